"""Gradient Lab: home. What the app is, the verdict for the current case, and the specimen's bugs."""

import streamlit as st

from gradient_lab import ui
from gradient_lab.app import views
from gradient_lab.present.figures.check import table_rows, verdict_rows
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
    if case.family == "cosine":  # the tutorial's story, told on the tutorial's family
        ui.start_here()
    st.subheader("Verdict for this case")
    formulas = ui.compute(views.chosen_formulas, case, what="Reading the formulas…") or ()
    parity = st.toggle("Parity: also run each formula compiled and under torch.func", False, key="home_parity", bind=ui.URL,
                       help=f"torch.compile (aot_eager, inductor, fullgraph, dynamic), torch.func (grad, vjp, jvp, jacrev, jacfwd, "
                            f"vmap) and double backward, each against the same truth. It compiles: about "
                            f"{views.parity_seconds(case, len(formulas)):.0f} s for these formulas the first time, kept for the session.")
    slots = ui.card_slots(formulas)
    # each formula's first-order verdict first (a fraction of a second each), its stages still running; then each card
    # again, whole, in its place; the contract lint after all of them
    checked = []  # those whose first order ran: where it was refused, that message stands for the formula
    for formula in formulas:
        first = ui.compute(views.first_verdict, case, formula, what=f"Checking {formula}…")
        if first is not None:
            checked.append(formula)
            with slots[formula].container():
                ui.verdict_card(first, key=f"{formula}_first")
    reports = []
    for formula in checked:
        report = ui.compute(views.gradient_report, case, formula, what=f"Checking {formula}…")
        if report is not None:
            reports.append(report)
            with slots[formula].container():
                ui.verdict_card(report, key=formula)
    for formula in formulas if parity else ():  # after every card: the grids take seconds, the verdicts do not
        grid = ui.compute(views.parity, case, formula, what=f"Running {formula} compiled and under torch.func…")
        report = next((r for r in reports if r.formula == formula), None)
        if grid is not None and report is not None:
            with slots[formula].container():
                ui.verdict_card(report, key=f"{formula}_parity", parity=grid)
    if reports:
        broken = ui.compute(views.contract_problems, case, what="Checking each Function's contract…")
        for formula, rules in (broken or {}).items():
            st.markdown(f":red-badge[:material/close: contract] **{formula}** breaks the Function contract: "
                        f"{'; '.join(dict.fromkeys(b.rule for b in rules))}. See the Anatomy page.")
        if case.perturbation.active:
            st.caption(f"Perturbations: {case.perturbation.describe(case.get_family().input_names)}")
        rows = verdict_rows(reports)
        with st.expander("Every formula's numbers, as a table"):
            st.table(table_rows(rows), border="horizontal")  # a plain table: light for a page opened first, and it wraps
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
                with st.expander(f"{formula.name}'s backward, fixed: the change to {right.name}'s", expanded=formula is wrong[0]):
                    st.caption(f"The fix: − lines are {formula.name}'s (the bug), + lines {right.name}'s (correct).")
                    st.code(diff, language="diff")
        if right:
            st.markdown(f":green-badge[correct] **{right.name}**: {right.summary}")
            if right.latex:
                st.latex(right.latex)
            with st.expander(f"{right.name}'s backward"):
                source = backward_source(right)
                st.code(source or "(its source cannot be read)", language="python")
