"""A 201×201 loss surface of the cosine loss at 64×128, float32, against the floor of evaluating
the same points as one flat batched ``F.cosine_similarity`` call on pre-built inputs.

The floor's inputs for all 40,401 points would take 1.3 GB, so it runs on a slice of the points
and its time is scaled up to all of them. Prints the surface time, the peak memory the chunked
evaluation added, and last ``surface_over_floor=R``. Target: R <= 2.

    .venv/bin/python benchmarks/bench_landscape.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import median_seconds  # noqa: E402
from gradient_lab.app.family import get_family  # noqa: E402
from gradient_lab.explore.landscape import loss_surface, make_plane  # noqa: E402

SIDE = 201
FLOOR_POINTS = 4096  # pre-built points for the floor: 4096 × 64 × 128 × 4 B × 2 inputs = 268 MB


def status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # reported in kB
    raise KeyError(field)


def setup():
    family = get_family("cosine")
    params = dict(family.params)
    inputs = family.build_inputs((64, 128), seed=0, dtype=torch.float32)
    plane = make_plane(family, inputs, params, "random")
    surface = lambda: loss_surface(family, inputs, params, plane, resolution=SIDE)  # noqa: E731
    return family, params, inputs, plane, surface


def peak_memory_child() -> None:
    """In a fresh process: how far the 201×201 surface raises the peak resident memory."""
    family, params, inputs, plane, surface = setup()
    loss_surface(family, inputs, params, plane, resolution=5)  # imports and first-call setup
    Path("/proc/self/clear_refs").write_text("5")  # Linux: reset the peak (VmHWM) to the current size
    before = status_bytes("VmRSS")
    surface()
    print(status_bytes("VmHWM") - before)


def main() -> None:
    family, params, inputs, plane, surface = setup()

    # the floor: the points already built, one flat call, then the loss's mean per point
    coefficients = torch.randn(FLOOR_POINTS, 2, dtype=torch.float64)
    x1 = plane.points(coefficients).reshape(-1, 128)
    x2 = inputs[1].expand(FLOOR_POINTS, 64, 128).reshape(-1, 128).contiguous()

    def floor():
        (1 - F.cosine_similarity(x1, x2, dim=1, eps=1e-8)).reshape(FLOOR_POINTS, 64).mean(1)

    # warm both, then alternate so that both see the same machine state
    surface(), floor(), floor()
    t_surface, t_floor = [], []
    for _ in range(3):
        t_surface.append(median_seconds(surface, 1))
        t_floor.append(median_seconds(floor, 3) * (SIDE * SIDE / FLOOR_POINTS))
    t_surface, t_floor = statistics.median(t_surface), statistics.median(t_floor)

    child = subprocess.run([sys.executable, __file__, "--peak-memory"], capture_output=True, text=True, check=True)
    peak_added = int(child.stdout.strip().splitlines()[-1])
    print(f"surface {SIDE}x{SIDE} at 64x128 float32: {t_surface * 1e3:.0f} ms")
    print(f"floor (one flat F.cosine_similarity call, scaled from {FLOOR_POINTS} points): {t_floor * 1e3:.0f} ms")
    print(f"peak memory added by the chunked evaluation (fresh process): {peak_added / 2**20:.0f} MiB "
          f"(the points alone would take {SIDE * SIDE * 64 * 128 * 4 / 2**30:.2f} GiB)")
    print(f"surface_over_floor={t_surface / t_floor:.2f}")


if __name__ == "__main__":
    peak_memory_child() if "--peak-memory" in sys.argv else main()
