"""Forward + backward of the cosine loss: the corrected Function against PyTorch's own
``F.cosine_similarity`` under autograd, float32 on the CPU, timed in one run.

Prints a line per size (times, ratio, achieved memory bandwidth against a plain copy of the same
bytes) and last ``corrected_over_builtin=R``, the larger of the sizes' ratios. Target: R <= 0.6.

    .venv/bin/python benchmarks/bench_cosine.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gradient_lab.app.functions.cosine import CosineSimilarityFunction  # noqa: E402

SIZES = ((4096, 512), (65536, 256))


def median_seconds(fn) -> float:
    return Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=2.0).median


def main() -> None:
    torch.manual_seed(0)
    ratios = []
    for shape in SIZES:
        x1 = torch.randn(shape, requires_grad=True)
        x2 = torch.randn(shape, requires_grad=True)

        def corrected():
            loss = (1 - CosineSimilarityFunction.apply(x1, x2, 1, 1e-8)).mean()  # noqa: B023 - timed in this iteration
            torch.autograd.grad(loss, (x1, x2))  # noqa: B023 - timed in this iteration

        def builtin():
            loss = (1 - F.cosine_similarity(x1, x2, dim=1, eps=1e-8)).mean()  # noqa: B023 - timed in this iteration
            torch.autograd.grad(loss, (x1, x2))  # noqa: B023 - timed in this iteration

        # the least traffic forward + backward can have: read x1, x2 twice, write two gradients
        tensor_bytes = x1.numel() * x1.element_size()
        needed_bytes = 6 * tensor_bytes
        both = torch.cat([x1.detach(), x2.detach()])
        t_copy = median_seconds(both.clone)  # reads and writes 2 tensors: 4 tensors' bytes
        copy_bandwidth = 4 * tensor_bytes / t_copy

        t_corrected = median_seconds(corrected)
        t_builtin = median_seconds(builtin)
        ratio = t_corrected / t_builtin
        ratios.append(ratio)
        achieved = needed_bytes / t_corrected
        print(
            f"{shape[0]}x{shape[1]}: corrected {t_corrected * 1e3:.2f} ms, builtin {t_builtin * 1e3:.2f} ms, "
            f"ratio {ratio:.3f}; bandwidth {achieved / 1e9:.1f} GB/s of a plain copy's "
            f"{copy_bandwidth / 1e9:.1f} GB/s ({achieved / copy_bandwidth:.0%})"
        )
    print(f"corrected_over_builtin={max(ratios):.3f}")


if __name__ == "__main__":
    main()
