"""What the conditions cost: the whole report with its default conditions against the same report
without them (``conditions="none"``), in one run, on a 64×128 float64 cosine pair.

Each side is the report a page asks for (the verdict, the second order, the diagnosis, the maps),
the Jacobian's structure found afresh every time (as for a new shape), timed best-of-N with the same
N on both sides (benchmarks/timing.py; medians printed beside). Per formula of the tutorial's
family, then the ratio of the sums. Last line ``conditions_over_plain=R`` (target <= 3).

    .venv/bin/python benchmarks/bench_conditions.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import best_report_totals  # noqa: E402
from gradient_lab.app.family import get_family  # noqa: E402
from gradient_lab.engine.pipeline import compare_gradients  # noqa: E402

REPEATS = 5
FORMULAS = ("tutorial", "sign-fixed", "corrected")


def main() -> None:
    family = get_family("cosine")
    inputs = family.build_inputs((64, 128), seed=0, dtype=torch.float64)
    totals = best_report_totals(family, FORMULAS, inputs, {"conditions=none": {"conditions": "none"},
                                                           "conditions=default": {"conditions": "default"}}, REPEATS)
    covered = compare_gradients(family, "corrected", inputs).conditions.describe()
    print(f"covered: {covered}")
    print(f"plain_ms={totals['conditions=none'] * 1e3:.0f}")
    print(f"with_conditions_ms={totals['conditions=default'] * 1e3:.0f}")
    print(f"conditions_over_plain={totals['conditions=default'] / totals['conditions=none']:.2f}")


if __name__ == "__main__":
    main()
