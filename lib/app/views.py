"""What each page computes, from a Case and plain settings: the one seam between pages and maths.

Every function here takes only hashable plain values (a Case, strings, numbers, small frozen
dataclasses), checks the memory guard before allocating anything large, and returns plain
results, so that ``lib.ui`` can cache them by their arguments and pages stay thin.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable

import numpy as np
import torch

from . import budget, guard
from .case import Case
from ..engine.options import DEFAULT_JACOBIAN_LIMIT  # noqa: F401 - the pages' limits, through views
from ..engine.options import CheckOptions
from ..engine.pipeline import check, exact_problem, first_order, first_report
from ..engine.stages import FirstOrder
from ..engine.precision import FLOOR_EPS, RMSE_FLOOR_EPS, is_low  # noqa: F401
from ..engine.report import PAIRS  # noqa: F401
from ..engine.parity import estimate_seconds, paths_of
from ..engine.report import GradientReport, Parity
from ..explore.step_sweep import StepSweep, step_sweep
from ..contract.conformance import Check, conformance_report
from .devices import available_devices
from ..errors import LabError
from ..explore.landscape import GradientField, Plane, Surface, chunk_points, gradient_field, loss_surface, make_plane
from ..engine.kernels import NATIVE, interpreted
from ..engine.signature import differentiable, function_class
from ..sizes import array_bytes
from ..engine.tolerances import Tolerances, default_tolerances, gradcheck_tolerances
from ..explore.trajectory import TrajectorySet, trajectories


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


def _problem(case: Case, formula: str, inputs=None):
    """The case's formula on its inputs, in the engine's canonical form (see ``lib.engine.signature``),
    with the case's own fresh draws (another seed, the same builder and perturbation) for the
    precision stage's tolerances."""
    problem = case.get_family().problem(formula, _checked_inputs(case) if inputs is None else inputs, case.param_values())
    _require_fit(problem)
    return replace(problem, draw=partial(_drawn, case))


def _require_fit(problem) -> None:
    """Refuse a formula whose outputs do not fit its reference's (their number, a shape): nothing
    can be compared, and the other formulas of the case are checked on their own."""
    if problem.failure is not None or problem.given_truth is None or problem.signature is None:
        return
    try:
        with torch.no_grad():
            outputs = problem.given_truth(*problem.given)
    except Exception:  # noqa: BLE001 - a reference that raises is the verdict's to report, as the reference's
        return
    reason = problem.signature.mismatch(outputs)
    if reason:
        raise LabError(f"{problem.formula} does not fit its reference: {reason}. Make the reference return the same outputs as "
                       "the formula, then check again.")


def _drawn(case: Case, seed: int) -> tuple:
    return replace(case, seed=seed).inputs()


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


