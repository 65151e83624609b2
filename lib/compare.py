"""The comparison engine: a formula's analytic gradient against autograd and finite differences,
element by element.

For one family and formula on given inputs it computes, per input, the analytic gradient (the
formula's own backward), the reference gradient (autograd through the family's reference) and the
numerical gradient (central differences of the formula's forward, see ``lib.numerical``), all for
the same upstream gradient; then signed and relative error maps, the worst elements, the cosine
between analytic and reference gradients, a gradcheck-compatible verdict, Jacobians for small
inputs, and a finite-difference step sweep. Results are plain numpy data; nothing here names a
family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
import torch

from lib.errors import LabError
from lib.family import Family
from lib.tolerances import Tolerances, default_tolerances
from lib.jacobian import JacobianVerdict, check_jacobian, compare_entries, tolerances_text, truth_scale
from lib.numerical import (DEFAULT_BUDGET_BYTES, DifferencePlan, numerical_entries, numerical_gradient, numerical_jacobian, plan_differences,
                           product_noise, with_values)
from lib.diagnosis import Diagnosis, Finding, diagnose
from lib.second_order import SecondOrderVerdict, check_second_order

Tensor = torch.Tensor
SOURCES = ("analytic", "reference", "numerical")
PAIRS = (("analytic", "reference"), ("analytic", "numerical"), ("reference", "numerical"))
DEFAULT_JACOBIAN_LIMIT = 64 * 64  # entries of one input's Jacobian worth drawing as a heatmap


# ---- tolerances and verdicts ------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    passed: bool
    summary: str  # one sentence a user can act on, that says what was covered
    outcome: str = ""  # "pass", "fail" or "no verdict" (nothing could be compared)

    def __post_init__(self) -> None:
        if not self.outcome:
            object.__setattr__(self, "outcome", "pass" if self.passed else "fail")


# ---- per-element results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NonFinite:
    """Where a tensor holds NaN or ±Inf."""

    nan: int
    inf: int
    first: tuple[tuple[int, ...], ...]  # up to 10 indices

    @property
    def count(self) -> int:
        return self.nan + self.inf

    def describe(self, name: str) -> str:
        where = ", ".join(f"{name}[{', '.join(map(str, i))}]" for i in self.first)
        more = "…" if self.count > len(self.first) else ""
        return f"{self.nan} NaN and {self.inf} Inf in {name}, at {where}{more}"


def non_finite(values: np.ndarray) -> NonFinite:
    nan, inf = np.isnan(values), np.isinf(values)
    first = tuple(tuple(int(i) for i in index) for index in np.argwhere(nan | inf)[:10])
    return NonFinite(int(nan.sum()), int(inf.sum()), first)


@dataclass(frozen=True)
class ErrorMap:
    """a − b element by element, for one pair of gradient sources on one input."""

    pair: tuple[str, str]
    signed: np.ndarray
    relative: np.ndarray  # |a − b| / max(|b|, floor); the floor keeps zeros of b from dividing
    max_abs: float
    mean_abs: float
    max_rel: float
    worst: tuple[int, ...] | None  # index of the largest finite |a − b|

    @property
    def absolute(self) -> np.ndarray:
        return np.abs(self.signed)


def error_map(pair: tuple[str, str], a: np.ndarray, b: np.ndarray) -> ErrorMap:
    signed = a - b
    absolute = np.abs(signed)
    finite = np.isfinite(absolute)
    floor = max(float(np.abs(b[np.isfinite(b)]).max(initial=0.0)) * 1e-12, np.finfo(np.float64).tiny)
    relative = absolute / np.maximum(np.abs(b), floor)
    if not finite.any():
        return ErrorMap(pair, signed, relative, math.nan, math.nan, math.nan, None)
    masked = np.where(finite, absolute, -1.0)
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(masked)), a.shape))
    return ErrorMap(
        pair,
        signed,
        relative,
        float(absolute[finite].max()),
        float(absolute[finite].mean()),
        float(np.nanmax(np.where(np.isfinite(relative), relative, np.nan))) if np.isfinite(relative).any() else math.nan,
        worst,
    )


@dataclass(frozen=True)
class InputComparison:
    """The three gradients of one input, and their differences."""

    name: str
    gradients: dict[str, np.ndarray]  # source -> gradient, float64, shaped like the input
    errors: dict[tuple[str, str], ErrorMap]
    non_finite: dict[str, NonFinite]  # "input" and each source
    plan: DifferencePlan
    jacobians: dict[str, np.ndarray] | None = None  # source -> (output elements, input elements)
    kinks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # flat indices where the function has a kink

    def worst(self, pair: tuple[str, str] = ("analytic", "reference")) -> tuple[tuple[int, ...] | None, dict[str, float]]:
        """The worst element of ``pair``'s error map and the three gradients' values there."""
        index = self.errors[pair].worst
        if index is None:
            return None, {}
        return index, {source: float(self.gradients[source][index]) for source in SOURCES}


@dataclass(frozen=True)
class GradientReport:
    family: str
    formula: str
    dtype: str
    device: str
    tolerances: Tolerances
    loss: float
    forward_max_error: float  # |formula output − reference output|, max
    inputs: tuple[InputComparison, ...]
    cosine: float  # between analytic and reference gradients, all inputs together; −1: flipped
    verdict: Verdict
    evaluations: int  # forward evaluations spent on finite differences
    failure: str | None = None  # the formula's own exception, if its forward or backward raised
    notes: tuple[str, ...] = field(default_factory=tuple)
    upstream: str = "loss"  # what the drawn gradients' upstream was (see UPSTREAMS)
    jacobian: JacobianVerdict | None = None  # the whole-Jacobian check behind the verdict
    second_order: SecondOrderVerdict | None = None
    diagnosis: Diagnosis | None = None  # why the formula is wrong, where it is

    def input(self, name: str) -> InputComparison:
        return next(c for c in self.inputs if c.name == name)


# ---- the engine ------------------------------------------------------------------------------------


def _numpy(t: Tensor | None, like: Tensor) -> np.ndarray:
    if t is None:  # autograd's None: this input does not affect the output
        return np.zeros(tuple(like.shape))
    return t.detach().to(device="cpu", dtype=torch.float64).numpy(force=True)


def _gradients(function: Callable[..., Tensor], inputs: Sequence[Tensor], upstream: Tensor) -> list[np.ndarray]:
    xs = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        y = function(*xs)
        grads = torch.autograd.grad(y, xs, upstream.to(dtype=y.dtype), allow_unused=True)
    return [_numpy(g, x) for g, x in zip(grads, xs)]


def _jacobian(function: Callable[..., Tensor], inputs: Sequence[Tensor], index: int) -> np.ndarray:
    """Row by row through the function's backward (small inputs only)."""
    xs = [x.detach().requires_grad_(i == index) for i, x in enumerate(inputs)]
    with torch.enable_grad():
        y = function(*xs)
        rows = []
        for k in range(y.numel()):
            e = torch.zeros(y.numel(), dtype=y.dtype, device=y.device)
            e[k] = 1
            (row,) = torch.autograd.grad(y, xs[index], e.reshape(y.shape), retain_graph=True, allow_unused=True)
            rows.append(_numpy(row, xs[index]).reshape(-1))
    return np.stack(rows) if rows else np.zeros((0, xs[index].numel()))


