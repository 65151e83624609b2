"""Parity: the same gradient, however the formula is run.

A custom gradient that is right in eager can be wrong, or raise, where the Function really runs:
under ``torch.compile`` (``aot_eager``, inductor, ``fullgraph``, ``dynamic``), under ``torch.func``
(``grad``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``vmap``) and in double backward, eager and
compiled. Each way of running it is a *path*; ``check_parity`` runs every path of a set and judges
what it gives (``ParityCell``) against the same truth as the verdict, with its tolerances:

- **against eager first**: a path that gives the formula's eager products for the same upstream
  (or tangent) vectors agrees where eager does, and is "as eager" where eager is wrong (the
  verdict says why). A path that gives something else is judged against the truth itself
  (autograd through the reference where the verdict trusts it, else finite differences), so a
  path is never blamed for what it did not change;
- **where nothing eager compares** (forward mode: ``jvp``, ``jacfwd``), against the truth's J·v;
- a path that returns zeros where the truth is not zero differs, and says so;
- a path that raises raises (the exception, shortened), unless the raise says what the Function
  lacks (no vmap rule, no jvp, the legacy ``forward(ctx, ...)`` style, ``@once_differentiable``)
  or what PyTorch itself cannot do (``fullgraph`` with a custom ``jvp``, compiled double backward,
  a custom op's registered autograd under ``torch.func``): "not supported", saying whose limit.

Beside the cells: the graph breaks and their reasons (``torch._dynamo.explain``), a canary that
says when a compiled gradient is autograd through the Function's forward instead of its own
backward, and for a ``torch.library`` custom op, ``torch.library.opcheck``'s four tests.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from .. import progress
from .evaluate import as_float64, backward_products, numerical_gradient
from .finding import truth_label
from .judge import compare_entries, truth_scale
from .planning import plan
from .report import Failure, OpcheckTest, Parity, ParityCell
from .signature import function_class, name_element
from .tolerances import Tolerances

Tensor = torch.Tensor

PROBES = 2  # random upstream (and tangent) vectors per path
SAMPLES = 2  # the batch vmap maps over: the case's inputs, moved a little, twice
JACOBIAN_ENTRIES = 1 << 20  # jacrev/jacfwd build the whole Jacobian; beyond this many entries the cell is skipped
MESSAGE = 300  # characters of an exception kept in a cell
HAS_COMPILER = shutil.which("gcc") is not None or shutil.which("cc") is not None or shutil.which("clang") is not None
_LOCK = threading.Lock()  # dynamo's caches are process-wide: one grid compiles at a time


@dataclass(frozen=True)
class Path:
    """One way of running the formula."""

    key: str  # what a user names it by: lib.check --parity, check(parity=...)
    group: str  # "eager", "torch.compile", "torch.func", "double backward"
    label: str  # what a table shows
    compiles: bool = False  # costs a compile (seconds, not milliseconds)
    inductor: bool = False  # needs a C compiler


PATHS = (
    Path("eager", "eager", "eager"),
    Path("aot_eager", "torch.compile", "torch.compile (aot_eager)", compiles=True),
    Path("aot_eager fullgraph", "torch.compile", "torch.compile (aot_eager, fullgraph)", compiles=True),
    Path("inductor", "torch.compile", "torch.compile (inductor)", compiles=True, inductor=True),
    Path("inductor fullgraph", "torch.compile", "torch.compile (inductor, fullgraph)", compiles=True, inductor=True),
    Path("dynamic", "torch.compile", "torch.compile (dynamic=True, two sizes)", compiles=True),
    Path("grad", "torch.func", "torch.func.grad"),
    Path("vjp", "torch.func", "torch.func.vjp"),
    Path("jvp", "torch.func", "torch.func.jvp (forward mode)"),
    Path("jacrev", "torch.func", "torch.func.jacrev"),
    Path("jacfwd", "torch.func", "torch.func.jacfwd"),
    Path("vmap", "torch.func", "torch.func.vmap (outputs and per-sample gradients)"),
    Path("double backward", "double backward", "double backward (create_graph=True)"),
    Path("double backward compiled", "double backward", "double backward, compiled (aot_eager)", compiles=True),
)
PATH_KEYS = tuple(p.key for p in PATHS)
# what lib.check --parity and check(parity=...) accept besides a list of keys
PARITY_SETS = {"all": PATH_KEYS, "quick": tuple(p.key for p in PATHS if not p.inductor)}


def paths_of(which: str | Iterable[str]) -> tuple[Path, ...]:
    """The paths a set (``PARITY_SETS``) or a list of keys names; ValueError for an unknown one."""
    if isinstance(which, str):  # a set's name, else keys, comma-separated
        keys = PARITY_SETS.get(which) or tuple(k.strip() for k in which.split(","))
    else:
        keys = tuple(which)
    unknown = [k for k in keys if k not in PATH_KEYS]
    if unknown:
        raise ValueError(f"unknown parity path {', '.join(map(repr, unknown))}; choose from: {', '.join(PARITY_SETS)}, "
                         f"or any of: {', '.join(PATH_KEYS)}")
    return tuple(p for p in PATHS if p.key in keys)


# ---- what raised, and whose limit it is -----------------------------------------------------------------

# A raise that says what the Function lacks: its words, then ours.
_FUNCTION_LACKS = (
    ("must override the setup_context", "it is written as forward(ctx, ...); torch.func needs the setup_context style"),
    ("does not have vmap support", "it has no vmap rule: set generate_vmap_rule = True, or write vmap"),
    ("generate_vmap_rule", "it has no vmap rule: set generate_vmap_rule = True, or write vmap"),
    ("must implement the jvp", "it has no jvp, so forward mode cannot run it"),
    ("differentiate twice", "its backward is @once_differentiable"),
)
# A raise that says what PyTorch itself cannot do, whatever the Function.
_PYTORCH_LIMITS = (
    ("unsupported custom jvp", "torch.compile's fullgraph cannot trace a Function that defines a custom jvp"),
    ("does not currently support double backward", "torch.compile (aot_autograd) does not run double backward"),
)


def _short(message: str) -> str:
    message = " ".join(message.split())
    return message if len(message) <= MESSAGE else message[:MESSAGE] + " …"


def _raised(path: Path, error: BaseException | Failure, custom_op: bool) -> ParityCell:
    failure = error if isinstance(error, Failure) else Failure.of("backward", error)
    mine = "the op" if custom_op else "the Function"
    text = f"{failure.kind}: {failure.message}"
    lowered = text.lower()
    if custom_op and path.group == "torch.func" and "setup_context" in lowered:
        return _cell(path, "not supported", whose="PyTorch", error=_short(text),
                     finding="torch.func does not run a custom op's registered autograd (a limit of PyTorch, not the op's error)")
    for sign, words in _PYTORCH_LIMITS:
        if sign in lowered:
            return _cell(path, "not supported", whose="PyTorch", error=_short(text), finding=f"{words} (a limit of PyTorch, not the Function's error)")
    for sign, words in _FUNCTION_LACKS:
        if sign in lowered:
            return _cell(path, "not supported", whose=mine, error=_short(text), finding=words)
    if failure.kind == "NotImplementedError":
        return _cell(path, "not supported", whose=mine, error=_short(text), finding=f"{mine} does not implement it")
    return _cell(path, "raises", whose=mine, error=_short(text), finding=f"it raised {_short(text)}")


def _cell(path: Path, outcome: str, **fields) -> ParityCell:
    return ParityCell(path.key, path.group, path.label, outcome, **fields)


# ---- the truth, and eager, at a point ------------------------------------------------------------------


class _Truth:
    """The truth's and the formula's eager values the paths are compared with, each computed once."""

    def __init__(self, problem, tolerances: Tolerances, jacobian, plans, seed: int, budget_bytes: int):
        self.problem, self.tolerances, self.jacobian, self.plans, self.budget = problem, tolerances, jacobian, plans, budget_bytes
        self.function, self.inputs = problem.function, problem.inputs
        with torch.no_grad():
            self.output = self.function(*self.inputs)
        generator = torch.Generator().manual_seed(seed + 104729)
        draw = lambda shape, like: torch.randn(tuple(shape), generator=generator, dtype=torch.float64).to(like)  # noqa: E731
        self.upstreams = [draw(self.output.shape, self.output) for _ in range(PROBES)]
        self.tangents = [tuple(draw(x.shape, x) for x in self.inputs) for _ in range(PROBES)]
        self.second = [tuple(draw(x.shape, x) for x in self.inputs) for _ in range(PROBES)]  # w of the double backward
        self.draw = draw
        names = problem.names
        self.by_reference = [problem.reference is not None and jacobian is not None and jacobian.coverage.judged_by_reference(n) for n in names]
        self._memo: dict[Any, Any] = {}

    def memo(self, key, compute):
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def scale(self, i: int, truth: np.ndarray) -> float:
        scales = self.jacobian.scales if self.jacobian is not None else ()
        given = scales[i] if i < len(scales) else None
        return given if given is not None else truth_scale({"truth": truth})

    # uᵀJ, per input: eager, and the truth (the reference where the verdict trusts it, else the differences)
    def eager_vjp(self, k: int) -> list[np.ndarray]:
        return self.memo(("eager vjp", k), lambda: backward_products(self.function, self.inputs, None, self.upstreams[k]))

    def truth_vjp(self, point: int | tuple[str, int], k: int, inputs=None, upstream=None) -> tuple[list[np.ndarray], list[str]]:
        def compute():
            xs = inputs or self.inputs
            u = self.upstreams[k] if upstream is None else upstream
            referenced = backward_products(self.problem.reference, xs, None, u) if any(self.by_reference) else None
            found, names = [], []
            for i in range(len(xs)):
                if self.by_reference[i]:
                    found.append(referenced[i])
                    names.append("reference")
                else:
                    found.append(numerical_gradient(self.function, xs, self.plans[i], u, None, self.budget))
                    names.append("numerical")
            return found, names
        return self.memo(("truth vjp", point, k), compute)

    def truth_jvp(self, k: int) -> tuple[np.ndarray, str, np.ndarray | None]:
        """J·v for tangent k: forward mode through the reference where it is the truth for every
        input, else central differences of the formula's forward with their own error estimate."""
        def compute():
            v = self.tangents[k]
            if all(self.by_reference):
                with torch.enable_grad():
                    _, t = torch.func.jvp(self.problem.reference, tuple(x.detach() for x in self.inputs), v)
                return as_float64(t, self.output), "reference", None
            values = []
            for h in (self.tolerances.step, 2 * self.tolerances.step):
                with torch.no_grad():
                    up = self.function(*(x + h * d for x, d in zip(self.inputs, v)))
                    down = self.function(*(x - h * d for x, d in zip(self.inputs, v)))
                values.append((up.double() - down.double()).cpu().numpy() / (2 * h))
            return values[0], "numerical", np.abs(values[0] - values[1])
        return self.memo(("truth jvp", k), compute)

    def eager_hvp(self, k: int) -> list[np.ndarray]:
        return self.memo(("eager hvp", k), lambda: double_backward(self.function, self.inputs, self.upstreams[k], self.second[k]))

    def truth_hvp(self, k: int) -> tuple[list[np.ndarray], str, list[np.ndarray] | None]:
        """The second order's truth: the reference's double backward where it is the truth, else
        central differences of the formula's own backward along w (as gradgradcheck takes them)."""
        def compute():
            u, w = self.upstreams[k], self.second[k]
            if all(self.by_reference):
                return double_backward(self.problem.reference, self.inputs, u, w), "reference", None
            values = []
            for h in (self.tolerances.step, 2 * self.tolerances.step):
                up = backward_products(self.function, [x + h * d for x, d in zip(self.inputs, w)], None, u)
                down = backward_products(self.function, [x - h * d for x, d in zip(self.inputs, w)], None, u)
                values.append([(a - b) / (2 * h) for a, b in zip(up, down)])
            return values[0], "numerical", [np.abs(a - b) for a, b in zip(*values)]
        return self.memo(("truth hvp", k), compute)


