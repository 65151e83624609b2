"""Showing results: verdicts as badges and boxes, and charts."""

from __future__ import annotations

import streamlit as st

BADGES = {"pass": ":green-badge[pass]", "fail": ":red-badge[fail]", "no verdict": ":orange-badge[no verdict]",
          "not differentiable": ":red-badge[not differentiable]", "not checked": ":gray-badge[not checked]",
          "by design": ":blue-badge[by design]"}


def badge(outcome: str) -> str:
    return BADGES.get(outcome, f":gray-badge[{outcome}]")


def sentence(text: str) -> str:
    """A verdict's words (its ``text``, the outcome shown by the badge beside it), safe as markdown."""
    return text.replace("*", "\\*").replace("_", "\\_")


def verdict_box(text: str, outcome: str) -> None:
    """A verdict as a coloured box: green for pass, red for a failure, amber when no verdict."""
    if outcome == "pass":
        st.success(text, icon=":material/check_circle:")
    elif outcome in ("no verdict", "not checked"):
        st.warning(text, icon=":material/help:")
    elif outcome == "by design":  # a fact the author chose (once differentiable), not a failure
        st.info(text, icon=":material/info:")
    else:
        st.error(text, icon=":material/cancel:")


def chart(fig, key: str) -> None:
    st.plotly_chart(fig, width="stretch", key=key)


