"""Perturbations of a case's inputs: what moves a formula off the easy ground where it looks right.

Rows are the slices the family reduces over (its ``dim`` param; the last dim otherwise). Each
perturbation is off at its default value; they apply in a fixed order (alignment, norms, noise,
near-zero rows, injected NaN/Inf) and draw their randomness from their own seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import LabError

Tensor = torch.Tensor
ALIGNMENTS = ("none", "parallel", "antiparallel")
INJECTIONS = ("none", "nan", "inf")


@dataclass(frozen=True)
class Perturbation:
    noise1: float = 0.0  # std of Gaussian noise added to input 1
    noise2: float = 0.0
    norm1: float = 0.0  # every row of input 1 rescaled to this norm; 0 leaves it
    norm2: float = 0.0
    near_zero_rows: int = 0  # rows of input 1 shrunk to norm near_zero_factor × eps
    near_zero_factor: float = 1.0
    align: str = "none"  # input 2 made (anti)parallel to input 1, row by row
    align_angle: float = 1.0  # degrees away from exactly (anti)parallel
    inject: str = "none"  # NaN or Inf written into input 1
    inject_count: int = 1

    @property
    def active(self) -> bool:
        return self != Perturbation()

    def describe(self, names: tuple[str, ...] = ("input 1", "input 2")) -> str:
        """The active perturbations in words, for captions and notes; ``names``: the inputs' names."""
        first, second = names[0], names[1] if len(names) > 1 else "input 2"
        parts = []
        if self.align != "none":
            parts.append(f"{second} {self.align} to {first} within {self.align_angle:g}°")
        for name, (norm, noise) in zip((first, second), ((self.norm1, self.noise1), (self.norm2, self.noise2))):
            if norm:
                parts.append(f"rows of {name} at norm {norm:g}")
            if noise:
                parts.append(f"noise σ={noise:g} on {name}")
        if self.near_zero_rows:
            parts.append(f"{self.near_zero_rows} row(s) of {first} at norm {self.near_zero_factor:g}·eps")
        if self.inject != "none":
            parts.append(f"{self.inject_count} {self.inject.upper()} in {first}")
        return "; ".join(parts) if parts else "none"


def _row_view(x: Tensor, dim: int) -> Tensor:
    """x with the reduced dim last and the rest flattened: (rows, features)."""
    return x.movedim(dim, -1).reshape(-1, x.shape[dim]) if x.dim() else x.reshape(1, 1)


def _from_rows(rows: Tensor, like: Tensor, dim: int) -> Tensor:
    moved = like.movedim(dim, -1).shape
    return rows.reshape(moved).movedim(-1, dim)


def _rotate_towards(target: Tensor, angle_deg: float, generator: torch.Generator) -> Tensor:
    """Unit rows at ``angle_deg`` from the unit rows of ``target``, in a random plane each."""
    unit = target / target.norm(dim=1, keepdim=True).clamp_min(1e-300)
    other = torch.randn(unit.shape, generator=generator, dtype=torch.float64).to(unit)
    other = other - (other * unit).sum(1, keepdim=True) * unit
    other = other / other.norm(dim=1, keepdim=True).clamp_min(1e-300)
    theta = math.radians(angle_deg)
    return math.cos(theta) * unit + math.sin(theta) * other


def apply_perturbation(inputs: tuple[Tensor, ...], perturbation: Perturbation, *, dim: int = -1, eps: float = 1e-8, seed: int = 0) -> tuple[Tensor, ...]:
    """The inputs with ``perturbation`` applied (new tensors; the given ones are not changed).
    "Input 1" and "input 2" are the first two floating-point inputs: integer targets and boolean
    masks pass through as they are."""
    if not perturbation.active:
        return inputs
    floating = [i for i, x in enumerate(inputs) if x.is_floating_point()]
    if len(floating) < len(inputs):
        moved = iter(apply_perturbation(tuple(inputs[i] for i in floating), perturbation, dim=dim, eps=eps, seed=seed))
        return tuple(next(moved) if i in floating else x for i, x in enumerate(inputs))
    if not inputs:
        return inputs
    p = perturbation
    if p.align not in ALIGNMENTS:
        raise LabError(f"Unknown alignment {p.align!r}; choose one of: {', '.join(ALIGNMENTS)}.")
    if p.inject not in INJECTIONS:
        raise LabError(f"Unknown injection {p.inject!r}; choose one of: {', '.join(INJECTIONS)}.")
    generator = torch.Generator().manual_seed(seed + 7919)  # its own stream: inputs stay as drawn
    xs = [x.detach().double().cpu().clone() for x in inputs]
    dtype, device = inputs[0].dtype, inputs[0].device
    second = len(xs) > 1 and xs[1].shape == xs[0].shape
    if len(xs) > 1 and not second and (p.align != "none" or p.norm2 or p.noise2):
        raise LabError("Perturbations of input 2 need it to have the shape of input 1 (turn broadcasting off).")
    d = dim % max(xs[0].dim(), 1)

    if p.align != "none" and second:
        rows1, rows2 = _row_view(xs[0], d), _row_view(xs[1], d)
        sign = 1.0 if p.align == "parallel" else -1.0
        turned = _rotate_towards(sign * rows1, p.align_angle, generator) * rows2.norm(dim=1, keepdim=True)
        xs[1] = _from_rows(turned, xs[1], d)
    for i, norm in ((0, p.norm1), (1, p.norm2)):
        if norm and i < len(xs):
            rows = _row_view(xs[i], d)
            xs[i] = _from_rows(rows * (norm / rows.norm(dim=1, keepdim=True).clamp_min(1e-300)), xs[i], d)
    for i, noise in ((0, p.noise1), (1, p.noise2)):
        if noise and i < len(xs):
            xs[i] = xs[i] + noise * torch.randn(xs[i].shape, generator=generator, dtype=torch.float64)
    if p.near_zero_rows:
        rows = _row_view(xs[0], d).clone()
        k = min(p.near_zero_rows, rows.shape[0])
        chosen = torch.randperm(rows.shape[0], generator=generator)[:k]
        rows[chosen] = rows[chosen] * (p.near_zero_factor * eps / rows[chosen].norm(dim=1, keepdim=True).clamp_min(1e-300))
        xs[0] = _from_rows(rows, xs[0], d)
    if p.inject != "none":
        flat = xs[0].reshape(-1).clone()
        k = min(p.inject_count, flat.numel())
        flat[torch.randperm(flat.numel(), generator=generator)[:k]] = math.nan if p.inject == "nan" else math.inf
        xs[0] = flat.reshape(xs[0].shape)
    return tuple(x.to(dtype=dtype, device=device) for x in xs)
