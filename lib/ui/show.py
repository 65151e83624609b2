"""Showing results: verdicts as badges and boxes, and charts."""

from __future__ import annotations

import streamlit as st

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


def chart(fig, key: str) -> None:
    st.plotly_chart(fig, width="stretch", key=key)


