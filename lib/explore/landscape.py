"""Landscapes: loss slices and surfaces on a plane through the inputs, and gradient fields on it.

A ``Plane`` is ``origin + a·u + b·v`` in the space of one input (the others held fixed). Its
directions are random Gaussian normalised per row to the row's norm (Li et al.'s filter
normalisation, applied to rows), the descent direction and one orthogonal to it, two chosen
coordinates, or, for feature size 2, the actual plane of one row of the input. Losses on a grid are
evaluated as batches of points under ``torch.func.vmap``, chunked to a memory budget; gradients
on a grid go through each formula's own backward. Everything returns plain numpy data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from ..errors import LabError
from ..app.family import Family
from ..engine.evaluate import DEFAULT_BUDGET_BYTES
from ..engine.signature import name_element
from ..progress import report

Tensor = torch.Tensor
PLANE_MODES = ("random", "gradient", "coordinates", "input plane")


# ---- planes -----------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Plane:
    """``origin + a·u + b·v`` in the space of input ``index``; the current input is at ``center``."""

    mode: str
    index: int
    origin: Tensor
    u: Tensor
    v: Tensor
    center: tuple[float, float]
    labels: tuple[str, str]  # axis titles
    absolute: bool  # coordinates are the input's own values (else multiples of u and v)

    def points(self, coefficients: Tensor, out: Tensor | None = None) -> Tensor:
        """Points for (k, 2) coefficients (a, b): (k, *input shape), in one fused multiply-add;
        written into ``out`` (at least k points) when given, to reuse one buffer chunk by chunk."""
        basis = torch.stack([self.u.reshape(-1), self.v.reshape(-1)])
        k = coefficients.shape[0]
        flat = None if out is None else out.reshape(out.shape[0], -1)[:k]
        flat = torch.addmm(self.origin.reshape(1, -1).expand(k, -1), coefficients.to(basis), basis, out=flat)
        return flat.reshape(-1, *self.origin.shape)

    def coordinates(self, points: Tensor) -> np.ndarray:
        """(a, b) of each point's least-squares projection onto the plane: (k, 2)."""
        basis = torch.stack([self.u.reshape(-1), self.v.reshape(-1)]).double().cpu().numpy()
        offsets = points.reshape(points.shape[0], -1).double().cpu().numpy() - self.origin.reshape(1, -1).double().cpu().numpy()
        # normal equations of the 2-column basis, by pseudo-inverse: a degenerate plane (u ∥ v, a
        # 1-element input) still projects, and NaN rows (a diverged path) stay NaN rows
        return (np.linalg.pinv(basis @ basis.T) @ (basis @ offsets.T)).T

    def extent(self, span: float) -> tuple[float, float, float, float]:
        """(a_min, a_max, b_min, b_max) of a square view ``span`` wide on each side of the centre;
        for the input plane, a square around the origin that holds the input's row."""
        a, b = self.center
        if self.mode == "input plane":
            radius = 1.5 * span * max(math.hypot(a, b), 1e-6)
            return -radius, radius, -radius, radius
        scale = max(abs(a), abs(b), 1.0) if self.absolute else 1.0
        return a - span * scale, a + span * scale, b - span * scale, b + span * scale


def _rows(x: Tensor) -> Tensor:
    """The input as rows: (first dim, everything else); a 1-D input is one row."""
    return x.reshape(1, -1) if x.dim() <= 1 else x.reshape(x.shape[0], -1)


def _filter_normalised(x: Tensor, generator: torch.Generator) -> Tensor:
    """A Gaussian direction with each row scaled to the norm of the input's row."""
    d = _rows(torch.randn(x.shape, generator=generator, dtype=torch.float64).to(x))
    rows = _rows(x)
    d = d * (rows.norm(dim=1, keepdim=True) / d.norm(dim=1, keepdim=True).clamp_min(1e-30))
    return d.reshape(x.shape)


