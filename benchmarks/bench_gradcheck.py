"""The whole-Jacobian verdict against torch.autograd.gradcheck, on the same inputs in one run.

A 64×128 float64 cosine pair, the corrected formula, the Jacobian's structure found afresh every
time (as for a new shape). Three checks, each timed best-of-N with the same N (see
benchmarks/timing.py; medians printed beside), each with how many Jacobian entries it covers:

- ours: the verdict of ``gradient_lab.engine.judge`` (plan, finite differences, compressed backward calls,
  random probes), every entry of both inputs' Jacobians;
- gradcheck slow mode: every entry, one perturbation per element in a Python loop;
- gradcheck fast mode: one random projection uᵀJv per input, not entry by entry.

Also printed: the whole report the pages show (maps and second order too), and the case with one
NaN element. Last lines ``speedup_vs_slow=S`` (target >= 100) and
``full_check_over_fast_gradcheck=R`` (target <= 3).

    .venv/bin/python benchmarks/bench_gradcheck.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import wall_times  # noqa: E402
from gradient_lab.engine.pipeline import compare_gradients  # noqa: E402
from gradient_lab.app.family import get_family  # noqa: E402
from gradient_lab.engine.judge import check_jacobian  # noqa: E402
from gradient_lab.engine.planning import _STRUCTURES, plan_differences  # noqa: E402
from gradient_lab.engine.tolerances import default_tolerances  # noqa: E402

REPEATS = 7  # the same best-of-N on every side


def main() -> None:
    family = get_family("cosine")
    inputs = family.build_inputs((64, 128), seed=0, dtype=torch.float64)
    formula = family.formula("corrected").function
    run = lambda a, b: formula(a, b, dim=1, eps=1e-8)  # noqa: E731
    reference = lambda a, b: family.reference(a, b, dim=1, eps=1e-8)  # noqa: E731
    tolerances = default_tolerances(torch.float64)

    def ours():
        _STRUCTURES.clear()  # the Jacobian's structure found afresh, as for a new shape
        plans = plan_differences(run, reference, inputs, tolerances.step, atol=tolerances.atol, rtol=tolerances.rtol)
        return check_jacobian(run, reference, inputs, family.input_names, plans, tolerances)

    def gradcheck(fast: bool):
        xs = tuple(x.clone().requires_grad_() for x in inputs)
        assert torch.autograd.gradcheck(run, xs, fast_mode=fast)

    def whole_report():
        _STRUCTURES.clear()
        return compare_gradients(family, "corrected", inputs)

    def one_nan_row():  # was minutes once: NaN made the Jacobian pattern look dense
        x1, x2 = family.build_inputs((40, 128), seed=1, dtype=torch.float64)
        x1[3, 5] = float("nan")
        _STRUCTURES.clear()
        return compare_gradients(family, "corrected", (x1, x2))

    verdict = ours()  # warm-up, and the numbers to print
    assert verdict.passed, verdict.summary
    entries = verdict.coverage.entries
    mine, fast = wall_times(ours, REPEATS), wall_times(lambda: gradcheck(True), REPEATS)
    slow = wall_times(lambda: gradcheck(False), REPEATS)
    ms = lambda times: f"best {min(times) * 1e3:.1f} ms, median {statistics.median(times) * 1e3:.1f} ms"  # noqa: E731
    print(f"ours, whole Jacobian: {ms(mine)}; covers {entries:,} entries: {verdict.summary}")
    print(f"gradcheck slow mode: {ms(slow)}; covers {entries:,} entries, one perturbation per element")
    print(f"gradcheck fast mode: {ms(fast)}; covers 2 random projections uᵀJv (one per input), no entry by itself")
    print(f"the whole report the pages show (maps, second order): {ms(wall_times(whole_report, REPEATS))}")
    print(f"40x128 with one NaN element, whole report: {ms(wall_times(one_nan_row, 3))}")
    print(f"speedup_vs_slow={min(slow) / min(mine):.0f}")
    print(f"full_check_over_fast_gradcheck={min(mine) / min(fast):.2f}")


if __name__ == "__main__":
    main()