def upstream_gradient(loss: Callable[[Tensor], Tensor], output: Tensor) -> Tensor:
    """d loss / d output at ``output``, by autograd through the loss alone."""
    y = output.detach().requires_grad_()
    with torch.enable_grad():
        (v,) = torch.autograd.grad(loss(y), y)
    return v


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    finite = np.isfinite(a) & np.isfinite(b)
    na, nb = np.linalg.norm(a[finite]), np.linalg.norm(b[finite])
    return float(a[finite] @ b[finite] / (na * nb)) if na > 0 and nb > 0 else math.nan


def _drawn_gradient_finding(comparisons: Sequence[InputComparison], tolerances: Tolerances, has_reference: bool,
                            second_looked: Sequence[np.ndarray] = (), noises: Sequence[np.ndarray | None] = (),
                            scales: Sequence[float | None] = ()) -> str | None:
    """The drawn gradients (one vector-Jacobian product, for the chosen upstream) against the
    truth: a backward may treat this one upstream specially, so it is checked as it is drawn.
    Elements the Jacobian check passed on a second look (kinks, the differences' own noise) are
    not judged again here by central differences."""
    for i, c in enumerate(comparisons):
        numerical = c.gradients["numerical"]
        reference = c.gradients["reference"]
        if i < len(second_looked) and second_looked[i].size:  # central differences are not the truth there
            numerical, reference = numerical.copy().reshape(-1), reference.copy().reshape(-1)
            numerical[second_looked[i]] = np.nan
            reference[second_looked[i]] = np.nan  # at a kink the reference's own choice is one right answer of several
            numerical, reference = numerical.reshape(c.gradients["numerical"].shape), reference.reshape(c.gradients["reference"].shape)
        truths = {"numerical": numerical, **({"reference": reference} if has_reference else {})}
        noise = {"numerical": noises[i]} if i < len(noises) and noises[i] is not None else None
        scale = scales[i] if i < len(scales) and scales[i] is not None else truth_scale(truths)  # the Jacobian's, not the product's
        excess, _, against = compare_entries(c.gradients["analytic"], truths, tolerances, noise, scale)
        if excess.size and excess.max() > 0:
            index = np.unravel_index(int(np.argmax(excess)), excess.shape)
            at = f"{c.name}[{', '.join(map(str, index))}]"
            return (f"the drawn gradient at {at} is {c.gradients['analytic'][index]:.6g} by the formula's backward, "
                    f"{c.gradients[against][index]:.6g} by the {against} truth ({tolerances_text(tolerances, against, scale)})")
    return None


