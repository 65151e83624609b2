"""Rows for CSV downloads of landscape results: plain dicts, one per grid point or step."""

from __future__ import annotations

import math

import numpy as np

from ..explore.landscape import GradientField
from ..explore.trajectory import TrajectorySet


def _finite_or_nan(value) -> float:
    """A float for a CSV cell: NaN stands for any value that is not finite."""
    value = float(value)
    return value if math.isfinite(value) else math.nan


def grid_rows(a: np.ndarray, b: np.ndarray | None, **values: np.ndarray) -> list[dict]:
    """Rows of a grid (a, b, value...) for a CSV download; 1-D when b is None."""
    if b is None:
        return [{"a": float(x), **{k: float(v[i]) for k, v in values.items()}} for i, x in enumerate(a)]
    return [{"a": float(x), "b": float(y), **{k: float(v[j, i]) for k, v in values.items()}}
            for j, y in enumerate(b) for i, x in enumerate(a)]


def field_columns(field: GradientField) -> dict:
    """Per-formula grids of a gradient field, named for a CSV: "<formula> d_a", "<formula> d_b",
    "<formula> error" (the error only where the family has a reference)."""
    columns = {}
    for formula, (d_a, d_b) in field.directions.items():
        columns[f"{formula} d_a"] = d_a
        columns[f"{formula} d_b"] = d_b
        if formula in field.errors:
            columns[f"{formula} error"] = field.errors[formula]
    return columns


def trajectory_rows(trajectories: TrajectorySet) -> list[dict]:
    """One row per formula and step: loss, the cosine to the true gradient and the followed
    gradient's norm (blank on the last position, where no step was taken), the plane position."""
    rows = []
    for formula, run in trajectories.runs.items():
        for step in range(run.loss.size):
            taken = step < run.gradient_cosine.size
            rows.append({
                "formula": formula,
                "step": step,
                "loss": _finite_or_nan(run.loss[step]),
                "cosine": _finite_or_nan(run.gradient_cosine[step]) if taken else math.nan,
                "gradient norm": _finite_or_nan(run.gradient_norm[step]) if taken else math.nan,
                "plane a": _finite_or_nan(run.plane_path[step, 0]),
                "plane b": _finite_or_nan(run.plane_path[step, 1]),
            })
    return rows
