"""The memory guard: estimate what a computation needs before running it, and refuse in words.

The budget defaults to 2 GiB (fits a laptop) and is set with the environment variable
``GRADIENT_LAB_MEMORY_MB``. Estimates are upper bounds of what a computation keeps and of the
most it holds at once, term by term, each term's constant set above what was measured
(tests/test_memory.py checks them against real results and a whole session's resident memory).
Memory that the allocator keeps once it is freed is handed back (``release_freed_memory``).
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
from dataclasses import dataclass
from typing import Sequence

from ..errors import LabError

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


@dataclass(frozen=True)
class Estimate:
    """What a computation keeps in its result, and the most it holds at once while it runs
    (what it keeps included)."""

    kept: float
    peak: float


# One gradient report (lib.engine.pipeline.check), term by term. An *entry* is one Jacobian
# entry the report differences and compares one by one: an entry of the pattern, for an input whose
# plan has one, else every one of the n_outputs × n_inputs entries of that input (a dense plan).
#
# Kept, per entry, at most 80 bytes:
#   the pattern's rows and cols                16  (int32; int64 once united with the pattern at a point)
#   the plan's values and one-sided gaps       16  (float64, one (2, entries) buffer)
#   the rounding those gaps carry               8
#   the reference's Jacobian on the pattern     8
#   the formula's own entries (analytic)        8
#   the numerical entries' rounding (noise)     8
#   copies with undefined outputs set to NaN   16  (numerical and reference; analytic's copy replaces it)
#   A dense plan keeps 24 per entry (values, gaps, rounding) and, per entry it finds not zero, 48
#   (rows and cols in int64, numerical, analytic and reference values, noise): at most 72.
ENTRY_KEPT = 80
# Working memory per entry, at the worst moment, at most 160 bytes: colouring the pattern checks
# every (row, colour) pair once (three int64 copies of the pattern and a count per pair, ~88);
# comparing entries against their truths (~50), the kinks' and off-pattern checks (~40) and the
# diagnosis's fits (the stacked entries and a design matrix, ~130) each hold temporaries of the
# entries' size, one phase at a time. Measured: 116 (softmax 64×128, failing, diagnosed).
ENTRY_WORK = 160
# Kept per input element: 9 maps (3 gradients, 3 signed and 3 relative error maps) 72; the plan's
# colours 8 and 2 random directions 16; kinks and elements passed on a second look 16.
INPUT_ELEMENT_KEPT = 112
# Kept per element of all inputs together: 2 random probes, uᵀJ from 3 sources (48); the backward
# for a zero upstream (8); the second order's 2 Hessian-vector products from 3 sources (48).
ELEMENT_KEPT = 104
# Working memory per element of all inputs: float64 copies of the inputs and gradients, autograd's
# graphs through the function (double backward included) outside the engine's chunks. Measured: up
# to ~630 (gelu 256×256, many small chunks).
ELEMENT_WORK = 1024
# Kept per output element: 2 random upstreams (16) and the rows left out (8); per input, the plan's
# 2 differences along random directions (16).
OUTPUT_KEPT = 24
OUTPUT_KEPT_PER_INPUT = 16
# Working memory per output element: the function's outputs (f(x), its ± copies outside chunks)
OUTPUT_WORK = 256
# A second look at up to ``looked`` elements keeps 5 float64 slopes over every output per element.
LOOK_BYTES_PER_OUTPUT = 5 * 8
# The diagnosis walks up to ``by_hand`` entries in Python (a dict of entries and a list): per entry
BY_HAND_BYTES = 320
# The engine sizes its batches to its chunk by a rule of thumb (6 copies of the input per direction);
# batched evaluations under vmap hold more, measured up to 2.8 times the chunk (softplus, layernorm).
CHUNK_FACTOR = 3


def report_bytes(sizes: Sequence[int], outputs: int, entries: Sequence[int], chunk_bytes: int, *,
                 looked: int = 256, drawn_jacobian: int = 64 * 64, by_hand: int = 200_000) -> Estimate:
    """A gradient report of inputs of ``sizes`` elements with ``outputs`` output elements, whose
    plans compare ``entries`` Jacobian entries per input (see above), the engine working in chunks
    of ``chunk_bytes``. ``looked``, ``drawn_jacobian`` and ``by_hand``: the engine's own limits
    (lib.engine.evaluate.MAX_SECOND_LOOK, lib.engine.pipeline.DEFAULT_JACOBIAN_LIMIT,
    lib.engine.diagnosis.MAX_ENTRIES_BY_HAND). An upper bound: every term is the most it can be, and the
    working memory of phases that never overlap is taken as the largest of them."""
    n, m, total = sum(sizes), outputs, sum(entries)
    # Jacobians small enough to draw: 3 sources in float64, and another while one is built
    drawn = sum(3 * 8 * size * m for size in sizes if size * m <= drawn_jacobian)
    kept = (INPUT_ELEMENT_KEPT * n + ELEMENT_KEPT * n + (OUTPUT_KEPT + OUTPUT_KEPT_PER_INPUT * len(sizes)) * m
            + ENTRY_KEPT * total + drawn)
    phases = (
        CHUNK_FACTOR * chunk_bytes,  # batched evaluations and backward calls, in chunks
        looked * LOOK_BYTES_PER_OUTPUT * m,  # a second look at single elements
        ENTRY_WORK * total + BY_HAND_BYTES * min(total, by_hand),  # working on the entries
    )
    work = ELEMENT_WORK * n + OUTPUT_WORK * m + drawn / 3 + max(phases)
    return Estimate(kept, kept + work)


def surface_bytes(points: int, n: int, itemsize: int, chunk_points: int) -> float:
    # the grid of losses, and one chunk of points with the function's temporaries
    return points * 8 * 4 + chunk_points * n * itemsize * 6


# A gradient at every point of the field at once, under vmap: the points, the reference's gradients
# and one formula's (float64), and autograd's graph through the function for every point. Measured,
# in units of points × elements × 8 bytes: 13 (cosine, layernorm, softplus) to 24 (gelu, whose erf
# backward runs as many small ops).
FIELD_FACTOR = 32


def field_bytes(points: int, n: int) -> float:
    return points * n * 8 * FIELD_FACTOR


def trajectory_bytes(steps: int, n: int, formulas: int) -> float:
    # every position of every run is kept for the principal components (float64), and the
    # components take up to 4 more copies of them all at once (the finite rows, stacked, centred,
    # scaled); a run's projection onto the plane 2 more of its own; and the components' eigenproblem,
    # on the smaller of positions × positions and elements × elements, 4 matrices of that size.
    # Measured: 13 to 20 copies of one run's positions for 3 formulas (cosine, layernorm, gelu); this
    # gives 19, and the eigenproblem.
    positions = formulas * (steps + 1)
    return (steps + 1) * n * 8 * (5 * formulas + 4) + 4 * 8 * min(positions, n) ** 2


def conformance_bytes(elements: int, outputs: int) -> float:
    # PyTorch's checks build whole Jacobians in float64; the largest, gradgradcheck's, is the
    # backward's: elements × (elements + outputs), and the slow and fast modes hold a few at once.
    # Measured: 4 of it (softmax, layernorm, gelu at 64×64), this gives 6.
    return 6 * 8 * elements * (elements + outputs)


# ---- memory that the allocator keeps -------------------------------------------------------------------


def resident_bytes() -> int | None:
    """The process's resident memory now (Linux's /proc); None where that cannot be read."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim by this means
        return None


def release_freed_memory() -> bool:
    """Hand back to the system the memory that has been freed but that glibc's allocator keeps.

    glibc serves blocks of up to a threshold from heaps that it does not shrink, and raises that
    threshold to the size of large blocks freed: a loop that allocates a chunk at a time (a loss
    surface, 8 MiB per chunk) then leaves about a chunk resident per iteration. Measured: 2.6 GiB
    resident for 8 MiB live (softplus 64×128, 201² points); trimmed between chunks, 24 MiB. Returns
    whether anything could be tried (glibc only)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


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
