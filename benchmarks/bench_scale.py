"""Growth: the verdict against gradcheck's fast mode on the same inputs, from 8k to 16M elements.

For an elementwise Function (x·x), a row-wise softmax and a linear layer (x @ w, w 256×256), each
right and each with a planted local bug (one element 1 % off; row 5 reading row 4's grad_output; the
weight's gradient transposed), at growing sizes: ``check_gradients(fn, inputs, reference=…,
order=1, conditions="none")`` and ``torch.autograd.gradcheck(fn, inputs, fast_mode=True)`` on the
same inputs in the same run, best of ``--repeats`` each (two at 4M elements and more). Prints per
Function and size both times, their ratio, and whether each side caught the planted bug; the last
line ``worst_ratio_vs_fast=R`` over every size (target: at most 3; below ``at_scale.SCALE_ELEMENTS``
the whole Jacobian is read, which costs more than a projection: the 8k softmax's 67M dense entries
are read row by row, far above fast gradcheck's one projection). At 4M elements and more each side
runs once, cold: there every 32 MB array is a fresh mapping of the process's memory, so the ratio
counts allocations as much as arithmetic.

    .venv/bin/python benchmarks/bench_scale.py [--largest 16777216] [--repeats 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gradient_lab.testing import check_gradients  # noqa: E402
from tests.specimens.scale import (Matmul, MatmulWeightTransposed, Softmax, SoftmaxRowReadsItsNeighbour, Square,  # noqa: E402
                                   SquareOneElementOff)


def cases(largest: int, device: str):
    """(name, elements, right, wrong, inputs, reference) from 8k elements up to ``largest``."""
    generator = torch.Generator().manual_seed(0)
    n = 2**13
    while n <= largest:
        x = torch.randn(n, generator=generator, dtype=torch.float64).to(device)
        yield "elementwise", n, Square, SquareOneElementOff, (x,), lambda x: x * x
        columns = 1024 if n >= 2**20 else 256
        rows = torch.randn(n // columns, columns, generator=generator, dtype=torch.float64).to(device)
        yield "softmax", n, Softmax, SoftmaxRowReadsItsNeighbour, (rows,), lambda x: torch.softmax(x, -1)
        if n >= 2**17:  # the weight alone is 64k elements
            xs = torch.randn(n // 256 - 256, 256, generator=generator, dtype=torch.float64).to(device)
            w = (torch.randn(256, 256, generator=generator, dtype=torch.float64) / 16).to(device)
            yield "linear", n, Matmul, MatmulWeightTransposed, (xs, w), lambda x, w: x @ w
        n *= 4 if n < 2**20 else 2


def best(call, repeats: int, *args, **kwargs) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = call(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--largest", type=int, default=2**24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    check_gradients(Square.apply, (torch.randn(2**16, dtype=torch.float64, device=args.device),), reference=lambda x: x * x,
                    order=1, conditions="none")  # imports and first kernels: not a size's cost
    worst, missed = 0.0, []
    print(f"{'function':<12} {'elements':>10} {'verdict s':>10} {'fast s':>8} {'ratio':>6}  bug caught (verdict, fast)")
    for name, n, right, wrong, inputs, reference in cases(args.largest, args.device):
        repeats = args.repeats if n < 2**22 else min(2, args.repeats)  # best of two at millions: a first call maps fresh memory
        ours, report = best(check_gradients, repeats, right.apply, inputs, reference=reference, order=1, conditions="none")
        leaves = [x.detach().clone().requires_grad_() for x in inputs]
        fast, passed = best(torch.autograd.gradcheck, repeats, right.apply, leaves, fast_mode=True, raise_exception=False)
        caught = not check_gradients(wrong.apply, inputs, reference=reference, order=1, conditions="none").verdict.passed
        fast_caught = not torch.autograd.gradcheck(wrong.apply, leaves, fast_mode=True, raise_exception=False)
        ratio = ours / fast
        worst = max(worst, ratio)
        if not report.verdict.passed or not caught:
            missed.append(f"{name} at {n:,}: {'the right one fails' if not report.verdict.passed else 'the bug passes'}")
        print(f"{name:<12} {n:>10,} {ours:>10.3f} {fast:>8.3f} {ratio:>6.1f}  {caught!s:<5} {fast_caught!s:<5}"
              f"{'  (sampled)' if report.jacobian.coverage.sampled else ''}", flush=True)
    for line in missed:
        print(f"PROBLEM {line}")
    print(f"worst_ratio_vs_fast={worst:.1f}")


if __name__ == "__main__":
    main()
