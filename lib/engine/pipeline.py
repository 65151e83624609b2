"""The pipeline: plan → evaluate → judge → diagnose → report, for one formula on given inputs.

Per input it computes the analytic gradient (the formula's own backward), the reference gradient
(autograd through the reference) and the numerical gradient (central differences of the formula's
forward), all for the same upstream gradient; then the whole-Jacobian verdict (``judge``), the
second order, the diagnosis, and the maps the pages draw. Results are plain numpy data.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Hashable, Sequence

import numpy as np
import torch

from .diagnosis import confirm, diagnose, diagnose_failure
from .evaluate import (as_float64, backward_products, cosine_of, numerical_entries, numerical_gradient, numerical_jacobian, product_noise,
                       summed_gradients, with_values)
from .finding import Evidence, Finding
from .judge import JacobianVerdict, check_jacobian, compare_entries, resolution_unit, truth_scale
from .options import DEFAULT_JACOBIAN_LIMIT, CheckOptions
from .planning import DifferencePlan, plan
from .precision import is_low, judge_values, upcast
from .report import PAIRS, Failure, GradientReport, InputComparison, Verdict, error_map, non_finite
from .signature import Signature, read_signature
from .at_scale import DrawnRaised, at_scale, check_at_scale, sampled_plans
from .kernels import Kernel, Native, Write, interpreted
from .stages import STAGES, FirstOrder
from .tolerances import Tolerances, default_tolerances
from ..errors import FormulaError, LabError

Tensor = torch.Tensor
__all__ = ["DEFAULT_JACOBIAN_LIMIT", "CheckOptions", "Problem", "check", "compare_gradients", "plan", "problem"]


# ---- the engine ------------------------------------------------------------------------------------


def gradients_for(function: Callable[..., Tensor], inputs: Sequence[Tensor], upstream: Tensor) -> list[np.ndarray]:
    return backward_products(function, inputs, None, upstream)


def _jacobian(function: Callable[..., Tensor], inputs: Sequence[Tensor], index: int) -> np.ndarray:
    """Row by row through the function's backward (small inputs only), every input requiring a
    gradient as in the plain verdict (the conditions try the others)."""
    xs = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        y = function(*xs)
        rows = []
        for k in range(y.numel()):
            e = torch.zeros(y.numel(), dtype=y.dtype, device=y.device)
            e[k] = 1
            (row,) = torch.autograd.grad(y, xs[index], e.reshape(y.shape), retain_graph=True, allow_unused=True)  # e: fresh each row
            rows.append(as_float64(row, xs[index]).reshape(-1))
    return np.stack(rows) if rows else np.zeros((0, xs[index].numel()))


def upstream_gradient(loss: Callable[[Tensor], Tensor], output: Tensor) -> Tensor:
    """d loss / d output at ``output``, by autograd through the loss alone."""
    y = output.detach().requires_grad_()
    with torch.enable_grad():
        (v,) = torch.autograd.grad(loss(y), y)
    return v


def _drawn_gradient_finding(comparisons: Sequence[InputComparison], tolerances: Tolerances, trusted: Sequence[bool],
                            second_looked: Sequence[np.ndarray] = (), noises: Sequence[np.ndarray | None] = (),
                            scales: Sequence[float | None] = (), role: str = "reference") -> Finding | None:
    """The drawn gradients (one vector-Jacobian product, for the chosen upstream) against the
    truth: a backward may treat this one upstream specially, so it is checked as it is drawn.
    ``trusted``: per input, whether the reference is a truth there (with ``role="surrogate"``, the
    only one).
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
        truths = {**({"numerical": numerical} if role != "surrogate" else {}), **({"reference": reference} if trusted[i] else {})}
        own_noise, own_scale = noises[i] if i < len(noises) else None, scales[i] if i < len(scales) else None
        noise = {"numerical": own_noise} if own_noise is not None else None
        scale = own_scale if own_scale is not None else truth_scale(truths)  # the Jacobian's, not the product's
        judgement = compare_entries(c.gradients["analytic"], truths, tolerances, noise, scale)
        excess, against = judgement.excess, judgement.against
        if excess.size and excess.max() > 0:
            assert against is not None  # an entry out of tolerance is out against a truth
            flat = int(np.argmax(excess))
            analytic, truth = c.gradients["analytic"].reshape(-1), c.gradients[against].reshape(-1)
            shape = tuple(c.gradients["analytic"].shape)
            return Finding("drawn", c.name, shape, flat, float(analytic[flat]), float(truth[flat]), against, role, tolerances=tolerances,
                           scale=scale, evidence=(Evidence.of_product(c.name, shape, analytic, truths[against], excess > 0, scale),))
    return None


