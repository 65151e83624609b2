"""What every figure shares: a colour per formula and per gradient source, and the base layout."""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

# Every figure here is drawn on plotly_white. As the default it is attached to each new figure
# unvalidated (0.3 ms); assigned per figure it is validated and copied again (7 ms a figure).
pio.templates.default = "plotly_white"

# Okabe–Ito: distinguishable with the common colour-vision deficiencies
PALETTE = ("#D55E00", "#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
KNOWN = {
    "tutorial": "#D55E00",  # vermillion: the specimen
    "sign-fixed": "#0072B2",  # blue: far from the tutorial's vermillion, they overlap a lot
    "norm-fixed": "#CC79A7",
    "sign+norm-fixed": "#56B4E9",
    "corrected": "#009E73",  # green: right
    "reference": "#000000",
    "analytic": "#D55E00",
    "numerical": "#0072B2",
}
KINK = "#E69F00"  # orange: elements where the function is not differentiable, apart from the maps' red–blue
DIVERGING = "RdBu_r"  # signed values, centred at 0
SEQUENTIAL = "Viridis"  # magnitudes


def color_for(name: str, position: int = 0) -> str:
    """A stable colour for a formula or source name; unknown names take the palette in order."""
    return KNOWN.get(name, PALETTE[position % len(PALETTE)])


def base_layout(fig: go.Figure, title: str, x_title: str | None = None, y_title: str | None = None, **layout) -> go.Figure:
    """Title, axis titles, hover mode and margins every figure has."""
    fig.update_layout(
        title={"text": title, "x": 0.0, "xanchor": "left"},
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        hoverlabel={"namelength": -1},
        **layout,
    )
    if x_title is not None:
        fig.update_xaxes(title_text=x_title)
    if y_title is not None:
        fig.update_yaxes(title_text=y_title)
    return fig
