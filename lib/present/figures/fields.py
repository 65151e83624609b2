"""Error maps of a gradient field side by side: one per formula, on one shared colour scale, so
that a formula 20 orders of magnitude better than another also looks it."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .landscape import error_field_figure
from ...explore.landscape import GradientField


def shared_log_range(field: GradientField) -> tuple[float, float] | None:
    """(lowest, highest) log10 of the positive finite errors over every formula; None if none."""
    positive = [e[np.isfinite(e) & (e > 0)] for e in field.errors.values()]
    values = np.concatenate(positive) if positive else np.zeros(0)
    if values.size == 0:
        return None
    low, high = float(np.log10(values.min())), float(np.log10(values.max()))
    return (low, high) if high > low else (low - 0.5, high + 0.5)


def error_field_figures(field: GradientField) -> dict[str, go.Figure]:
    """Each formula's error map (``error_field_figure``), all on the colour range of
    ``shared_log_range``, with a title short enough for a narrow column."""
    span = shared_log_range(field)
    figures = {}
    for formula in field.errors:
        fig = error_field_figure(field, formula)
        if span is not None:
            fig.update_traces(zmin=span[0], zmax=span[1], selector={"type": "heatmap"})
        worst = float(np.nanmax(field.errors[formula])) if np.isfinite(field.errors[formula]).any() else float("nan")
        fig.update_layout(title={"text": f"{formula}: largest error {worst:.2g}"}, showlegend=False, height=400)
        fig.update_xaxes(constrain="domain")  # the plane's square region drawn square in a narrow column
        figures[formula] = fig
    return figures