def _gradient_noise(run, inputs, plan: DifferencePlan, upstream: Tensor, budget_bytes: int) -> np.ndarray | None:
    """The numerical gradient's own error estimate for ``upstream``: Σ |u|·(each entry's rounding)."""
    if plan.values is None:
        return None
    x = inputs[plan.input_index]
    entries = numerical_entries(run, inputs, plan, None, budget_bytes)
    return product_noise(plan, x, entries, upstream.detach().double().cpu().reshape(-1).numpy()).reshape(tuple(x.shape))


def _second_point(problem: Problem, plans: Sequence[DifferencePlan], trusted: Sequence[bool], tolerances: Tolerances, seed: int,
                  budget_bytes: int) -> Callable[[int], tuple[np.ndarray, np.ndarray] | None]:
    """For ``diagnosis.confirm``: at a second point (each input moved by half its spread, seeded),
    input i's flat values and which of its elements the formula's gradient gets wrong there, for
    a random upstream, against the reference where it is a truth, else finite differences."""
    generator = torch.Generator().manual_seed(seed + 15485863)
    found: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}
    point: list[tuple] = []  # the second point, drawn when first asked for (a verdict with nothing to confirm never asks)

    def wrong_at(index: int):
        if not point:
            point.append(tuple(x + 0.5 * float(x.double().std().nan_to_num(1.0) if x.numel() > 1 else 1.0)
                               * torch.randn(tuple(x.shape), generator=generator, dtype=torch.float64).to(x) for x in problem.inputs))
        moved = point[0]
        if index not in found:
            try:
                assert problem.function is not None  # a judged problem: its forward ran
                with torch.no_grad():
                    output = problem.function(*moved)
                u = torch.randn(tuple(output.shape), generator=generator, dtype=torch.float64).to(output)
                analytic = gradients_for(problem.function, moved, u)[index]
                truth = (gradients_for(problem.reference, moved, u)[index] if trusted[index] and problem.reference is not None else
                         numerical_gradient(problem.function, moved, _at_another_point(plans[index]), u, tolerances.step, budget_bytes))
                wrong = compare_entries(analytic, {"truth": truth}, tolerances).excess > 0
                found[index] = (as_float64(moved[index], moved[index]).reshape(-1), wrong.reshape(-1))
            except Exception:  # noqa: BLE001 - the code under test may raise there: then the second point cannot tell
                found[index] = None
        return found[index]

    return wrong_at


def _at_another_point(plan: DifferencePlan) -> DifferencePlan:
    """A plan's perturbations without what it found at its own point (its values, the gaps, the
    directions' differences): those belong to that point."""
    return replace(plan, values=None, gaps=None, gap_rounding=None, reference_values=None, directions=(), along=())


def _plain_verdict(first: FirstOrder, diagnosis=None) -> Verdict:
    """Never "passes" without saying what it covered; a failure leads with its diagnosis; a
    forward that differs from its reference fails, whatever its backward does against itself."""
    why = diagnosis.words if diagnosis is not None and diagnosis.findings else ""
    jacobian, drawn = first.jacobian, first.drawn
    if first.failure is not None:
        return Verdict("fail", why=why, failure=first.failure)
    assert jacobian is not None  # nothing raised: the Jacobian was judged
    coverage = jacobian.coverage.describe()
    if first.forward:
        found = jacobian.found or drawn  # the backward against its own forward
        return Verdict("fail", coverage, found.describe() if found else "", why if found else "", forward=first.forward,
                       found=found or first.forward_found)
    if jacobian.outcome != "pass":
        return Verdict(jacobian.outcome, coverage, jacobian.finding, why if jacobian.outcome == "fail" else "", found=jacobian.found)
    if drawn is not None:
        return Verdict("fail", coverage, drawn.describe(), found=drawn)
    return Verdict("pass", coverage)


def require_work(plans: Sequence[DifferencePlan], inputs: Sequence[Tensor], repeats: int, work_limit: float) -> None:
    """Refuse finite differences whose evaluations, each over every input, exceed the limit."""
    evaluations = repeats * sum(p.evaluations for p in plans)
    work = evaluations * sum(x.numel() for x in inputs)
    if work > work_limit:
        why = "; ".join(dict.fromkeys(p.source for p in plans))
        raise LabError(
            f"Finite differences would take {evaluations:,} evaluations of {sum(x.numel() for x in inputs):,} elements "
            f"({work:.1e} element evaluations), more than the limit of {work_limit:.1e} ({why}). Choose a smaller shape."
        )


REPEATED = "called again on the same graph (retain_graph=True), as the whole-Jacobian check calls it"
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


