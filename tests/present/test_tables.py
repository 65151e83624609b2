"""CSV rows of landscape results: every grid point and every step, named columns, no surprises."""

import math

import numpy as np

from gradient_lab.app.family import get_family
from gradient_lab.explore.landscape import gradient_field, make_plane
from gradient_lab.present.tables import field_columns, grid_rows, trajectory_rows
from gradient_lab.explore.trajectory import trajectories

COSINE = get_family("cosine")
PARAMS = dict(COSINE.params)
X = COSINE.build_inputs((3, 2), seed=0)
PLANE = make_plane(COSINE, X, PARAMS, "input plane", row=1)


def test_field_columns_name_each_formulas_directions_and_error():
    field = gradient_field(COSINE, X, PARAMS, PLANE, ["tutorial", "corrected"], resolution=4)
    columns = field_columns(field)
    assert list(columns) == ["tutorial d_a", "tutorial d_b", "tutorial error", "corrected d_a", "corrected d_b", "corrected error"]
    assert all(v.shape == (4, 4) for v in columns.values())
    np.testing.assert_array_equal(columns["tutorial d_b"], field.directions["tutorial"][1])
    assert columns["corrected error"].max() < 1e-12 < columns["tutorial error"].max()


def test_trajectory_rows_have_every_step_and_blank_the_last_gradient():
    runs = trajectories(COSINE, X, PARAMS, ["tutorial", "corrected"], PLANE, optimizer="SGD", learning_rate=0.1, steps=5)
    rows = trajectory_rows(runs)
    assert len(rows) == 2 * 6
    assert list(rows[0]) == ["formula", "step", "loss", "cosine", "gradient norm", "plane a", "plane b"]
    assert [r["step"] for r in rows[:6]] == list(range(6)) and rows[6]["formula"] == "corrected"
    assert math.isnan(rows[5]["cosine"]) and math.isnan(rows[5]["gradient norm"])  # no step from the last position
    assert rows[0]["cosine"] < 0 < 0.99 < rows[6]["cosine"]  # the tutorial follows a flipped gradient
    corrected = runs.runs["corrected"]
    assert rows[6 + 5]["loss"] == corrected.loss[5] and rows[6 + 2]["plane a"] == corrected.plane_path[2, 0]
    assert all(isinstance(v, float) for r in rows for k, v in r.items() if k not in ("formula", "step"))


def test_trajectory_rows_keep_a_divergence_as_nan():
    runs = trajectories(COSINE, X, PARAMS, ["tutorial"], PLANE, optimizer="SGD", learning_rate=10.0, steps=20)
    stop = runs.runs["tutorial"].diverged_at
    rows = trajectory_rows(runs)
    assert len(rows) == 21 and stop is not None
    assert math.isfinite(rows[0]["loss"]) and all(math.isnan(r["loss"]) for r in rows[stop + 1 :])


def test_grid_rows_follow_the_grid_layout():
    a, b = np.array([0.0, 1.0, 2.0]), np.array([10.0, 20.0])
    loss = np.array([[1, 2, 3], [4, 5, 6]], dtype=float)  # rows follow b, columns follow a
    rows = grid_rows(a, b, loss=loss)
    assert len(rows) == 6 and rows[4] == {"a": 1.0, "b": 20.0, "loss": 5.0}
    assert grid_rows(a, None, loss=np.array([7.0, 8.0, 9.0]))[2] == {"a": 2.0, "loss": 9.0}
