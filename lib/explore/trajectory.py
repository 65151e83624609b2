"""Optimizer trajectories: where SGD, momentum or Adam end up when driven by each formula's gradient.

Every formula starts from the same point and takes the same optimizer for N steps; the gradient
it follows is its own backward, while the loss, and the gradient it should have followed, come
from the family's reference. Paths are projected onto a ``Plane`` and onto the top two principal
components of all the paths together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from ..errors import LabError
from ..app.family import Family
from .landscape import Plane, loss_gradient
from ..progress import report

Tensor = torch.Tensor

OPTIMIZERS: dict[str, Callable[[list[Tensor], float], torch.optim.Optimizer]] = {
    "SGD": lambda params, lr: torch.optim.SGD(params, lr=lr),
    "SGD + momentum": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
    "Adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
}
LEARNING_RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0)  # the pages' choices
MAX_STEPS = 2000
DIVERGENCE_GROWTH = 1e12  # a run whose input norm grows this much is called diverged and stopped


@dataclass(frozen=True)
class Trajectory:
    """One formula's run: values per step (NaN after a divergence)."""

    formula: str
    loss: np.ndarray  # (steps + 1,): the reference loss at each position
    gradient_cosine: np.ndarray  # (steps,): cosine between the followed and the true gradient
    gradient_norm: np.ndarray  # (steps,): norm of the followed gradient
    plane_path: np.ndarray  # (steps + 1, 2): positions on the plane
    diverged_at: int | None  # first step whose loss or gradient is not finite
    problem: str | None = None  # the formula's own exception, if it raised

    @property
    def loss_change(self) -> float:
        finite = self.loss[np.isfinite(self.loss)]
        return float(finite[-1] - finite[0]) if finite.size else math.nan


@dataclass(frozen=True)
class TrajectorySet:
    optimizer: str
    learning_rate: float
    steps: int
    runs: dict[str, Trajectory]
    pca_paths: dict[str, np.ndarray]  # formula -> (steps + 1, 2) on the top two principal components
    explained_variance: tuple[float, float]  # fraction of the fitted paths' variance on PC1, PC2
    pca_fitted_on: tuple[str, ...]  # the runs the components come from: those that did not diverge
    plane_labels: tuple[str, str]


def _cosine(a: Tensor, b: Tensor) -> float:
    na, nb = a.norm(), b.norm()
    return float((a * b).sum() / (na * nb)) if na > 0 and nb > 0 else math.nan


def _run(family, inputs, params, index, formula, optimizer, lr, steps, plane) -> tuple[Trajectory, np.ndarray]:
    x = inputs[index].detach().clone().requires_grad_()
    opt = OPTIMIZERS[optimizer]([x], lr)
    truth_formula = None if family.reference is not None else formula
    losses, cosines, norms = np.full(steps + 1, np.nan), np.full(steps, np.nan), np.full(steps, np.nan)
    positions = np.full((steps + 1, x.numel()), np.nan)
    diverged, problem = None, None
    blow_up = DIVERGENCE_GROWTH * (float(x.detach().norm()) + 1.0)  # far past any useful loss value

    def current() -> tuple[Tensor, ...]:
        return (*inputs[:index], x, *inputs[index + 1 :])

    for step in range(steps + 1):
        positions[step] = x.detach().double().reshape(-1).cpu().numpy()
        with torch.no_grad():
            losses[step] = float(family.objective(family.run(truth_formula, current(), **params)))
        if step == steps:
            break
        try:
            followed = loss_gradient(family, current(), params, index, formula)
        except Exception as error:  # noqa: BLE001 - the formula under test may be broken
            problem = f"{type(error).__name__}: {error}"
            break
        true = loss_gradient(family, current(), params, index, truth_formula)
        cosines[step], norms[step] = _cosine(followed, true), float(followed.norm())
        if not (math.isfinite(losses[step]) and torch.isfinite(followed).all()) or x.detach().norm() > blow_up:
            diverged = step
            break
        opt.zero_grad()
        x.grad = followed.detach().clone()
        opt.step()
    plane_path = plane.coordinates(torch.from_numpy(positions).to(inputs[index].dtype))
    return Trajectory(formula, losses, cosines, norms, plane_path, diverged, problem), positions


def trajectories(
    family: Family,
    inputs: Sequence[Tensor],
    params: dict,
    formulas: Sequence[str],
    plane: Plane,
    *,
    optimizer: str = "SGD",
    learning_rate: float = 0.1,
    steps: int = 100,
) -> TrajectorySet:
    """Each formula drives ``optimizer`` on input ``plane.index`` from the current inputs."""
    if optimizer not in OPTIMIZERS:
        raise LabError(f"Unknown optimizer {optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}.")
    if not 1 <= steps <= MAX_STEPS:
        raise LabError(f"Steps must be between 1 and {MAX_STEPS}; got {steps}.")
    if not (learning_rate > 0 and math.isfinite(learning_rate)):
        raise LabError(f"The learning rate must be a positive number; got {learning_rate}.")
    runs, positions = {}, {}
    for position, formula in enumerate(formulas):
        runs[formula], positions[formula] = _run(family, inputs, params, plane.index, formula, optimizer, learning_rate, steps, plane)
        report((position + 1) / len(formulas))
    # a diverged run's positions grow without bound and would be all the components see
    steady = tuple(f for f, run in runs.items() if run.diverged_at is None and run.problem is None) or tuple(runs)
    pca_paths, explained = _principal_paths(positions, steady)
    return TrajectorySet(optimizer, learning_rate, steps, runs, pca_paths, explained, steady, plane.labels)


def _principal_paths(positions: dict[str, np.ndarray], fit_on: Sequence[str]) -> tuple[dict[str, np.ndarray], tuple[float, float]]:
    """All paths on the top two principal components of the finite positions of ``fit_on``."""
    fitted = [positions[f] for f in fit_on]
    stacked = np.concatenate([p[np.isfinite(p).all(axis=1)] for p in fitted]) if fitted else np.zeros((0, 1))
    if stacked.shape[0] < 2:
        return {f: np.full((p.shape[0], 2), np.nan) for f, p in positions.items()}, (math.nan, math.nan)
    mean = stacked.mean(axis=0)
    centred = stacked - mean
    scale = np.abs(centred).max()
    if not scale > 0:
        return {f: np.zeros((p.shape[0], 2)) for f, p in positions.items()}, (math.nan, math.nan)
    components, variance = _top_components(centred / scale, 2)  # scaled: no overflow
    explained = (float(variance[0]), float(variance[1]))
    return {f: (p - mean) @ components.T for f, p in positions.items()}, explained


def _top_components(a: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` principal directions of the rows of ``a`` (k × columns) and their shares of
    the variance, from the eigenvectors of the smaller of a·aᵀ and aᵀ·a: a path of 200 steps in
    16,384 dimensions needs a 402×402 eigenproblem, not a full SVD of the positions."""
    rows, cols = a.shape
    gram = a @ a.T if rows < cols else a.T @ a
    values, vectors = np.linalg.eigh(gram)
    values, vectors = np.clip(values[::-1], 0.0, None), vectors[:, ::-1]  # largest first; rounding can make 0 negative
    total = values.sum()
    shares = np.zeros(k)
    components = np.zeros((k, cols))
    for i in range(min(k, values.size)):
        if values[i] <= 0:
            break
        shares[i] = values[i] / total
        direction = a.T @ vectors[:, i] if rows < cols else vectors[:, i]  # aᵀu / σ is the right singular vector
        components[i] = direction / np.linalg.norm(direction)
    return components, shares
