"""What the parity grid costs a user who switches it on: the gallery's corrected cosine at the
sidebar's default shape, every path (inductor included), in a fresh process (the first compile of
a process is the slowest), then the same grid again with dynamo's caches reset (what a second
formula costs). Prints seconds; the last line is the grid of a second formula."""

import time

import torch

from gradient_lab.app.family import get_family
from gradient_lab.engine.pipeline import compare_gradients


def grid_seconds(formula: str) -> float:
    family = get_family("cosine")
    inputs = family.build_inputs((8, 16), seed=0, dtype=torch.float64, device="cpu", broadcast=False, **family.params)
    start = time.perf_counter()
    report = compare_gradients(family, formula, inputs, params=family.params, conditions="none", parity="all")
    assert report.parity is not None
    return time.perf_counter() - start


if __name__ == "__main__":
    first = grid_seconds("corrected")
    print(f"first_parity_grid_s={first:.2f}")
    print(f"parity_grid_s={min(grid_seconds('tutorial') for _ in range(2)):.2f}")