def double_backward(function, inputs: Sequence[Tensor], upstream: Tensor, w: Sequence[Tensor]) -> list[np.ndarray]:
    """∂/∂x ⟨uᵀJ(x), w⟩ per input, by autograd through the backward (create_graph=True)."""
    xs = [x.detach().requires_grad_(True) for x in inputs]
    with torch.enable_grad():
        y = function(*xs)
        grads = torch.autograd.grad(y, xs, upstream.to(y.dtype).clone(), create_graph=True, allow_unused=True, materialize_grads=True)
        paired = sum((g * d.to(g.dtype)).sum() for g, d in zip(grads, w))
        assert isinstance(paired, Tensor)  # a sum over at least one input
        if not paired.requires_grad:  # the backward is no function of x: its derivative is zero
            return [np.zeros(tuple(x.shape)) for x in xs]
        seconds = torch.autograd.grad(paired, xs, allow_unused=True, materialize_grads=True)
    return [as_float64(s, x) for s, x in zip(seconds, xs)]


# ---- judging what a path gave -----------------------------------------------------------------------


@dataclass
class _Side:
    """One comparison: what the path gave, per entry, and what it is compared with."""

    what: str  # "the gradient", "the output", ...
    got: list[np.ndarray]
    eager: list[np.ndarray] | None  # the formula's eager values for the same vectors (None: none to compare)
    truth: list[np.ndarray]
    truth_names: list[str]
    names: list[str]  # per entry, whose element ("x1", "out")
    scales: list[float]
    noise: Sequence[np.ndarray | None] = field(default_factory=list)


