"""Error maps side by side: one colour range for all, short titles."""

import math

import numpy as np

from gradient_lab.app.family import get_family
from gradient_lab.present.figures.fields import error_field_figures, shared_log_range
from gradient_lab.explore.landscape import GradientField, gradient_field, make_plane

COSINE = get_family("cosine")
PARAMS = dict(COSINE.params)
X = COSINE.build_inputs((2, 2), seed=0)
PLANE = make_plane(COSINE, X, PARAMS, "input plane")
FIELD = gradient_field(COSINE, X, PARAMS, PLANE, ["tutorial", "corrected"], resolution=5)


def test_every_map_shares_the_range_of_all_the_errors():
    low, high = shared_log_range(FIELD)
    assert low < -10 and high > -1  # the corrected formula's round-off and the tutorial's errors
    figures = error_field_figures(FIELD)
    assert list(figures) == ["tutorial", "corrected"]
    for formula, fig in figures.items():
        heatmap = fig.data[0]
        assert (heatmap.zmin, heatmap.zmax) == (low, high)
        assert formula in fig.layout.title.text and "largest error" in fig.layout.title.text
        assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_the_title_names_the_largest_error():
    worst = float(np.nanmax(FIELD.errors["tutorial"]))
    assert f"{worst:.2g}" in error_field_figures(FIELD)["tutorial"].layout.title.text


def test_errors_all_zero_or_missing_leave_the_range_alone():
    zeros = np.zeros((3, 3))
    field = GradientField(np.arange(3.0), np.arange(3.0), {"a": (zeros, zeros)}, {"a": zeros}, (0.0, 0.0), ("a", "b"))
    assert shared_log_range(field) is None
    assert error_field_figures(field)["a"].data[0].zmin is None
    one = np.full((3, 3), 1e-3)
    field = GradientField(np.arange(3.0), np.arange(3.0), {"a": (one, one)}, {"a": one}, (0.0, 0.0), ("a", "b"))
    low, high = shared_log_range(field)
    assert math.isclose(low, -3.5) and math.isclose(high, -2.5)