@dataclass(frozen=True)
class Problem:
    """One formula and its truth in the engine's canonical form (``signature``): functions of the
    differentiable inputs alone that return one tensor. What every stage takes."""

    formula: str
    function: Callable[..., Tensor] | None  # None: the formula's forward raised before anything could run
    reference: Callable[..., Tensor] | None
    inputs: tuple[Tensor, ...]  # the differentiable inputs
    signature: Signature | None
    loss: Callable[[Tensor], Tensor]  # packed output -> scalar
    structure_key: Hashable = None  # names the reference and its settings, for a pattern kept across points
    failure: Failure | None = None  # the formula's (or reference's) forward, where it raised while the signature was read
    role: str = "reference"  # the reference's role (``judge.ROLES``): "surrogate" where it is the declared intended gradient
    given: tuple = ()  # every input as given, differentiable or not: what a condition changes
    remake: Callable[..., Problem] | None = None  # (given, formula=wrap, reference=wrap) -> the same problem on other inputs
    draw: Callable[[int], tuple] | None = None  # seed -> every input as given, freshly drawn (the precision stage's draws)
    given_truth: Callable[..., Any] | None = None  # the reference (or surrogate) as given: of every input, not the canonical form
    batch_dims: tuple[int | None, ...] | None = None  # per given input, its batch dim (None: kept whole); None: inferred
    kernel: str = ""  # a fused kernel, "declared" or "detected" (it launches Triton kernels): a graph of its own per backward call
    native: Native | None = None  # a kernel run in its native precision (``kernels``): judged with that dtype's tolerances
    writes: tuple[Write, ...] = ()  # the writes a kernel makes that autograd cannot see (``kernels.unseen_writes``): named, not judged

    @property
    def names(self) -> tuple[str, ...]:
        return self.signature.names if self.signature is not None else ()

    @property
    def output_element(self) -> Callable[[int], str]:
        return self.signature.output_element if self.signature is not None else (lambda flat: f"out[{flat}]")


def problem(formula: str, function: Callable[..., Any], reference: Callable[..., Any] | None, inputs: Sequence[Tensor],
            names: Sequence[str], loss: Callable[..., Tensor], *, outputs: Sequence[str] = (), constants: Sequence[str] = (),
            structure_key: Hashable = None, surrogate: Callable[..., Any] | None = None,
            batch_dims: tuple[int | None, ...] | None = None, signature: Signature | None = None, kernel: str = "",
            native: Native | None = None, writes: Sequence[Write] = ()) -> Problem:
    """The canonical form of ``function`` (and ``reference``) on ``inputs``: integer, boolean and
    declared-constant inputs held as they are, the differentiable outputs packed, ``loss`` taking
    the differentiable outputs. A forward that raises is kept as the problem's failure.

    A ``surrogate`` (plain torch ops whose autograd gradient is the *intended* one, its forward
    the formula's) takes the reference's place as the only truth."""
    def remake(given: Sequence[Any], formula: Callable | None = None, reference: Callable | None = None) -> Problem:
        """The same formula and truth on other inputs, each optionally wrapped (a condition's way
        of changing how they are called); its pattern is planned afresh."""
        wrap = lambda w, f: w(f) if w is not None and f is not None else f  # noqa: E731
        # the same callables on inputs of the same kinds and shapes have the same signature: not read again (a draw's)
        same = formula is None and reference is None and kept is not None and _kinds(given) == _kinds(inputs)
        return problem(formula_name, wrap(formula, function), wrap(reference, given_reference), given, names, loss, outputs=outputs,
                       constants=constants, surrogate=wrap(reference, surrogate), batch_dims=batch_dims, signature=kept if same else None,
                       kernel=kernel, native=native, writes=writes)

    formula_name, given_reference = formula, reference
    inputs = tuple(x.detach() if isinstance(x, Tensor) else x for x in inputs)
    role = "surrogate" if surrogate is not None else "reference"
    reference = surrogate if surrogate is not None else reference
    kept = signature
    if signature is None:
        try:  # from the formula's forward, else the reference's
            signature = kept = read_signature((function, reference), inputs, names, outputs, constants)
        except Exception as error:  # noqa: BLE001 - the code under test may be broken; the last to raise is named
            failure = Failure.of("reference" if reference is not None else "forward", error)
            return Problem(formula, None, None, (), None, lambda y: y.sum(), structure_key, failure, role, inputs, remake,
                           given_truth=reference, batch_dims=batch_dims, kernel=kernel, native=native,
                           writes=tuple(writes))
    canonical = lambda f: signature.canonical(f, inputs) if f is not None else None  # noqa: E731
    return Problem(formula, canonical(function), canonical(reference), signature.split(inputs), signature,
                   lambda y: loss(*signature.unpack(y)), structure_key, role=role, given=inputs, remake=remake, given_truth=reference,
                   batch_dims=batch_dims, kernel=kernel, native=native, writes=tuple(writes))


def _kinds(given: Sequence[Any]) -> tuple:
    """What a signature is read from: each tensor's shape, dtype and device, any other value itself."""
    return tuple((tuple(x.shape), x.dtype, x.device) if isinstance(x, Tensor) else ("value", repr(x)) for x in given)