def _judge(path: Path, sides: Sequence[_Side], tolerances: Tolerances, role: str, eager_wrong: bool, **fields) -> ParityCell:
    """The path's outcome over its comparisons (see the module's rules)."""
    same_as_eager = True
    worst: tuple[float, dict] | None = None
    for side in sides:
        for j, got in enumerate(side.got):
            truth = side.truth[j]
            if got.shape != truth.shape:
                return _cell(path, "differs", finding=f"{side.what} for {side.names[j]} has shape {tuple(got.shape)}, the truth's is "
                             f"{tuple(truth.shape)}", **fields)
            if side.eager is not None and not compare_entries(got, {"eager": side.eager[j]}, tolerances, scale=side.scales[j]).failed:
                continue
            if side.eager is not None:
                same_as_eager = False
            noise = side.noise[j] if side.noise else None
            name = side.truth_names[j]
            judged = compare_entries(got, {name: truth}, tolerances, noise={name: noise} if noise is not None else None, scale=side.scales[j])
            if not judged.failed:
                continue
            flat = int(np.nanargmax(np.where(np.isnan(judged.excess), np.inf, judged.excess)))
            index = np.unravel_index(flat, got.shape)
            excess = float(judged.excess.ravel()[flat])
            at = name_element(side.names[j], got.shape, flat)
            zeros = not np.any(got) and np.any(truth)
            truth_words = "in eager" if name == "eager" else f"by the {truth_label(name, role)} truth"
            words = (f"it returned zeros for {side.what} of {side.names[j]}, where the truth is not zero" if zeros
                     else f"{side.what} at {at} is {got[index]:.6g} by this path, {truth[index]:.6g} {truth_words}"
                          + (f", {side.eager[j][index]:.6g} in eager" if side.eager is not None else ""))
            if worst is None or excess > worst[0]:
                worst = (excess, {"finding": words, "worst": at, "zeros": bool(zeros),
                                  "differences": tuple(np.nan_to_num(g - t, nan=np.inf) for g, t in zip(side.got, side.truth)),
                                  "names": tuple(side.names)})
    if worst is not None:
        return _cell(path, "differs", **worst[1], **fields)
    if same_as_eager and eager_wrong and any(s.eager is not None for s in sides):
        return _cell(path, "as eager", finding="the same gradient as eager, which the verdict finds wrong", **fields)
    return _cell(path, "agrees", **fields)


