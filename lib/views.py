"""What each page computes, from a Case and plain settings: the one seam between pages and maths.

Every function here takes only hashable plain values (a Case, strings, numbers, small frozen
dataclasses), checks the memory guard before allocating anything large, and returns plain
results, so that ``lib.ui`` can cache them by their arguments and pages stay thin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from lib import budget
from lib.case import Case
from lib.compare import GradientReport, StepSweep, compare_case, step_sweep
from lib.conformance import Check, conformance_report
from lib.devices import available_devices
from lib.errors import LabError
from lib.landscape import GradientField, Plane, Surface, chunk_points, gradient_field, loss_surface, make_plane
from lib.numerical import DEFAULT_BUDGET_BYTES
from lib.tolerances import default_tolerances
from lib.trajectory import TrajectorySet, trajectories


@dataclass(frozen=True)
class PlaneSpec:
    """A plane in plain values (see ``lib.landscape.make_plane``)."""

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


def gradient_report(case: Case, formula: str) -> GradientReport:
    n = math.prod(case.shape)
    if n > MAX_CHECK_ELEMENTS:
        raise LabError(
            f"Element-by-element checks take inputs of up to {MAX_CHECK_ELEMENTS:,} elements; this case has {n:,}. "
            "Choose a smaller shape (the loss surface and training pages take larger ones)."
        )
    _, total, itemsize = _sizes(case)
    budget.require(  # outputs taken as many as input elements: the common worst case
        budget.comparison_bytes(n, total // n, itemsize, n, DEFAULT_BUDGET_BYTES),
        f"Checking gradients of shape {case.shape}", "Choose a smaller shape.",
    )
    _require_input_memory(case)
    return compare_case(case, formula, work_limit=budget.work_limit())  # builds the inputs once


def verdicts(case: Case) -> list[GradientReport]:
    """A gradient report for every chosen formula."""
    return [gradient_report(case, formula) for formula in _formulas(case)]


def gradient_sweep(case: Case, formula: str) -> StepSweep:
    family, inputs = case.get_family(), _checked_inputs(case)
    return step_sweep(family, formula, inputs, params=case.param_values(), work_limit=budget.work_limit())


MAX_CONFORMANCE_ELEMENTS = 4096  # PyTorch's checks build whole Jacobians


def conformance(case: Case, formula: str) -> list[Check]:
    n = math.prod(case.shape) * len(case.get_family().input_names)
    if n > MAX_CONFORMANCE_ELEMENTS:
        raise LabError(f"PyTorch's checks build whole Jacobians, so they run on inputs of up to {MAX_CONFORMANCE_ELEMENTS:,} "
                       f"elements in all; this case has {n:,}. Choose a smaller shape for them.")
    family, inputs, params = case.get_family(), _checked_inputs(case), case.param_values()
    function = lambda *xs: family.run(formula, xs, **params)  # noqa: E731
    return conformance_report(function, inputs, atol=case.atol, rtol=case.rtol, step=case.step)


@dataclass(frozen=True)
class DeviceDifference:
    device: str
    max_difference: dict[str, float]  # input name -> max |gradient on CPU − gradient on device|
    verdict_cpu: str
    verdict_device: str


def device_difference(case: Case, formula: str, device: str) -> DeviceDifference:
    """The same case on the CPU and on ``device``: their analytic gradients' largest difference."""
    on_cpu = gradient_report(Case(**{**case.__dict__, "device": "cpu"}), formula)
    on_device = gradient_report(Case(**{**case.__dict__, "device": device}), formula)
    differences = {
        c.name: float(np.nanmax(np.abs(c.gradients["analytic"] - d.gradients["analytic"]), initial=0.0))
        for c, d in zip(on_cpu.inputs, on_device.inputs)
    }
    return DeviceDifference(device, differences, on_cpu.verdict.summary, on_device.verdict.summary)


def accelerators() -> list[str]:
    return [name for name, problem in available_devices().items() if name != "cpu" and problem is None]


def wrong_inputs(case: Case) -> dict[str, tuple[str, ...]]:
    """For each chosen formula, the inputs whose gradient is wrong at the case's point."""
    from lib.compare import wrong_inputs as find

    _require_input_memory(case)
    return find(case.get_family(), _formulas(case), case.inputs(), case.param_values(),
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
    budget.require(budget.field_bytes(resolution**2, n, len(formulas)), what, "Lower the field resolution or the shape.")
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
    (``lib.sweeps``); returns a ``SweepResult``."""
    from lib import sweeps  # here, not at the top: this section is appended to the module

    formulas = _formulas(case)
    budget.require(sweeps.sweep_bytes(case), f"A {kind} sweep of shape {case.shape} with {len(formulas)} formulas",
                   "Choose a smaller shape or fewer formulas.")
    return sweeps.perturbation_sweep(case, kind)
