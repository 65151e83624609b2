"""The Gradient check page's plain data: comparisons cut to a drawable block, rows per element, the summary."""

import json
import math

import numpy as np
import plotly.graph_objects as go
import pytest

from gradient_lab.engine.report import PAIRS, SOURCES
from gradient_lab.engine.pipeline import compare_gradients
from gradient_lab.app.family import get_family
from gradient_lab.present.figures.check import error_heatmap, gradient_heatmaps
from gradient_lab.present.report_data import drawable, element_rows, leading_block, pair_name, plan_sources, shown, summary

COSINE = get_family("cosine")
AR = ("analytic", "reference")


@pytest.fixture(scope="module")
def tutorial():
    return compare_gradients(COSINE, "tutorial", COSINE.build_inputs((8, 16)))


@pytest.mark.parametrize(
    "shape, limit, expected",
    [
        ((8, 16), 20_000, (8, 16)),  # fits: whole
        ((8192, 4096), 20_000, (4, 4096)),  # whole rows, as many as fit
        ((3, 30_000), 20_000, (1, 20_000)),  # not even one row fits: part of the first
        ((1, 4096, 64), 20_000, (1, 312, 64)),  # 3-D: trailing dims kept whole while they fit
        ((100_000,), 20_000, (20_000,)),
        ((5, 7), 1, (1, 1)),
    ],
)
def test_leading_block_keeps_whole_rows_within_the_limit(shape, limit, expected):
    block = leading_block(shape, limit)
    assert block == expected
    assert math.prod(block) <= max(limit, 1)


def test_a_small_comparison_is_drawn_whole(tutorial):
    c = tutorial.input("x1")
    drawn = drawable(c)
    assert not drawn.cut and drawn.comparison is c and drawn.describe() == ""


def test_a_large_comparison_is_cut_to_its_first_rows_with_errors_recomputed(tutorial):
    c = tutorial.input("x2")
    drawn = drawable(c, limit=50)
    assert drawn.cut and drawn.shape == (8, 16) and drawn.shown == (3, 16)
    for source in SOURCES:
        np.testing.assert_array_equal(drawn.comparison.gradients[source], c.gradients[source][:3])
    for pair in PAIRS:
        errors = drawn.comparison.errors[pair]
        assert errors.signed.shape == (3, 16)
        assert errors.max_abs == pytest.approx(np.abs(c.gradients[pair[0]][:3] - c.gradients[pair[1]][:3]).max())
        assert errors.worst[0] < 3  # the worst mark falls inside the drawn block
    assert drawn.comparison.jacobians is None  # not of the block: not drawn
    assert "x2[:3, :]" in drawn.describe() and "128 elements" in drawn.describe() and "48 elements" in drawn.describe()
    # part of one row when a row alone is above the limit
    assert "x2[:1, :10]" in drawable(c, limit=10).describe()


def test_the_cut_comparison_draws(tutorial):
    drawn = drawable(tutorial.input("x1"), limit=50)
    heatmaps = [t for t in gradient_heatmaps(drawn.comparison).data if isinstance(t, go.Heatmap)]
    assert len(heatmaps) == 3 and all(np.asarray(h.z).shape == (3, 16) for h in heatmaps)
    fig = error_heatmap(drawn.comparison, AR)
    marker = [t for t in fig.data if isinstance(t, go.Scatter)][0]
    assert marker.y[0] < 3


def test_element_rows_have_one_row_per_element_with_every_value(tutorial):
    rows, left_out = element_rows(tutorial)
    assert left_out == 0 and len(rows) == 2 * 8 * 16
    assert list(rows[0]) == ["input", "index", *SOURCES, *(pair_name(p) for p in PAIRS), *(f"relative {pair_name(p)}" for p in PAIRS)]
    row = next(r for r in rows if r["input"] == "x2" and r["index"] == "[2, 11]")
    c = tutorial.input("x2")
    assert row["analytic"] == c.gradients["analytic"][2, 11] and row["numerical"] == c.gradients["numerical"][2, 11]
    assert row["analytic-reference"] == pytest.approx(c.gradients["analytic"][2, 11] - c.gradients["reference"][2, 11])
    assert row["relative analytic-reference"] == c.errors[AR].relative[2, 11]


def test_element_rows_stop_at_the_limit_and_say_how_many_are_left_out(tutorial):
    rows, left_out = element_rows(tutorial, limit=200)
    assert len(rows) == 200 and left_out == 56
    assert rows[-1]["input"] == "x2" and rows[-1]["index"] == "[4, 7]"  # 128 of x1, then 72 of x2


def test_summary_is_the_report_without_arrays(tutorial):
    data = summary(tutorial)
    text = json.dumps(data)  # plain values only
    assert "ndarray" not in text
    assert data["passed"] is False and data["formula"] == "tutorial"
    assert data["cosine to reference"] == tutorial.cosine
    x1 = data["inputs"]["x1"]
    assert x1["errors"]["analytic-reference"]["max abs"] == tutorial.input("x1").errors[AR].max_abs
    assert x1["errors"]["analytic-reference"]["worst index"] == list(tutorial.input("x1").errors[AR].worst)
    assert x1["forward evaluations"] + data["inputs"]["x2"]["forward evaluations"] == data["forward evaluations"]
    assert "colour groups" in plan_sources(tutorial) and "x2:" in plan_sources(tutorial)
    coverage = data["coverage"]
    assert coverage["entries"] == tutorial.jacobian.coverage.entries and coverage["in words"] in data["verdict"]
    assert data["second order"]["outcome"] == "fail" and data["outcome"] == "fail"


def test_shown_says_nan_and_inf_in_words():
    assert [shown(0.12345, ".2f"), shown(math.nan), shown(math.inf), shown(-math.inf)] == ["0.12", "NaN", "Inf", "−Inf"]