def _outputs(problem: Problem) -> tuple[Tensor | None, Tensor | None, Failure | None]:
    """(reference output, formula output, the failure of either's forward)."""
    reference_output = None
    if problem.reference is not None:
        try:
            with torch.no_grad():
                reference_output = problem.reference(*problem.inputs)
        except Exception as error:  # noqa: BLE001 - a user's reference may be broken too
            return None, None, Failure.of("reference", error)
    try:
        assert problem.function is not None  # a problem without a failure has its forward
        with torch.no_grad():
            return reference_output, problem.function(*problem.inputs), None
    except Exception as error:  # noqa: BLE001 - the formula under test may be broken
        return reference_output, None, Failure.of("forward", error)


def _analytic(run, inputs, upstream) -> tuple[list[np.ndarray] | None, Failure | None]:
    try:
        return gradients_for(run, inputs, upstream), None
    except Exception as error:  # noqa: BLE001
        return None, Failure.of("backward", error)


def forward_difference(formula_output: Tensor, reference_output: Tensor, tolerances: Tolerances,
                       output_element: Callable[[int], str], role: str = "reference") -> tuple[str, Finding | None]:
    """The formula's forward against its reference's: in words ("" where they agree) and, where
    their values differ, as a finding. Where they differ, the reference's gradient is not the
    derivative of the formula's forward, so it cannot judge the backward: that is the finding, and
    the backward is judged against its own forward."""
    whose = "the declared surrogate's" if role == "surrogate" else "the reference's"
    if formula_output.shape != reference_output.shape:
        return (f"the formula's forward gives an output of shape {tuple(formula_output.shape)}, {whose} one of shape "
                f"{tuple(reference_output.shape)}"), None
    mine, truth = as_float64(formula_output, formula_output).reshape(-1), as_float64(reference_output, reference_output).reshape(-1)
    scale = truth_scale({"reference": truth})
    judgement = compare_entries(mine, {"reference": truth}, tolerances, scale=scale)  # the common case, without indexing millions of values
    if not judgement.failed:
        return "", None
    finite = np.isfinite(mine)  # an overflow is the same function computed badly: the verdict's to show, by the same truth
    every = bool(finite.all())
    judgement = judgement if every else compare_entries(mine[finite], {"reference": truth[finite]}, tolerances, scale=scale)
    if not judgement.failed:
        return "", None
    where = np.arange(mine.size) if every else np.flatnonzero(finite)
    k = int(where[np.argmax(judgement.excess)])
    wrong = np.zeros(mine.size, dtype=bool)
    wrong[where] = judgement.excess > 0
    shape = tuple(formula_output.shape)
    found = Finding("forward", "output", shape, k, float(mine[k]), float(truth[k]), "reference", role, output=output_element(k),
                    tolerances=tolerances, scale=scale, evidence=(Evidence.of_product("output", shape, mine, truth, wrong, scale),))
    return found.describe(), found


def _forward_error(formula_output: Tensor | None, reference_output: Tensor | None) -> float:
    if formula_output is None or reference_output is None:
        return math.nan
    if not reference_output.numel():
        return 0.0
    difference = torch.sub(formula_output.double(), reference_output.double()).abs_()
    largest = float(difference.max())
    return largest if not math.isnan(largest) else math.inf


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
        errors={pair: error_map(pair, grads[pair[0]], grads[pair[1]], computed=not (plan.sampled and "numerical" in pair)) for pair in PAIRS},
        non_finite={"input": non_finite(as_float64(x, x)), **{s: non_finite(g) for s, g in grads.items()}},
        plan=plan,
        jacobians=jacobians,
    )


@dataclass(frozen=True)
class Evaluation:
    """The evaluate stage's results, each computed once: the outputs, the upstream the maps draw,
    the three gradients for it, and the plans with their finite differences."""

    output: Tensor  # the reference's output where there is one, else the formula's (packed)
    upstream: Tensor
    plans: list[DifferencePlan]
    analytic: list[np.ndarray]  # per input: the formula's backward for ``upstream``; NaN where it raised
    numerical: list[np.ndarray]
    referenced: list[np.ndarray]  # autograd through the reference, else the numerical gradient
    failure: Failure | None  # the formula's forward or backward raised