# ---- the paths ----------------------------------------------------------------------------------------------


def _counting(backend: str, counter: list[int]):
    """``backend``, counting the graphs it is handed: a compiled path that compiled none ran eagerly."""
    inner = torch._dynamo.lookup_backend(backend)

    def counted(graph, example_inputs):
        counter[0] += 1
        return inner(graph, example_inputs)

    return counted


class _Run:
    """One formula's paths: the problem, its truth, and how to build each path's function."""

    def __init__(self, problem, truth: _Truth, tolerances: Tolerances, eager_wrong: bool, custom_op: bool, order: int,
                 function_class_: type | None):
        self.problem, self.truth, self.tolerances = problem, truth, tolerances
        self.eager_wrong, self.custom_op, self.order, self.owner = eager_wrong, custom_op, order, function_class_
        self.names = list(problem.names)
        self.bypass: list[list[np.ndarray]] | None = None  # autograd through the forward, per upstream

    def vjp_side(self, got: list[np.ndarray], k: int, against_eager: bool = True, what: str = "the gradient") -> _Side:
        truth, truth_names = self.truth.truth_vjp(0, k)
        eager = self.truth.eager_vjp(k) if against_eager else None
        return _Side(what, got, eager, truth, truth_names, self.names, [self.truth.scale(i, t) for i, t in enumerate(truth)])

    def output_side(self, got: Tensor, expected: Tensor, what: str = "the output") -> _Side:
        a, b = as_float64(got, got), as_float64(expected, expected)
        return _Side(what, [a], None, [b], ["eager"], ["out"], [truth_scale({"truth": b})])

    def jvp_side(self, got: Tensor | np.ndarray, k: int) -> _Side:
        truth, name, noise = self.truth.truth_jvp(k)
        got = got if isinstance(got, np.ndarray) else as_float64(got, self.truth.output)
        return _Side("the tangent (J·v)", [got], None, [truth], [name], ["out"], [truth_scale({"truth": truth})], [noise])

    def judge(self, path: Path, sides, **fields) -> ParityCell:
        return _judge(path, sides, self.tolerances, self.problem.role, self.eager_wrong, **fields)

    # -- compile
    def compiled(self, backend: str, counter: list[int], **options) -> Callable[[Callable], Callable]:
        """A wrap for ``Problem.remake``: the formula as a user compiles it (its own callable, params
        bound), compiled once and reused at every size."""
        kept: dict[int, Callable] = {}

        def wrap(f):
            if id(f) not in kept:
                kept[id(f)] = torch.compile(f, backend=_counting(backend, counter), **options)
            return kept[id(f)]

        return wrap

    def compiled_problem(self, wrap, given=None):
        p = self.problem
        if p.remake is None:
            return type(p)(**{**p.__dict__, "function": wrap(p.function)})
        return p.remake(p.given if given is None else given, formula=wrap)


def _eager(run: _Run, path: Path) -> ParityCell:
    sides = [run.vjp_side(run.truth.eager_vjp(k), k, against_eager=False) for k in range(PROBES)]
    return run.judge(path, sides)


