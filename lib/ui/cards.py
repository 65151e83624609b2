"""A verdict card on a page: the one component Home and Gradient check share (``lib.present.cards``
says what it holds; ``lib.present.figures.cards`` draws its picture)."""

from __future__ import annotations

import base64
from typing import Sequence

import streamlit as st

from ..engine.report import GradientReport
from ..present.cards import card, parity_line
from ..present.figures.cards import card_figure
from .show import badge, sentence


def verdict_card(report: GradientReport, key: str, wide: bool = False, parity=None) -> None:
    """The badge and name, the headline, the key numbers and the picture (beside them when
    ``wide``, below them in a column of cards); the evidence under Details. ``parity``: the
    formula's parity grid, where one ran, in one line."""
    shown = card(report)
    with st.container(border=True, key=f"card_{key}"):
        words, picture = st.columns([3, 2], vertical_alignment="center") if wide else (st.container(), st.container())
        with words:
            second = f" · {badge(shown.second_order[0])} second order" if shown.second_order is not None else ""
            st.markdown(f"{badge(shown.outcome)} **{sentence(shown.formula)}**{second}")
            st.markdown(f"##### {sentence(shown.headline)}")
            st.markdown(" · ".join(f"**{number.value}** :gray[{number.label}]" for number in shown.numbers),
                        help=" ".join(f"{number.label[:1].upper() + number.label[1:]}: {number.help}." for number in shown.numbers))
            if shown.precision is not None:  # below float64: its error against PyTorch's own in the same dtype
                st.markdown(f"{badge(shown.precision[0])} {sentence(shown.precision[1])}")
            if shown.conditions is not None:  # where the Function will really run: subsets, layouts, aliasing, sizes, ties
                st.markdown(f"{badge(shown.conditions[0])} {sentence(shown.conditions[1])}")
            for outcome, stage_line in shown.stages:  # the other stages: does it train, …
                st.markdown(f"{badge(outcome)} {sentence(stage_line)}")
            if shown.pending:  # a first-order verdict shown early: the stages that may still change it
                st.markdown(f":gray[:material/progress_activity: {shown.pending}]")
            line = parity_line(parity)
            if line is not None:  # however it is run: torch.compile, torch.func, double backward
                st.markdown(f"{badge(line[0])} Parity: {sentence(line[1][0].lower() + line[1][1:])}")
        with picture:
            svg = card_figure(shown, report)
            if svg is not None:
                # a markdown image, not st.image: markdown's code comes with the page, while the
                # browser fetches st.image's (and raw HTML's) when first used, from a busy server
                st.markdown(f"![{shown.picture}](data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()})")
        with st.expander("Details"):
            lines = [*shown.details, *([shown.second_order[1]] if shown.second_order is not None else [])]
            st.markdown("\n".join(f"- {sentence(line)}" for line in lines))


def card_slots(names: Sequence[str], per_row: int = 3) -> dict[str, st.delta_generator.DeltaGenerator]:
    """One place per card, side by side, ``per_row`` to a row: each filled, and filled again, in place."""
    slots = {}
    for start in range(0, len(names), per_row):
        row = names[start:start + per_row]
        for name, column in zip(row, st.columns(per_row)):
            slots[name] = column.empty()
    return slots