def evaluate(problem: Problem, tolerances: Tolerances, plans: Sequence[DifferencePlan] | None, grad_output: Tensor | None,
             upstream: str, seed: int, budget_bytes: int, work_limit: float, outputs=None) -> Evaluation | Failure:
    """Forward (unless its ``outputs`` are given, as ``_outputs`` gives them), the formula's
    backward for the drawn upstream, the plan (unless given) and its finite differences. A
    Failure where no output at all could be computed."""
    inputs, run, reference = problem.inputs, problem.function, problem.reference
    reference_output, formula_output, failure = outputs or _outputs(problem)
    output = reference_output if reference_output is not None else formula_output
    if output is None:  # neither forward ran: one of them raised
        assert failure is not None
        return failure
    drawn = grad_output if grad_output is not None else choose_upstream(upstream, problem.loss, output, seed)
    if failure is None and at_scale(inputs, output.numel()):  # the verdict samples, and computes the drawn gradients with its probes
        nothing = [np.broadcast_to(np.nan, tuple(x.shape)) for x in inputs]  # no differences by groups at scale: read-only NaN, no memory
        return Evaluation(output, drawn, sampled_plans(inputs, output.numel()), nothing, nothing, nothing, None)
    blank: list[np.ndarray] = [np.full(tuple(x.shape), np.nan) for x in inputs]
    analytic, numerical = blank, blank
    if failure is None:
        computed, failure = _analytic(run, inputs, drawn)
        analytic = computed if computed is not None else blank
    if failure is None:
        plans = list(plans) if plans is not None else plan(problem, tolerances, budget_bytes=budget_bytes, work_limit=work_limit)
        require_work(plans, inputs, 1, work_limit)
        plans = [with_values(run, inputs, p, budget_bytes) for p in plans]  # the maps draw the numerical gradient too
        numerical = [numerical_gradient(run, inputs, p, drawn, None, budget_bytes) for p in plans]
    else:
        plans = [DifferencePlan(i, x.numel(), output.numel(), None, None, None, "not run") for i, x in enumerate(inputs)]
    referenced = gradients_for(reference, inputs, drawn) if reference else numerical
    return Evaluation(output, drawn, plans, analytic, numerical, referenced, failure)


def _maps(problem: Problem, e: Evaluation, jacobian: JacobianVerdict | None, tolerances: Tolerances, jacobian_limit: int,
          budget_bytes: int) -> list[InputComparison]:
    """Per input: its three gradients, their error maps, its small Jacobians, its kinks."""
    run, reference, inputs = problem.function, problem.reference, problem.inputs
    comparisons = [
        _comparison(name, x, i, {"analytic": e.analytic[i], "reference": e.referenced[i], "numerical": e.numerical[i]}, e.plans[i],
                    run, reference, inputs, e.output.numel(), tolerances, jacobian_limit, budget_bytes, e.failure)
        for i, (name, x) in enumerate(zip(problem.names, inputs))
    ]
    if jacobian is not None and jacobian.kinks:
        comparisons = [replace(c, kinks=k) for c, k in zip(comparisons, jacobian.kinks)]
    return comparisons


def check(problem: Problem, options: CheckOptions | None = None, /, *, family: str = "", plans: Sequence[DifferencePlan] | None = None,
          grad_output: Tensor | None = None, first: FirstOrder | None = None, **overrides: Any) -> GradientReport:
    """The specification, read top to bottom: the first-order verdict against the truth (plan
    unless the guard's ``plans`` are given, evaluate, judge the whole Jacobian and the drawn
    gradient), then each stage that applies (``stages.STAGES``: second order, conditions, parity,
    precision, provenance, determinism, does it train), the diagnosis, the verdict with the
    stages that decide it folded in, and the report.

    ``options`` (``CheckOptions``), or any of its fields as keywords. The drawn upstream is
    ``grad_output`` if given, else ``options.upstream`` (see ``choose_upstream``). The code under
    test raising is reported, not raised; finite differences beyond ``options.work_limit`` element
    evaluations are refused (LabError) after planning, before they run. Below float64
    (``precision.LOW_PRECISION``) the first order is judged in float64 on the dtype's values upcast,
    and the precision stage judges the dtype. ``first``: the first order of this problem under these
    options, where a front end has it already (``first_report`` showed it)."""
    options = CheckOptions.of(options, **overrides)
    start, given = time.perf_counter(), first is not None
    first = first if first is not None else first_order(problem, options, plans, grad_output)
    results: dict[str, Any] = {}
    for stage in STAGES:
        if stage.applies(first, options, results):
            result = stage.run(first, options, results)
            if result is not None:
                results[stage.name] = result
    diagnosis = _diagnosis(first, results, options)
    verdict = _plain_verdict(first, diagnosis)
    for stage in STAGES:  # the stages whose failure is the verdict's
        if stage.name in results and hasattr(stage, "fold"):
            verdict = stage.fold(verdict, results[stage.name], first)
    report = _report(first, verdict, diagnosis, results, family, options, given=grad_output is not None)
    return replace(report, seconds=time.perf_counter() - start + (first.seconds if given else 0.0))


def first_report(first: FirstOrder, options: CheckOptions, *, family: str = "", given: bool = False) -> GradientReport:
    """The first-order verdict alone, with its diagnosis, for a front end to show before the stages
    that follow it have run: ``pending`` names them. ``check(..., first=first)`` gives the whole report."""
    pending = tuple(stage.name for stage in STAGES if stage.applies(first, options, {}))
    diagnosis = _diagnosis(first, {}, options)
    return replace(_report(first, _plain_verdict(first, diagnosis), diagnosis, {}, family, options, given), pending=pending,
                   seconds=first.seconds)


