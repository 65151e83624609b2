"""The finite-difference step sweep: where truncation error gives way to rounding, per dtype, and the
Taylor test of the formula's own backward against differences at each step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..app.family import Family
from ..engine.evaluate import DEFAULT_BUDGET_BYTES, numerical_gradient
from ..engine.pipeline import gradients_for, require_work, upstream_gradient
from ..engine.planning import plan_differences
from ..engine.signature import differentiable
from ..engine.tolerances import default_tolerances
from ..errors import LabError

Tensor = torch.Tensor


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
    def canonical(xs):
        problem = family.problem(formula, xs, params)
        if problem.failure is not None and (problem.reference is None or problem.failure.stage == "reference"):
            raise LabError(f"There is no step sweep to draw: {problem.failure.whose} raised {problem.failure}.")
        return problem

    exact_problem = canonical(tuple(x.detach().double() if differentiable(x) else x for x in inputs))
    run, reference, exact = exact_problem.function, exact_problem.reference, exact_problem.inputs
    with torch.no_grad():
        output = (reference or run)(*exact)
    upstream = upstream_gradient(exact_problem.loss, output)
    if reference:
        truth = gradients_for(reference, exact, upstream)
    else:
        plans = plan_differences(run, None, exact, 1e-6, budget_bytes=budget_bytes)
        truth = [numerical_gradient(run, exact, p, upstream, 1e-6, budget_bytes) for p in plans]
    errors: dict[str, tuple[float, ...]] = {}
    for dtype in dtypes:
        problem = canonical(tuple(x.detach().to(dtype) if differentiable(x) else x for x in inputs))
        run, reference, xs = problem.function, problem.reference, problem.inputs
        plans = plan_differences(run, reference, xs, default_tolerances(dtype).step, budget_bytes=budget_bytes,
                                 structure_key=problem.structure_key, work_limit=work_limit)
        require_work(plans, xs, len(steps) * len(dtypes), work_limit)
        per_step = []
        for h in steps:
            with np.errstate(all="ignore"):
                estimate = [numerical_gradient(run, xs, p, upstream.to(dtype), h, budget_bytes) for p in plans]
                per_step.append(float(max(np.nanmax(np.abs(e - t)) if np.isfinite(e).any() else math.inf for e, t in zip(estimate, truth))))
        errors[str(dtype).removeprefix("torch.")] = tuple(per_step)
    return StepSweep(tuple(float(h) for h in steps), errors,
                     _taylor(exact_problem.function, exact_problem.reference, exact, upstream, steps, budget_bytes, work_limit))


def _taylor(run, reference, exact, upstream, steps, budget_bytes: int, work_limit: float) -> tuple[float, ...]:
    """max |numerical(h) − analytic| over all inputs, per step, in float64: a right backward's
    error falls like h² (central differences) until rounding; a wrong one's stops falling at the
    size of its bug. Empty when the formula's backward raises."""
    try:
        analytic = gradients_for(run, exact, upstream)
    except Exception:  # noqa: BLE001 - the formula under test may be broken: no Taylor test then
        return ()
    plans = plan_differences(run, reference, exact, default_tolerances(torch.float64).step, budget_bytes=budget_bytes, work_limit=work_limit)
    found = []
    for h in steps:
        with np.errstate(all="ignore"):
            estimate = [numerical_gradient(run, exact, p, upstream, h, budget_bytes) for p in plans]
            found.append(float(max(np.nanmax(np.abs(e - a)) if np.isfinite(e - a).any() else math.inf for e, a in zip(estimate, analytic))))
    return tuple(found)

