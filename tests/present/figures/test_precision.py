"""The precision verdict's figures: the ULP histogram and the error against magnitude, formula beside baseline."""

import numpy as np

from gradient_lab.app import views
from gradient_lab.app.case import Case
from gradient_lab.engine.precision import ULP_EDGES
from gradient_lab.present.figures.precision import error_against_magnitude, ulp_histogram, ulp_labels


def _result(formula: str = "one-pass variance"):
    setup_module()
    case = Case(family="precision standardize", formulas=(formula,), dtype="bfloat16")
    return views.compare_case(case, formula).precision.results[0]


def setup_module():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "specimens" / "modules"))
    import precision_functions

    precision_functions.register_all()


def test_the_histogram_has_one_bar_per_bin_for_each_side_and_the_poor_formula_sits_further_right():
    result = _result()
    fig = ulp_histogram(result, "bfloat16")
    formula, baseline = fig.data
    assert list(formula.x) == ulp_labels() and len(ulp_labels()) == len(ULP_EDGES) - 1
    assert sum(formula.y) == result.compared == sum(baseline.y)
    mean_bin = lambda counts: float(np.dot(np.arange(len(counts)), counts) / max(sum(counts), 1))  # noqa: E731
    assert mean_bin(formula.y) > mean_bin(baseline.y) + 2  # it loses bits
    assert "in bfloat16 ULPs" in fig.layout.title.text


def test_the_scatter_draws_both_sides_on_log_axes_with_the_one_ulp_line():
    fig = error_against_magnitude(_result("two-pass"), "bfloat16")
    assert [t.name for t in fig.data][:2] == ["formula", "PyTorch's own (reference)"] and "1 ULP" in fig.data[2].name
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert all(np.all(np.asarray(t.y) > 0) for t in fig.data[:2])