def first_order(problem: Problem, options: CheckOptions, plans: Sequence[DifferencePlan] | None = None,
                grad_output: Tensor | None = None) -> FirstOrder:
    """The truth and the first-order verdict: the forward against the truth's, plan and evaluate,
    the whole Jacobian (``judge``), the maps and the drawn gradient. Below float64, on the values
    upcast, for the upstream drawn in the dtype. Timed (``FirstOrder.seconds``)."""
    start = time.perf_counter()
    first = _first_order(problem, options, plans, grad_output)
    return replace(first, seconds=time.perf_counter() - start)


def _first_order(problem: Problem, options: CheckOptions, plans: Sequence[DifferencePlan] | None,
                 grad_output: Tensor | None) -> FirstOrder:
    dtype = next((x.dtype for x in problem.inputs), torch.float64)
    low = is_low(dtype) and problem.failure is None
    exact = exact_problem(problem) if low else problem
    upstream = _low_upstream(problem, grad_output, options) if low else grad_output
    grad_output = upstream.double() if low and upstream is not None else grad_output
    judged_as = getattr(torch, problem.native.dtype) if problem.native is not None else torch.float64 if low else dtype
    tolerances = replace(default_tolerances(judged_as, step=options.step, atol=options.atol, rtol=options.rtol), unit=options.unit)
    checked, outputs, forward, forward_error, forward_found = exact, None if exact.failure else _outputs(exact), "", math.nan, None
    if outputs and outputs[0] is not None and outputs[1] is not None:  # the truth's forward must be the formula's
        forward, forward_found = forward_difference(outputs[1], outputs[0], tolerances, exact.output_element, exact.role)
        forward_error = _forward_error(outputs[1], outputs[0]) if outputs[0].shape == outputs[1].shape else math.inf
        if forward:  # then its gradient is no truth for this backward
            checked, outputs = replace(exact, reference=None, role="reference"), (None, *outputs[1:])
    output = (outputs[0] if outputs[0] is not None else outputs[1]) if outputs else None
    if output is not None:  # entries below the output's rounding are rounding
        tolerances = replace(tolerances, unit=max(options.unit, resolution_unit(output, exact.inputs)))
    e = exact.failure or evaluate(checked, tolerances, plans, grad_output, options.upstream, options.seed, options.budget_bytes,
                                  options.work_limit, outputs)
    common: dict[str, Any] = dict(problem=problem, exact=exact, checked=checked, tolerances=tolerances, outputs=outputs or (), forward=forward,
                  forward_found=forward_found, forward_error=forward_error, upstream=upstream, judge=check)
    if isinstance(e, Failure):
        return FirstOrder(**common, evaluation=None, jacobian=None, comparisons=(), drawn=None, raised=e)
    assert checked.function is not None  # evaluated: its forward ran
    jacobian = None
    if e.failure is None and any(p.sampled for p in e.plans):  # judge, at scale
        try:
            probed = check_at_scale(checked.function, checked.reference, checked.inputs, checked.names, tolerances, e.upstream,
                                     seed=options.seed, output_element=checked.output_element, role=checked.role)
        except DrawnRaised as raised:
            assert raised.__cause__ is not None  # raised from the backward's own error
            e = replace(e, failure=Failure.of("backward", raised.__cause__))
        except FormulaError as error:
            e = replace(e, failure=Failure.of("backward", error, when=_when_again(error)))
        else:
            jacobian = probed.verdict
            e = replace(e, analytic=probed.analytic, referenced=probed.referenced if probed.referenced is not None else e.numerical)
    elif e.failure is None:  # judge
        try:
            jacobian = check_jacobian(checked.function, checked.reference, checked.inputs, checked.names, e.plans, tolerances, seed=options.seed,
                                      budget_bytes=options.budget_bytes, work_limit=options.work_limit,
                                      output_element=checked.output_element, role=checked.role,
                                      # a kernel in float32: its differences are float32's noise, never looked at one by one
                                      looks=0 if checked.native is not None else options.looks, read_kinks=checked.native is None)
        except FormulaError as error:  # its backward raised for another upstream, or when called again on the graph
            e = replace(e, failure=Failure.of("backward", error, when=_when_again(error)))
    sampled = jacobian is not None and bool(jacobian.coverage.sampled)  # at scale the drawn upstream is a probe: judged there
    comparisons: Sequence[InputComparison] | None = None if sampled else _maps(checked, e, jacobian, tolerances, options.jacobian_limit, options.budget_bytes)
    trusted = [jacobian is not None and jacobian.coverage.judged_by_reference(name) for name in checked.names]
    drawn = None if e.failure or sampled or comparisons is None or jacobian is None else _drawn_gradient_finding(
        comparisons, tolerances, trusted, jacobian.second_looked,
        [_gradient_noise(checked.function, checked.inputs, p, e.upstream, options.budget_bytes) for p in e.plans], jacobian.scales, checked.role)
    redrawn = False
    if jacobian is not None and jacobian.found is not None and drawn is None and grad_output is None and not low and options.upstream == "loss":
        # the loss's upstream hides the failure (a backward that ignores grad_output is right for ones):
        # the maps show the upstream that exposed it (an upstream the user chose is drawn as chosen)
        again = _redrawn(checked, e, jacobian, options)
        if again is not None:
            e, redrawn, comparisons = again, True, None
    if comparisons is None:
        comparisons = _maps(checked, e, jacobian, tolerances, options.jacobian_limit, options.budget_bytes)
    if low and upstream is not None and e.failure is None:  # the maps draw the formula's gradient as it runs, in the dtype
        comparisons = _low_analytic(problem, comparisons, upstream)
    return FirstOrder(**common, evaluation=e, jacobian=jacobian, comparisons=tuple(comparisons), drawn=drawn, redrawn=redrawn)


