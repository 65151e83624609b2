"""Figures of the precision verdict (``lib.engine.precision``): where a formula loses bits in a low
dtype, beside the baseline (PyTorch's own in the same dtype, or the truth rounded).

Pure builders: a ``PrecisionResult`` in, a ``plotly.graph_objects.Figure`` out; no streamlit, no torch.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from ...engine.precision import ULP_EDGES
from ...engine.report import BASELINES, PrecisionResult
from .check import LEGEND_BELOW
from .style import base_layout

FORMULA_COLOR, BASELINE_COLOR = "#d1495b", "#4c78a8"


def ulp_labels() -> list[str]:
    """One label per bin of ``ULP_EDGES``: "≤ ½", "½–1", …, "> 65,536"."""
    def shown(edge: float) -> str:
        return "½" if edge == 0.5 else f"{edge:,.0f}"
    labels = [f"≤ {shown(ULP_EDGES[1])}"]
    labels += [f"{shown(lo)}–{shown(hi)}" for lo, hi in zip(ULP_EDGES[1:-2], ULP_EDGES[2:-1])]
    return labels + [f"> {shown(ULP_EDGES[-2])}"]


def ulp_histogram(result: PrecisionResult, dtype: str) -> go.Figure:
    """How many elements lie how many ULPs from the float64 truth, the formula's bars beside the
    baseline's: a formula that loses bits has its bars further right."""
    fig = go.Figure()
    labels = ulp_labels()
    for side, stats, color in (("formula", result.formula, FORMULA_COLOR), (_baseline_name(result), result.baseline, BASELINE_COLOR)):
        total = max(int(stats.ulp_counts.sum()), 1)
        fig.add_trace(go.Bar(x=labels, y=stats.ulp_counts, name=side, marker={"color": color},
                             customdata=100 * stats.ulp_counts / total,
                             hovertemplate=f"{side}<br>%{{x}} ULP: %{{y}} elements (%{{customdata:.1f}}%)<extra></extra>"))
    base_layout(fig, f"{_what(result)}: distance from the float64 truth, in {dtype} ULPs", f"ULPs of {dtype} at the truth",
                "elements", barmode="group")
    fig.update_layout(**LEGEND_BELOW)
    fig.update_xaxes(type="category")
    return fig


def error_against_magnitude(result: PrecisionResult, dtype: str) -> go.Figure:
    """Each sampled element's |error| against |truth| (log–log), formula and baseline, with the
    line of one ULP: rounding lies along it; a formula that loses bits lies above the baseline."""
    fig = go.Figure()
    tiny = 1e-300
    # the baseline as open rings under the formula's dots: where they coincide, both show
    for side, stats, marker in (("formula", result.formula, {"color": FORMULA_COLOR, "size": 4}),
                                (_baseline_name(result), result.baseline, {"color": BASELINE_COLOR, "size": 8, "symbol": "circle-open"})):
        keep = np.isfinite(stats.sample_error) & (stats.sample_error > 0) & (stats.sample_magnitude > 0)
        fig.add_trace(go.Scattergl(x=stats.sample_magnitude[keep], y=stats.sample_error[keep], mode="markers", name=side,
                                   marker={**marker, "opacity": 0.7},
                                   hovertemplate=f"{side}<br>|truth| %{{x:.3g}}<br>|error| %{{y:.3g}}<extra></extra>"))
    magnitudes = np.concatenate([result.formula.sample_magnitude, result.baseline.sample_magnitude])
    magnitudes = magnitudes[np.isfinite(magnitudes) & (magnitudes > tiny)]
    if magnitudes.size:
        eps = _eps(dtype)
        line = np.geomspace(magnitudes.min(), magnitudes.max(), 50)
        fig.add_trace(go.Scatter(x=line, y=eps * line, mode="lines", name=f"1 ULP ({dtype} eps × |truth|)",
                                 line={"color": "#777", "dash": "dot"}, hoverinfo="skip"))
    base_layout(fig, f"{_what(result)}: |error| against |truth|, {result.formula.sample_error.size:,} elements sampled",
                "|float64 truth| (log)", "|value − truth| (log)")
    fig.update_layout(**LEGEND_BELOW)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


def _what(result: PrecisionResult) -> str:
    return "the output" if result.name == "output" else f"gradient of {result.name}"


def _baseline_name(result: PrecisionResult) -> str:
    return {"reference": "PyTorch's own (reference)", "surrogate": "surrogate's autograd",
            "rounding": "truth rounded"}.get(result.baseline_kind, BASELINES[result.baseline_kind])


def _eps(dtype: str) -> float:
    return {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}.get(dtype, math.ldexp(1, -52))
