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


def best_report_totals(family, formulas, inputs, variants: dict[str, dict], repeats: int) -> dict[str, float]:
    """Per variant (its keyword arguments to ``compare_gradients``), the sum over ``formulas`` of each
    report's best-of-``repeats`` seconds, the Jacobian's structure found afresh every time (as for a
    new shape), the same N on every side; each formula's best and median printed as it goes."""
    from gradient_lab.engine.pipeline import compare_gradients
    from gradient_lab.engine.planning import _STRUCTURES

    totals = dict.fromkeys(variants, 0.0)
    for formula in formulas:
        for name, options in variants.items():
            def report(formula=formula, options=options):
                _STRUCTURES.clear()
                return compare_gradients(family, formula, inputs, **options)

            report()  # the first call of each warms its kernels
            times = wall_times(report, repeats)
            totals[name] += min(times)
            print(f"{formula}, {name}: best {min(times) * 1e3:.0f} ms, median {statistics.median(times) * 1e3:.0f} ms", flush=True)
    return totals