def _compile(run: _Run, path: Path) -> ParityCell:
    if path.inductor and not HAS_COMPILER:
        return _cell(path, "skipped", finding="no C compiler on this machine: inductor cannot compile (aot_eager still runs)")
    backend = "inductor" if path.inductor else "aot_eager"
    counter = [0]
    torch._dynamo.reset()
    changed = run.compiled_problem(run.compiled(backend, counter, fullgraph="fullgraph" in path.key))
    if changed.failure is not None:
        return _raised(path, changed.failure, run.custom_op)
    sides = []
    with torch.no_grad():
        sides.append(run.output_side(changed.function(*run.problem.inputs), run.truth.output, "the compiled output"))
    got = [backward_products(changed.function, run.problem.inputs, None, u) for u in run.truth.upstreams]
    sides += [run.vjp_side(g, k) for k, g in enumerate(got)]
    note = "" if counter[0] else "it compiled no graph: the formula ran eagerly inside the compiled region, so it agrees only trivially"
    if run.owner is not None and _has_custom_jvp(run.owner) and "fullgraph" not in path.key:
        note = ("the Function defines a custom jvp, so dynamo runs it eagerly inside the compiled region (a graph break): "
                "its gradient agrees only trivially here")
    cell = run.judge(path, sides, graphs=counter[0], note=note)
    return _with_canary(run, cell, got)


def _has_custom_jvp(owner: type) -> bool:
    jvp = getattr(owner, "jvp", None)
    return jvp is not None and getattr(jvp, "__func__", jvp) is not \
        getattr(torch.autograd.Function.jvp, "__func__", torch.autograd.Function.jvp)


def _with_canary(run: _Run, cell: ParityCell, got: list[list[np.ndarray]]) -> ParityCell:
    """Marks a compiled gradient that is autograd through the forward rather than the Function's backward."""
    if cell.outcome != "differs" or run.bypass is None:
        return cell
    tolerances = run.tolerances
    for g, b in zip(got, run.bypass):
        if any(compare_entries(a, {"forward": c}, tolerances).failed for a, c in zip(g, b)):
            return cell
    return ParityCell(**{**cell.__dict__, "bypassed": True,
                         "finding": "custom backward bypassed: the compiled gradient is autograd through the forward, not the "
                                    f"Function's own backward. {cell.finding}"})


def _dynamic(run: _Run, path: Path) -> ParityCell:
    backend = "inductor" if HAS_COMPILER else "aot_eager"
    p = run.problem
    resized = _resized(p)
    if resized is None:
        return _cell(path, "skipped", finding="no batch dimension of two or more rows to change the size of")
    counter = [0]
    torch._dynamo.reset()
    wrap = run.compiled(backend, counter, dynamic=True)
    first = run.compiled_problem(wrap)
    if first.failure is not None:
        return _raised(path, first.failure, run.custom_op)
    sides = [run.vjp_side(backward_products(first.function, p.inputs, None, u), k) for k, u in enumerate(run.truth.upstreams)]
    compiled_once = counter[0]
    second = run.compiled_problem(wrap, resized)
    if second.failure is not None:
        return _raised(path, second.failure, run.custom_op)
    smaller = second.inputs
    with torch.no_grad():
        output = second.function(*smaller)
    u = run.truth.draw(output.shape, output)
    before = counter[0]  # the calls that read the signature run without grad: another graph, not a recompile of this one
    got = backward_products(second.function, smaller, None, u)
    recompiles = counter[0] - before
    eager_problem = p.remake(resized)  # _resized gives None where the problem has no remake
    eager = backward_products(eager_problem.function, smaller, None, u)
    if all(run.truth.by_reference):
        truth, names = backward_products(eager_problem.reference, smaller, None, u), ["reference"] * len(smaller)
    else:  # at the second size, the formula's own eager gradient: the verdict judged it at the first
        truth, names = eager, ["eager at that size"] * len(smaller)
    sides.append(_Side(f"the gradient at size {tuple(smaller[0].shape)}", got, eager, truth, names, run.names,
                       [truth_scale({"truth": t}) for t in truth]))
    note = (f"recompiled {recompiles} time{'s' * (recompiles != 1)} at the second size, although compiled with dynamic=True"
            if recompiles else "")
    return run.judge(path, sides, graphs=compiled_once, recompiles=recompiles, note=note)


def _resized(problem) -> tuple | None:
    """The inputs with one row fewer in their shared leading dimension (None: no such batch)."""
    given = problem.given
    first = next((x for x in problem.inputs), None)
    if problem.remake is None or first is None or first.dim() < 1 or first.shape[0] < 2:
        return None
    batch = first.shape[0]
    return tuple(x[: batch - 1] if isinstance(x, Tensor) and x.dim() >= 1 and x.shape[0] == batch else x for x in given)


def _func_grad(run: _Run, path: Path) -> ParityCell:
    f, xs, n = run.problem.function, run.problem.inputs, len(run.problem.inputs)
    sides = []
    for k, u in enumerate(run.truth.upstreams):
        got = torch.func.grad(lambda *a, u=u: (f(*a) * u).sum(), argnums=tuple(range(n)))(*xs)
        sides.append(run.vjp_side([as_float64(g, x) for g, x in zip(got, xs)], k))
    return run.judge(path, sides)


