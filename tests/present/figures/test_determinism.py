"""The determinism check's spread map."""

import numpy as np

from gradient_lab.engine.report import Spread
from gradient_lab.present.figures.determinism import spread_map


def test_the_spread_map_draws_each_element_with_its_spread_and_counts_the_varying_ones():
    spread = np.zeros((3, 4))
    spread[1, 2] = 2e-15
    fig = spread_map(Spread("x", (3, 4), np.array([6]), spread, 2e-15, 9, "x[1, 2]"), runs=10)
    (heat,) = fig.data
    assert np.asarray(heat.z).shape == (3, 4) and np.asarray(heat.z)[1, 2] == 2e-15
    assert "spread over 10 runs" in fig.layout.title.text and "(1 element varies)" in fig.layout.title.text
