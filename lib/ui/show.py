"""Showing results: verdicts as badges and boxes, and charts."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from ..present.guide import PRESENT

# colour and an icon: a verdict reads without telling red from green
BADGES = {"pass": ":green-badge[:material/check: pass]", "fail": ":red-badge[:material/close: fail]",
          "no verdict": ":orange-badge[:material/help: no verdict]", "not differentiable": ":red-badge[:material/close: not differentiable]",
          "first order only": ":gray-badge[:material/looks_one: first order only]",
          "not checked": ":gray-badge[:material/remove: not checked]", "by design": ":blue-badge[:material/info: by design]",
          "as plain": ":gray-badge[:material/remove: as without]", "not applicable": ":gray-badge[:material/remove: not applicable]",
          "raises": ":red-badge[:material/close: raises]", "hides it": ":orange-badge[:material/visibility_off: hides it]"}


def badge(outcome: str) -> str:
    return BADGES.get(outcome, f":gray-badge[{outcome}]")


def sentence(text: str) -> str:
    """A verdict's words (its ``text``, the outcome shown by the badge beside it), safe as markdown."""
    return text.replace("*", "\\*").replace("_", "\\_")


PRESENTATION_FONT = 20  # px: plotly's default is 12, too small to read from the back of a room
PRESENTATION_HEIGHT = 1.3  # charts taller by this much, their larger text given room


def presenting() -> bool:
    """The presentation setting (``present=true`` in the address, the sidebar's toggle bound to it)."""
    return st.query_params.get(PRESENT) == "true"


def chart(fig, key: str) -> None:
    """A plotly figure across its column; in the presentation setting, its text larger and the chart taller."""
    if presenting():
        fig = go.Figure(fig)  # a copy: a figure may be kept between runs
        fig.update_layout(font={"size": PRESENTATION_FONT}, title_font={"size": round(PRESENTATION_FONT * 1.2)},
                          height=round((fig.layout.height or DEFAULT_HEIGHT) * PRESENTATION_HEIGHT))
    st.plotly_chart(fig, width="stretch", key=key)


DEFAULT_HEIGHT = 450  # plotly's, where a figure sets none


