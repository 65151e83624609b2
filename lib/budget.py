"""The memory guard: estimate what a computation needs before running it, and refuse in words.

The budget defaults to 2 GiB (fits a laptop) and is set with the environment variable
``GRADIENT_LAB_MEMORY_MB``. Estimates are deliberately simple upper bounds of the largest
arrays each computation keeps; the chunked parts of the engine stay inside the budget by design.
"""

from __future__ import annotations

import math
import os

from lib.errors import LabError

DEFAULT_MEMORY_MB = 2048


def memory_budget() -> int:
    """The budget in bytes, from GRADIENT_LAB_MEMORY_MB (MiB) or the default."""
    raw = os.environ.get("GRADIENT_LAB_MEMORY_MB", "")
    try:
        mb = float(raw) if raw else DEFAULT_MEMORY_MB
    except ValueError:
        mb = DEFAULT_MEMORY_MB
    return int(max(mb, 1) * 2**20)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def require(estimate: float, what: str, advice: str, budget: int | None = None) -> None:
    """Raise a LabError naming the estimate and the limit when ``estimate`` exceeds the budget."""
    budget = memory_budget() if budget is None else budget
    if not math.isfinite(estimate) or estimate > budget:
        raise LabError(
            f"{what} would need about {human_bytes(estimate)} of memory, more than the budget of "
            f"{human_bytes(budget)}. {advice} (The budget is set by GRADIENT_LAB_MEMORY_MB.)"
        )


# Estimates, in bytes: n = elements per input, k = inputs, m = output elements.


def comparison_bytes(n: int, k: int, itemsize: int, m: int, chunk_bytes: int) -> float:
    # per input: 3 gradients, 3 signed and 3 relative error maps, 2 masks, all float64; the
    # Jacobian pattern (row, col, colour) of up to n·max(1, m/n) entries; the engine's chunk
    return k * n * (11 * 8 + 3 * 8 * max(1.0, m / max(n, 1))) + k * n * itemsize * 4 + chunk_bytes


def surface_bytes(points: int, n: int, itemsize: int, chunk_points: int) -> float:
    # the grid of losses, and one chunk of points with the function's temporaries
    return points * 8 * 4 + chunk_points * n * itemsize * 6


def field_bytes(points: int, n: int, formulas: int) -> float:
    # every formula's gradient at every grid point, in float64, plus the reference's
    return points * n * 8 * (formulas + 2)


def trajectory_bytes(steps: int, n: int, formulas: int) -> float:
    # every position of every run is kept for the principal components
    return (steps + 1) * n * 8 * formulas * 2


# ---- time: element evaluations ------------------------------------------------------------------------

DEFAULT_WORK = 3e9  # element evaluations: a few seconds on two cores


def work_limit() -> float:
    """The most element evaluations one computation may take, from GRADIENT_LAB_WORK_LIMIT."""
    try:
        return float(os.environ.get("GRADIENT_LAB_WORK_LIMIT", "") or DEFAULT_WORK)
    except ValueError:
        return DEFAULT_WORK


def require_work(evaluations: float, what: str, advice: str, limit: float | None = None) -> None:
    """Refuse, in words, a computation that would keep the page busy for too long."""
    limit = work_limit() if limit is None else limit
    if not math.isfinite(evaluations) or evaluations > limit:
        raise LabError(
            f"{what} would take about {evaluations:.1e} element evaluations, more than the limit of {limit:.1e} "
            f"(a few seconds here). {advice} (The limit is set by GRADIENT_LAB_WORK_LIMIT.)"
        )
