"""What each page computes, from a Case and plain settings: the one seam between pages and maths.

Every function here takes only hashable plain values (a Case, strings, numbers, small frozen
dataclasses), checks the memory guard before allocating anything large, and returns plain
results, so that ``lib.ui`` can cache them by their arguments and pages stay thin.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from lib.app import budget
from lib.app.case import Case
from lib.engine.pipeline import DEFAULT_JACOBIAN_LIMIT, check
from lib.engine.report import GradientReport
from lib.explore.step_sweep import StepSweep, step_sweep
from lib.contract.conformance import Check, conformance_report
from lib.app.devices import available_devices
from lib.engine.diagnosis import MAX_ENTRIES_BY_HAND
from lib.errors import LabError
from lib.explore.landscape import GradientField, Plane, Surface, chunk_points, gradient_field, loss_surface, make_plane
from lib.engine.planning import CHECK_DIRECTIONS, jacobian_rows, jittered_point, plan_differences
from lib.engine.evaluate import DEFAULT_BUDGET_BYTES, MAX_SECOND_LOOK
from lib.sizes import array_bytes
from lib.engine.tolerances import Tolerances, default_tolerances
from lib.explore.trajectory import TrajectorySet, trajectories


@dataclass(frozen=True)
class PlaneSpec:
    """A plane in plain values (see ``lib.explore.landscape.make_plane``)."""

    mode: str = "random"
    index: int = 0
    seed: int = 0
    coordinates: tuple[int, int] = (0, 1)
    row: int = 0


def _require_input_memory(case: Case) -> None:
    budget.require(case.input_bytes(), f"Inputs of shape {case.shape}", "Choose a smaller shape.")


def _checked_inputs(case: Case):
    _require_input_memory(case)
    return case.inputs()


def _formulas(case: Case) -> tuple[str, ...]:
    family = case.get_family()
    unknown = [f for f in case.formulas if f not in family.formulas]
    if unknown:
        raise LabError(f"{family.title} has no formula {', '.join(map(repr, unknown))}; it has: {', '.join(family.formulas)}.")
    if not case.formulas:
        raise LabError("Choose at least one formula to compare.")
    return case.formulas


# ---- the comparison engine -------------------------------------------------------------------------


def _sizes(case: Case) -> tuple[int, int, int]:
    """(elements of one input, of all inputs, bytes per element) from the Case alone: the guards
    judge a setting before anything is allocated (broadcast inputs are smaller: an upper bound)."""
    n = math.prod(case.shape)
    return n, n * len(case.get_family().input_names), case.torch_dtype().itemsize


MAX_CHECK_ELEMENTS = 2**18  # per input: finite differences cost (colours × 2) evaluations of it


def _chunk_bytes() -> int:
    """The engine's working chunk: its default, or an eighth of the budget where that is less, so
    that a lower budget lowers what every chunked loop holds (at the default budget: the default)."""
    return min(DEFAULT_BUDGET_BYTES, budget.memory_budget() // 8)


def _report_estimate(sizes, outputs: int, entries) -> budget.Estimate:
    return budget.report_bytes(sizes, outputs, entries, _chunk_bytes(), looked=MAX_SECOND_LOOK,
                               drawn_jacobian=DEFAULT_JACOBIAN_LIMIT, by_hand=MAX_ENTRIES_BY_HAND)


def _output_elements(function, inputs) -> int | None:
    try:
        with torch.no_grad():
            return int(function(*inputs).numel())
    except Exception:  # noqa: BLE001 - the engine says what failed, in words
        return None


_PATTERN_COUNTS: OrderedDict[tuple, list[int]] = OrderedDict()  # the last few counts, as the engine keeps its last patterns
_PATTERN_COUNTS_KEPT = 32
_PATTERN_COUNTS_LOCK = threading.Lock()


def _pattern_entries(family, params: dict, reference, inputs, cap: int) -> list[int] | None:
    """How many entries of each input's Jacobian the engine's pattern holds: the reference's
    Jacobian's entries that are not 0 at the jittered point where ``lib.numerical.jacobian_patterns``
    reads them (the same jitter), counted chunk by chunk and never kept; None once more than ``cap``.
    Counted once per family, params and input shapes: that generic pattern is the same at every
    point but where kinks sit, and the plans read at the point itself decide in the end."""
    key = (family.structure_key(params), tuple((tuple(x.shape), x.dtype, str(x.device)) for x in inputs))
    with _PATTERN_COUNTS_LOCK:  # sessions run in threads
        counts = _PATTERN_COUNTS.get(key)
        if counts is not None:
            _PATTERN_COUNTS.move_to_end(key)
            return counts if sum(counts) <= cap else None
    counts = [0] * len(inputs)
    for _, rows in jacobian_rows(reference, jittered_point(inputs), _chunk_bytes()):
        counts = [count + int(torch.count_nonzero(r)) for count, r in zip(counts, rows)]
        if sum(counts) > cap:
            return None
    with _PATTERN_COUNTS_LOCK:
        _PATTERN_COUNTS[key] = counts
        while len(_PATTERN_COUNTS) > _PATTERN_COUNTS_KEPT:
            _PATTERN_COUNTS.popitem(last=False)
    return counts


def _require_report_memory(family, formula: str, inputs, params: dict, tolerances, what: str, held: float = 0,
                           work_first: bool = True) -> None:
    """Refuse, in words, a report whose peak (``budget.report_bytes``), with the ``held`` bytes the
    caller keeps already, exceeds the budget. What it costs depends on how many Jacobian entries it
    compares, which depends on the Jacobian's pattern, known only once read; so the guard goes only
    as far as it must, each step guarded by the one before:

    1. every input's Jacobian compared whole (outputs × elements): an upper bound, enough for small cases;
    2. where the engine must go whole (no reference, or reading the pattern is beyond the work
       limit), that, unless the work limit refuses it before any value is computed (``work_first``:
       the engine checks its work before computing values, as the report does);
    3. else the pattern's size, counted where the engine reads it, chunk by chunk, keeping nothing;
       the pattern at the point itself, which the engine unites with it where a pattern kept from an
       earlier point fails here, adds entries only at kinks (a Jacobian's nonzero entries stay
       nonzero nearby);
    4. then the engine's own plans at this point, by its own planning (which leaves the pattern in the
       engine's cache for the report itself): which inputs' patterns hold here, and which fall back
       to the whole Jacobian (at a zero row, say), so that such a case is refused, not run.
    """
    total = budget.memory_budget()
    sizes, limit = [x.numel() for x in inputs], budget.work_limit()
    elements = sum(sizes)
    run = lambda *xs: family.run(formula, xs, **params)  # noqa: E731
    reference = (lambda *xs: family.run(None, xs, **params)) if family.reference is not None else None
    outputs = _output_elements(reference or run, inputs)
    if outputs is None or (reference is not None and _output_elements(run, inputs) is None):
        return  # the formula or the reference raises: the engine says so, and builds no Jacobian

    def need(entries) -> float:
        return held + _report_estimate(sizes, outputs, entries).peak

    def require(entries, why: str) -> None:
        budget.require(need(entries), f"{what} ({why})", "Choose a smaller shape.")

    whole = [outputs * size for size in sizes]
    if need(whole) <= total:
        return
    in_full = f"every entry of its Jacobian compared, {outputs:,} outputs by {elements:,} input elements"
    if reference is None or outputs * elements > limit:
        if not work_first or sum(2 * size + 2 * CHECK_DIRECTIONS for size in sizes) * elements <= limit:  # else the work limit refuses first
            require(whole, in_full)
        return
    cap = math.ceil(max(total - held, 0) / (budget.ENTRY_KEPT + budget.ENTRY_WORK))  # beyond this, the entries alone are too much
    counts = _pattern_entries(family, params, reference, inputs, cap)
    if counts is None:
        require([cap + 1] + [0] * (len(sizes) - 1), f"its Jacobian has more than {cap:,} entries that are not 0")
    require(counts, f"its Jacobian has {sum(counts):,} entries that are not 0")
    try:
        plans = plan_differences(run, reference, inputs, tolerances.step, budget_bytes=_chunk_bytes(), structure_key=family.structure_key(params),
                                 work_limit=limit, atol=tolerances.atol, rtol=tolerances.rtol)
    except Exception:  # noqa: BLE001 - the engine will meet the same failure and say so; until then, the whole Jacobian
        plans = None
    if plans is None:
        require(whole, in_full)
        return
    entries = [p.rows.size if p.structured else outputs * p.n_inputs for p in plans]
    whole_inputs = [p.input_index for p in plans if not p.structured]
    evaluations = sum(p.evaluations for p in plans)
    del plans
    if work_first and evaluations * elements > limit:
        return  # the work limit refuses it before any value is computed
    if whole_inputs:
        names = ", ".join(family.input_names[i] for i in whole_inputs)
        require(entries, f"the Jacobian's pattern does not hold at this point for {names}, so every one of its "
                         f"{sum(outputs * sizes[i] for i in whole_inputs):,} entries is compared")
    require(entries, f"its Jacobian has {sum(entries):,} entries that are not 0")


def _report(case: Case, formula: str, held: float = 0) -> GradientReport:
    """``held``: bytes the caller keeps while this report is computed (earlier reports of a list)."""
    n = math.prod(case.shape)
    if n > MAX_CHECK_ELEMENTS:
        raise LabError(
            f"Element-by-element checks take inputs of up to {MAX_CHECK_ELEMENTS:,} elements; this case has {n:,}. "
            "Choose a smaller shape (the loss surface and training pages take larger ones)."
        )
    _, total, _ = _sizes(case)
    what = f"Checking gradients of shape {case.shape}"
    # from the Case, before anything is built: the least a report of this shape needs (one output,
    # no Jacobian entries); then, with the inputs, what it really needs (_require_report_memory)
    budget.require(held + _report_estimate([n] * (total // n), 1, [0] * (total // n)).peak, what, "Choose a smaller shape.")
    inputs = _checked_inputs(case)
    family, params = case.get_family(), case.param_values()
    tolerances = default_tolerances(case.torch_dtype(), step=case.step, atol=case.atol, rtol=case.rtol)
    _require_report_memory(family, formula, inputs, params, tolerances, what, held)
    # the inputs built once, for the guard and the engine
    return compare_case(case, formula, inputs, work_limit=budget.work_limit(), budget_bytes=_chunk_bytes())


def compare_case(case: Case, formula: str, inputs=None, **options) -> GradientReport:
    """The engine's check of a Case's formula on its inputs (built here unless given), with its params, upstream and tolerances."""
    family = case.get_family()
    problem = family.problem(formula, case.inputs() if inputs is None else inputs, case.param_values())
    return check(problem, family=family.name, upstream=case.upstream, seed=case.seed, step=case.step, atol=case.atol, rtol=case.rtol,
                 **options)


def gradient_report(case: Case, formula: str) -> GradientReport:
    return _report(case, formula)


def verdicts(case: Case) -> list[GradientReport]:
    """A gradient report for every chosen formula; each is guarded with the ones before it held."""
    reports: list[GradientReport] = []
    for formula in _formulas(case):
        reports.append(_report(case, formula, held=sum(array_bytes(r) for r in reports)))
    return reports


SWEEP_DTYPES = (torch.float32, torch.float64)


def gradient_sweep(case: Case, formula: str) -> StepSweep:
    family, inputs, params = case.get_family(), _checked_inputs(case), case.param_values()
    exact = [x.detach().double() for x in inputs]
    for dtype in SWEEP_DTYPES:  # it plans in each dtype at its default step, with the planner's default tolerances;
        # without a reference its truth is the whole numerical Jacobian, computed before any work check
        _require_report_memory(family, formula, [x.to(dtype) for x in exact], params, Tolerances(default_tolerances(dtype).step, 1e-5, 1e-3),
                               f"A step sweep of shape {case.shape}", work_first=False)
    return step_sweep(family, formula, inputs, params=params, dtypes=SWEEP_DTYPES, work_limit=budget.work_limit(),
                      budget_bytes=_chunk_bytes())


MAX_CONFORMANCE_ELEMENTS = 4096  # PyTorch's checks build whole Jacobians


def conformance(case: Case, formula: str) -> list[Check]:
    n = math.prod(case.shape) * len(case.get_family().input_names)
    if n > MAX_CONFORMANCE_ELEMENTS:
        raise LabError(f"PyTorch's checks build whole Jacobians, so they run on inputs of up to {MAX_CONFORMANCE_ELEMENTS:,} "
                       f"elements in all; this case has {n:,}. Choose a smaller shape for them.")
    family, inputs, params = case.get_family(), _checked_inputs(case), case.param_values()
    function = lambda *xs: family.run(formula, xs, **params)  # noqa: E731
    outputs = _output_elements(function, inputs)
    if outputs is not None:  # else the checks say how the formula fails
        budget.require(budget.conformance_bytes(n, outputs), f"PyTorch's checks of shape {case.shape}", "Choose a smaller shape for them.")
    return conformance_report(function, inputs, atol=case.atol, rtol=case.rtol, step=case.step)


@dataclass(frozen=True)
class DeviceDifference:
    device: str
    max_difference: dict[str, float]  # input name -> max |gradient on CPU − gradient on device|
    verdict_cpu: str
    verdict_device: str


def device_difference(case: Case, formula: str, device: str) -> DeviceDifference:
    """The same case on the CPU and on ``device``: their analytic gradients' largest difference."""
    on_cpu = _report(Case(**{**case.__dict__, "device": "cpu"}), formula)
    on_device = _report(Case(**{**case.__dict__, "device": device}), formula, held=array_bytes(on_cpu))
    differences = {
        c.name: float(np.nanmax(np.abs(c.gradients["analytic"] - d.gradients["analytic"]), initial=0.0))
        for c, d in zip(on_cpu.inputs, on_device.inputs)
    }
    return DeviceDifference(device, differences, on_cpu.verdict.summary, on_device.verdict.summary)