def _func_vjp(run: _Run, path: Path) -> ParityCell:
    f, xs = run.problem.function, run.problem.inputs
    output, pullback = torch.func.vjp(f, *xs)  # type: ignore[misc]  # torch annotates 2 or 3 values (has_aux); without aux, 2
    sides = [run.output_side(output, run.truth.output)]
    for k, u in enumerate(run.truth.upstreams):
        sides.append(run.vjp_side([as_float64(g, x) for g, x in zip(pullback(u), xs)], k))
    return run.judge(path, sides)


def _func_jvp(run: _Run, path: Path) -> ParityCell:
    f, xs = run.problem.function, run.problem.inputs
    sides = []
    for k, v in enumerate(run.truth.tangents):
        output, tangent = torch.func.jvp(f, tuple(xs), v)  # type: ignore[misc]  # torch annotates 2 or 3 values (has_aux); without aux, 2
        if k == 0:
            sides.append(run.output_side(output, run.truth.output))
        sides.append(run.jvp_side(tangent, k))
    return _zero_tangents(run, run.judge(path, sides))


def _zero_tangents(run: _Run, cell: ParityCell) -> ParityCell:
    """Forward mode through a custom op: PyTorch 2.13 runs no rule for it and returns zero tangents,
    silently. Never "agrees", and never the op's error."""
    if not (run.custom_op and cell.outcome == "differs" and cell.zeros):
        return cell
    return ParityCell(**{**cell.__dict__, "outcome": "not supported", "whose": "PyTorch", "finding": (
        "PyTorch returns zero tangents for a custom op, silently: forward mode does not run its registered autograd "
        "(a limit of PyTorch, not the op's error; do not trust forward mode through it)")})


def _jacobian(transform, reverse: bool) -> Callable[[_Run, Path], ParityCell]:
    def run_it(run: _Run, path: Path) -> ParityCell:
        f, xs, out = run.problem.function, run.problem.inputs, run.truth.output
        entries = out.numel() * sum(x.numel() for x in xs)
        if entries > JACOBIAN_ENTRIES:
            return _cell(path, "skipped", finding=f"the whole Jacobian has {entries:,} entries, above {JACOBIAN_ENTRIES:,}: a smaller case runs it")
        jacobians = transform(f, argnums=tuple(range(len(xs))))(*xs)
        sides = []
        for k, (u, v) in enumerate(zip(run.truth.upstreams, run.truth.tangents)):  # the Jacobian, read along the same vectors
            if reverse:  # its rows come from backward: uᵀJ, against eager's
                vjp = [torch.tensordot(u.to(J.dtype), J, dims=out.dim()) for J in jacobians]
                sides.append(run.vjp_side([as_float64(g, x) for g, x in zip(vjp, xs)], k, what="uᵀJ of its Jacobian"))
            else:  # its columns come from forward mode: J·v, against the truth's
                jv = sum(torch.tensordot(J, d.to(J.dtype), dims=x.dim()) for J, d, x in zip(jacobians, v, xs))
                sides.append(run.jvp_side(jv, k))
        return _zero_tangents(run, run.judge(path, sides))

    return run_it


def _vmap(run: _Run, path: Path) -> ParityCell:
    p, truth = run.problem, run.truth
    f, xs, n = p.function, p.inputs, len(p.inputs)
    samples = [tuple(x + 0.05 * (x.detach().double().std().nan_to_num(1.0).clamp_min(1e-3)).to(x) * truth.draw(x.shape, x) for x in xs)
               for _ in range(SAMPLES)]
    stacked = [torch.stack([s[i] for s in samples]) for i in range(n)]
    outputs = torch.func.vmap(f)(*stacked)
    sides = []
    for b, sample in enumerate(samples):
        with torch.no_grad():
            sides.append(run.output_side(outputs[b], f(*sample), f"the output of sample {b}"))
    upstreams = torch.stack([truth.draw(truth.output.shape, truth.output) for _ in samples])
    per_sample = torch.func.vmap(lambda *a: torch.func.vjp(f, *a[:n])[1](a[n]))(*stacked, upstreams)
    for b, sample in enumerate(samples):
        got = [as_float64(g[b], x) for g, x in zip(per_sample, xs)]
        eager = backward_products(f, sample, None, upstreams[b])
        found, names = truth.truth_vjp(("sample", b), 0, inputs=list(sample), upstream=upstreams[b])
        sides.append(_Side(f"the per-sample gradient of sample {b}", got, eager, found, names, run.names,
                           [truth.scale(i, t) for i, t in enumerate(found)]))
    return run.judge(path, sides)


