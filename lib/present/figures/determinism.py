"""The determinism check's figure (``lib.engine.determinism``): where the backward varies from run to run.

A pure builder: a ``Spread`` in, a ``plotly.graph_objects.Figure`` out; no streamlit, no torch.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ...engine.report import Spread
from .style import SEQUENTIAL, base_layout


def spread_map(spread: Spread, runs: int) -> go.Figure:
    """max − min of each element over the runs (0 where every run agrees bitwise), as a heatmap of
    the input's elements (1-D as one row, N-D as dim 0 against the rest)."""
    values = np.asarray(spread.spread, dtype=np.float64)
    grid = values.reshape(1, -1) if values.ndim < 2 else values.reshape(values.shape[0], -1)
    fig = go.Figure(go.Heatmap(z=grid, colorscale=SEQUENTIAL, colorbar={"title": "spread", "exponentformat": "e"},
                               hovertemplate="row %{y}, column %{x}<br>max − min over the runs: %{z:.3g}<extra></extra>"))
    count = spread.varying.size
    base_layout(fig, f"gradient of {spread.name}: spread over {runs} runs of the backward "
                     f"({count:,} element{' varies' if count == 1 else 's vary'})",
                "element (the rest of the dims)", "dim 0")
    fig.update_yaxes(autorange="reversed")
    return fig
