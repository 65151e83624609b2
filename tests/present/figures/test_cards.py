"""The verdict card's small picture, an SVG: titled, both axes labelled, right and wrong told by
shape as well as colour, and the error map where the story is about where."""

import re

import numpy as np
import torch

from gradient_lab.app.family import get_family
from gradient_lab.engine.pipeline import compare_gradients
from gradient_lab.present.cards import card
from gradient_lab.present.figures.cards import MAX_CELLS, RIGHT, WRONG, _pooled, card_figure, entries_scatter, error_map
from gradient_lab.testing import check_gradients
from tests.specimens import shipped

COSINE = get_family("cosine")
INPUTS = COSINE.build_inputs((8, 16), seed=0)


def texts(svg: str) -> list[str]:
    return re.findall(r">([^<>]+)</text>", svg)


def test_the_scatter_marks_wrong_entries_with_another_colour_and_shape():
    report = compare_gradients(COSINE, "tutorial", INPUTS)
    svg = entries_scatter(report)
    words = texts(svg)
    assert svg.startswith("<svg") and words[0] == "Jacobian entries: formula against truth"
    assert "true entry (reference)" in words and "formula&#x27;s entry" in words
    assert f"✕ wrong ({report.jacobian.coverage.compared:,})" in words and "<circle" not in svg  # every entry is wrong: crosses
    assert f"stroke='{WRONG}'" in svg
    right = entries_scatter(compare_gradients(COSINE, "corrected", INPUTS))
    assert right.count("<circle") == 256 and f"fill='{RIGHT}'" in right and "✕" not in "".join(texts(right))


def test_the_error_map_shows_where_and_how_much():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    report = check_gradients(shipped.PaddedDifferences, x)
    svg = error_map(report)
    assert texts(svg)[0].startswith("|formula − truth| over x") and "column (dim 1)" in texts(svg)
    fills = re.findall(r"<rect x='[^']+' y='[^']+' width='[^']+' height='[^']+' fill='(#[0-9a-f]{6})'", svg)
    grid = np.array(fills).reshape(4, 8)
    assert set(grid[:, 1:-1].ravel()) == {"#ffffff"} and "#ffffff" not in set(grid[:, [0, -1]].ravel())  # white: right
    assert card_figure(card(report), report) == svg


def test_a_large_error_map_is_pooled_to_blocks_by_their_largest_value():
    values = np.zeros((64, 128))
    values[63, 127] = 5.0
    pooled = _pooled(values)
    assert pooled.shape[0] <= MAX_CELLS[0] and pooled.shape[1] <= MAX_CELLS[1] and pooled.max() == 5.0 and pooled[-1, -1] == 5.0