def loss_gradient(family: Family, inputs: Sequence[Tensor], params: dict, index: int, formula: str | None = None) -> Tensor:
    """d loss / d input[index] through ``formula``'s backward (None: the reference's autograd)."""
    xs = [x.detach().requires_grad_(i == index) for i, x in enumerate(inputs)]
    with torch.enable_grad():
        loss = family.objective(family.run(formula, tuple(xs), **params))
        (gradient,) = torch.autograd.grad(loss, xs[index], allow_unused=True)
    return torch.zeros_like(inputs[index]) if gradient is None else gradient


def make_plane(
    family: Family,
    inputs: Sequence[Tensor],
    params: dict,
    mode: str = "random",
    *,
    index: int = 0,
    seed: int = 0,
    coordinates: tuple[int, int] = (0, 1),
    row: int = 0,
) -> Plane:
    """A plane through the current inputs, moving input ``index``.

    ``coordinates``: two flat element indices (mode "coordinates"); ``row``: which row's two
    features span the "input plane" (needs feature size 2)."""
    if not 0 <= index < len(inputs):
        raise LabError(f"There is no input {index}: {family.title} has {len(inputs)}.")
    if not family.differentiates(index, inputs[index]):
        raise LabError(f"{family.input_names[index]} is not differentiated (an integer, boolean or declared-constant input), "
                       "so there is no plane to move it on: pick another input.")
    x = inputs[index].detach()
    name = family.input_names[index]
    # its own stream: seeded like the inputs, a plane would otherwise repeat the inputs themselves
    generator = torch.Generator().manual_seed(seed + 1_000_003)
    if mode == "random":
        u, v = _filter_normalised(x, generator), _filter_normalised(x, generator)
        return Plane(mode, index, x, u, v, (0.0, 0.0), ("a: random direction 1 (× row norm)", "b: random direction 2 (× row norm)"), False)
    if mode == "gradient":
        reference = None if family.reference is not None else next(iter(family.formulas))
        descent = -loss_gradient(family, inputs, params, index, reference)
        if not torch.isfinite(descent).all() or descent.norm() == 0:
            raise LabError("The gradient at this point is zero or not finite, so it gives no direction: pick another plane.")
        u = descent * (x.norm() / descent.norm())
        w = _filter_normalised(x, generator)
        w = w - (w * u).sum() / (u * u).sum() * u  # Gram–Schmidt: orthogonal to the descent
        v = w * (x.norm() / w.norm().clamp_min(1e-30))
        return Plane(mode, index, x, u, v, (0.0, 0.0), ("a: descent direction (× ‖input‖)", "b: orthogonal direction (× ‖input‖)"), False)
    if mode in ("coordinates", "input plane"):
        if mode == "input plane":
            if x.dim() == 0 or x.shape[-1] != 2:
                raise LabError(f"The input plane needs feature size 2; {name} has shape {tuple(x.shape)}.")
            if not 0 <= row < x.numel() // 2:
                raise LabError(f"There is no row {row} in {name}, which has {x.numel() // 2} rows.")
            coordinates = (2 * row, 2 * row + 1)
        i, j = coordinates
        if i == j or not (0 <= i < x.numel() and 0 <= j < x.numel()):
            raise LabError(f"Coordinates {i} and {j} must be two different elements of {name} (0 … {x.numel() - 1}).")
        flat = x.reshape(-1)
        u, v = torch.zeros_like(flat), torch.zeros_like(flat)
        u[i], v[j] = 1.0, 1.0
        origin = flat.clone()
        origin[i], origin[j] = 0.0, 0.0
        labels = (name_element(name, x.shape, i), name_element(name, x.shape, j))
        center = (float(flat[i]), float(flat[j]))
        return Plane(mode, index, origin.reshape(x.shape), u.reshape(x.shape), v.reshape(x.shape), center, labels, True)
    raise LabError(f"Unknown plane {mode!r}; choose one of: {', '.join(PLANE_MODES)}.")


def target_coordinates(family: Family, inputs: Sequence[Tensor], params: dict, plane: Plane) -> tuple[float, float] | None:
    """Where the family's target for the moving input (x2's direction, for cosine) projects onto
    the plane; None if the family names no target."""
    if family.target is None:
        return None
    target = family.target(tuple(inputs), plane.index, params)
    if target is None:
        return None
    a, b = plane.coordinates(target[None])[0]
    return float(a), float(b)


