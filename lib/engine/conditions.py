"""Conditions: the verdict again where the Function will really run.

The plain verdict asks every input to require a gradient, hands backward a fresh dense
``grad_output``, and draws distinct, contiguous, non-tied inputs. Real backward bugs live outside
that: a gradient gated on ``ctx.needs_input_grad``, a ``grad_output`` that arrives expanded
(stride 0, as ``.sum()`` makes it), transposed or as a strided view, an in-place write into it,
transposed or sliced inputs, the same tensor passed twice, an empty batch, ties and kinks.

Each condition changes how the formula is called and judges its backward there, by one of two
rules:
- **the same values** (requires_grad subsets, layouts, hygiene): the formula's vector-Jacobian
  products under the condition must equal its products without it, for the same random upstream
  vectors (the plain verdict judged those against the truth entry by entry). Where they differ,
  they are judged against the truth itself (autograd through the reference where it is a truth,
  else the plain finite differences), so a condition is never blamed for what it did not change.
- **other values** (aliasing, sizes, ties): the whole-Jacobian verdict (``judge_point``, the
  pipeline's ``check``) on the changed case, on a few rows of its batch; at ties, also jointly
  over each tied group: along a direction that keeps every tie, the function is smooth, and the
  backward's directional derivative must be the one-sided differences' common value (a max that
  gives every tied element the whole gradient passes entry by entry, and fails here).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .evaluate import backward_products, numerical_gradient
from .finding import Evidence, Finding
from .isolate import Crashed, isolated
from .signature import as_tuple
from .judge import JacobianVerdict, compare_entries, truth_scale
from .report import ConditionResult, Conditions, Failure
from .tolerances import Tolerances

Tensor = torch.Tensor

GROUPS = ("requires_grad", "grad_output", "inputs", "aliasing", "size", "ties")
# lib.check --conditions, check(conditions=...); "none" still judges each output alone, as gradcheck's own check does
CONDITION_SETS = ("default", "all", "none")
PROBES = 2  # random upstream vectors per same-values condition
SUBSETS_UP_TO = 4  # every non-empty subset of requires_grad up to this many inputs; beyond, a sample
VALUE_ROWS = 4  # the rows of the batch the other-values conditions run on by default ("all": every row)
VALUE_ELEMENTS = 8192  # and at most this many differentiable input elements by default: each is a whole verdict of its own
# how a gradient shares itself among tied values it selects (``convention``), as the ties' pass says it
CONVENTION_WORDS = {"split evenly": "is split evenly", "to the first index": "goes to the first index",
                    "to the last index": "goes to the last index", "its own split": "follows a split of its own"}
TIE_SLOPE_RTOL = 1e-4  # the tied directions' rule: far above the one-sided differences' own error, far below a wrong split


# ---- layouts: the same values, the strides real code meets --------------------------------------


def laid_out(t: Tensor, layout: str) -> Tensor | None:
    """``t``'s values in ``layout`` (None where it cannot have one): "dense" (a fresh contiguous
    copy), "expanded" (stride 0, as ``.sum()`` hands it: ``t`` must be constant), "transposed"
    (column-major), "sliced" (every other element of a larger buffer, at storage offset 1)."""
    if layout == "dense":
        return t.clone(memory_format=torch.contiguous_format)
    if layout == "expanded":
        return t.reshape(-1)[:1].clone().reshape(()).expand(t.shape) if t.numel() else None
    if layout == "transposed":
        return t.mT.contiguous().mT if t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1 else None
    if layout == "sliced":
        if t.dim() == 0:
            return None
        buffer = t.new_zeros(*t.shape[:-1], 2 * t.shape[-1] + 1)
        view = buffer[..., 1::2]
        view.copy_(t)
        return view
    raise ValueError(f"unknown layout {layout!r}")


def laid_out_input(x: Tensor, layout: str) -> Tensor:
    """``x`` in ``layout``, differentiably (the formula's gradient flows back to ``x``)."""
    if layout == "transposed" and x.dim() >= 2 and x.shape[-1] > 1 and x.shape[-2] > 1:
        return x.mT.contiguous().mT
    if layout == "sliced" and x.dim() >= 1:
        return torch.stack([torch.zeros_like(x), x], dim=-1).flatten(-2)[..., 1::2]
    return x


class _HandOn(torch.autograd.Function):
    """The identity, whose backward hands the gradient on in a layout, keeping a copy of what it
    handed so that a write into it shows."""

    @staticmethod
    def forward(ctx, y, layout, handed):
        ctx.layout, ctx.handed = layout, handed
        return y.clone()

    @staticmethod
    def backward(ctx, g):
        given = laid_out(g, ctx.layout)
        given = g.clone() if given is None else given
        base = given._base if given._base is not None else given  # a view's whole buffer: a write through it shows there
        ctx.handed.append((base, base.clone()))
        return given, None, None


def _written(handed: list) -> Finding | None:
    """How a backward changed the grad_output it was handed, as a finding (the values it left
    against those it was handed); None where it did not."""
    for base, copy in handed:
        if not torch.equal(torch.nan_to_num(base, nan=0.0), torch.nan_to_num(copy, nan=0.0)) or \
                not torch.equal(base.isnan(), copy.isnan()):
            after, before = base.detach().double().cpu().reshape(-1).numpy(), copy.detach().double().cpu().reshape(-1).numpy()
            change = np.nan_to_num(np.abs(after - before), nan=np.inf)
            changed = (change > 0) | (np.isnan(after) != np.isnan(before))
            k, shape = int(np.argmax(change)), tuple(base.shape)
            scale = float(np.abs(before[np.isfinite(before)]).max(initial=0.0)) or 1.0
            return Finding("wrote grad_output", "grad_output", shape, k, float(after[k]), float(before[k]), amount=float(change.max()),
                           scale=scale, evidence=(Evidence.of_product("grad_output", shape, after, before, changed, scale),))
    return None


# ---- the conditions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Backward:
    """A same-values condition: how the formula is called and handed its upstream."""

    name: str
    group: str
    label: str
    function: Callable[..., Tensor]  # the formula as the condition calls it (canonical form)
    needs: tuple[bool, ...]  # which inputs require a gradient
    handed: list | None = None  # where the formula's _HandOn nodes keep what they handed
    constant: bool = False  # its upstream must be constant (an expanded grad_output): probed with ones
    called: Callable[[Callable], Callable] | None = None  # how it calls a function (inputs laid out): the reference's own rounding there


def _subsets(n: int, every: bool) -> list[tuple[int, ...]]:
    """The non-empty proper subsets of range(n): all of them up to SUBSETS_UP_TO inputs (or
    ``every``), else each input alone and all but each one."""
    if n < 2:
        return []
    if n <= SUBSETS_UP_TO or every:
        return [s for k in range(1, n) for s in itertools.combinations(range(n), k)]
    return [(i,) for i in range(n)] + [tuple(j for j in range(n) if j != i) for i in range(n)]


def _subset_name(subset: tuple[int, ...], names: Sequence[str]) -> str:
    if len(subset) == 1:
        return f"only {names[subset[0]]} requires a gradient"
    left = [names[i] for i in range(len(names)) if i not in subset]
    return f"{' and '.join(left)} {'does' if len(left) == 1 else 'do'} not require a gradient"


def _with_outputs_handed_on(problem, layout: str, handed: list) -> Callable[..., Tensor] | None:
    """The formula with each differentiable output passed through ``_HandOn``: its backward is
    then handed ``grad_output`` in ``layout``, whatever the loss."""
    def wrap(function):
        def handing(*args):
            outputs = function(*args)
            many = isinstance(outputs, (tuple, list))
            wrapped = [_HandOn.apply(o, layout, handed) if isinstance(o, Tensor) and o.requires_grad else o
                       for o in (outputs if many else (outputs,))]
            return type(outputs)(wrapped) if many else wrapped[0]
        return handing

    if problem.remake is not None:
        changed = problem.remake(problem.given, formula=wrap)
        return changed.function if changed.failure is None else None
    return wrap(problem.function)


def _backwards(problem, every: bool) -> list[_Backward]:
    names, inputs, n = problem.names, problem.inputs, len(problem.inputs)
    everyone = (True,) * n
    found: list[_Backward] = []
    subsets = _subsets(n, every)
    for subset in subsets:
        found.append(_Backward(_subset_name(subset, names), "requires_grad", "every" if n <= SUBSETS_UP_TO or every else "sample",
                               problem.function, tuple(i in subset for i in range(n))))
    outputs = problem.signature.packed_shape if problem.signature is not None else ()
    words = {"dense": ("another consumer shares grad_output", "kept for another consumer"),
             "expanded": ("grad_output is expanded (stride 0, as .sum() makes it)", "expanded"),
             "transposed": ("grad_output is transposed", "transposed"),
             "sliced": ("grad_output is a strided view at an offset", "sliced")}
    for layout, (name, label) in words.items():
        kept = [s for s in (problem.signature.outputs if problem.signature is not None else ()) if s.differentiable]
        shapes = [s.shape for s in kept] or [outputs]
        if all(laid_out(torch.zeros(shape), layout) is None for shape in shapes):
            continue  # no output can have this layout (a transposed vector, a view of a scalar)
        handed: list = []
        function = _with_outputs_handed_on(problem, layout, handed)
        if function is not None:
            found.append(_Backward(name, "grad_output", label, function, everyone, handed, constant=layout == "expanded"))
    for layout, name, label in (("transposed", "the inputs are transposed", "transposed"),
                                ("sliced", "the inputs are strided views at an offset", "sliced")):
        if all(laid_out_input(x, layout) is x for x in inputs):
            continue
        def called(function, layout=layout):
            return lambda *xs: function(*(laid_out_input(x, layout) for x in xs))

        found.append(_Backward(name, "inputs", label, called(problem.function), everyone, called=called))
    return found


# ---- judging a backward under a condition -------------------------------------------------------


class _Truths:
    """The upstream vectors, and per vector the plain products and the truth's, each computed once."""

    def __init__(self, problem, plans, jacobian: JacobianVerdict, tolerances: Tolerances, seed: int, budget_bytes: int):
        self.problem, self.plans, self.jacobian, self.tolerances, self.budget = problem, plans, jacobian, tolerances, budget_bytes
        with torch.no_grad():
            output = problem.function(*problem.inputs)
        generator = torch.Generator().manual_seed(seed + 7919)
        self.random = [torch.randn(tuple(output.shape), generator=generator, dtype=torch.float64).to(output) for _ in range(PROBES)]
        # an expanded grad_output holds one value: 1 as .sum() hands it, and another (.sum() * c, .mean()),
        # so that a backward which takes stride 0 to mean "ones" shows
        self.constant = [torch.ones_like(output), torch.full_like(output, 1.0 + float(torch.rand((), generator=generator)))]
        self._plain: dict[int, list] = {}
        self._referenced: dict[int, list] = {}  # autograd through the reference, every input at once
        self._truth: dict[tuple[int, int], np.ndarray] = {}

    def plain(self, u: Tensor) -> list[np.ndarray]:
        if id(u) not in self._plain:
            self._plain[id(u)] = backward_products(self.problem.function, self.problem.inputs, None, u)
        return self._plain[id(u)]

    def truth(self, u: Tensor, i: int) -> tuple[np.ndarray, str]:
        """The truth's uᵀJ for input i, and its name."""
        p = self.problem
        by_reference = self.jacobian.coverage.judged_by_reference(p.names[i]) and p.reference is not None
        if by_reference:
            if id(u) not in self._referenced:
                self._referenced[id(u)] = backward_products(p.reference, p.inputs, None, u)
            return self._referenced[id(u)][i], "reference"
        if (id(u), i) not in self._truth:
            self._truth[(id(u), i)] = numerical_gradient(p.function, p.inputs, self.plans[i], u, None, self.budget)
        return self._truth[(id(u), i)], "numerical"

    def scale(self, i: int, truth: np.ndarray) -> float:
        scales = self.jacobian.scales
        given = scales[i] if i < len(scales) else None
        return given if given is not None else truth_scale({"truth": truth})


def _judge_backward(condition: _Backward, truths: _Truths) -> ConditionResult:
    p, tolerances = truths.problem, truths.tolerances
    result = lambda outcome, **kw: ConditionResult(condition.name, condition.group, condition.label, outcome, **kw)  # noqa: E731
    probes = truths.constant if condition.constant else truths.random
    same = True
    for u in probes:
        if condition.handed is not None:
            condition.handed.clear()
        try:
            got = backward_products(condition.function, p.inputs, condition.needs, u)
        except Exception as error:  # noqa: BLE001 - the formula, under a condition it did not expect
            failure = Failure.of("backward", error, when=condition.name)
            return result("fail", finding=f"{failure.whose} raised {failure.unconditioned}", failure=failure)
        written = _written(condition.handed or [])
        if written is not None:
            return result("fail", finding=written.describe(), found=written)
        plain = truths.plain(u)
        for i, (mine, before) in enumerate(zip(got, plain)):
            if mine is None:
                continue
            truth, truth_name = truths.truth(u, i)
            scale = truths.scale(i, truth)
            if not compare_entries(mine, {"plain": before}, tolerances, scale=scale).failed:
                continue
            same = False
            judged = compare_entries(mine, {truth_name: truth}, tolerances, scale=scale)
            if judged.failed and truth_name == "reference" and condition.called is not None:
                # the reference called the same way moves too where the function is ill-conditioned (a row at eps's
                # scale): the formula's change within a few times the reference's own is rounding, not a bug
                moved = backward_products(condition.called(p.reference), p.inputs, condition.needs, u)[i]
                judged = compare_entries(mine, {truth_name: truth}, tolerances, {truth_name: np.abs(moved - truth)}, scale=scale)
            if judged.failed:
                flat = int(np.argmax(judged.excess))
                shape = tuple(mine.shape)
                found = Finding("condition", p.names[i], shape, flat, float(mine.reshape(-1)[flat]), float(truth.reshape(-1)[flat]),
                                truth_name, p.role, upstream=u.detach().double().cpu().reshape(-1).numpy(), tolerances=tolerances,
                                scale=scale, plain=float(before.reshape(-1)[flat]),
                                evidence=(Evidence.of_product(p.names[i], shape, mine, truth, judged.excess > 0, scale),))
                return result("fail", worst=found.at, finding=found.describe(), found=found)
    if same and not truths.jacobian.passed:  # it changes nothing: the plain verdict's failure stands, and is said there
        return result("as plain", finding="the same gradient as without the condition")
    return result("pass")  # the same right gradient, or another one the truth holds right


# ---- other values: aliasing, sizes, ties -------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """Which dim of each input is the batch (None: the input is kept whole, a bias say), and its size."""

    size: int
    dims: tuple[int | None, ...]

    @classmethod
    def leading(cls, given: Sequence[Any], wrt: Sequence[int], declared: Sequence[int | None] | None = None) -> Batch | None:
        """The declared batch dims, or by default every input whose leading size is the first
        differentiable input's (None: no batch to cut)."""
        if declared is not None:
            sizes = [int(x.shape[d]) for x, d in zip(given, declared) if d is not None and isinstance(x, Tensor) and -x.dim() <= d < x.dim()]
            return cls(sizes[0], tuple(declared)) if sizes and len(set(sizes)) == 1 else None
        first = given[wrt[0]] if wrt else None
        if not isinstance(first, Tensor) or first.dim() < 1:
            return None
        size = int(first.shape[0])
        return cls(size, tuple(0 if isinstance(x, Tensor) and x.dim() >= 1 and x.shape[0] == size else None for x in given))

    def rows(self, given: Sequence[Any], rows: int) -> tuple[Any, ...]:
        """The first ``rows`` rows of the batch: every batched input cut along its batch dim."""
        return tuple(x.narrow(d, 0, rows) if d is not None else x for x, d in zip(given, self.dims))

    def grown(self, given: Sequence[Any], extra: int) -> tuple[Any, ...]:
        """``extra`` rows more: every batched input's first rows copied after its last, exactly (the
        values the case holds, at one more row: a special value, a unit norm, stays one)."""
        return tuple(x if d is None else torch.cat([x, x.narrow(d, 0, extra)], dim=d) for x, d in zip(given, self.dims))

    def without(self, index: int) -> Batch:
        return Batch(self.size, tuple(None if i == index else d for i, d in enumerate(self.dims)))


def _tied(given: Sequence[Any], wrt: Sequence[int]) -> tuple[Any, ...]:
    """The differentiable inputs rounded to a coarse grid (half their spread): values tie, and
    many sit exactly at 0, where |x|, ReLU and clamps have their kinks; and, on purpose, along the
    last dim, every row's largest value copied onto its runner-up and its smallest onto the next
    smallest, so that maxima, minima, sorts and top-k tie in every row."""
    changed = list(given)
    for i in wrt:
        x = given[i]
        spread = float(x.double().std()) if x.numel() > 1 else 1.0
        q = 0.5 * spread if math.isfinite(spread) and spread > 0 else 0.5
        t = (torch.round(x / q) * q).to(x.dtype)
        if t.dim() >= 1 and t.shape[-1] >= 4:
            order = t.argsort(dim=-1)
            t = t.scatter(-1, order[..., -2:-1], t.gather(-1, order[..., -1:]))  # the runner-up ties the maximum
            t = t.scatter(-1, order[..., 1:2], t.gather(-1, order[..., :1]))  # the next smallest ties the minimum
        changed[i] = t
    return tuple(changed)


def _jittered(given: Sequence[Any], wrt: Sequence[int], size: float, seed: int) -> tuple[Any, ...]:
    """The differentiable inputs moved by ``size`` of their spread at random: no ties, no kinks."""
    generator = torch.Generator().manual_seed(seed + 1299709)
    changed = list(given)
    for i in wrt:
        x = given[i]
        spread = float(x.double().std()) if x.numel() > 1 else 1.0
        spread = spread if math.isfinite(spread) and spread > 0 else 1.0
        changed[i] = x + size * spread * torch.randn(tuple(x.shape), generator=generator, dtype=torch.float64).to(x)
    return tuple(changed)


def _controlled(name: str, group: str, label: str, judge_point, changed, control, control_words: str,
                plain_passed: bool) -> ConditionResult:
    """The verdict at the changed case; where it fails, the same change without the condition's
    own structure (``control``) tells whether the condition is the cause: a formula right only at
    the user's point (at unit norm, say) fails wherever its values move, ties or not."""
    result = _from_report(name, group, label, judge_point(changed), changed)
    if result.failed and plain_passed and not judge_point(control()).verdict.passed:
        return ConditionResult(name, group, label, "not applicable",
                               finding=f"the formula fails {control_words} too, so not because of this condition")
    return result


def _outside_domain(changed) -> str:
    """Why the changed inputs lie outside the Function's domain, where its truth (the reference as
    given) raises there or is not finite anywhere; "" where it runs, or there is none to ask."""
    truth = getattr(changed, "given_truth", None)
    if truth is None:
        return ""
    try:
        with torch.no_grad():
            output = truth(*changed.given)
    except Exception as error:  # noqa: BLE001 - the truth's own limit: the changed inputs are outside the domain
        return f"the reference raises there too ({type(error).__name__}): the changed inputs are outside the Function's domain"
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    floats = [o for o in outputs if isinstance(o, Tensor) and o.is_floating_point() and o.numel()]
    if floats and not any(bool(torch.isfinite(o).any()) for o in floats):
        return "the reference is not finite there: the changed inputs are outside the Function's domain"
    return ""


def _from_report(name: str, group: str, label: str, report, changed=None) -> ConditionResult:
    verdict = report.verdict
    if verdict.passed:
        return ConditionResult(name, group, label, "pass")
    if verdict.outcome == "no verdict":
        return ConditionResult(name, group, label, "not applicable", finding="the truth is not finite there")
    failure = verdict.failure
    if failure is not None and failure.stage == "reference":
        return ConditionResult(name, group, label, "not applicable", finding=f"the reference raises there ({failure.kind})")
    outside = _outside_domain(changed) if failure is not None and failure.stage == "forward" else ""
    if outside:  # the formula's forward raises where its truth does not run either: not the formula's error
        return ConditionResult(name, group, label, "not applicable", finding=outside)
    failure = replace(failure, when=name) if failure is not None else None
    return ConditionResult(name, group, label, "fail", finding=verdict.text, failure=failure, found=verdict.found)


def _empty(problem, given, batch: Batch) -> ConditionResult:
    """An empty batch: forward and backward run, and give outputs and gradients of the right
    (empty) shapes. Nothing to compare element by element."""
    name, label = "the batch is empty", "an empty batch"
    result = lambda outcome, **kw: ConditionResult(name, "size", label, outcome, **kw)  # noqa: E731
    changed = problem.remake(batch.rows(given, 0))
    if changed.failure is not None:
        outside = _outside_domain(changed) if changed.failure.stage == "forward" else ""
        if outside:
            return result("not applicable", finding=outside)
        if changed.failure.stage == "reference" or problem.reference is None:  # nothing says it should take one
            return result("not applicable", finding=f"the {'reference' if problem.reference is not None else 'forward'} "
                                                    f"does not take an empty batch ({changed.failure.kind})")
        failure = replace(changed.failure, when=name)
        return result("fail", finding=f"{failure.whose} raised {failure.unconditioned}", failure=failure)

    def run() -> ConditionResult:
        try:
            xs = [x.detach().requires_grad_() for x in changed.inputs]
            with torch.enable_grad():
                y = changed.function(*xs)
                if changed.reference is not None:
                    with torch.no_grad():
                        expected = changed.reference(*changed.inputs)
                    if tuple(expected.shape) != tuple(y.shape):
                        return result("fail", finding=f"the forward gives an output of shape {tuple(y.shape)}, the reference "
                                                      f"one of shape {tuple(expected.shape)}")
                if y.requires_grad:
                    torch.autograd.grad(y, xs, torch.zeros_like(y), allow_unused=True)  # autograd checks the gradients' shapes
        except Exception as error:  # noqa: BLE001 - the formula, on a batch it did not expect
            outside = _outside_domain(changed)  # a mean over no rows: the truth is not finite either, nothing is asked there
            if outside:
                return result("not applicable", finding=outside)
            failure = Failure.of("backward", error, when=name)
            return result("fail", finding=f"{failure.whose} raised {failure.unconditioned}", failure=failure)
        return result("pass")

    outcome = isolated(run)  # kernels meet empty tensors rarely: one that segfaults must not take the checker down
    if isinstance(outcome, Crashed):
        return result("fail", finding=f"the formula's forward or backward {outcome.describe()} on an empty batch")
    return outcome


def convention(problem) -> str:
    """How the formula's gradient shares itself among tied maxima (or minima) along the last dim,
    where it selects them (the rest of the row gets none), for an upstream of ones: "split evenly",
    "to the first index", "to the last index", or "its own split"; "" where nothing selects."""
    try:
        grads = backward_products(problem.function, problem.inputs, None, None)
    except Exception:  # noqa: BLE001 - a backward that raises is judged elsewhere
        return ""
    found = set()
    with torch.no_grad():
        outputs = problem.function(*problem.inputs).numel()
    for x, g in zip(problem.inputs, grads):
        if x.dim() < 1 or x.shape[-1] < 2 or outputs >= x.numel():  # only a reduction selects among its inputs
            continue
        t, g = x.detach().double().cpu().reshape(-1, x.shape[-1]).numpy(), g.reshape(-1, x.shape[-1])
        for row, share in zip(t, g):
            for extreme in (row.max(), row.min()):
                group = np.flatnonzero(row == extreme)
                part, rest = share[group], np.delete(share, group)
                tiny = 1e-12 * max(1.0, float(np.abs(share).max()))
                if group.size < 2 or not np.abs(part).max() > tiny or np.abs(rest).max(initial=0.0) > tiny:
                    continue  # a selection (max, min, sort's ends) carries the whole row's gradient on its group
                if np.allclose(part, part[0], rtol=1e-9, atol=0):
                    found.add("split evenly")
                elif np.count_nonzero(part) == 1:
                    found.add("to the first index" if part[0] != 0 else "to the last index" if part[-1] != 0 else "its own split")
                else:
                    found.add("its own split")
    return found.pop() if len(found) == 1 else "its own split" if found else ""


def _tied_directions(problem, tolerances: Tolerances, seed: int) -> Finding | None:
    """At tied inputs, along directions that keep every tie (each group of equal values moved
    together; the group at 0 held still where moving it is not smooth): the formula's directional
    derivative uᵀJd against the one-sided differences' common value, as a finding. None where it
    agrees, or where no such direction is smooth."""
    inputs, f = problem.inputs, problem.function
    generator = torch.Generator().manual_seed(seed + 104729)
    directions = []
    for x in inputs:
        values, inverse = torch.unique(x.detach(), return_inverse=True)
        moves = torch.randn(values.numel(), generator=generator, dtype=torch.float64).to(x)
        directions.append((moves[inverse], (values == 0)[inverse]))
    with torch.no_grad():
        output = f(*inputs)
    u = torch.randn(tuple(output.shape), generator=generator, dtype=torch.float64).to(output)
    h = tolerances.step

    def slopes(d):
        at = lambda t: (u * f(*(x + t * di for x, di in zip(inputs, d)))).double()  # noqa: E731 - per output, weighted
        with torch.no_grad():
            f0, r1, r2, l1, l2 = at(0.0), at(h), at(2 * h), at(-h), at(-2 * h)
        return (-3 * f0 + 4 * r1 - r2) / (2 * h), (3 * f0 - 4 * l1 + l2) / (2 * h)

    grads = backward_products(f, inputs, None, u)
    for hold_zero in (False, True):
        d = [torch.where(zero, torch.zeros_like(move), move) if hold_zero else move for move, zero in directions]
        right, left = slopes(d)
        if not (torch.isfinite(right).all() and torch.isfinite(left).all()):
            return None
        spread = float(right.abs().sum() + left.abs().sum()) / 2
        if float((right - left).abs().sum()) > TIE_SLOPE_RTOL * spread + tolerances.atol:
            continue  # a kink along this direction too: no joint rule there
        mine = sum(float((torch.from_numpy(g) * di.double().cpu()).sum()) for g, di in zip(grads, d))
        truth = float((right + left).sum()) / 2
        allowed = TIE_SLOPE_RTOL * spread + tolerances.atol * max(1.0, spread)
        if abs(mine - truth) > allowed:
            scale = max(abs(truth), 1e-300)
            return Finding("tied directions", "uᵀJd", (1,), 0, mine, truth, "numerical", problem.role, tolerances=tolerances, scale=scale,
                           allowed=allowed, evidence=(Evidence.of_product("uᵀJd", (1,), [mine], [truth], [True], scale),))
        return None
    return None


def _inferred(batch: Batch, jacobian: JacobianVerdict, wrt: Sequence[int]) -> tuple[Batch, str]:
    """The leading batch checked against the plain verdict's pattern: the batch, with every input
    whose rows each output row mixes kept whole (a bias as long as the batch, say), and why the
    leading dim is not a batch at all ("" where it is one, or the pattern cannot tell: a scalar
    output, no entries). A batch's output rows each depend on their own input row alone; a dim the
    function reduces, or mixes in its first differentiable input, is not one."""
    shape, size = jacobian.output_shape, batch.size
    if not shape:
        return batch, ""
    if shape[0] != size:
        return batch, f"the inputs' leading dim ({size}) is not the output's ({shape[0]}): the function reduces it, so it is not a batch"
    out_row = max(math.prod(shape) // size, 1)
    for index, e in zip(wrt, jacobian.entries):
        if not e.shape or e.shape[0] != size or not e.rows.size:
            continue
        in_row = max(math.prod(e.shape) // size, 1)
        mixed = (e.rows // out_row) != (e.cols // in_row)
        if mixed.any() and index != wrt[0]:  # a parameter that happens to be as long as the batch: kept whole
            batch = batch.without(index)
        elif mixed.any():
            k = int(np.argmax(mixed))
            return batch, (f"the inputs' leading dim is not a batch: output row {int(e.rows[k] // out_row)} depends on {e.name}'s row "
                           f"{int(e.cols[k] // in_row)}, so emptying it or cutting it to one row makes another function")
    return batch, ""


def _outputs_alone(problem, judge_point) -> list[ConditionResult]:
    """Each differentiable output used alone, as gradcheck checks them: the others take no part in
    the loss, so their grad_output reaches the backward undefined (None, or zeros where autograd
    materialises it). A backward that reads a gradient only when another is defined is wrong here."""
    signature = problem.signature
    if signature is None or len(signature.kept) < 2:
        return []
    found = []
    for k in signature.kept:
        alone = lambda f, k=k: (lambda *args: as_tuple(f(*args))[k])  # noqa: E731
        name = signature.outputs[k].name
        changed = problem.remake(problem.given, formula=alone, reference=alone)
        found.append(_from_report(f"only {name} is used", "grad_output", f"only {name} used", judge_point(changed), changed))
    return found


def _sizes(problem, given, batch: Batch, judge_point, too_large) -> list[ConditionResult]:
    """The verdict with the batch one row shorter (where that is more than one row) and one row
    longer, each named by its size: a backward wrong only past a tile's multiple, or at a size that is
    not a power of two."""
    found = []
    for rows in (batch.size - 1, batch.size + 1):
        if rows < 2:
            continue
        changed_given = batch.rows(given, rows) if rows < batch.size else batch.grown(given, rows - batch.size)
        name, label = f"the batch has {rows} rows", f"a batch of {rows}"
        found.append(too_large(name, "size", label, changed_given) or
                     _from_report(name, "size", label, judge_point(changed := problem.remake(changed_given)), changed))
    return found


def _other_values(problem, tolerances, judge_point, every: bool, seed: int, plain_passed: bool,
                  jacobian: JacobianVerdict) -> list[ConditionResult]:
    if problem.remake is None or not all(bool(torch.isfinite(x).all()) for x in problem.inputs):
        return []  # at non-finite inputs the plain verdict says what the formula does with them; moved, they mean nothing
    given, wrt = problem.given, problem.signature.wrt
    batch = Batch.leading(given, wrt, problem.batch_dims)
    not_batch = ""
    if batch is not None and problem.batch_dims is None:
        batch, not_batch = _inferred(batch, jacobian, wrt)
    rows = (lambda g: g) if every or batch is None or batch.size <= VALUE_ROWS else (lambda g: batch.rows(g, VALUE_ROWS))
    found = []
    names = problem.names

    def too_large(name: str, group: str, label: str, changed_given) -> ConditionResult | None:
        size = sum(changed_given[i].numel() for i in wrt)
        if every or size <= VALUE_ELEMENTS:
            return None
        return ConditionResult(name, group, label, "not applicable", finding=(
            f"its case would hold {size:,} input elements, more than the {VALUE_ELEMENTS:,} the default conditions judge "
            f"whole: conditions=\"all\" (lib.check --conditions all) runs it"))

    found += _outputs_alone(problem, judge_point)
    pairs = [(a, b) for a, b in itertools.combinations(range(len(wrt)), 2)
             if tuple(given[wrt[a]].shape) == tuple(given[wrt[b]].shape) and given[wrt[a]].dtype == given[wrt[b]].dtype]
    for a, b in pairs if every else pairs[:1]:
        name, label = f"the same tensor is passed as {names[a]} and {names[b]}", f"{names[a]} passed as {names[b]} too"
        ia, ib = wrt[a], wrt[b]
        skipped = too_large(name, "aliasing", label, rows(given))
        if skipped is not None:
            found.append(skipped)
            continue

        def alias(function, ia=ia, ib=ib):
            return lambda *args: function(*(args[ia] if k == ib else v for k, v in enumerate(args)))

        changed = problem.remake(rows(given), formula=alias, reference=alias)
        apart = list(rows(given))
        apart[ib] = _jittered(apart, [ia], 1e-3, seed)[ia]  # nearly the same values, in a tensor of its own
        found.append(_controlled(name, "aliasing", label, judge_point, changed, lambda apart=apart: problem.remake(tuple(apart)),
                                 f"with {names[b]} a tensor of its own at nearly the values of {names[a]}", plain_passed))
    if not_batch:  # emptied or cut to one row, it would be another function: outside the Function's domain
        found += [ConditionResult(name, "size", label, "not applicable", finding=not_batch)
                  for name, label in (("the batch is empty", "an empty batch"), ("the batch has one row", "a batch of one"))]
    elif batch is not None and batch.size > 0:
        found.append(_empty(problem, given, batch))
        if batch.size > 1:
            one = batch.rows(given, 1)
            found.append(too_large("the batch has one row", "size", "a batch of one", one) or
                         _from_report("the batch has one row", "size", "a batch of one", judge_point(changed := problem.remake(one)),
                                      changed))
        if plain_passed:  # a row fewer and a row more: a kernel wrong past a tile, or off a power of two (beside a failing
            # plain verdict they would fail as plain)
            found += _sizes(problem, given, batch, judge_point, too_large)
    skipped = too_large("inputs tie and sit on kinks", "ties", "ties and kinks", rows(given))
    if skipped is not None and problem.reference is not None and problem.role == "reference":
        found.append(skipped)
    elif problem.reference is not None and problem.role == "reference":
        tied = _tied(rows(given), wrt)
        changed = problem.remake(tied)
        result = _controlled("inputs tie and sit on kinks", "ties", "ties and kinks", judge_point, changed,
                             lambda: problem.remake(_jittered(tied, wrt, 1e-2, seed)), "at the same values moved apart slightly",
                             plain_passed)
        if result.outcome == "pass" and changed.failure is None:
            joint = _tied_directions(changed, tolerances, seed)
            if joint is not None:
                result = ConditionResult(result.name, result.group, result.label, "fail", finding=joint.describe(), found=joint)
            elif named := convention(changed):  # a valid subgradient, named by how it shares itself among tied values
                result = ConditionResult(result.name, result.group, result.label, "pass",
                                         finding=f"at tied maxima and minima its gradient {CONVENTION_WORDS[named]}")
        found.append(result)
    return found


# ---- the stage --------------------------------------------------------------------------------------


def check_conditions(problem, tolerances: Tolerances, jacobian: JacobianVerdict, plans, judge_point: Callable[[Any], Any], *,
                     which: str = "default", seed: int = 0, budget_bytes: int) -> Conditions | None:
    """The verdict under every condition of ``which`` (``CONDITION_SETS``), after the plain one.
    ``judge_point``: the whole-Jacobian verdict of a changed problem (the pipeline's ``check``)."""
    if problem.function is None or not problem.inputs:
        return None
    if which == "none":  # what gradcheck checks without being asked: each output's Jacobian with the others unused
        alone = _outputs_alone(problem, judge_point)
        return Conditions(tuple(alone), ()) if alone else None
    if which not in CONDITION_SETS:
        raise ValueError(f"unknown conditions {which!r}; choose one of: {', '.join(CONDITION_SETS)}")
    every = which == "all"
    try:
        truths = _Truths(problem, plans, jacobian, tolerances, seed, budget_bytes)
        truths.plain(truths.random[0])
    except Exception:  # noqa: BLE001 - the plain backward already raised for another upstream: the verdict says so
        return None
    results = [_judge_backward(c, truths) for c in _backwards(problem, every)]
    results += [r if jacobian.passed or not r.failed else  # the plain verdict's failure again, at other values
                ConditionResult(r.name, r.group, r.label, "as plain", finding="it fails there too, as it does without the condition")
                for r in _other_values(problem, tolerances, judge_point, every, seed, jacobian.passed, jacobian)]
    return Conditions(tuple(results), _notes(problem, truths))


def _notes(problem, truths: _Truths) -> tuple[str, ...]:
    """Not errors: a backward that computes every input's gradient even when only one is needed
    (it does not read ``ctx.needs_input_grad``), counted in the operations it runs."""
    n = len(problem.inputs)
    if n < 2:
        return ()
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counting.count += 1
            return func(*args, **(kwargs or {}))

    def operations(needs) -> int:
        xs = [x.detach().requires_grad_(need) for x, need in zip(problem.inputs, needs)]
        with torch.enable_grad():
            y = problem.function(*xs)
            Counting.count = 0
            with Counting():
                torch.autograd.grad(y, [x for x in xs if x.requires_grad], truths.random[0].to(y.dtype).clone(), allow_unused=True)
        return Counting.count

    try:
        everyone = operations((True,) * n)
        alone = [operations(tuple(i == j for j in range(n))) for i in range(n)]
    except Exception:  # noqa: BLE001 - a backward that raises alone is a condition's failure, said there
        return ()
    if everyone and all(a >= everyone for a in alone):
        return (f"its backward runs all {everyone} operations even when one input alone needs a gradient: it computes gradients "
                f"nobody asked for (it does not read ctx.needs_input_grad; not an error, a cost)",)
    return ()