def _gradient_noise(run, inputs, plan: DifferencePlan, upstream: Tensor, budget_bytes: int) -> np.ndarray | None:
    """The numerical gradient's own error estimate for ``upstream``: Σ |u|·(each entry's rounding)."""
    if plan.values is None:
        return None
    x = inputs[plan.input_index]
    entries = numerical_entries(run, inputs, plan, None, budget_bytes)
    return product_noise(plan, x, entries, upstream.detach().double().cpu().reshape(-1).numpy()).reshape(tuple(x.shape))


def _verdict(jacobian: JacobianVerdict | None, drawn_finding: str | None, failure: str | None, diagnosis=None) -> Verdict:
    """Never "passes" without saying what it covered; a failure starts with its diagnosis."""
    if failure:
        if diagnosis is not None and diagnosis.findings:
            return Verdict(False, f"fails: {diagnosis.words}. The formula raised {failure}")
        return Verdict(False, f"fails: the formula raised {failure}")
    if not jacobian.passed:
        why = f"{diagnosis.words}. " if diagnosis is not None and diagnosis.findings and jacobian.outcome == "fail" else ""
        return Verdict(False, jacobian.summary.replace("fails: ", f"fails: {why}", 1), jacobian.outcome)
    if drawn_finding:
        return Verdict(False, f"fails: {drawn_finding} (checked {jacobian.coverage.describe()})")
    return Verdict(True, jacobian.summary)


def _require_work(plans: Sequence[DifferencePlan], inputs: Sequence[Tensor], repeats: int, work_limit: float) -> None:
    """Refuse finite differences whose evaluations, each over every input, exceed the limit."""
    evaluations = repeats * sum(p.evaluations for p in plans)
    work = evaluations * sum(x.numel() for x in inputs)
    if work > work_limit:
        why = "; ".join(dict.fromkeys(p.source for p in plans))
        raise LabError(
            f"Finite differences would take {evaluations:,} evaluations of {sum(x.numel() for x in inputs):,} elements "
            f"({work:.1e} element evaluations), more than the limit of {work_limit:.1e} ({why}). Choose a smaller shape."
        )


def _structure_key(family: Family, params: dict) -> tuple:
    # the reference's Jacobian structure depends on the family, its params and the input shapes;
    # a kept structure is verified at each new point before it is used (lib.numerical)
    return (family.name, id(family), tuple(sorted((k, repr(v)) for k, v in params.items())))


UPSTREAMS = ("loss", "ones", "random")  # the drawn gradient's upstream: the loss's, all ones, seeded random


def choose_upstream(kind: str, loss: Callable[[Tensor], Tensor], output: Tensor, seed: int = 0) -> Tensor:
    """The upstream gradient the maps draw: the loss's (what users look at), ones, or random."""
    if kind == "loss":
        return upstream_gradient(loss, output)
    if kind == "ones":
        return torch.ones_like(output)
    if kind == "random":
        generator = torch.Generator().manual_seed(seed + 31337)
        return torch.randn(tuple(output.shape), generator=generator, dtype=torch.float64).to(output)
    raise LabError(f"Unknown upstream gradient {kind!r}; choose one of: {', '.join(UPSTREAMS)}.")


# ---- the engine, step by step -------------------------------------------------------------------------


def _outputs(run, reference, inputs) -> tuple[Tensor | None, Tensor | None, str | None]:
    """(reference output, formula output, the formula's failure in forward)."""
    with torch.no_grad():
        reference_output = reference(*inputs) if reference else None
    try:
        with torch.no_grad():
            return reference_output, run(*inputs), None
    except Exception as error:  # noqa: BLE001 - the formula under test may be broken
        return reference_output, None, f"in forward: {type(error).__name__}: {error}"