# ---- evaluating many points --------------------------------------------------------------------------


CACHE_BYTES = 8 * 2**20  # a chunk of points small enough to stay in cache between build and use


def chunk_points(points_elements: int, itemsize: int, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> int:
    # a point, and room for the function's temporaries on it; no more than fits in cache
    point_bytes = max(points_elements * itemsize, 1)
    return max(1, min(budget_bytes // (6 * point_bytes), CACHE_BYTES // point_bytes))


def _batched(fn: Callable[[Tensor], Tensor], batch: Tensor) -> Tensor:
    """``fn`` on every point of ``batch``: vmap where the function supports it, else a loop."""
    try:
        return torch.func.vmap(fn)(batch)
    except Exception:  # noqa: BLE001 - e.g. a legacy autograd.Function without a vmap rule
        return torch.stack([fn(p) for p in batch])


def losses_at(
    family: Family,
    inputs: Sequence[Tensor],
    params: dict,
    plane: Plane,
    coefficients: Tensor,
    *,
    formula: str | None = None,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> np.ndarray:
    """The family's loss at ``plane.points(coefficients)``, (k,), in chunks that fit the budget."""
    x = inputs[plane.index]
    if formula is None and family.reference is None:
        formula = next(iter(family.formulas))

    def loss_at(point: Tensor) -> Tensor:
        xs = (*inputs[: plane.index], point, *inputs[plane.index + 1 :])
        return family.objective(family.run(formula, xs, **params))

    chunk = chunk_points(x.numel(), x.element_size(), budget_bytes)
    buffer = torch.empty((min(chunk, coefficients.shape[0]), *x.shape), dtype=x.dtype, device=x.device)
    out = []
    with torch.no_grad():
        for start in range(0, coefficients.shape[0], chunk):
            points = plane.points(coefficients[start : start + chunk], out=buffer)
            out.append(_batched(loss_at, points).double().cpu())
            report(min(1.0, (start + chunk) / coefficients.shape[0]))
    return torch.cat(out).numpy() if out else np.zeros(0)


@dataclass(frozen=True)
class Surface:
    """Losses on a 1-D slice (``b`` is None, ``loss`` (na,)) or a 2-D grid (``loss`` (nb, na))."""

    a: np.ndarray
    b: np.ndarray | None
    loss: np.ndarray
    center: tuple[float, float]
    center_loss: float
    labels: tuple[str, str]
    target: tuple[float, float] | None = None
    plane_mode: str = ""


MAX_SLICE_POINTS = 401
MAX_SURFACE_SIDE = 201


def loss_surface(
    family: Family,
    inputs: Sequence[Tensor],
    params: dict,
    plane: Plane,
    *,
    resolution: int = 51,
    span: float = 1.0,
    one_dimensional: bool = False,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> Surface:
    """The loss on a ``resolution``² grid of the plane (or ``resolution`` points along a, through
    the centre, for a 1-D slice). Cost: points × input elements."""
    limit = MAX_SLICE_POINTS if one_dimensional else MAX_SURFACE_SIDE
    if not 2 <= resolution <= limit:
        raise LabError(f"Resolution {resolution} is outside 2 … {limit} for a {'1-D slice' if one_dimensional else '2-D surface'}.")
    a_min, a_max, b_min, b_max = plane.extent(span)
    a = np.linspace(a_min, a_max, resolution)
    if one_dimensional:
        b = None
        coefficients = torch.from_numpy(np.stack([a, np.full_like(a, plane.center[1])], axis=1))
    else:
        b = np.linspace(b_min, b_max, resolution)
        bb, aa = np.meshgrid(b, a, indexing="ij")  # rows follow b, columns follow a
        coefficients = torch.from_numpy(np.stack([aa.ravel(), bb.ravel()], axis=1))
    loss = losses_at(family, inputs, params, plane, coefficients, budget_bytes=budget_bytes)
    center = losses_at(family, inputs, params, plane, torch.tensor([plane.center], dtype=torch.float64))[0]
    return Surface(
        a=a,
        b=b,
        loss=loss if one_dimensional else loss.reshape(resolution, resolution),
        center=plane.center,
        center_loss=float(center),
        labels=plane.labels,
        target=target_coordinates(family, inputs, params, plane),
        plane_mode=plane.mode,
    )


# ---- gradient fields -----------------------------------------------------------------------------------


def gradients_at(
    family: Family,
    inputs: Sequence[Tensor],
    params: dict,
    plane: Plane,
    coefficients: Tensor,
    formula: str | None,
) -> Tensor:
    """d loss / d input at each plane point, through ``formula``'s backward: (k, *input shape)."""

    def gradient_at(point: Tensor) -> Tensor:
        xs = (*inputs[: plane.index], point, *inputs[plane.index + 1 :])
        return loss_gradient(family, xs, params, plane.index, formula)

    points = plane.points(coefficients)
    try:  # torch.func's own grad under vmap, for Functions that support both
        def loss_at(point: Tensor) -> Tensor:
            xs = (*inputs[: plane.index], point, *inputs[plane.index + 1 :])
            return family.objective(family.run(formula, xs, **params))

        return torch.func.vmap(torch.func.grad(loss_at))(points)
    except Exception:  # noqa: BLE001 - legacy Functions: their backward, point by point
        return torch.stack([gradient_at(p) for p in points])


@dataclass(frozen=True)
class GradientField:
    """On a grid of the plane: each formula's negative gradient projected onto the plane, as
    (d_a, d_b) = −(g·u, g·v), and the error |g − g_reference| (Euclidean norm over the input)."""

    a: np.ndarray
    b: np.ndarray
    directions: dict[str, tuple[np.ndarray, np.ndarray]]  # formula -> (d_a, d_b), each (nb, na)
    errors: dict[str, np.ndarray]  # formula -> (nb, na)
    center: tuple[float, float]
    labels: tuple[str, str]
    target: tuple[float, float] | None = None
    problems: dict[str, str] = field(default_factory=dict)  # formula -> why it has no field


MAX_FIELD_SIDE = 41


def gradient_field(
    family: Family,
    inputs: Sequence[Tensor],
    params: dict,
    plane: Plane,
    formulas: Sequence[str],
    *,
    resolution: int = 15,
    span: float = 1.0,
) -> GradientField:
    if not 2 <= resolution <= MAX_FIELD_SIDE:
        raise LabError(f"Field resolution {resolution} is outside 2 … {MAX_FIELD_SIDE}.")
    a_min, a_max, b_min, b_max = plane.extent(span)
    a, b = np.linspace(a_min, a_max, resolution), np.linspace(b_min, b_max, resolution)
    bb, aa = np.meshgrid(b, a, indexing="ij")
    coefficients = torch.from_numpy(np.stack([aa.ravel(), bb.ravel()], axis=1))
    truth = gradients_at(family, inputs, params, plane, coefficients, None) if family.reference is not None else None
    flat_u, flat_v = plane.u.reshape(1, -1).double(), plane.v.reshape(1, -1).double()
    directions, errors, problems = {}, {}, {}
    for position, formula in enumerate(formulas):
        try:
            g = gradients_at(family, inputs, params, plane, coefficients, formula).reshape(coefficients.shape[0], -1).double()
        except Exception as error:  # noqa: BLE001 - a broken formula: say why, keep the others
            problems[formula] = f"{type(error).__name__}: {error}"
            continue
        shape = (resolution, resolution)
        directions[formula] = (
            (-(g * flat_u).sum(1)).reshape(shape).cpu().numpy(),
            (-(g * flat_v).sum(1)).reshape(shape).cpu().numpy(),
        )
        if truth is not None:
            errors[formula] = (g - truth.reshape(g.shape).double()).norm(dim=1).reshape(shape).cpu().numpy()
        report((position + 1) / len(formulas))
    return GradientField(a, b, directions, errors, plane.center, plane.labels, target_coordinates(family, inputs, params, plane), problems)
