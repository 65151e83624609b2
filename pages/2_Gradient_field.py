"""Gradient field: each formula's descent direction on a plane through the inputs, over the loss,
and where on the plane each formula's gradient is wrong."""

import streamlit as st

from lib import ui, views
from lib.figures.fields import error_field_figures
from lib.figures.landscape import gradient_field_figure
from lib.landscape import PLANE_MODES
from lib.tables import field_columns

URL = "query-params"
SPANS = [0.25, 0.5, 1.0, 2.0, 4.0]
PLANE_HELP = ("random: two Gaussian directions scaled to each row's norm · gradient: the descent direction and one "
              "orthogonal to it · coordinates: two chosen elements of the input · input plane: the actual plane of one "
              "row (needs feature size 2)")
BACKGROUND_RESOLUTION = 41

case = ui.page_setup(
    "Gradient field",
    "Which way each formula's backward pushes the input: its −gradient drawn as arrows on a plane through the inputs, "
    "over the loss contours, and how far its gradient is from the reference's at every point of that plane.",
)

sizes = ui.compute(views.input_sizes, case, what="Building the inputs…")
if sizes is None:
    st.info("Fix the case in the sidebar to see the gradient field.")
    st.stop()
names = case.get_family().input_names

default_mode = "input plane" if case.shape[-1] == 2 else "random"
plane_col, input_col, extra_a, extra_b, span_col, resolution_col = st.columns([3, 2, 2, 2, 3, 3])
mode = plane_col.selectbox("Plane", PLANE_MODES, index=PLANE_MODES.index(default_mode), key="field_plane", bind=URL, help=PLANE_HELP)
moving = input_col.selectbox("Input that moves", names, key="field_input", bind=URL, help="The other inputs stay where they are.")
index = names.index(moving)
seed, coordinates, row = 0, (0, 1), 0
if mode in ("random", "gradient"):
    seed = int(extra_a.number_input("Plane seed", 0, 2**31 - 1, 0, key="field_plane_seed", bind=URL, help="Draws the random direction(s)."))
elif mode == "coordinates":
    last = max(sizes[index] - 1, 0) if index < len(sizes) else 0
    coordinates = (
        int(extra_a.number_input("Coordinate a", 0, None, 0, key="field_coord_a", bind=URL, help=f"A flat index into {names[index]}: 0 … {last}.")),
        int(extra_b.number_input("Coordinate b", 0, None, 1, key="field_coord_b", bind=URL, help=f"A flat index into {names[index]}: 0 … {last}.")),
    )
else:
    rows = sizes[index] // 2 if index < len(sizes) else 0
    row = int(extra_a.number_input("Row", 0, None, 0, key="field_row", bind=URL, help=f"Which row's two features span the plane: 0 … {max(rows - 1, 0)}."))
span = span_col.select_slider("View half-width (±)", SPANS, value=1.0, key="field_span", bind=URL, format_func=lambda v: f"{v:g}",
                              help="How far the view reaches from the current point, in the plane's own units.")
resolution = int(resolution_col.slider("Arrows per side", 5, 41, 15, key="field_resolution", bind=URL))
if mode == "input plane" and case.shape[-1] != 2:
    st.caption(f"The input plane needs feature size 2 (this case has {case.shape[-1]}): set Features to 2 in the sidebar, or pick another plane.")
spec = views.PlaneSpec(mode=mode, index=int(index), seed=seed, coordinates=coordinates, row=row)

field = ui.compute(views.field, case, spec, resolution, span, what="Computing every formula's gradient on the plane…")
if field is not None:
    for formula, problem in field.problems.items():
        st.warning(f"**{formula}** raised an error, so it has no arrows: {problem}", icon="⚠️")
    if field.directions:
        background = ui.compute(views.surface, case, spec, BACKGROUND_RESOLUTION, span, what="Computing the loss contours…")
        figure = gradient_field_figure(field, background)
        figure.update_layout(height=760)
        figure.update_xaxes(constrain="domain")  # equal aspect in a wide column: no empty range beside the arrows
        ui.chart(figure, key="field_chart")
        st.caption(
            "Each arrow is a formula's −gradient projected on the plane: the way one step of gradient descent moves the "
            f"input ({names[index]}). Arrows all have the same length, so only directions show; lengths are in the hover. "
            "The ✕ is the current point; the ★ is the target (where the loss pulls the moving input, projected on the plane). "
            "A correct formula's arrows head down the loss towards the ★; the tutorial's point away from it."
        )

        if field.errors:
            st.subheader("Where each formula's gradient is wrong")
            st.caption("‖analytic − reference‖ over the whole input at every point of the plane, all maps on one log colour "
                       "scale; ✕ marks the current point, blank cells are exactly 0.")
            maps = list(error_field_figures(field).items())
            per_row = min(3, len(maps))
            for start in range(0, len(maps), per_row):
                for column, (formula, figure) in zip(st.columns(per_row), maps[start : start + per_row]):
                    with column:
                        ui.chart(figure, key=f"field_error_{formula}")
        ui.download("Download the field (CSV)", ui.grid_rows(field.a, field.b, **field_columns(field)),
                    "gradient_field.csv", key="field_download")
