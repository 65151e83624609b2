"""Loss surface: the loss on a line or a plane through the inputs, with optimizer paths driven by
each formula's gradient."""

import streamlit as st

from gradient_lab import ui
from gradient_lab.app import views
from gradient_lab.present.figures.landscape import (
    loss_contour_figure,
    loss_slice_figure,
    loss_surface_3d_figure,
    trajectory_curves_figure,
    trajectory_pca_figure,
)
from gradient_lab.present.tables import grid_rows, trajectory_rows
from gradient_lab.explore.trajectory import LEARNING_RATES, OPTIMIZERS

KINDS = ("2-D surface", "1-D slice")
VIEWS = ("contours", "3-D")

case = ui.page_setup(
    "pages/3_Loss_surface.py",
    "Loss surface",
    "The loss along a line or over a plane through the inputs (the reference's loss: what every formula should descend), "
    "and where an optimizer ends up when each formula's own gradient drives it.",
)

# whatever fails below is said in words on the page, never as a traceback
with ui.guard("This page"):
    sizes = ui.compute(views.input_sizes, case, what="Building the inputs…")
    if sizes is None:
        st.info("Fix the case in the sidebar to see the loss surface.")
        st.stop()
    names = case.get_family().input_names

    # ---- the plane ----
    spec, span = ui.plane_controls("surface", case, sizes, st.columns([3, 2, 2, 2, 3]))
    index = spec.index

    # ---- the view ----
    kind_col, resolution_col, view_col, log_col, paths_col = st.columns([3, 4, 3, 2, 3], vertical_alignment="center")
    kind = kind_col.radio("Show", KINDS, key="surface_kind", bind=ui.URL, horizontal=True)
    one_dimensional = kind == "1-D slice"
    if one_dimensional:
        resolution = int(resolution_col.slider("Points along the line", 11, 401, 101, key="surface_slice_resolution", bind=ui.URL))
    else:
        resolution = int(resolution_col.slider("Points per side", 5, 201, 51, key="surface_resolution", bind=ui.URL,
                                               help="The cost grows with the square: 201 per side is 40,401 loss evaluations."))
    log = log_col.toggle("Log scale", False, key="surface_log", bind=ui.URL)
    view = "contours"
    if not one_dimensional:
        view = view_col.radio("Draw as", VIEWS, key="surface_view", bind=ui.URL, horizontal=True)
    paths = paths_col.toggle("Optimizer paths", False, key="surface_paths", bind=ui.URL,
                             help="Run an optimizer from the current point, driven by each formula's gradient.")
    optimizer, learning_rate, steps = "SGD", 0.1, 100
    if paths:
        optimizer_col, rate_col, steps_col = st.columns([2, 3, 3])
        optimizer = optimizer_col.selectbox("Optimizer", list(OPTIMIZERS), key="surface_optimizer", bind=ui.URL)
        learning_rate = float(rate_col.select_slider("Learning rate", LEARNING_RATES, value=0.1, key="surface_lr", bind=ui.URL, format_func=lambda v: f"{v:g}"))
        steps = int(steps_col.slider("Steps", 1, 500, 100, key="surface_steps", bind=ui.URL))

    # ---- computing and drawing ----
    surface = ui.compute(views.surface, case, spec, resolution, span, one_dimensional,
                         what=f"Evaluating the loss on {resolution if one_dimensional else resolution**2:,} points…")
    runs = ui.compute(views.training, case, spec, optimizer, learning_rate, steps,
                      what=f"Running {optimizer} for {steps} steps per formula…") if paths and surface is not None else None

    if surface is not None:
        if one_dimensional:
            ui.chart(loss_slice_figure(surface, log), key="surface_slice_chart")
        elif view == "3-D":
            figure = loss_surface_3d_figure(surface, log)
            figure.update_layout(height=650)
            ui.chart(figure, key="surface_3d_chart")
        else:
            figure = loss_contour_figure(surface, log, trajectories=runs)
            figure.update_layout(height=600)
            ui.chart(figure, key="surface_contour_chart")
        if log and not (surface.loss > 0).all():
            st.caption("On the log scale, points where the loss is 0 or negative are left blank.")
        ui.download("Download the surface (CSV)", grid_rows(surface.a, surface.b, loss=surface.loss),
                    "loss_slice.csv" if one_dimensional else "loss_surface.csv", key="surface_download")

    if runs is not None:
        st.subheader("Optimizer paths")
        if one_dimensional or view != "contours":
            st.caption("The paths are drawn on the plane in the 2-D contour view; here are their curves.")
        for formula, run in runs.runs.items():
            if run.problem:
                st.warning(f"**{formula}** raised an error, so its path stops early: {run.problem}", icon="⚠️")
            elif run.diverged_at is not None:
                st.warning(f"**{formula}** diverged at step {run.diverged_at}: its loss or gradient stopped being finite. "
                           "Try a smaller learning rate.", icon="⚠️")
        curves = trajectory_curves_figure(runs)
        ui.chart(curves, key="surface_curves_chart")
        if index < len(sizes) and sizes[index] > 2:
            ui.chart(trajectory_pca_figure(runs), key="surface_pca_chart")
            st.caption(f"{names[index]} has {sizes[index]} elements, so the plane above shows only part of each path; "
                       "the principal components show the directions the paths actually moved along.")
        ui.download("Download the trajectories (CSV)", trajectory_rows(runs), "trajectories.csv", key="surface_paths_download")