def _analytic(run, inputs, upstream) -> tuple[list[np.ndarray] | None, str | None]:
    try:
        return _gradients(run, inputs, upstream), None
    except Exception as error:  # noqa: BLE001
        return None, f"in backward: {type(error).__name__}: {error}"


def _forward_error(formula_output: Tensor | None, reference_output: Tensor | None) -> float:
    if formula_output is None or reference_output is None:
        return math.nan
    if not reference_output.numel():
        return 0.0
    difference = (formula_output.double() - reference_output.double()).abs()
    return float(difference.nan_to_num(nan=math.inf, posinf=math.inf).max())


def _comparison(name, x, index, grads, plan, run, reference, inputs, n_outputs, tolerances, jacobian_limit, budget_bytes, failure) -> InputComparison:
    jacobians = None
    if failure is None and x.numel() * n_outputs <= jacobian_limit:
        jacobians = {
            "analytic": _jacobian(run, inputs, index),
            "reference": _jacobian(reference, inputs, index) if reference else numerical_jacobian(run, inputs, plan, tolerances.step),
            "numerical": numerical_jacobian(run, inputs, plan, tolerances.step, budget_bytes),
        }
    return InputComparison(
        name=name,
        gradients=grads,
        errors={pair: error_map(pair, grads[pair[0]], grads[pair[1]]) for pair in PAIRS},
        non_finite={"input": non_finite(_numpy(x, x)), **{s: non_finite(g) for s, g in grads.items()}},
        plan=plan,
        jacobians=jacobians,
    )


def compare_gradients(
    family: Family,
    formula: str,
    inputs: Sequence[Tensor],
    *,
    params: dict | None = None,
    grad_output: Tensor | None = None,
    upstream: str = "loss",
    seed: int = 0,
    step: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    jacobian_limit: int = DEFAULT_JACOBIAN_LIMIT,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    work_limit: float = math.inf,
    second_order: bool = True,
) -> GradientReport:
    """Analytic vs reference vs numerical: the whole Jacobian (``lib.jacobian``), the drawn
    gradient for one upstream, and the second order (``lib.second_order``).

    The drawn upstream is ``grad_output`` if given, else ``upstream`` (see ``choose_upstream``).
    The formula raising in forward or backward is reported, not raised. Finite differences that
    would take more than ``work_limit`` element evaluations are refused (LabError) after
    planning, before they run.
    """
    params = {**family.params, **(params or {})}
    inputs = tuple(x.detach() for x in inputs)
    dtype = inputs[0].dtype
    tolerances = default_tolerances(dtype, step=step, atol=atol, rtol=rtol)
    run = lambda *xs: family.run(formula, xs, **params)  # noqa: E731
    reference = (lambda *xs: family.run(None, xs, **params)) if family.reference is not None else None

    # 1. outputs and the upstream gradient the maps draw
    reference_output, formula_output, failure = _outputs(run, reference, inputs)
    output = reference_output if reference_output is not None else formula_output
    if output is None:
        raise ValueError(f"the formula {formula!r} failed and the family has no reference: {failure}")
    drawn_upstream = grad_output if grad_output is not None else choose_upstream(upstream, family.loss, output, seed)
    loss = float(family.loss(output))

    # 2. the formula's own backward, then the plan and the truth (finite differences, reference)
    blank = [np.full(tuple(x.shape), np.nan) for x in inputs]
    analytic, numerical = blank, blank
    plans = [DifferencePlan(i, x.numel(), output.numel(), None, None, None, "not run") for i, x in enumerate(inputs)]
    jacobian, second = None, None
    if failure is None:
        analytic, failure = _analytic(run, inputs, drawn_upstream)
        analytic = analytic if analytic is not None else blank
    if failure is None:
        plans = plan_differences(run, reference, inputs, tolerances.step, budget_bytes=budget_bytes, structure_key=_structure_key(family, params),
                                 work_limit=work_limit, atol=tolerances.atol, rtol=tolerances.rtol)
        _require_work(plans, inputs, 1, work_limit)
        plans = [with_values(run, inputs, p, budget_bytes) for p in plans]  # the maps draw the numerical gradient too
        numerical = [numerical_gradient(run, inputs, p, drawn_upstream, None, budget_bytes) for p in plans]
        # 3. the whole Jacobian and the second order
        jacobian = check_jacobian(run, reference, inputs, family.input_names, plans, tolerances, seed=seed,
                                  budget_bytes=budget_bytes, work_limit=work_limit)
        if second_order:
            second = check_second_order(run, reference, inputs, family.loss, tolerances, first_order_passed=jacobian.passed, seed=seed,
                                        names=family.input_names)
    referenced = _gradients(reference, inputs, drawn_upstream) if reference else numerical

    # 4. maps, input by input
    comparisons = [
        _comparison(name, x, i, {"analytic": analytic[i], "reference": referenced[i], "numerical": numerical[i]}, plans[i],
                    run, reference, inputs, output.numel(), tolerances, jacobian_limit, budget_bytes, failure)
        for i, (name, x) in enumerate(zip(family.input_names, inputs))
    ]
    if jacobian is not None and jacobian.kinks:
        comparisons = [replace(c, kinks=k) for c, k in zip(comparisons, jacobian.kinks)]
    notes = tuple(c.non_finite["input"].describe(c.name) for c in comparisons if c.non_finite["input"].count)
    drawn = None if failure else _drawn_gradient_finding(comparisons, tolerances, reference is not None,
                                                         jacobian.second_looked if jacobian is not None else (),
                                                         [_gradient_noise(run, inputs, p, drawn_upstream, budget_bytes) for p in plans],
                                                         jacobian.scales if jacobian is not None else ())
    diagnosis = None
    if failure and "size of tensor" in failure and any(x.dim() >= 3 for x in inputs):
        diagnosis = Diagnosis((Finding("reduction dim", "the backward reduces over the wrong dim: its shapes do not match a 3-D input's", failure),))
    if jacobian is not None:
        second_wrong = second is not None and second.outcome in ("fail", "not differentiable")
        diagnosis = diagnose(jacobian, [_numpy(x, x) for x in inputs], tolerances, second_order_wrong=second_wrong)
    return GradientReport(
        family=family.name,
        formula=formula,
        dtype=str(dtype).removeprefix("torch."),
        device=str(inputs[0].device),
        tolerances=tolerances,
        loss=loss,
        forward_max_error=_forward_error(formula_output, reference_output),
        inputs=tuple(comparisons),
        cosine=_cosine(np.concatenate([a.ravel() for a in analytic]), np.concatenate([r.ravel() for r in referenced])),
        verdict=_verdict(jacobian, drawn, failure, diagnosis),
        evaluations=sum(p.evaluations for p in plans) if failure is None else 0,
        failure=failure,
        notes=notes,
        upstream="given" if grad_output is not None else upstream,
        jacobian=jacobian,
        second_order=second,
        diagnosis=diagnosis,
    )


