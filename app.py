"""Gradient Lab: home. What the app is, the verdict for the current case, and the specimen's bugs."""

import streamlit as st

from gradient_lab import ui
from gradient_lab.app import views
from gradient_lab.present.figures.check import verdict_rows
from gradient_lab.present.source import backward_diff, backward_source

case = ui.page_setup(
    "app.py",
    "∇ Gradient Lab",
    "Custom autograd Functions with hand-written backward passes, checked against PyTorch's autograd and "
    "finite differences: every entry of the Jacobian, and the second order. Change the case in the sidebar; "
    "every page follows it, and the URL holds it, so a link reproduces the view.",
)

# whatever fails below is said in words on the page, never as a traceback
with ui.guard("This page"):
    st.subheader("Verdict for this case")
    reports = ui.compute(views.verdicts, case, what="Checking every formula…")
    if reports:
        rows = verdict_rows(reports)
        error = st.column_config.NumberColumn(format="%.2e")
        st.dataframe(rows, hide_index=True, width="stretch", key="verdicts", column_config={
            "max |analytic − reference|": error,
            "max |analytic − numerical|": error,
            "cosine to reference": st.column_config.NumberColumn(help="−1: the gradient is flipped; 1: it points the right way", format="%.4f"),
            "entries checked one by one": st.column_config.NumberColumn(help="Jacobian entries compared one by one; random probes cover the rest"),
            "evaluations": st.column_config.NumberColumn("forward evaluations", help="spent on finite differences"),
        })
        for report in reports:
            st.markdown(f"{ui.badge(report.verdict.outcome)} **{report.formula}**: {ui.sentence(report.verdict.text)}  \n"
                        + (f"{ui.badge(report.second_order.outcome)} second order: {ui.sentence(report.second_order.text)}" if report.second_order else ""))
        broken = ui.compute(views.contract_problems, case, what="Checking each Function's contract…")
        for formula, rules in (broken or {}).items():
            st.markdown(f":red-badge[contract] **{formula}** breaks the Function contract: "
                        f"{'; '.join(dict.fromkeys(b.rule for b in rules))}. See the Anatomy page.")
        if case.perturbation.active:
            st.caption(f"Perturbations: {case.perturbation.describe(case.get_family().input_names)}")
        ui.download("Download the verdicts (CSV)", rows, "verdicts.csv", key="download_verdicts")

    with ui.guard("Showing the formulas"):
        family = case.get_family()
        right = next((f for f in family.formulas.values() if f.correct), None)
        wrong = [f for f in family.formulas.values() if not f.correct]
        st.subheader(f"{family.title}: what the buggy formulas get wrong" if wrong else family.title)
        if family.specimen:
            st.code(family.specimen, language="python")  # long lines scroll: wrapping would break the indentation
        if family.forward_latex or family.gradient_latex:
            left, middle = st.columns(2)
            with left:
                if family.forward_latex:
                    st.markdown("**Forward**")
                    st.latex(family.forward_latex)
            with middle:
                if family.gradient_latex:
                    st.markdown("**What the gradient should be** (autograd through the reference)")
                    st.latex(family.gradient_latex)
        for formula in wrong:
            st.markdown(f":red-badge[buggy] **{formula.name}**: {formula.summary}")
            if formula.latex:
                st.latex(formula.latex)
            diff = backward_diff(formula, right) if right else None
            if diff:
                with st.expander(f"{formula.name}'s backward against {right.name}'s", expanded=formula is wrong[0]):
                    st.caption(f"− lines are {right.name}'s (correct), + lines {formula.name}'s.")
                    st.code(diff, language="diff")
        if right:
            st.markdown(f":green-badge[correct] **{right.name}**: {right.summary}")
            if right.latex:
                st.latex(right.latex)
            with st.expander(f"{right.name}'s backward"):
                source = backward_source(right)
                st.code(source or "(its source cannot be read)", language="python")
