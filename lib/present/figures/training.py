"""Training runs in words: one summary row per formula (final loss, change, what happened)."""

from __future__ import annotations

import math

import numpy as np

from ...explore.trajectory import Trajectory, TrajectorySet


def _first_missing_step(run: Trajectory) -> int:
    """The step whose gradient the run did not get (where the formula raised)."""
    missing = np.flatnonzero(np.isnan(run.gradient_norm))
    return int(missing[0]) if missing.size else int(run.gradient_norm.size)


STATUSES = ("descends", "climbs", "stays", "raised", "diverged")


def outcome(run: Trajectory) -> tuple[str, str]:
    """(status, what happened in words a user can act on) for one run; status is one of STATUSES."""
    if run.problem:
        return "raised", f"raised at step {_first_missing_step(run)}, so it stopped: {run.problem}"
    change = run.loss_change
    cosines = run.gradient_cosine[np.isfinite(run.gradient_cosine)]
    uphill = cosines.size and float(np.median(cosines)) < 0  # the gradient followed points away from the true one
    if uphill and (change > 0 or run.diverged_at is not None):  # the cause is the direction, not the step: a smaller one climbs too
        end = f" until it blows up at step {run.diverged_at}" if run.diverged_at is not None else ""
        return "climbs", (f"the loss goes up{f' by {change:.3g}' if math.isfinite(change) and change > 0 else ''}{end}: its gradient "
                          f"points uphill (median cosine to the true gradient {float(np.median(cosines)):.2f}), so every step climbs")
    if run.diverged_at is not None:
        before = f" (the loss had gone {'up' if change > 0 else 'down'} by {abs(change):.3g})" if math.isfinite(change) and change else ""
        return "diverged", (f"diverged at step {run.diverged_at}{before}: its loss, gradient or input stopped being finite "
                            "or blew up; try a smaller learning rate")
    finite = run.loss[np.isfinite(run.loss)]
    scale = max(float(np.abs(finite).max()) if finite.size else 0.0, 1e-12)
    if not math.isfinite(change) or abs(change) <= 1e-9 * scale:
        return "stays", "the loss stays where it started"
    if change > 0:
        return "climbs", f"the loss goes up by {change:.3g}: it climbs instead of descending"
    return "descends", f"the loss goes down by {-change:.3g}"


def training_summary(trajectories: TrajectorySet) -> list[dict]:
    """One row per formula: start and final loss, the change, the mean cosine between the
    followed and the true gradient, a one-word status and what happened."""
    rows = []
    for formula, run in trajectories.runs.items():
        status, words = outcome(run)
        finite = run.loss[np.isfinite(run.loss)]
        cosines = run.gradient_cosine[np.isfinite(run.gradient_cosine)]
        rows.append({
            "formula": formula,
            "start loss": float(finite[0]) if finite.size else math.nan,
            "final loss": float(finite[-1]) if finite.size else math.nan,
            "loss change": run.loss_change,
            "mean cosine to true gradient": float(cosines.mean()) if cosines.size else math.nan,
            "status": status,
            "what happened": words,
        })
    return rows
