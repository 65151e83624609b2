"""Sweep figures: a line per formula in its colour, log axes where they belong, markers and hover."""

import numpy as np
import plotly.graph_objects as go
import pytest

from gradient_lab.app.case import Case
from gradient_lab.present.figures.style import color_for
from gradient_lab.present.figures.sweeps import sweep_figure
from gradient_lab.explore.sweeps import perturbation_sweep

CASE = Case(formulas=("tutorial", "sign-fixed", "corrected"), shape=(4, 5))
NORMS = perturbation_sweep(CASE, "input norm")


def lines(fig: go.Figure) -> dict[str, go.Scatter]:
    return {t.name: t for t in fig.data if t.mode == "lines+markers"}


def test_error_plot_has_a_line_per_formula_on_log_axes_with_titles():
    fig = sweep_figure(NORMS, "max abs error")
    drawn = lines(fig)
    assert list(drawn) == list(CASE.formulas)
    assert [t.line.color for t in drawn.values()] == [color_for(f, i) for i, f in enumerate(CASE.formulas)]
    assert len({t.line.color for t in drawn.values()}) == 3
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.layout.xaxis.title.text == NORMS.axis_title
    assert "log scale" in fig.layout.yaxis.title.text and "input norm" in fig.layout.title.text
    np.testing.assert_allclose(np.asarray(drawn["tutorial"].x, dtype=float), NORMS.values)
    assert "max abs error" in drawn["corrected"].hovertemplate


def test_unit_norm_is_marked_with_a_vertical_line():
    fig = sweep_figure(NORMS, "max relative error")
    (line,) = fig.layout.shapes
    assert line.x0 == line.x1 == 1.0 and line.yref == "paper"
    assert fig.layout.annotations[0].text == "unit norm" and fig.layout.annotations[0].x == 0.0  # log10(1) on a log axis


def test_cosine_is_linear_from_minus_one_to_one_and_keeps_the_values():
    fig = sweep_figure(NORMS, "cosine to reference")
    assert fig.layout.yaxis.type != "log" and tuple(fig.layout.yaxis.range) == (-1.1, 1.1)
    np.testing.assert_allclose(np.asarray(lines(fig)["tutorial"].y, dtype=float), NORMS.cosine["tutorial"])


def test_exact_zeros_sit_on_the_floor_and_keep_their_value_in_hover():
    result = perturbation_sweep(Case(formulas=("corrected",), shape=(4, 5)), "dtype")
    result.max_abs["corrected"][0] = 0.0
    fig = sweep_figure(result, "max abs error")
    trace = lines(fig)["corrected"]
    y = np.asarray(trace.y, dtype=float)
    assert y[0] > 0 and y[0] < y[1:].min()
    assert float(trace.customdata[0][0]) == 0.0 and "exactly 0" in trace.customdata[0][2]
    assert list(trace.x) == ["float64", "float32", "float16", "bfloat16"] and fig.layout.xaxis.type == "category"
    assert not fig.layout.shapes  # nothing to mark on a dtype axis


def test_a_formula_that_raised_is_drawn_as_crosses_with_the_message():
    result = perturbation_sweep(Case(formulas=("tutorial", "corrected"), shape=(4, 5, 3)), "noise scale", values=(0.0, 1.0))
    fig = sweep_figure(result, "max abs error")
    crosses = [t for t in fig.data if t.name == "tutorial: raised"]
    assert len(crosses) == 1 and crosses[0].marker.symbol == "x" and len(crosses[0].x) == 2
    assert "RuntimeError" in crosses[0].customdata[0]


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown metric"):
        sweep_figure(NORMS, "speed")