def wrong_inputs(family: Family, formulas: Sequence[str], inputs: Sequence[Tensor], params: dict | None = None,
                 tolerances: Tolerances | None = None) -> dict[str, tuple[str, ...]]:
    """For each formula, the inputs whose gradient of the family's loss differs from the
    reference's at this point (gradcheck's test, element by element); a formula that raises has
    every input. One backward per formula: cheap, for pages that move one input and must say
    when a bug lies in another one's gradient."""
    if family.reference is None:
        return {}
    params = {**family.params, **(params or {})}
    inputs = tuple(x.detach() for x in inputs)
    tolerances = tolerances or default_tolerances(inputs[0].dtype)
    reference = lambda *xs: family.run(None, xs, **params)  # noqa: E731
    with torch.no_grad():
        upstream = upstream_gradient(family.loss, reference(*inputs))
    truth = _gradients(reference, inputs, upstream)
    wrong = {}
    for formula in formulas:
        try:
            analytic = _gradients(lambda *xs: family.run(formula, xs, **params), inputs, upstream)  # noqa: B023
        except Exception:  # noqa: BLE001 - the formula under test may be broken
            wrong[formula] = tuple(family.input_names)
            continue
        wrong[formula] = tuple(name for name, a, t in zip(family.input_names, analytic, truth)
                               if compare_entries(a, {"reference": t}, tolerances)[2] is not None)
    return wrong


# ---- finite-difference step sweep -------------------------------------------------------------------

DEFAULT_STEPS = tuple(10.0**-k for k in np.arange(1, 12.5, 0.5))  # 1e-1 … 1e-12


