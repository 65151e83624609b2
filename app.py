"""Gradient Lab: home. What the app is, the verdict for the current case, and the specimen's bugs."""

import streamlit as st

from lib import ui, views
from lib.figures.check import verdict_rows

case = ui.page_setup(
    "∇ Gradient Lab",
    "Custom autograd Functions with hand-written backward passes, checked element by element against "
    "PyTorch's autograd and finite differences. Change the case in the sidebar; every page follows it, "
    "and the URL holds it, so a link reproduces the view.",
)

st.subheader("Verdict for this case")
reports = ui.compute(views.verdicts, case, what="Checking every formula…")
if reports:
    rows = verdict_rows(reports)
    st.dataframe(rows, hide_index=True, width="stretch", key="verdicts", column_config={
        "cosine to reference": st.column_config.NumberColumn(help="−1: the gradient is flipped; 1: it points the right way", format="%.4f"),
    })
    for report in reports:
        icon = "✅" if report.verdict.passed else "❌"
        st.markdown(f"{icon} **{report.formula}**: {report.verdict.summary}")
    if case.perturbation.active:
        st.caption(f"Perturbations: {case.perturbation.describe()}")
    ui.download("Download the verdicts (CSV)", rows, "verdicts.csv", key="download_verdicts")

with ui.guard("Showing the formulas"):
    family = case.get_family()
    st.subheader(f"{family.title}: what the specimen gets wrong")
    code, maths = st.columns([3, 2])
    with code:
        if family.specimen:
            st.code(family.specimen, language="python")
    with maths:
        st.markdown("**Forward**")
        st.latex(family.forward_latex)
        st.markdown("**True gradient** (autograd through the reference)")
        st.latex(family.gradient_latex)
        for name, formula in family.formulas.items():
            st.markdown(f"**{name}** {'✅' if formula.correct else '❌'}: {formula.summary}")
            st.latex(formula.latex)
