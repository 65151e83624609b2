"""Gradient check: one formula of the sidebar's case, element by element against autograd and
finite differences, with PyTorch's own checks and a script that reproduces it. The sections are
``lib/ui/check_sections.py``'s, one per stage of the report among them."""

import streamlit as st

from gradient_lab import ui
from gradient_lab.app import views
from gradient_lab.ui import check_sections as sections

case = ui.page_setup(
    "pages/1_Gradient_check.py",
    "Gradient check",
    "One formula's hand-written gradient against PyTorch's autograd (the reference) and finite "
    "differences, element by element: where it is wrong, by how much, and how to reproduce it.",
)

# whatever fails below is said in words on the page, never as a traceback
with ui.guard("This page"):
    family = case.get_family()
    formulas = list(case.formulas) or list(family.formulas)
    if not case.formulas:
        st.caption("No formula is chosen in the sidebar: every formula of the family is offered here.")
    formula = st.selectbox("Formula to check", formulas, key="check_formula", bind=ui.URL,
                           help="One of the formulas chosen in the sidebar.")

    st.subheader("Verdict")  # 1. the verdict, and a section per stage of its report
    report = ui.compute(views.gradient_report, case, formula, what=f"Checking {formula}…")
    if report is not None:
        sections.verdict(report)
        sections.stages(case, formula, report)
        sections.determinism(case, formula, report)
        sections.parity(case, formula)
        sections.diagnosis(report)
    comparison = sections.elements(report) if report is not None else None  # 2. element by element
    if report is not None:
        sections.other_stages(case, formula, report)  # does it train, …
    sections.more_checks(case, formula, report, comparison)  # 3. more checks, in tabs
    sections.downloads(case, formula, report)  # 4. downloads and the script