def _when_again(error: FormulaError) -> str:
    """When a backward that ran for the drawn upstream raised later: called again on the graph, or
    given other upstreams."""
    again = any(sign in str(error) for sign in ("modified by an inplace operation", "backward through the graph a second time"))
    return REPEATED if again else "given other upstream gradients"


def _low_upstream(problem: Problem, grad_output: Tensor | None, options: CheckOptions) -> Tensor | None:
    """The upstream the maps draw, in the dtype as the formula gets it (the truth gets it upcast);
    None where the code under test raises in the dtype (the precision stage's to report)."""
    dtype = problem.inputs[0].dtype
    try:
        truth = problem.reference or problem.function
        assert truth is not None  # below float64 without a failure: its forward ran
        with torch.no_grad():
            output = truth(*problem.inputs)
        return grad_output.to(dtype) if grad_output is not None else choose_upstream(options.upstream, problem.loss, output, options.seed).to(dtype)
    except Exception:  # noqa: BLE001 - the code under test raising in the dtype
        return None


def _redrawn(problem: Problem, e: Evaluation, jacobian: JacobianVerdict, options: CheckOptions) -> Evaluation | None:
    """The evaluation's three gradients again for the upstream that exposed the verdict's failure
    (the finding's own, else the first random probe's), where it shows there; None where not."""
    found = jacobian.found
    if found is not None and found.kind == "zero upstream":
        flat = np.zeros(e.output.numel())
    elif found is not None and found.upstream is not None and found.upstream.size == e.output.numel():
        flat = found.upstream
    elif jacobian.probes:
        flat = jacobian.probes[0].upstream
    else:
        return None
    u = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float64)).reshape(tuple(e.output.shape)).to(e.output)
    probe = next((p for p in jacobian.probes if p.upstream is flat), None)
    if jacobian.coverage.sampled and probe is not None and (problem.reference is None or "reference" in probe.products):
        # at scale the probe's products are the gradients for it (every input has each source's): nothing is computed again
        shaped = lambda source: [v.reshape(tuple(x.shape)) for v, x in zip(probe.products[source], problem.inputs) if v is not None]  # noqa: E731
        return replace(e, upstream=u, analytic=shaped("analytic"), referenced=shaped("reference") if problem.reference else e.numerical)
    try:
        assert problem.function is not None  # evaluated: its forward ran
        analytic = gradients_for(problem.function, problem.inputs, u)
        numerical = [numerical_gradient(problem.function, problem.inputs, p, u, None, options.budget_bytes) for p in e.plans]
        referenced = gradients_for(problem.reference, problem.inputs, u) if problem.reference else numerical
    except Exception:  # noqa: BLE001 - the code under test: the maps keep the upstream they had
        return None
    return replace(e, upstream=u, analytic=analytic, numerical=numerical, referenced=referenced)


def _diagnosis(first: FirstOrder, results: dict, options: CheckOptions):
    """Why it is wrong: the raise named, or hypotheses tested against the judged comparison and
    held to a second point. None where nothing ran, or a condition's check (``options.diagnose``)."""
    if first.evaluation is None:
        return None
    p, jacobian = first.checked, first.jacobian
    diagnosis = diagnose_failure(first.failure, p.inputs) if first.failure is not None else None
    if jacobian is None or not options.diagnose:
        return diagnosis
    second = results.get("second_order")
    summed = summed_gradients(p.function, p.inputs) if not jacobian.passed else []
    diagnosis = diagnose(jacobian, [as_float64(x, x) for x in p.inputs], first.tolerances, second_order_wrong=second is not None and second.failed,
                         summed=summed)
    return confirm(diagnosis, _second_point(p, first.plans, first.trusted, first.tolerances, options.seed, options.budget_bytes))


