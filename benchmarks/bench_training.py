"""What "does it train" costs: the whole report with its training stage (20 steps, the default)
against the same report without it (``training=0``), in one run, on a 64×128 float64 cosine pair.

Each side is the report a page asks for (the verdict, its conditions, the second order, the
diagnosis, the maps), the Jacobian's structure found afresh every time (as for a new shape), timed
best-of-N with the same N on both sides (benchmarks/timing.py). Per formula of the tutorial's family,
then the ratio of the sums. Last line ``training_over_plain=R`` (target <= 1.15).

    .venv/bin/python benchmarks/bench_training.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import best_report_totals  # noqa: E402
from gradient_lab.app.family import get_family  # noqa: E402

REPEATS = 5
FORMULAS = ("tutorial", "sign-fixed", "corrected")


def main() -> None:
    family = get_family("cosine")
    inputs = family.build_inputs((64, 128), seed=0, dtype=torch.float64)
    totals = best_report_totals(family, FORMULAS, inputs, {"training=0": {"training": 0}, "training=20": {"training": 20}}, REPEATS)
    print(f"plain_ms={totals['training=0'] * 1e3:.0f}")
    print(f"with_training_ms={totals['training=20'] * 1e3:.0f}")
    print(f"training_over_plain={totals['training=20'] / totals['training=0']:.2f}")


if __name__ == "__main__":
    main()
