"""Start here: the guided path through the tutorial's story (``lib.present.guide``), as one row of
links that set the case, in the presentation setting when it is on."""

from __future__ import annotations

import streamlit as st

from . import show
from ..present.guide import TUTORIAL
from .sidebar import open_case


def start_here() -> None:
    presenting = show.presenting()
    with st.container(border=True, key="start_here"):
        st.markdown(":material/school: **Start here**: a popular tutorial's cosine-similarity backward is wrong twice. "
                    "Four clicks show it; each opens the page and the case that shows one step (hover for what to look at).")
        for number, (column, step) in enumerate(zip(st.columns(len(TUTORIAL)), TUTORIAL), 1):
            # a button that opens the step's page at its case, as its pasted link does: a clicked page_link drops its query
            column.button(step.title, key=f"start_here_{number}", icon=":material/arrow_forward:", help=step.what_to_see,
                          type="tertiary", on_click=open_case, args=(step.page, step.query_params(presenting)))