def _double(compiled: bool) -> Callable[[_Run, Path], ParityCell]:
    def run_it(run: _Run, path: Path) -> ParityCell:
        if run.order < 2:
            return _cell(path, "not supported", whose="the Function", finding="it is declared to be differentiated once (order=1)")
        p, truth = run.problem, run.truth
        function, fields = p.function, {}
        if compiled:
            counter = [0]
            torch._dynamo.reset()
            changed = run.compiled_problem(run.compiled("aot_eager", counter))
            if changed.failure is not None:
                return _raised(path, changed.failure, run.custom_op)
            function, fields = changed.function, {"graphs": counter[0]}
        sides = []
        for k in range(PROBES):
            got = double_backward(function, p.inputs, truth.upstreams[k], truth.second[k])
            expected, name, noise = truth.truth_hvp(k)
            eager = truth.eager_hvp(k) if compiled else None
            sides.append(_Side("the second derivative (double backward)", got, eager, expected, [name] * len(got), run.names,
                               [truth_scale({"truth": e}) for e in expected], noise or []))
        return run.judge(path, sides, **fields)

    return run_it


_RUNNERS: dict[str, Callable[[_Run, Path], ParityCell]] = {
    "eager": _eager, "aot_eager": _compile, "aot_eager fullgraph": _compile, "inductor": _compile, "inductor fullgraph": _compile,
    "dynamic": _dynamic, "grad": _func_grad, "vjp": _func_vjp, "jvp": _func_jvp, "jacrev": _jacobian(torch.func.jacrev, reverse=True),
    "jacfwd": _jacobian(torch.func.jacfwd, reverse=False), "vmap": _vmap, "double backward": _double(False), "double backward compiled": _double(True),
}


# ---- beside the cells: graph breaks, the canary, opcheck ------------------------------------------------


def _formula_of(problem) -> Callable | None:
    """The formula's own callable (its params bound), as ``Problem.remake`` hands it to a wrap."""
    if problem.remake is None:
        return problem.function
    seen: list[Callable] = []

    def keep(f: Callable) -> Callable:
        seen.append(f)
        return f

    problem.remake(problem.given, formula=keep)
    return seen[0] if seen else None


def _custom_ops(problem) -> list[tuple[Any, tuple, dict]]:
    """The torch.library custom ops the formula calls, with the arguments of their first call."""
    from torch.overrides import TorchFunctionMode

    found: dict[Any, tuple] = {}

    class Seen(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if isinstance(func, torch._ops.OpOverload) and func.namespace not in ("aten", "prim", "prims") and func not in found:
                found[func] = (args, kwargs)
            return func(*args, **kwargs)

    xs = [x.detach().requires_grad_(True) for x in problem.inputs]
    try:
        with torch.enable_grad(), Seen():
            problem.function(*xs)
    except Exception:  # noqa: BLE001 - a forward that raises is the verdict's to say
        return []
    return [(op, args, kwargs) for op, (args, kwargs) in found.items()]


def _opcheck(ops) -> tuple[OpcheckTest, ...]:
    tests: list[OpcheckTest] = []
    for op, args, kwargs in ops:
        args = tuple(a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in args)
        try:
            results = torch.library.opcheck(op, args, kwargs, raise_exception=False)
        except Exception as error:  # noqa: BLE001 - opcheck itself refused the op
            tests.append(OpcheckTest("opcheck", False, _short(f"{type(error).__name__}: {error}")))
            continue
        prefix = f"{op}: " if len(ops) > 1 else ""
        for name, result in results.items():
            passed = result == "SUCCESS"
            tests.append(OpcheckTest(f"{prefix}{name}", passed, "" if passed else _short(f"{type(result).__name__}: {result}")))
    return tuple(tests)


def _graph_breaks(problem) -> tuple[str, ...]:
    """Each graph break dynamo finds in the formula, with its reason and the user's line."""
    torch._dynamo.reset()
    xs = [x.detach().requires_grad_(True) for x in problem.inputs]
    try:
        explained = torch._dynamo.explain(problem.function)(*xs)
    except Exception as error:  # noqa: BLE001 - explain raising is the compile paths' finding; say it here too
        return (f"dynamo could not trace it: {_short(f'{type(error).__name__}: {error}')}",)
    breaks = []
    for reason in explained.break_reasons:
        frames = [f for f in (reason.user_stack or []) if "gradient_lab" not in f.filename and "/lib/engine/" not in f.filename]
        where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
        breaks.append(_short(str(reason.reason).split("\n")[0]) + where)
    return tuple(dict.fromkeys(breaks))


class _Context:
    """A stand-in for ctx while a Function's forward runs alone (the canary)."""

    def __init__(self, n: int):
        self.needs_input_grad = (True,) * n
        self.saved_tensors = ()

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *args):
        pass

    def mark_dirty(self, *args):
        pass

    def set_materialize_grads(self, value):
        pass


