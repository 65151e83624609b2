"""Start here: the guided path through the tutorial's story (``lib.present.guide``), as one row of
links that set the case, in the presentation setting when it is on."""

from __future__ import annotations

import streamlit as st

from ..present.guide import PRESENT, TUTORIAL


def start_here() -> None:
    presenting = st.query_params.get(PRESENT) == "true"
    with st.container(border=True, key="start_here"):
        st.markdown(":material/school: **Start here**: a popular tutorial's cosine-similarity backward is wrong twice. "
                    "Four clicks show it; each opens the page and the case that shows one step (hover for what to look at).")
        for column, step in zip(st.columns(len(TUTORIAL)), TUTORIAL):
            column.page_link(step.page, label=step.title, query_params=step.query_params(presenting), icon=":material/arrow_forward:",
                             help=step.what_to_see)