def _report(first: FirstOrder, verdict: Verdict, diagnosis, results: dict, family: str, options: CheckOptions, given: bool) -> GradientReport:
    problem, e = first.problem, first.evaluation
    dtype = next((x.dtype for x in problem.inputs), torch.float64)
    precision = results.get("precision")
    forward_error = precision.output.formula.max_error if precision is not None and precision.output is not None else first.forward_error
    comparisons = first.comparisons
    gradients = lambda source: (np.concatenate([c.gradients[source].ravel() for c in comparisons]) if len(comparisons) != 1  # noqa: E731
                                else comparisons[0].gradients[source].ravel())
    return GradientReport(
        family=family,
        formula=problem.formula,
        dtype=str(dtype).removeprefix("torch."),
        device=str(problem.inputs[0].device) if problem.inputs else "cpu",
        tolerances=first.tolerances,
        loss=float(first.checked.loss(e.output)) if e is not None else math.nan,
        forward_max_error=forward_error,
        inputs=comparisons,
        cosine=cosine_of(gradients("analytic"), gradients("reference")) if comparisons else math.nan,
        verdict=verdict,
        evaluations=sum(p.evaluations for p in e.plans) if e is not None and e.failure is None else 0,
        failure=first.failure,
        notes=tuple(c.non_finite["input"].describe(c.name) for c in comparisons if c.non_finite["input"].count),
        upstream="given" if given else "finding" if first.redrawn else options.upstream,
        jacobian=first.jacobian,
        diagnosis=diagnosis,
        signature=first.checked.signature,
        stages=results,
        kernel=Kernel(problem.native, interpreted(), problem.writes, problem.kernel == "detected") if problem.kernel else None,
    )


def exact_problem(problem: Problem) -> Problem:
    """The same problem on its values upcast to float64 (the precision stage's truth)."""
    if problem.remake is not None:
        return replace(problem.remake(upcast(problem.given)), draw=None)
    return replace(problem, inputs=upcast(problem.inputs), given=upcast(problem.given))


def _low_analytic(problem: Problem, comparisons: Sequence[InputComparison], upstream: Tensor) -> tuple[InputComparison, ...]:
    """The float64 maps with the analytic gradient of the formula run in the dtype (its errors
    against the float64 truths are what the dtype costs); as they were where its backward raises."""
    try:
        assert problem.function is not None  # evaluated: its forward ran
        analytic = gradients_for(problem.function, problem.inputs, upstream)
    except Exception:  # noqa: BLE001 - the precision stage reports the formula raising in the dtype
        return tuple(comparisons)
    changed = []
    for c, a in zip(comparisons, analytic):
        grads = {**c.gradients, "analytic": a}
        changed.append(replace(c, gradients=grads, errors={pair: error_map(pair, grads[pair[0]], grads[pair[1]]) for pair in PAIRS},
                               non_finite={**c.non_finite, "analytic": non_finite(a)}))
    return tuple(changed)


def compare_gradients(family, formula: str, inputs: Sequence[Tensor], *, params: dict | None = None,
                      options: CheckOptions | None = None, **overrides) -> GradientReport:
    """``check`` of one formula of a family (anything with ``problem``, as ``lib.app.family.Family``),
    to the order the family declares unless ``options`` or ``order`` say otherwise."""
    if options is None and "order" not in overrides:
        overrides["order"] = getattr(family, "order", CheckOptions.order)
    return check(family.problem(formula, inputs, params), options, family=family.name, **overrides)


def wrong_inputs(problems: Sequence[Problem], tolerances: Tolerances | None = None) -> dict[str, tuple[str, ...]]:
    """For each problem's formula, the inputs whose gradient of the loss differs from the
    reference's at this point (gradcheck's test, element by element); a formula that raises has
    every input. One backward per formula: cheap, for pages that move one input and must say
    when a bug lies in another one's gradient. Empty without a reference."""
    known = [p for p in problems if p.reference is not None]
    if not known:
        return {}
    first = known[0]
    assert first.reference is not None  # known: a problem with a reference
    dtype = first.inputs[0].dtype
    tolerances = tolerances or default_tolerances(dtype)
    with torch.no_grad():
        upstream = upstream_gradient(first.loss, first.reference(*first.inputs))
    if is_low(dtype):  # below float64, the precision rule: against float64, beside the reference in the dtype
        exact = exact_problem(first)
        assert exact.reference is not None  # the same problem upcast
        truth, baseline = gradients_for(exact.reference, exact.inputs, upstream.double()), gradients_for(first.reference, first.inputs, upstream)
        differs = lambda a, t, b: not judge_values("", a.reshape(-1), b.reshape(-1), t.reshape(-1), dtype, "reference", None).passed  # noqa: E731
    else:
        truth = baseline = gradients_for(first.reference, first.inputs, upstream)
        differs = lambda a, t, b: compare_entries(a, {"reference": t}, tolerances).against is not None  # noqa: E731
    wrong = {}
    for p in problems:
        if p.function is None:  # its forward raised before anything ran
            wrong[p.formula] = first.names
            continue
        try:
            analytic = gradients_for(p.function, p.inputs, upstream)
        except Exception:  # noqa: BLE001 - the formula under test may be broken
            wrong[p.formula] = first.names
            continue
        wrong[p.formula] = tuple(name for name, a, t, b in zip(first.names, analytic, truth, baseline) if differs(a, t, b))
    return wrong