@dataclass(frozen=True)
class StepSweep:
    """Max |numerical − reference| over all inputs, for each step and dtype; and the Taylor test:
    max |numerical − analytic| (the formula's own backward) for each step, in float64."""

    steps: tuple[float, ...]
    errors: dict[str, tuple[float, ...]]  # dtype name -> error per step
    taylor: tuple[float, ...] = ()  # float64: |numerical(h) − analytic| per step; ∝ h² for a right backward

    def plateau(self) -> float:
        """Where the Taylor test flattens out: the smallest |numerical − analytic| over the steps
        (for a wrong backward, about the size of the bug; for a right one, round-off)."""
        finite = [t for t in self.taylor if math.isfinite(t)]
        return min(finite) if finite else math.nan

    def best_step(self, dtype: str) -> float:
        """The step with the smallest finite error; NaN when no step gave a finite one."""
        errors = np.array(self.errors[dtype])
        finite = np.isfinite(errors)
        return self.steps[int(np.argmin(np.where(finite, errors, np.inf)))] if finite.any() else math.nan


def step_sweep(
    family: Family,
    formula: str,
    inputs: Sequence[Tensor],
    *,
    params: dict | None = None,
    steps: Sequence[float] = DEFAULT_STEPS,
    dtypes: Sequence[torch.dtype] = (torch.float32, torch.float64),
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    work_limit: float = math.inf,
) -> StepSweep:
    """Where truncation error (large h) gives way to rounding error (small h), per dtype.

    Truth is the reference's gradient in float64 (the numerical one, if there is no reference);
    the colouring is planned once per dtype at its default step and reused for every h."""
    params = {**family.params, **(params or {})}
    run = lambda *xs: family.run(formula, xs, **params)  # noqa: E731
    reference = (lambda *xs: family.run(None, xs, **params)) if family.reference is not None else None
    exact = tuple(x.detach().double() for x in inputs)
    with torch.no_grad():
        output = (reference or run)(*exact)
    upstream = upstream_gradient(family.loss, output)
    if reference:
        truth = _gradients(reference, exact, upstream)
    else:
        plans = plan_differences(run, None, exact, 1e-6, budget_bytes=budget_bytes)
        truth = [numerical_gradient(run, exact, p, upstream, 1e-6, budget_bytes) for p in plans]
    errors: dict[str, tuple[float, ...]] = {}
    for dtype in dtypes:
        xs = tuple(x.to(dtype) for x in exact)
        plans = plan_differences(run, reference, xs, default_tolerances(dtype).step, budget_bytes=budget_bytes,
                                 structure_key=_structure_key(family, params), work_limit=work_limit)
        _require_work(plans, xs, len(steps) * len(dtypes), work_limit)
        per_step = []
        for h in steps:
            with np.errstate(all="ignore"):
                estimate = [numerical_gradient(run, xs, p, upstream.to(dtype), h, budget_bytes) for p in plans]
                per_step.append(float(max(np.nanmax(np.abs(e - t)) if np.isfinite(e).any() else math.inf for e, t in zip(estimate, truth))))
        errors[str(dtype).removeprefix("torch.")] = tuple(per_step)
    return StepSweep(tuple(float(h) for h in steps), errors, _taylor(run, reference, exact, upstream, steps, budget_bytes, work_limit))


def _taylor(run, reference, exact, upstream, steps, budget_bytes: int, work_limit: float) -> tuple[float, ...]:
    """max |numerical(h) − analytic| over all inputs, per step, in float64: a right backward's
    error falls like h² (central differences) until rounding; a wrong one's stops falling at the
    size of its bug. Empty when the formula's backward raises."""
    try:
        analytic = _gradients(run, exact, upstream)
    except Exception:  # noqa: BLE001 - the formula under test may be broken: no Taylor test then
        return ()
    plans = plan_differences(run, reference, exact, default_tolerances(torch.float64).step, budget_bytes=budget_bytes, work_limit=work_limit)
    found = []
    for h in steps:
        with np.errstate(all="ignore"):
            estimate = [numerical_gradient(run, exact, p, upstream, h, budget_bytes) for p in plans]
            found.append(float(max(np.nanmax(np.abs(e - a)) if np.isfinite(e - a).any() else math.inf for e, a in zip(estimate, analytic))))
    return tuple(found)


def compare_case(case, formula: str, inputs: Sequence[Tensor] | None = None, **options) -> GradientReport:
    """``compare_gradients`` on a Case's family, inputs (built here unless given), params, upstream and tolerances."""
    return compare_gradients(
        case.get_family(), formula, case.inputs() if inputs is None else inputs, params=case.param_values(), upstream=case.upstream, seed=case.seed,
        step=case.step, atol=case.atol, rtol=case.rtol, **options,
    )
