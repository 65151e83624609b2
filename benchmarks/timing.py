"""What the benchmarks share: repeated wall-time measurements.

This machine shares its cores, and other load only ever adds time, so ratios are taken between
best-of-N times (as ``timeit`` advises); medians are printed beside them to show the spread.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable


def wall_times(fn: Callable[[], object], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    return statistics.median(wall_times(fn, repeats))


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    return min(wall_times(fn, repeats))