def accelerators() -> list[str]:
    return [name for name, problem in available_devices().items() if name != "cpu" and problem is None]


def wrong_inputs(case: Case) -> dict[str, tuple[str, ...]]:
    """For each chosen formula, the inputs whose gradient is wrong at the case's point."""
    from lib.engine.pipeline import wrong_inputs as find

    _require_input_memory(case)
    family, inputs, params = case.get_family(), case.inputs(), case.param_values()
    return find([family.problem(formula, inputs, params) for formula in _formulas(case)],
                default_tolerances(case.torch_dtype(), step=case.step, atol=case.atol, rtol=case.rtol))


# ---- landscapes --------------------------------------------------------------------------------------


def _finite_inputs(case: Case, what: str):
    """The case's inputs, refused in words where one holds NaN or Inf: a loss through such a
    point is not finite anywhere, so there is no surface, field or path to draw, and fitting
    planes or projections to it would compute on NaN as if it were a number."""
    inputs = _checked_inputs(case)
    names = case.get_family().input_names
    bad = [f"{name} holds {int((~torch.isfinite(x)).sum()):,} NaN or Inf" for name, x in zip(names, inputs) if not bool(torch.isfinite(x).all())]
    if bad:
        raise LabError(f"{what} needs finite inputs: {'; '.join(bad)} (the sidebar's Perturbations inject them), so the loss "
                       "is not finite anywhere near this point. Gradient check shows, element by element, where such inputs lead.")
    return inputs


