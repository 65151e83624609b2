"""Values as the 2-D grid a picture draws: shared by the plotly heatmaps (``check``) and the cards'
SVG (``cards``). No plotly here: a card draws where only the package's own dependencies are
installed (a notebook's report without the dashboard's extra)."""

from __future__ import annotations

import math

import numpy as np

from ...engine.signature import name_index


def grid_of(values: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray | None, str, str]:
    """``values`` as the 2-D grid a heatmap needs, a label per cell where the grid's own (row,
    column) does not name the element (N-D inputs; None otherwise), and the x and y axis titles
    saying how the grid was made. Non-finite values become NaN: blank cells."""
    shape = values.shape
    labels = None
    if values.ndim <= 1:
        grid, x_title, y_title = values.reshape(1, -1), "element index", "(1-D: one row)"
    elif values.ndim == 2:
        grid, x_title, y_title = values, "column (dim 1)", "row (dim 0)"
    else:
        rest = "…".join(map(str, (1, values.ndim - 1)))
        grid, x_title, y_title = values.reshape(shape[0], math.prod(shape[1:])), f"flattened dims {rest} (row-major)", "dim 0"
        index = np.indices(shape).reshape(values.ndim, -1).T
        labels = np.array([name_index(name, i) for i in index.tolist()], dtype=object).reshape(grid.shape)
    grid = np.where(np.isfinite(grid), grid, np.nan).astype(np.float64)
    return grid, labels, x_title, y_title
