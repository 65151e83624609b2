"""The plane through the inputs: the controls that the gradient field and loss surface share."""

from __future__ import annotations

from typing import Sequence

import streamlit as st

from ..app import views
from ..app.case import Case
from .sidebar import URL


PLANE_SPANS = [0.25, 0.5, 1.0, 2.0, 4.0]
PLANE_HELP = ("random: two Gaussian directions scaled to each row's norm · gradient: the descent direction and one "
              "orthogonal to it · coordinates: two chosen elements of the input · input plane: the actual plane of one "
              "row (needs a last dim of size 2)")


def plane_controls(prefix: str, case: Case, sizes: Sequence[int], columns: Sequence) -> tuple[views.PlaneSpec, float]:
    """The plane's widgets in five given columns (mode, moving input, two extras, span), keyed
    ``<prefix>_...``; returns the plane and the view's half-width."""
    from ..explore.landscape import PLANE_MODES

    plane_col, input_col, extra_a, extra_b, span_col = columns
    names = case.get_family().input_names
    movable = views.moving_inputs(case)
    default_mode = "input plane" if case.shape[-1] == 2 else "random"
    mode = plane_col.selectbox("Plane", PLANE_MODES, index=PLANE_MODES.index(default_mode), key=f"{prefix}_plane", bind=URL, help=PLANE_HELP)
    index = names.index(input_col.selectbox("Input that moves", movable, key=f"{prefix}_input", bind=URL, help="The other inputs stay where they are."))
    size = sizes[index] if index < len(sizes) else 0
    seed, coordinates, row = 0, (0, 1), 0
    if mode in ("random", "gradient"):
        seed = int(extra_a.number_input("Plane seed", 0, 2**31 - 1, 0, key=f"{prefix}_plane_seed", bind=URL, help="Draws the random direction(s)."))
    elif mode == "coordinates":
        where = f"A flat index into {names[index]}: 0 … {max(size - 1, 0)}."
        coordinates = (int(extra_a.number_input("Coordinate a", 0, None, 0, key=f"{prefix}_coord_a", bind=URL, help=where)),
                       int(extra_b.number_input("Coordinate b", 0, None, 1, key=f"{prefix}_coord_b", bind=URL, help=where)))
    else:
        row = int(extra_a.number_input("Row", 0, None, 0, key=f"{prefix}_row", bind=URL,
                                       help=f"Which row's two features span the plane: 0 … {max(size // 2 - 1, 0)}."))
    span = span_col.select_slider("View half-width (±)", PLANE_SPANS, value=1.0, key=f"{prefix}_span", bind=URL, format_func=lambda v: f"{v:g}",
                                  help="How far the view reaches from the current point, in the plane's own units.")
    if mode == "input plane" and case.shape[-1] != 2:
        last = "Extra dim" if len(case.shape) == 3 else "Features"  # the sidebar control that sets the last dim
        st.caption(f"The input plane spans the last dim, which needs size 2 (this case's shape is {case.shape}): "
                   f"set {last} to 2 in the sidebar, or pick another plane.")
    return views.PlaneSpec(mode=mode, index=int(index), seed=seed, coordinates=coordinates, row=row), span