def _plane(case: Case, spec: PlaneSpec, inputs) -> Plane:
    return make_plane(case.get_family(), inputs, case.param_values(), spec.mode, index=spec.index, seed=spec.seed,
                      coordinates=spec.coordinates, row=spec.row)


def surface(case: Case, spec: PlaneSpec, resolution: int, span: float, one_dimensional: bool = False) -> Surface:
    n, total, itemsize = _sizes(case)
    points = resolution if one_dimensional else resolution**2
    what = f"A {'slice' if one_dimensional else 'surface'} of {points} points at shape {case.shape}"
    budget.require(budget.surface_bytes(points, n, itemsize, chunk_points(n, itemsize)), what, "Lower the resolution or the shape.")
    budget.require_work(points * total, what, "Lower the resolution or the shape.")
    inputs = _finite_inputs(case, "A loss surface")
    return loss_surface(case.get_family(), inputs, case.param_values(), _plane(case, spec, inputs),
                        resolution=resolution, span=span, one_dimensional=one_dimensional)


def field(case: Case, spec: PlaneSpec, resolution: int, span: float) -> GradientField:
    formulas = _formulas(case)
    n, total, _ = _sizes(case)
    what = f"A gradient field of {resolution}×{resolution} points at shape {case.shape}"
    budget.require(budget.field_bytes(resolution**2, n), what, "Lower the field resolution or the shape.")
    budget.require_work(3 * resolution**2 * (len(formulas) + 1) * total, what, "Lower the field resolution or the shape.")
    inputs = _finite_inputs(case, "A gradient field")
    return gradient_field(case.get_family(), inputs, case.param_values(), _plane(case, spec, inputs), formulas,
                          resolution=resolution, span=span)


