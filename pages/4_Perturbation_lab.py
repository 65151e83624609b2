"""Perturbation lab: one perturbation swept over a range, each formula's gradient error at every setting."""

import streamlit as st

from gradient_lab import ui
from gradient_lab.app import views
from gradient_lab.present.figures.sweeps import sweep_figure
from gradient_lab.explore.sweeps import METRICS, SWEEPS, look_for, sweeps_for

METRIC_HELP = ("max abs error: the largest |analytic − reference| over every element · max relative error: the same divided "
               "by |reference| (floored) · cosine to reference: 1 points the right way, −1 is exactly flipped")

case = ui.page_setup(
    "pages/4_Perturbation_lab.py",
    "Perturbation lab",
    "Turn one knob of the inputs (their norm, noise, the dtype, and where the family has them, eps and the angle "
    "between two inputs) over a range and see where each formula's gradient stops agreeing with autograd through "
    "the reference.",
)

# whatever fails below is said in words on the page, never as a traceback
with ui.guard("This page"):
    family = case.get_family()
    kind_col, metric_col = st.columns(2)
    kind = kind_col.selectbox("Perturbation to sweep", sweeps_for(family), key="lab_kind", bind=ui.URL,
                              help="Every other setting comes from the sidebar; this one is replaced by each value of the sweep. "
                                   "eps sweeps need a family with an eps, the angle two inputs.")
    metric = metric_col.selectbox("Metric", list(METRICS), key="lab_metric", bind=ui.URL, help=METRIC_HELP)
    st.caption(f"**What to look for.** {look_for(family, kind)}")

    result = ui.compute(views.perturbation_sweep, case, kind, what=f"Sweeping the {kind} over {len(SWEEPS[kind].values)} values…")
    if result is not None:
        figure = sweep_figure(result, metric)
        figure.update_layout(height=520)
        ui.chart(figure, key="lab_chart")
        for formula in result.formulas:
            raised = [(label, problem) for label, problem in zip(result.labels, result.problems[formula]) if problem]
            if raised:
                where = "every value" if len(raised) == len(result.values) else ", ".join(label for label, _ in raised)
                st.warning(f"**{formula}** raised at {where}, so it has no gradient there: {raised[0][1]}", icon="⚠️")
        if case.perturbation.active:
            st.caption(f"The sidebar's other perturbations stay on: {case.perturbation.describe(family.input_names)}.")
        ui.download("Download the sweep (CSV)", result.rows(), f"sweep_{kind.replace(' ', '_')}.csv", key="lab_download")
