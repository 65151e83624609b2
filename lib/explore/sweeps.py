"""Perturbation sweeps: one knob of the case turned over a range, each formula's gradient error at every setting.

Cheap by design: at every point only the formula's own backward (the analytic gradient) and autograd
through the family's reference (the reference gradient) are taken, no finite differences. The
reference is always computed in float64 at the same inputs (upcast on the CPU), so that the error
includes what a lower precision costs the formula. Every other setting comes from the Case; the
swept knob replaces the case's own value of it. A formula that raises at a point is reported, not
raised. Results are plain numpy data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch

from ..app.case import DTYPES, Case
from ..engine.evaluate import cosine_of
from ..engine.report import error_map
from ..errors import LabError
from .landscape import loss_gradient
from ..progress import report

Tensor = torch.Tensor
MAX_POINTS = 64


@dataclass(frozen=True)
class SweepKind:
    """One knob to sweep: its default values, how to draw its axis, and what to look for."""

    name: str
    values: tuple[float | str, ...]
    axis_title: str
    log_x: bool
    look_for: str


def _log_values(low: int, high: int, per_decade: int = 1) -> tuple[float, ...]:
    exponents = np.linspace(low, high, (high - low) * per_decade + 1)
    return tuple(float(10.0**e) for e in exponents)


SWEEPS: dict[str, SweepKind] = {
    kind.name: kind
    for kind in (
        SweepKind(
            "input norm", _log_values(-3, 3, 2), "row norm of every input", True,
            "Every row of every input rescaled to the same norm. A correct formula stays at round-off at every "
            "norm. A formula that drops a factor depending on the norm (a normalisation, say) is right only "
            "where that factor is 1, and its error grows away from there.",
        ),
        SweepKind(
            "noise scale", tuple(float(v) for v in np.linspace(0.0, 2.0, 11)), "σ of the Gaussian noise added to the first input", False,
            "Noise moves the first input off where it was drawn. A correct formula stays at round-off however large "
            "the noise; a wrong one's error changes with the inputs but does not go away.",
        ),
        SweepKind(
            "eps", _log_values(-12, 1), "eps", True,
            "eps matters only where it is comparable to the quantities it guards: the error is flat until eps reaches "
            "them, and then shows which formulas treat it the way the reference does.",
        ),
        SweepKind(
            "near-zero norm", _log_values(-1, 1, 4), "row norm of the first input, in units of eps", True,
            "Every row of the first input shrunk to a tiny norm around eps. Where the reference clamps at eps, a "
            "formula that does otherwise shows a jump at 1. Read the relative error: the gradients themselves can be huge.",
        ),
        SweepKind(
            "angle", tuple(float(v) for v in np.linspace(0.0, 180.0, 13)), "angle between the second input and the first (degrees)", False,
            "The second input turned to a given angle from the first, row by row (0°: parallel, 180°: antiparallel). "
            "A sign error shows as cosine −1 at every angle; an error that depends on the inputs' alignment changes with it.",
        ),
        SweepKind(
            "dtype", tuple(DTYPES), "dtype of the inputs and the formula", False,
            "The same inputs rounded to each dtype, each formula run in it, and its gradient compared with the "
            "float64 reference at the rounded inputs: the error a correct formula pays for the precision "
            "(≈ 1e-16, 1e-7, 1e-3, 1e-2), against the error of a wrong one, which does not shrink with precision.",
        ),
    )
}


def sweeps_for(family) -> list[str]:
    """The sweeps that act on ``family``: eps ones need an eps, the angle a second input."""
    return [
        kind for kind in SWEEPS
        if (kind not in ("eps", "near-zero norm") or "eps" in family.params)
        and (kind != "angle" or len(family.input_names) > 1)
    ]


def look_for(family, kind: str) -> str:
    """What to look for in a sweep: the family's own words, or the sweep's neutral ones."""
    return family.note(f"sweep:{kind}", SWEEPS[kind].look_for)


METRICS: dict[str, str] = {  # name shown -> SweepResult field
    "max abs error": "max_abs",
    "max relative error": "max_rel",
    "cosine to reference": "cosine",
}
METRIC_TITLES = {
    "max abs error": "max |analytic − reference|",
    "max relative error": "max |analytic − reference| / |reference|",
    "cosine to reference": "cosine(analytic, reference)",
}


@dataclass(frozen=True, eq=False)
class SweepResult:
    """Per formula, one value per swept setting (NaN where the formula raised)."""

    kind: str
    values: tuple[float | str, ...]
    labels: tuple[str, ...]  # each value as shown
    axis_title: str
    log_x: bool
    formulas: tuple[str, ...]
    max_abs: dict[str, np.ndarray]  # max |analytic − reference| over every input's elements
    max_rel: dict[str, np.ndarray]  # max of |analytic − reference| / |reference| (floored)
    cosine: dict[str, np.ndarray]  # between analytic and reference, all inputs together
    non_finite: dict[str, np.ndarray]  # analytic elements not finite where the reference is
    problems: dict[str, tuple[str | None, ...]]  # formula -> per value, why it gave no gradient
    marker: tuple[float | str, str] | None = None  # (x, label) worth a vertical line
    dtype: str = "float64"  # the formulas' dtype (each point's own, for the dtype sweep)

    def metric(self, name: str) -> dict[str, np.ndarray]:
        try:
            return getattr(self, METRICS[name])
        except KeyError:
            raise LabError(f"Unknown metric {name!r}; choose one of: {', '.join(METRICS)}.") from None

    def rows(self) -> list[dict]:
        """One row per (value, formula), for a CSV."""
        return [
            {
                self.axis_title: value,
                "formula": formula,
                "max abs error": float(self.max_abs[formula][i]),
                "max relative error": float(self.max_rel[formula][i]),
                "cosine to reference": float(self.cosine[formula][i]),
                "non-finite elements": int(self.non_finite[formula][i]),
                "problem": self.problems[formula][i] or "",
            }
            for i, value in enumerate(self.values)
            for formula in self.formulas
        ]


# ---- one point ----------------------------------------------------------------------------------------


def _label(kind: str, value: float | str) -> str:
    if isinstance(value, str):
        return value
    if kind == "angle":
        return f"{value:g}°"
    if kind == "near-zero norm":
        return f"{value:.3g}·eps"
    return f"{value:.3g}"


def point_case(case: Case, kind: str, value: float | str) -> Case:
    """The case with the swept knob set to ``value``; every other setting kept."""
    p = case.perturbation
    if kind == "input norm":
        return replace(case, perturbation=replace(p, norm1=float(value), norm2=float(value)))
    if kind == "noise scale":
        return replace(case, perturbation=replace(p, noise1=float(value)))
    if kind == "eps":
        return replace(case, params=tuple(sorted({**dict(case.params), "eps": float(value)}.items())))
    if kind == "near-zero norm":
        every_row = math.prod(case.shape)  # more than there are rows: all of them
        return replace(case, perturbation=replace(p, near_zero_rows=every_row, near_zero_factor=float(value)))
    if kind == "angle":
        angle = float(value)
        if not 0.0 <= angle <= 180.0:
            raise LabError(f"Angle {angle:g}° is outside 0 … 180°.")
        align, within = ("parallel", angle) if angle <= 90.0 else ("antiparallel", 180.0 - angle)
        return replace(case, perturbation=replace(p, align=align, align_angle=within))
    if kind == "dtype":
        return replace(case, dtype=str(value))
    raise LabError(f"Unknown perturbation {kind!r}; choose one of: {', '.join(SWEEPS)}.")


def _float64(x: Tensor) -> Tensor:
    return x.detach().to(device="cpu", dtype=torch.float64)


def point_gradients(case: Case, formulas: Sequence[str]) -> tuple[list[np.ndarray], dict[str, list[np.ndarray] | str]]:
    """The reference gradients (float64, at the case's inputs upcast) and each formula's analytic
    gradients in the case's dtype, as float64 numpy arrays; a formula that raises gives its message."""
    family, params = case.get_family(), case.param_values()
    inputs = case.inputs()
    upcast = tuple(_float64(x) if x.is_floating_point() else x for x in inputs)
    moving = [i for i, x in enumerate(inputs) if family.differentiates(i, x)]
    truth = [loss_gradient(family, upcast, params, i, None).numpy() for i in moving]
    analytic: dict[str, list[np.ndarray] | str] = {}
    for formula in formulas:
        try:
            analytic[formula] = [_float64(loss_gradient(family, inputs, params, i, formula)).numpy() for i in moving]
        except Exception as error:  # noqa: BLE001 - the formula under test may be broken
            analytic[formula] = f"{type(error).__name__}: {error}"
    return truth, analytic


def _measure(analytic: list[np.ndarray], truth: list[np.ndarray]) -> tuple[float, float, float, int]:
    """(max abs error, max relative error, cosine, non-finite count) over all inputs together."""
    maps = [error_map(("analytic", "reference"), a, r) for a, r in zip(analytic, truth)]
    worst = lambda values: max((v for v in values if not math.isnan(v)), default=math.nan)  # noqa: E731
    flat_a = np.concatenate([a.reshape(-1) for a in analytic])
    flat_r = np.concatenate([r.reshape(-1) for r in truth])
    non_finite = int((~np.isfinite(flat_a) & np.isfinite(flat_r)).sum())
    return worst(m.max_abs for m in maps), worst(m.max_rel for m in maps), cosine_of(flat_a, flat_r), non_finite


# ---- the sweep -----------------------------------------------------------------------------------------


def _check(case: Case, kind: str) -> None:
    if kind not in SWEEPS:
        raise LabError(f"Unknown perturbation {kind!r}; choose one of: {', '.join(SWEEPS)}.")
    family = case.get_family()
    if family.reference is None:
        raise LabError(f"{family.title} has no reference function, so there is no true gradient to sweep against.")
    params = case.param_values()
    if kind in ("eps", "near-zero norm") and "eps" not in params:
        raise LabError(f"{family.title} has no eps parameter, so the {kind!r} sweep does not apply to it.")
    if kind == "near-zero norm" and not float(params["eps"]) > 0:
        raise LabError("eps is 0, and the near-zero sweep sets row norms in units of eps: choose an eps above 0 in the sidebar.")
    if kind == "angle" and len(family.input_names) < 2:
        raise LabError(f"{family.title} has one input, so there is no angle between inputs to sweep.")
    if kind in ("angle", "input norm") and len(family.input_names) > 1 and case.broadcast:
        raise LabError(f"The {kind!r} sweep changes input 2 row by row, which needs it to have the shape of input 1: turn broadcasting off.")


def _marker(case: Case, kind: str) -> tuple[float | str, str] | None:
    if kind == "input norm":
        return 1.0, "unit norm"
    if kind == "near-zero norm":
        return 1.0, "norm = eps"
    if kind == "angle":
        return 90.0, "orthogonal"
    if kind == "eps":
        eps = float(case.param_values()["eps"])
        return (eps, "this case's eps") if eps > 0 else None
    if kind == "noise scale":
        return (case.perturbation.noise1, "this case's noise") if case.perturbation.noise1 > 0 else None
    return None


def perturbation_sweep(case: Case, kind: str, values: Sequence[float | str] | None = None) -> SweepResult:
    """Each of ``case.formulas``' gradient error against the reference as ``kind`` takes ``values``
    (default: ``SWEEPS[kind].values``)."""
    _check(case, kind)
    spec = SWEEPS[kind]
    values = tuple(spec.values if values is None else values)
    if not 1 <= len(values) <= MAX_POINTS:
        raise LabError(f"A sweep takes 1 … {MAX_POINTS} values; got {len(values)}.")
    if not case.formulas:
        raise LabError("Choose at least one formula to sweep.")
    formulas = tuple(case.formulas)
    shape = (len(values),)
    max_abs = {f: np.full(shape, np.nan) for f in formulas}
    max_rel = {f: np.full(shape, np.nan) for f in formulas}
    cosine = {f: np.full(shape, np.nan) for f in formulas}
    non_finite = {f: np.zeros(shape, dtype=int) for f in formulas}
    problems: dict[str, list[str | None]] = {f: [None] * len(values) for f in formulas}
    for i, value in enumerate(values):
        truth, analytic = point_gradients(point_case(case, kind, value), formulas)
        for formula, gradients in analytic.items():
            if isinstance(gradients, str):
                problems[formula][i] = gradients
                continue
            max_abs[formula][i], max_rel[formula][i], cosine[formula][i], non_finite[formula][i] = _measure(gradients, truth)
        report((i + 1) / len(values))
    return SweepResult(
        kind=kind,
        values=values,
        labels=tuple(_label(kind, v) for v in values),
        axis_title=spec.axis_title,
        log_x=spec.log_x,
        formulas=formulas,
        max_abs=max_abs,
        max_rel=max_rel,
        cosine=cosine,
        non_finite=non_finite,
        problems={f: tuple(p) for f, p in problems.items()},
        marker=_marker(case, kind),
        dtype="each" if kind == "dtype" else case.dtype,
    )


def sweep_bytes(case: Case) -> float:
    """Memory one point of a sweep needs at most: the inputs in the case's dtype and in float64, and
    per formula and the reference its gradients with their graph's temporaries, in float64."""
    elements = math.prod(case.shape) * len(case.get_family().input_names)
    return case.input_bytes() + elements * 8 * (1 + 4 * (len(case.formulas) + 1))