def training(case: Case, spec: PlaneSpec, optimizer: str, learning_rate: float, steps: int) -> TrajectorySet:
    formulas = _formulas(case)
    n, total, _ = _sizes(case)
    what = f"{steps} optimizer steps for {len(formulas)} formulas at shape {case.shape}"
    budget.require(budget.trajectory_bytes(steps, n, len(formulas)), what, "Take fewer steps or a smaller shape.")
    budget.require_work(4 * steps * len(formulas) * total, what, "Take fewer steps or a smaller shape.")
    inputs = _finite_inputs(case, "Training")
    return trajectories(case.get_family(), inputs, case.param_values(), formulas, _plane(case, spec, inputs),
                        optimizer=optimizer, learning_rate=learning_rate, steps=steps)


# ---- small facts for page controls --------------------------------------------------------------------


def input_sizes(case: Case) -> tuple[int, ...]:
    """How many elements each of the case's inputs has (after broadcasting options)."""
    return tuple(int(x.numel()) for x in _checked_inputs(case))


# ---- perturbation sweeps ---------------------------------------------------------------------------


def perturbation_sweep(case: Case, kind: str):
    """Each formula's gradient error against the reference as one perturbation is swept
    (``lib.explore.sweeps``); returns a ``SweepResult``."""
    from lib.explore import sweeps  # here, not at the top: this section is appended to the module

    formulas = _formulas(case)
    # its own estimate leaves out autograd's graphs through each formula: measured up to 1.8 times it
    budget.require(2 * sweeps.sweep_bytes(case), f"A {kind} sweep of shape {case.shape} with {len(formulas)} formulas",
                   "Choose a smaller shape or fewer formulas.")
    return sweeps.perturbation_sweep(case, kind)