def _prepared(case: Case, formula: str, held: float = 0) -> tuple:
    """The case's problem and the guard's plans, refused in words where the case is too large;
    ``held``: bytes the caller keeps while this report is computed (earlier reports of a list)."""
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
    budget.require(held + guard.report_estimate([n] * (total // n), 1, [0] * (total // n)).peak, what, "Choose a smaller shape.")
    problem = _problem(case, formula)
    low = is_low(case.torch_dtype()) and problem.failure is None  # then the verdict runs in float64 on the dtype's values
    tolerances = default_tolerances(torch.float64 if low else case.torch_dtype(), step=case.step, atol=case.atol, rtol=case.rtol)
    # planned once: the engine runs the guard's plan
    return problem, guard.require_report_memory(exact_problem(problem) if low else problem, tolerances, what, held)


def _options(case: Case, **overrides) -> CheckOptions:
    return CheckOptions.of(case.options(), work_limit=budget.work_limit(), budget_bytes=guard.chunk_bytes(), **overrides)


# first orders shown early (``first_verdict``), each kept until its whole report is made from it
_FIRSTS: OrderedDict[tuple[Case, str], FirstOrder] = OrderedDict()
_FIRSTS_LOCK = threading.Lock()
KEPT_FIRSTS = 8


def first_verdict(case: Case, formula: str) -> GradientReport:
    """The first-order verdict alone (``pipeline.first_report``, its pending stages named): what a
    page shows within a fraction of a second, while the stages that follow it run. Its first order
    is kept for ``gradient_report``, which goes on from it."""
    problem, plans = _prepared(case, formula)
    options = _options(case)
    first = first_order(problem, options, plans)
    with _FIRSTS_LOCK:
        _FIRSTS[(case, formula)] = first
        while len(_FIRSTS) > KEPT_FIRSTS:
            _FIRSTS.popitem(last=False)
    return first_report(first, options, family=case.family)


def _report(case: Case, formula: str, held: float = 0, parity: str | None = None, determinism: int | None = None) -> GradientReport:
    with _FIRSTS_LOCK:
        first = _FIRSTS.pop((case, formula), None)
    if first is None:
        problem, plans = _prepared(case, formula, held)
        return check(problem, _options(case, parity=parity, determinism=determinism), family=case.family, plans=plans)
    return check(first.problem, _options(case, parity=parity, determinism=determinism), family=case.family, first=first)


def _check(case: Case, problem, **overrides) -> GradientReport:
    return check(problem, case.options(), family=case.family, **overrides)


def determinism(case: Case, formula: str, runs: int = 10):
    """The determinism and batch invariance of ``formula``'s backward (``runs`` times), beside its verdict."""
    if not 2 <= runs <= 1000:
        raise LabError(f"Determinism runs the backward 2 to 1,000 times; {runs} is outside that.")
    return _report(replace(case, conditions="none", parity=""), formula, determinism=runs).determinism


def compare_case(case: Case, formula: str, inputs=None, **options) -> GradientReport:
    """The engine's check of a Case's formula on its inputs (built here unless given), unguarded."""
    problem = _problem(case, formula, case.inputs() if inputs is None else inputs)
    return _check(case, problem, **options)


def parity(case: Case, formula: str) -> Parity | None:
    """The parity grid of ``formula`` (``case.parity``'s paths, "all" where none is named): the
    verdict's truth and tolerances, its gradient under each way of running it. Seconds: it compiles."""
    which = case.parity or "all"
    try:
        paths_of(which)  # an unknown path is refused before anything runs
    except ValueError as error:
        raise LabError(str(error)) from None
    plain = replace(case, conditions="none", parity="")  # the grid needs the verdict's truth, not its conditions
    return _report(plain, formula, parity=which).parity


def parity_seconds(case: Case, formulas: int = 1) -> float:
    """What a parity grid of ``formulas`` would cost, before it runs (a page says so beside its switch)."""
    try:
        return estimate_seconds(formulas, case.parity or "all")
    except ValueError:
        return estimate_seconds(formulas)


def chosen_formulas(case: Case) -> tuple[str, ...]:
    """The case's formulas, each one the family has (a LabError that names the others if not)."""
    return _formulas(case)


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
    for dtype in SWEEP_DTYPES:  # it plans in each dtype at its default step, with the planner's default tolerances;
        # without a reference its truth is the whole numerical Jacobian, computed before any work check
        problem = family.problem(formula, [x.detach().to(dtype) if differentiable(x) else x for x in inputs], params)
        guard.require_report_memory(problem, Tolerances(default_tolerances(dtype).step, 1e-5, 1e-3), f"A step sweep of shape {case.shape}",
                                    work_first=False)
    return step_sweep(family, formula, inputs, params=params, dtypes=SWEEP_DTYPES, work_limit=budget.work_limit(),
                      budget_bytes=guard.chunk_bytes())


MAX_CONFORMANCE_ELEMENTS = 4096  # PyTorch's checks build whole Jacobians
# under Triton's interpreter a kernel's launch takes tens of milliseconds: slow gradcheck's loop over every element would take
# minutes for what the verdict has judged entry by entry already; the other checks run
INTERPRETED_SLOW_LIMIT = 64


def conformance(case: Case, formula: str) -> list[Check]:
    n = math.prod(case.shape) * len(case.get_family().input_names)
    if n > MAX_CONFORMANCE_ELEMENTS:
        raise LabError(f"PyTorch's checks build whole Jacobians, so they run on inputs of up to {MAX_CONFORMANCE_ELEMENTS:,} "
                       f"elements in all; this case has {n:,}. Choose a smaller shape for them.")
    problem = _problem(case, formula)
    if is_low(case.torch_dtype()) and problem.signature is not None:  # gradcheck's differences need float64: on the dtype's values, upcast
        problem = exact_problem(problem)
    if problem.signature is not None:  # else the checks say how the formula fails
        outputs = math.prod(problem.signature.packed_shape)
        budget.require(budget.conformance_bytes(n, outputs), f"PyTorch's checks of shape {case.shape}", "Choose a smaller shape for them.")
    function = problem.function or case.get_family().bind(formula, case.param_values())
    # a kernel in its native precision: gradcheck's tolerances for that dtype, its differences of float64 values it rounds
    native = gradcheck_tolerances(getattr(torch, problem.native.dtype)) if problem.native is not None else None
    return conformance_report(function, problem.inputs if problem.signature else _checked_inputs(case),
                              atol=case.atol if case.atol is not None or native is None else native.atol,
                              rtol=case.rtol if case.rtol is not None or native is None else native.rtol,
                              step=case.step if case.step is not None or native is None else native.step,
                              slow_limit=INTERPRETED_SLOW_LIMIT if problem.kernel and interpreted() else MAX_CONFORMANCE_ELEMENTS)


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
    from ..engine.pipeline import wrong_inputs as find

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


def moving_inputs(case: Case) -> tuple[str, ...]:
    """The inputs a page may move or differentiate: not integer, boolean or declared constants."""
    family = case.get_family()
    return tuple(name for i, (name, x) in enumerate(zip(family.input_names, _checked_inputs(case))) if family.differentiates(i, x))


def input_sizes(case: Case) -> tuple[int, ...]:
    """How many elements each of the case's inputs has (after broadcasting options)."""
    return tuple(int(x.numel()) for x in _checked_inputs(case))


# ---- perturbation sweeps ---------------------------------------------------------------------------


def perturbation_sweep(case: Case, kind: str):
    """Each formula's gradient error against the reference as one perturbation is swept
    (``lib.explore.sweeps``); returns a ``SweepResult``."""
    from ..explore import sweeps  # here, not at the top: this section is appended to the module

    formulas = _formulas(case)
    # its own estimate leaves out autograd's graphs through each formula: measured up to 1.8 times it
    budget.require(2 * sweeps.sweep_bytes(case), f"{'An' if kind[:1] in 'aeiou' else 'A'} {kind} sweep of shape {case.shape} with "
                   f"{len(formulas)} formulas",
                   "Choose a smaller shape or fewer formulas.")
    return sweeps.perturbation_sweep(case, kind)


ANATOMY_ELEMENTS = 2**16  # per input: the anatomy runs the formula a few times, and times it


def anatomy(case: Case, formula: str, timed: bool = True):
    """The anatomy of ``formula`` on the case's inputs (``lib.contract.anatomy``), the reference beside it."""
    from ..contract.anatomy import anatomy as anatomy_of, unseen_writes_broken

    n = math.prod(case.shape)
    if n > ANATOMY_ELEMENTS:
        raise LabError(f"The anatomy runs and times the formula on inputs of up to {ANATOMY_ELEMENTS:,} elements; this case has "
                       f"{n:,}. Choose a smaller shape.")
    family = case.get_family()
    budget.require(8 * case.input_bytes(), f"The anatomy of inputs of shape {case.shape}", "Choose a smaller shape.")
    problem = _problem(case, formula)
    owner = function_class(family.formula(formula).function)  # MyFunction.apply: the class, linted even if forward raises
    if problem.kernel and problem.signature is not None:  # the kernel's own Function as it runs, not the verdict's fresh graphs
        found = anatomy_of(*_as_it_runs(problem, family.bind_as_given(formula, case.param_values())), None, timed=timed,
                           owner=owner if isinstance(owner, type) else None)
    elif problem.signature is None:  # its forward raised: the anatomy says where, on the inputs as given
        found = anatomy_of(family.bind(formula, case.param_values()), _checked_inputs(case), family.input_names, None, timed=timed,
                           owner=owner)
    else:
        found = anatomy_of(problem.function, problem.inputs, problem.names, problem.reference, timed=timed,
                           owner=owner if isinstance(owner, type) else None)
    first_only = case.declared_order() == 1 or bool(problem.kernel)  # a kernel's backward is a kernel: first order unless said
    return _as_asked(found, first_only, unseen_writes_broken(problem.writes))


def _as_it_runs(problem, kernel) -> tuple[Callable[..., Any], tuple, tuple[str, ...]]:
    """A kernel as it runs, in the canonical form (the differentiated inputs alone, outputs packed),
    on its inputs in its native precision: (function, inputs, names) for its anatomy."""
    cast = lambda xs: tuple(x.to(NATIVE) if problem.native is not None and differentiable(x) else x for x in xs)  # noqa: E731
    return problem.signature.canonical(kernel, cast(problem.given)), cast(problem.inputs), problem.names


def _as_asked(found, first_only: bool, writes: list):
    """The anatomy's rules as the case asks them: checked to first order only (``order=1``, a kernel), a
    backward that cannot be differentiated again breaks nothing asked of it, so it is a note; a
    kernel's writes that autograd cannot see are notes beside them (``Problem.writes``)."""
    from ..contract.anatomy import SEVERITIES

    def asked(b):
        if first_only and b.rule == "a differentiable backward" and b.severity != "note":
            return replace(b, severity="note", message=f"{b.message}; not asked of it: checked to first order only")
        return b

    broken = sorted([*map(asked, found.broken), *writes], key=lambda b: SEVERITIES.index(b.severity))
    return replace(found, broken=broken)


def contract_problems(case: Case) -> dict[str, list]:
    """Per formula of the case, the rules of the Function contract it breaks (errors and
    warnings; notes left out): what the home page names in one line."""
    found = {}
    skipped = ("forward runs", "backward runs")
    for formula in _formulas(case):
        # a formula that raises is the verdict's to report; here only the contract's rules
        broken = [b for b in anatomy(case, formula, timed=False).errors() if b.rule not in skipped]
        if broken:
            found[formula] = broken
    return found