@contextlib.contextmanager
def _forward_only(owner: type[torch.autograd.Function]):
    """``owner``'s forward runs alone under autograd, in this thread: the gradient as if it had no
    backward. A formula holds ``owner.apply`` already bound, so the hook is where ``Function.apply``
    hands over to C++ (``super().apply``), and every other Function goes on to C++ as before."""
    takes_ctx = owner.setup_context is torch.autograd.Function.setup_context
    base = torch.autograd.function._SingleLevelFunction
    native = torch._C._FunctionBase.__dict__["apply"]
    caller = threading.get_ident()

    def apply(cls, *args, **kwargs):
        if cls is not owner or threading.get_ident() != caller:
            return native.__get__(None, cls)(*args, **kwargs)
        return owner.forward(_Context(len(args)), *args, **kwargs) if takes_ctx else owner.forward(*args, **kwargs)

    base.apply = classmethod(apply)  # type: ignore[attr-defined]  # apply comes from torch's C++ base class, not in its stubs
    try:
        yield
    finally:
        del base.apply  # type: ignore[attr-defined]  # as above


def _bypass(run: _Run) -> str:
    """Arms the canary: autograd through the forward, per upstream; returns what it can tell."""
    if run.owner is None:
        return "no autograd.Function's backward to bypass" if not run.custom_op else "a custom op's forward is opaque to autograd: the canary cannot run"
    try:
        with _forward_only(run.owner):
            products = [backward_products(run.problem.function, run.problem.inputs, None, u) for u in run.truth.upstreams]
    except Exception:  # noqa: BLE001 - a forward autograd cannot go through (it leaves torch, or detaches)
        return "autograd cannot go through the forward alone: the canary cannot run"
    eager = [run.truth.eager_vjp(k) for k in range(PROBES)]
    if all(not compare_entries(a, {"forward": b}, run.tolerances).failed for e, f in zip(eager, products) for a, b in zip(e, f)):
        return "cannot tell here: the Function's backward gives what autograd through its forward gives"
    run.bypass = products
    return "armed: the Function's backward differs from autograd through its forward, so a compiled path that bypassed it would show"


# ---- the grid ------------------------------------------------------------------------------------------------


def check_parity(problem, tolerances: Tolerances, jacobian, plans, *, which: str | Iterable[str] = "all", seed: int = 0,
                 budget_bytes: int, order: int = 2) -> Parity | None:
    """Every path of ``which`` (``PARITY_SETS`` or keys of ``PATHS``) on ``problem``, judged. ``jacobian``
    is the verdict's (its coverage says which truth is trusted, its scales the unit); ``plans`` the
    finite differences' where a truth is numerical. None where the formula cannot run at all."""
    paths = paths_of(which)
    if problem.function is None or not problem.inputs:
        return None
    start = time.perf_counter()
    with _LOCK, _quiet():
        if plans is None:  # a truth by finite differences needs the plan the verdict made

            plans = plan(problem, tolerances, budget_bytes=budget_bytes)
        truth = _Truth(problem, tolerances, jacobian, plans, seed, budget_bytes)
        ops = _custom_ops(problem)
        formula = _formula_of(problem)
        owner = function_class(formula) if formula is not None else None  # it looks through functools.wraps
        kind = "custom op" if ops else "autograd.Function" if owner is not None else "callable"
        eager_wrong = jacobian is not None and not jacobian.passed
        run = _Run(problem, truth, tolerances, eager_wrong, bool(ops), order, owner)
        canary = _bypass(run) if any(p.compiles for p in paths) else ""
        cells = []
        for n, path in enumerate(paths):
            progress.report(n / len(paths))
            began = time.perf_counter()
            try:
                cell = _RUNNERS[path.key](run, path)
            except Exception as error:  # noqa: BLE001 - the formula, run another way: its raise is the finding
                cell = _raised(path, error, bool(ops))
            cells.append(ParityCell(**{**cell.__dict__, "seconds": time.perf_counter() - began}))
        breaks = _graph_breaks(problem) if any(p.group == "torch.compile" for p in paths) else ()
        if owner is not None and _has_custom_jvp(owner) and any(p.group == "torch.compile" for p in paths):
            breaks += (f"{owner.__name__} defines a custom jvp: dynamo does not trace it, and runs the Function eagerly",)
        torch._dynamo.reset()
        tests = _opcheck(ops) if ops else ()
    progress.report(1.0)
    compiler = "a C compiler is present: inductor runs" if HAS_COMPILER else "no C compiler: the inductor paths are skipped"
    return Parity(tuple(cells), kind, breaks, canary, tests, compiler, time.perf_counter() - start)


@contextlib.contextmanager
def _quiet():
    """Dynamo's own warnings and recompile limits, set for the grid: every path compiles afresh."""
    import logging
    import warnings

    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), torch._dynamo.config.patch(cache_size_limit=64, suppress_errors=False):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def estimate_seconds(formulas: int, which: str | Iterable[str] = "all") -> float:
    """A rough cost of a grid before it runs, from this machine's compile times (seconds per
    compiled path; the rest is small)."""
    paths = paths_of(which)
    per = sum(_COMPILE_SECONDS.get("inductor" if p.inductor else "aot_eager", 1.0) for p in paths if p.compiles) + 0.5
    return formulas * per


# measured on the 2-core CI machine for a small Function (first inductor compile of a process is slower)
_COMPILE_SECONDS = {"aot_eager": 0.4, "inductor": 1.6}