ANATOMY_ELEMENTS = 2**16  # per input: the anatomy runs the formula a few times, and times it


def anatomy(case: Case, formula: str, timed: bool = True):
    """The anatomy of ``formula`` on the case's inputs (``lib.contract.anatomy``), the reference beside it."""
    from lib.contract.anatomy import anatomy as anatomy_of

    n = math.prod(case.shape)
    if n > ANATOMY_ELEMENTS:
        raise LabError(f"The anatomy runs and times the formula on inputs of up to {ANATOMY_ELEMENTS:,} elements; this case has "
                       f"{n:,}. Choose a smaller shape.")
    family, inputs, params = case.get_family(), _checked_inputs(case), case.param_values()
    budget.require(8 * case.input_bytes(), f"The anatomy of inputs of shape {case.shape}", "Choose a smaller shape.")
    reference = (lambda *xs: family.run(None, xs, **params)) if family.reference is not None else None
    owner = getattr(family.formula(formula).function, "__self__", None)  # MyFunction.apply: the class, linted even if forward raises
    return anatomy_of(lambda *xs: family.run(formula, xs, **params), inputs, family.input_names, reference, timed=timed,
                      owner=owner if isinstance(owner, type) else None)


def contract_problems(case: Case) -> dict[str, list]:
    """Per formula of the case, the rules of the Function contract it breaks (errors and
    warnings; notes left out): what the home page names in one line."""
    found = {}
    for formula in _formulas(case):
        # a formula that raises is the verdict's to report; here only the contract's rules
        broken = [b for b in anatomy(case, formula, timed=False).errors() if b.rule not in ("forward runs", "backward runs")]
        if broken:
            found[formula] = broken
    return found
