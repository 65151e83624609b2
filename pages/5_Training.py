"""Training: the first input optimized down the family's loss with each formula's gradient, and which formulas get there."""

import streamlit as st

from gradient_lab import ui
from gradient_lab.app import views
from gradient_lab.present.figures.landscape import trajectory_curves_figure
from gradient_lab.present.figures.training import training_summary
from gradient_lab.present.tables import trajectory_rows
from gradient_lab.explore.trajectory import LEARNING_RATES, MAX_STEPS, OPTIMIZERS

BADGES = {"descends": "green", "climbs": "red", "stays": "gray", "raised": "orange", "diverged": "orange"}

case = ui.page_setup(
    "pages/5_Training.py",
    "Training",
    "The first input optimized down the family's loss with each formula: every formula starts from the same point and "
    "drives the same optimizer with its own backward, while the loss and the true gradient come from the reference.",
)

# whatever fails below is said in words on the page, never as a traceback
with ui.guard("This page"):
    optimizer_col, rate_col, steps_col = st.columns([2, 3, 3])
    optimizer = optimizer_col.selectbox("Optimizer", list(OPTIMIZERS), key="train_optimizer", bind=ui.URL,
                                        help="SGD + momentum uses momentum 0.9; Adam its defaults.")
    learning_rate = float(rate_col.select_slider("Learning rate", LEARNING_RATES, value=0.1, key="train_lr", bind=ui.URL,
                                                 format_func=lambda v: f"{v:g}"))
    steps = int(steps_col.slider("Steps", 1, MAX_STEPS, 200, key="train_steps", bind=ui.URL))

    movable = ui.compute(views.moving_inputs, case, what="Building the inputs…") or case.get_family().input_names[:1]
    moving = movable[0]  # training moves the first input that is differentiated
    spec = views.PlaneSpec(index=case.get_family().input_names.index(moving))
    runs = ui.compute(views.training, case, spec, optimizer, learning_rate, steps,
                      what=f"Running {optimizer} for {steps} steps per formula…")
    if runs is not None:
        family = case.get_family()
        summary = training_summary(runs)
        st.dataframe(summary, hide_index=True, width="stretch", key="train_summary", column_config={
            "start loss": st.column_config.NumberColumn(format="%.4g"),
            "final loss": st.column_config.NumberColumn(format="%.4g", help="The last finite loss of the run."),
            "loss change": st.column_config.NumberColumn(format="%+.4g", help="Final minus start: negative is progress."),
            "mean cosine to true gradient": st.column_config.NumberColumn(
                format="%.3f", help="Between the gradient the formula followed and the true one, averaged over the steps: −1 walks uphill."),
        }, column_order=["formula", "status", "start loss", "final loss", "loss change", "mean cosine to true gradient"])
        for row in summary:
            st.markdown(f":{BADGES[row['status']]}-badge[{row['status']}] **{row['formula']}**: {row['what happened'].rstrip('.')}.")
        wrong = ui.compute(views.wrong_inputs, case, what="Checking which inputs' gradients are wrong…") or {}
        for formula, inputs in wrong.items():
            if inputs and moving not in inputs:  # only the first input moves: such a bug cannot show here
                st.info(f"**{formula}**'s gradient with respect to {moving} is right, so it descends here like a correct "
                        f"formula; its bug is in the gradient with respect to {', '.join(inputs)}, which this page does not "
                        "move. See Gradient check.", icon=":material/info:")
        figure = trajectory_curves_figure(runs)
        figure.update_layout(height=460)
        ui.chart(figure, key="train_curves_chart")
        st.caption(
            f"Only {moving} moves; the other inputs stay where they are. Loss: {family.description} "
            f"{family.note('training')} The middle panel is the cosine between the gradient each formula followed "
            "and the true one: −1 means it walks straight uphill."
        )
        ui.download("Download the trajectories (CSV)", trajectory_rows(runs), "training.csv", key="train_download")
