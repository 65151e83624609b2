"""Which devices this machine has, and in words why one is missing."""

from __future__ import annotations

import torch

from ..errors import LabError

DEVICES = ("cpu", "cuda", "mps")


def device_problem(name: str) -> str | None:
    """None if ``name`` can be used here, else the reason it cannot."""
    kind = name.split(":")[0]
    if kind == "cpu":
        return None
    if kind == "cuda":
        if not torch.cuda.is_available():
            build = "this PyTorch is a CPU-only build" if torch.version.cuda is None else "no CUDA device is visible"
            return f"CUDA is not available: {build}."
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            return f"there is no CUDA device {index}: this machine has {torch.cuda.device_count()}."
        return None
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_built():
            return "MPS is not available: this PyTorch was built without Apple's Metal support."
        if not mps.is_available():
            return "MPS is not available: no Apple-silicon GPU on this machine."
        return None
    return f"unknown device {name!r}; known: {', '.join(DEVICES)}."


def available_devices() -> dict[str, str | None]:
    """Every device kind, with None where usable or the reason it is not."""
    return {name: device_problem(name) for name in DEVICES}


def resolve_device(name: str) -> torch.device:
    problem = device_problem(name)
    if problem:
        raise LabError(f"Device {name!r} cannot be used: {problem}")
    return torch.device(name)
