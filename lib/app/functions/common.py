"""What the gallery's families share: seeded inputs, a loss that weighs every output, the specimen's source.

The loss is ``(y * w).sum()`` with ``w`` a fixed standard-normal draw of the output's shape. A
plain ``y.sum()`` would hide errors that sum to zero along a row: with an upstream gradient of
ones, the true gradient of softmax and of LayerNorm's variance term vanish, and so would a bug in
them. ``w`` is drawn by NumPy, not torch: the loss runs under ``torch.func.vmap``, where torch's
own random functions are refused.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np
import torch

Tensor = torch.Tensor
WEIGHT_SEED = 20240611


def standard_normal(
    shape: tuple[int, ...], *, seed: int = 0, dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu"
) -> Tensor:
    """A standard-normal tensor drawn in float64 on the CPU from its own generator, then cast:
    the same seed gives the same numbers on every device and in every dtype."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(tuple(shape), generator=generator, dtype=torch.float64).to(device=device, dtype=dtype)


def single_input(
    shape: tuple[int, ...],
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    broadcast: bool = False,
    **_params,
) -> tuple[Tensor]:
    """One standard-normal input ``x`` of ``shape`` (``broadcast`` has no meaning with one input)."""
    return (standard_normal(shape, seed=seed, dtype=dtype, device=device),)


@functools.lru_cache(maxsize=64)
def _weights(shape: tuple[int, ...]) -> Tensor:
    return torch.from_numpy(np.random.default_rng(WEIGHT_SEED).standard_normal(shape))


def loss_weights(shape: tuple[int, ...], dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu") -> Tensor:
    """The fixed weights of ``weighted_sum`` for an output of ``shape``."""
    return _weights(tuple(shape)).to(dtype=dtype, device=device)


def weighted_sum(y: Tensor) -> Tensor:
    """``(y * w).sum()``, ``w`` fixed for each shape: every output element moves the loss its own way."""
    return (y * loss_weights(y.shape, y.dtype, y.device)).sum()


def opmath(x: Tensor) -> Tensor:
    """float16 and bfloat16 widened to float32 for the arithmetic, as PyTorch's own kernels do
    (its "opmath" type): exp, squares and 1/eps terms leave their range long before the result
    would. Callers round the result back to the input's dtype."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def specimen(function: type) -> str:
    """A Function's source without docstrings, for the home page (its ``# BUG`` comments kept),
    after the source of a base class of the same module that holds its forward."""
    bases = [b for b in function.__bases__ if b.__module__ == function.__module__]
    return "\n\n\n".join(_without_docstring(inspect.getsource(c)) for c in [*bases, function])


def _without_docstring(source: str) -> str:
    if '"""' in source:
        start = source.index('"""')
        source = source[:start].rstrip() + "\n" + source[source.index('"""', start + 3) + 3 :].lstrip("\n")
    return source.rstrip()
