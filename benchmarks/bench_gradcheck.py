"""The engine's full per-element check against torch.autograd.gradcheck, in one run.

Corrected cosine formula, both inputs 64x128, float64. The engine computes analytic, reference and
numerical gradients of every element with their error maps; gradcheck(fast_mode=False) perturbs
every element in a Python loop and answers pass or fail. The engine is timed with the Jacobian's
structure found afresh (cold, what the figure uses) and cached (warm); the ratio is of best-of-N
times (see benchmarks/timing.py), the medians are printed too. Prints both times, the engine's max error
against the analytic gradient, and last ``speedup_vs_gradcheck=S``. Target: S >= 50, error <= 1e-8.

    .venv/bin/python benchmarks/bench_gradcheck.py
"""

from __future__ import annotations

import statistics

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import wall_times  # noqa: E402
from lib.compare import compare_gradients  # noqa: E402
from lib.family import get_family  # noqa: E402
from lib.numerical import _STRUCTURES  # noqa: E402


def main() -> None:
    family = get_family("cosine")
    inputs = family.build_inputs((64, 128), seed=0, dtype=torch.float64)
    formula = family.formula("corrected").function

    def engine():
        return compare_gradients(family, "corrected", inputs)

    def gradcheck():
        xs = tuple(x.clone().requires_grad_() for x in inputs)
        assert torch.autograd.gradcheck(lambda a, b: formula(a, b, dim=1, eps=1e-8), xs, fast_mode=False)

    def engine_cold():
        _STRUCTURES.clear()  # the Jacobian's structure found afresh, as for a new shape
        return engine()

    def engine_one_nan_row():  # was minutes once: NaN made the Jacobian pattern look dense
        x1, x2 = family.build_inputs((40, 128), seed=1, dtype=torch.float64)
        x1[3, 5] = float("nan")
        _STRUCTURES.clear()
        return compare_gradients(family, "corrected", (x1, x2))

    report = engine()  # warm-up, and the numbers to print
    cold, warm, checks = wall_times(engine_cold, 15), wall_times(engine, 15), wall_times(gradcheck, 3)
    max_error = max(c.errors[("analytic", "numerical")].max_abs for c in report.inputs)
    ms = lambda times: f"best {min(times) * 1e3:.1f} ms, median {statistics.median(times) * 1e3:.1f} ms"  # noqa: E731
    print(f"engine, structure found afresh: {ms(cold)}; structure cached: {ms(warm)}")
    print(f"  {report.evaluations} forward evaluations; {report.inputs[0].plan.source}")
    print(f"gradcheck(fast_mode=False): {ms(checks)}")
    print(f"engine on 40x128 with one NaN element, structure found afresh: {ms(wall_times(engine_one_nan_row, 5))}")
    print(f"engine max |numerical - analytic| = {max_error:.2e}; verdict: {report.verdict.summary}")
    print(f"median speedup {statistics.median(checks) / statistics.median(cold):.1f}; warm (structure cached, as on a slider move) "
          f"{min(checks) / min(warm):.1f}")
    print(f"speedup_vs_gradcheck={min(checks) / min(cold):.1f}")


if __name__ == "__main__":
    main()
