"""Gradient field: each formula's descent direction on a plane through the inputs, over the loss,
and where on the plane each formula's gradient is wrong."""

import numpy as np
import streamlit as st

from gradient_lab import ui
from gradient_lab.app import views
from gradient_lab.present.figures.fields import error_field_figures
from gradient_lab.present.figures.landscape import gradient_field_figure
from gradient_lab.present.tables import field_columns, grid_rows

BACKGROUND_RESOLUTION = 41

case = ui.page_setup(
    "pages/2_Gradient_field.py",
    "Gradient field",
    "Which way each formula's backward pushes the input: its −gradient drawn as arrows on a plane through the inputs, "
    "over the loss contours, and how far its gradient is from the reference's at every point of that plane.",
)

# whatever fails below is said in words on the page, never as a traceback
with ui.guard("This page"):
    sizes = ui.compute(views.input_sizes, case, what="Building the inputs…")
    if sizes is None:
        st.info("Fix the case in the sidebar to see the gradient field.")
        st.stop()
    names = case.get_family().input_names

    *plane_columns, resolution_col = st.columns([3, 2, 2, 2, 3, 3])
    spec, span = ui.plane_controls("field", case, sizes, plane_columns)
    resolution = int(resolution_col.slider("Arrows per side", 5, 41, 15, key="field_resolution", bind=ui.URL))
    index = spec.index

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
            target = ("; the ★ is the target (where the loss pulls the moving input, projected on the plane)"
                      if field.target is not None else "")
            st.caption(
                "Each arrow is a formula's −gradient projected on the plane: the way one step of gradient descent moves the "
                f"input ({names[index]}). Arrows all have the same length, so only directions show; lengths are in the hover. "
                f"The ✕ is the current point{target}. "
                + case.get_family().note("field", "A correct formula's arrows head down the loss contours.")
            )

            if field.errors:
                st.subheader("Where each formula's gradient is wrong")
                st.caption(f"‖analytic − reference‖ over the whole of {names[index]} at every point of the plane, all maps on one "
                           "log colour scale; ✕ marks the current point, blank cells are exactly 0.")
                wrong = ui.compute(views.wrong_inputs, case, what="Checking which inputs' gradients are wrong…") or {}
                exact = [f for f, e in field.errors.items() if not np.any(np.nan_to_num(e, nan=1.0) > 0)]
                for formula in exact:  # an all-zero map draws as empty axes: say what it means instead
                    others = [n for n in wrong.get(formula, ()) if n != names[index]]
                    elsewhere = (f" Its bug is in the gradient with respect to {', '.join(others)}: choose that input to move, "
                                 "or see Gradient check." if others else "")
                    st.info(f"**{formula}**: its gradient with respect to {names[index]} equals the reference's everywhere on "
                            f"this plane.{elsewhere}", icon=":material/check:")
                maps = [(f, figure) for f, figure in error_field_figures(field).items() if f not in exact]
                per_row = max(1, min(3, len(maps)))
                for start in range(0, len(maps), per_row):
                    for column, (formula, figure) in zip(st.columns(per_row), maps[start : start + per_row]):
                        with column:
                            ui.chart(figure, key=f"field_error_{formula}")
            ui.download("Download the field (CSV)", grid_rows(field.a, field.b, **field_columns(field)),
                        "gradient_field.csv", key="field_download")
