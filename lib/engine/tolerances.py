"""Finite-difference steps and closeness tolerances, per dtype, as gradcheck has them for float64."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerances:
    """Finite-difference step and closeness test |a − b| ≤ atol + rtol·|b|, as gradcheck has them."""

    step: float
    atol: float
    rtol: float
    # the smallest unit atol is taken in (a floor under judge.truth_scale): a changed case whose
    # Jacobian vanishes by cancellation (f(x, x) of a cosine) is judged in the plain case's unit,
    # not in its own rounding's
    unit: float = 0.0
    rounding: float = 2.220446049250313e-16  # the judged dtype's eps: float64's, or float32's for a kernel judged in it


# The verdict's own: atol is in units of the truth's largest |value| (lib.engine.judge.truth_scale),
# and an entry fails against finite differences only beyond several times their own error, so
# float32 can be held to 1e-4 (its rounding is 6e-8) without false alarms from the differences.
_DEFAULTS = {
    torch.float64: Tolerances(step=1e-6, atol=1e-5, rtol=1e-3),  # gradcheck's own
    torch.float32: Tolerances(step=1e-3, atol=1e-4, rtol=1e-4),
    torch.float16: Tolerances(step=1e-2, atol=1e-1, rtol=1e-1),
    torch.bfloat16: Tolerances(step=1e-2, atol=1e-1, rtol=1e-1),
}
# PyTorch's gradcheck compares raw differences with plain atol + rtol·|numerical|: float32 needs 1e-2
_GRADCHECK = {**_DEFAULTS, torch.float32: Tolerances(step=1e-3, atol=1e-2, rtol=1e-2)}


def default_tolerances(dtype: torch.dtype, **overrides: float | None) -> Tolerances:
    """Per-dtype defaults of the verdict; any of step, atol, rtol given (not None) overrides its default."""
    return _with(_DEFAULTS, dtype, overrides)


def gradcheck_tolerances(dtype: torch.dtype, **overrides: float | None) -> Tolerances:
    """Per-dtype defaults for PyTorch's own gradcheck, which has no error estimate of its differences."""
    return _with(_GRADCHECK, dtype, overrides)


def round_up(value: float, digits: int = 2) -> float:
    """``value`` rounded up to ``digits`` significant digits (a suggested tolerance never rounds down)."""
    if value <= 0 or not math.isfinite(value):
        return value
    unit = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return float(f"{math.ceil(value / unit * (1 - 1e-12)) * unit:.{digits}g}")


def _with(table: dict, dtype: torch.dtype, overrides: dict) -> Tolerances:
    base = table.get(dtype, table[torch.float64])
    rounding = torch.finfo(dtype).eps if dtype.is_floating_point else torch.finfo(torch.float64).eps
    return Tolerances(**{k: (v if (v := overrides.get(k)) is not None else getattr(base, k)) for k in ("step", "atol", "rtol")},
                      rounding=rounding)
