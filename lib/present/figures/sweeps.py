"""Figures of perturbation sweeps: each formula's gradient error as one perturbation is turned."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from .style import base_layout, color_for
from ...explore.sweeps import METRIC_TITLES, METRICS, SweepResult

ERROR_METRICS = ("max abs error", "max relative error")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


def _floor(values: list[np.ndarray]) -> float:
    """Where exact zeros are drawn on a log axis: a decade under the smallest positive value."""
    positive = [v[np.isfinite(v) & (v > 0)] for v in values]
    smallest = min((float(p.min()) for p in positive if p.size), default=1.0)
    return smallest / 10


def sweep_figure(result: SweepResult, metric: str = "max abs error") -> go.Figure:
    """One line per formula: ``metric`` against the swept value (log axes for errors and for
    log-spaced values); where a formula raised, an ✕ at the bottom with the message in hover;
    the point worth noticing (unit norm, this case's eps, …) marked by a dotted vertical line."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of: {', '.join(METRICS)}")
    data = result.metric(metric)
    log_y = metric in ERROR_METRICS
    categorical = any(isinstance(v, str) for v in result.values)
    x = list(result.labels) if categorical else [float(v) for v in result.values]
    floor = _floor(list(data.values())) if log_y else -1.0
    fig = go.Figure()
    for position, formula in enumerate(result.formulas):
        values = data[formula]
        color = color_for(formula, position)
        shown = np.where(values > 0, values, floor) if log_y else values  # exact zeros sit on the floor
        notes = [
            ("exactly 0 (drawn at the bottom)" if log_y and v == 0 else "")
            + (f"; {n} non-finite element(s)" if n else "")
            for v, n in zip(values, result.non_finite[formula])
        ]
        fig.add_trace(go.Scatter(
            x=x, y=shown, mode="lines+markers", name=formula, legendgroup=formula,
            line={"color": color, "width": 2, "dash": DASHES[position % len(DASHES)]},  # overlapping lines stay visible
            marker={"size": 7, "color": color}, customdata=np.stack([values, np.array(result.labels, dtype=object), np.array(notes, dtype=object)], axis=1),
            hovertemplate=f"{formula}<br>{result.axis_title}: %{{customdata[1]}}<br>{metric}: %{{customdata[0]:.4g}}%{{customdata[2]}}<extra></extra>",
        ))
        raised = [i for i, problem in enumerate(result.problems[formula]) if problem]
        if raised:
            fig.add_trace(go.Scatter(
                x=[x[i] for i in raised], y=[floor] * len(raised), mode="markers", name=f"{formula}: raised",
                legendgroup=formula, marker={"symbol": "x", "size": 11, "color": color, "line": {"width": 1, "color": "black"}},
                customdata=[result.problems[formula][i] for i in raised],
                hovertemplate=f"{formula} raised<br>%{{customdata}}<extra></extra>",
            ))
    if result.marker is not None and not categorical:
        at, label = result.marker
        fig.add_shape(type="line", x0=float(at), x1=float(at), y0=0, y1=1, xref="x", yref="paper",
                      line={"color": "grey", "width": 1.5, "dash": "dot"})
        fig.add_annotation(x=math.log10(float(at)) if result.log_x and float(at) > 0 else float(at), y=1, xref="x", yref="paper",
                           text=label, showarrow=False, yanchor="bottom", font={"color": "grey"})
    fig.update_xaxes(type="category" if categorical else ("log" if result.log_x else "linear"))
    if log_y:
        fig.update_yaxes(type="log", exponentformat="power")
    else:
        fig.update_yaxes(range=[-1.1, 1.1], zeroline=True)
    if result.log_x and not categorical:
        numbers = [float(v) for v in x]  # not categorical: the values as floats already
        decades = math.log10(max(numbers) / min(numbers)) if min(numbers) > 0 else 0.0
        if decades > 3:  # a tick per decade, without the 2s and 5s between
            fig.update_xaxes(exponentformat="power", dtick=1)
        else:  # a short range: a tick at every swept value, labelled as the sweep labels it
            fig.update_xaxes(tickvals=x, ticktext=list(result.labels))
    elif result.kind == "angle":
        fig.update_xaxes(dtick=30)
    dtype = "each dtype" if result.dtype == "each" else result.dtype
    title = f"{metric.capitalize()} of each formula's gradient as the {result.kind} changes ({dtype}, reference in float64)"
    base_layout(fig, title, result.axis_title, METRIC_TITLES[metric] + (" (log scale)" if log_y else ""))
    # the legend beside the plot: any number of formulas, clear of the title
    fig.update_layout(legend={"orientation": "v", "x": 1.01, "xanchor": "left", "y": 1.0, "yanchor": "top"}, margin={"r": 150})
    return fig
