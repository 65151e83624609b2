"""Finite-difference steps and closeness tolerances, per dtype, as gradcheck has them for float64."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerances:
    """Finite-difference step and closeness test |a − b| ≤ atol + rtol·|b|, as gradcheck has them."""

    step: float
    atol: float
    rtol: float


_DEFAULTS = {
    torch.float64: Tolerances(step=1e-6, atol=1e-5, rtol=1e-3),  # gradcheck's own
    torch.float32: Tolerances(step=1e-3, atol=1e-2, rtol=1e-2),
    torch.float16: Tolerances(step=1e-2, atol=1e-1, rtol=1e-1),
    torch.bfloat16: Tolerances(step=1e-2, atol=1e-1, rtol=1e-1),
}


def default_tolerances(dtype: torch.dtype, **overrides: float | None) -> Tolerances:
    """Per-dtype defaults; any of step, atol, rtol given (not None) overrides its default."""
    base = _DEFAULTS.get(dtype, _DEFAULTS[torch.float64])
    return Tolerances(**{k: (overrides.get(k) if overrides.get(k) is not None else getattr(base, k)) for k in ("step", "atol", "rtol")})
