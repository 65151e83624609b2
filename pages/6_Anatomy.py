"""Anatomy: what a custom Function saved, what its backward returned, its graph, its cost, and the
rules of the Function contract it breaks."""

import streamlit as st

from gradient_lab import ui
from gradient_lab.app import views
from gradient_lab.contract.anatomy import describe, rows_broken, rows_returned, rows_saved
from gradient_lab.app.budget import human_bytes

case = ui.page_setup(
    "pages/6_Anatomy.py",
    "Anatomy",
    "One formula's custom autograd Function taken apart on the sidebar's case: the tensors its forward saved, what its "
    "backward returned for each input, the autograd graph around it, its cost against the reference, and every rule "
    "of the Function contract it breaks.",
)

# whatever fails below is said in words on the page, never as a traceback
with ui.guard("This page"):
    family = case.get_family()
    formula = st.selectbox("Formula to take apart", case.formulas or list(family.formulas), key="anatomy_formula", bind=ui.URL,
                           help="Each formula applies a custom autograd.Function; the reference is autograd through plain ops.")
    found = ui.compute(views.anatomy, case, formula, what=f"Taking {formula} apart…")
    if found is not None and not found.custom and not found.broken:
        st.info(f"**{formula}** runs no custom autograd.Function: autograd differentiates it through plain ops, so there is "
                "no hand-written backward to take apart. The Gradient check page still compares it with the reference.")
        found = None
    if found is not None:
        st.subheader("The contract")
        errors = found.errors()
        if errors:
            st.error(f"**{formula}** ({found.function}) breaks {len(errors)} rule{'s' * (len(errors) != 1)} of the Function "
                     f"contract: {'; '.join(b.rule for b in errors)}.", icon=":material/gavel:")
        else:
            st.success(f"**{formula}** ({found.function}) keeps every rule of the Function contract checked here.",
                       icon=":material/check_circle:")
        if found.broken:
            st.dataframe(rows_broken(found.broken), hide_index=True, width="stretch", key="anatomy_broken",
                         column_config={"what": st.column_config.TextColumn(width="large")})
        st.caption("Checked: tensors saved with save_for_backward, not kept on ctx; saved tensors not changed in place; one "
                   "gradient per input; its shape and precision; None only where no gradient is needed; a differentiable "
                   "backward; staticmethods; one style of forward.")

        left, right = st.columns(2)
        with left:
            st.subheader("What forward saved")
            if found.saved:
                st.dataframe(rows_saved(found.saved), hide_index=True, width="stretch", key="anatomy_saved")
            else:
                st.info("Nothing was saved for backward.")
            held = f"Held for backward: {human_bytes(found.saved_bytes)}"
            if found.reference_bytes is not None:
                held += f", against {human_bytes(found.reference_bytes)} for autograd through the reference's plain ops"
            st.caption(held + ".")
            if found.attributes:
                st.markdown("**Attributes set on ctx**")
                st.dataframe([{"attribute": k, "holds": v} for k, v in found.attributes.items()], hide_index=True, width="stretch",
                             key="anatomy_attributes")
        with right:
            st.subheader("What backward returned")
            if found.returned:
                st.dataframe(rows_returned(found.returned), hide_index=True, width="stretch", key="anatomy_returned")
            else:
                st.info("No custom Function ran, so no backward was called.")
            if found.cost:
                st.subheader("Cost")
                st.markdown(describe(found.cost) + " (median of repeated runs, torch.utils.benchmark).")

        st.subheader("The graph")
        st.caption("From the inputs (green) up to the output; the custom Function's node in orange, each node with what it saved.")
        st.graphviz_chart(found.dot, width="content")
