"""What the conditions cost: the whole report with its default conditions against the same report
without them (``conditions="none"``), in one run, on a 64×128 float64 cosine pair.

Each side is the report a page asks for (the verdict, the second order, the diagnosis, the maps),
the Jacobian's structure found afresh every time (as for a new shape), timed best-of-N with the same
N on both sides (benchmarks/timing.py; medians printed beside). Per formula of the tutorial's
family, then the ratio of the sums. Last line ``conditions_over_plain=R`` (target <= 3).

    .venv/bin/python benchmarks/bench_conditions.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import wall_times  # noqa: E402
from gradient_lab.app.family import get_family  # noqa: E402
from gradient_lab.engine.pipeline import compare_gradients  # noqa: E402
from gradient_lab.engine.planning import _STRUCTURES  # noqa: E402

REPEATS = 5
FORMULAS = ("tutorial", "sign-fixed", "corrected")


def main() -> None:
    family = get_family("cosine")
    inputs = family.build_inputs((64, 128), seed=0, dtype=torch.float64)
    totals = {"none": 0.0, "default": 0.0}
    for formula in FORMULAS:
        for which in ("none", "default"):
            def report(which=which, formula=formula):
                _STRUCTURES.clear()  # the structure found afresh, as for a new shape
                return compare_gradients(family, formula, inputs, conditions=which)

            report()  # the first call of each warms its kernels
            times = wall_times(report, REPEATS)
            totals[which] += min(times)
            print(f"{formula}, conditions={which}: best {min(times) * 1e3:.0f} ms, median {statistics.median(times) * 1e3:.0f} ms",
                  flush=True)
    covered = compare_gradients(family, "corrected", inputs).conditions.describe()
    print(f"covered: {covered}")
    print(f"plain_ms={totals['none'] * 1e3:.0f}")
    print(f"with_conditions_ms={totals['default'] * 1e3:.0f}")
    print(f"conditions_over_plain={totals['default'] / totals['none']:.2f}")


if __name__ == "__main__":
    main()
