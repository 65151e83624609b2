"""Landscapes: planes, loss surfaces and gradient fields, in float64."""

import numpy as np
import pytest
import torch

from gradient_lab.errors import LabError
from gradient_lab.app.family import get_family
from gradient_lab.explore.landscape import gradient_field, gradients_at, loss_gradient, loss_surface, losses_at, make_plane

COSINE = get_family("cosine")
PARAMS = dict(COSINE.params)


def inputs(shape=(6, 8), seed=0):
    return COSINE.build_inputs(shape, seed=seed)


def true_loss(x1, x2):
    return float((1 - torch.nn.functional.cosine_similarity(x1, x2)).mean())


def test_random_plane_is_filter_normalised_per_row():
    x = inputs()
    plane = make_plane(COSINE, x, PARAMS, "random", seed=3)
    torch.testing.assert_close(plane.u.norm(dim=1), x[0].norm(dim=1))
    torch.testing.assert_close(plane.v.norm(dim=1), x[0].norm(dim=1))
    assert not torch.allclose(plane.u, plane.v)
    assert plane.center == (0.0, 0.0)


def test_gradient_plane_descends_and_is_orthogonal():
    x = inputs()
    plane = make_plane(COSINE, x, PARAMS, "gradient")
    assert abs(float((plane.u * plane.v).sum())) < 1e-9 * float(plane.u.norm() * plane.v.norm())
    g = loss_gradient(COSINE, x, PARAMS, 0)
    assert float((g * plane.u).sum()) < 0  # u points downhill
    losses = losses_at(COSINE, x, PARAMS, plane, torch.tensor([[0.0, 0.0], [0.01, 0.0]], dtype=torch.float64))
    assert losses[1] < losses[0]


def test_surface_values_equal_the_loss_at_the_points():
    x = inputs()
    plane = make_plane(COSINE, x, PARAMS, "random")
    surface = loss_surface(COSINE, x, PARAMS, plane, resolution=7, span=0.5)
    assert surface.loss.shape == (7, 7)
    i, j = 2, 5  # row follows b, column follows a
    point = plane.origin + surface.a[j] * plane.u + surface.b[i] * plane.v
    assert surface.loss[i, j] == pytest.approx(true_loss(point, x[1]), rel=1e-12)
    assert surface.center_loss == pytest.approx(true_loss(*x), rel=1e-12)


def test_chunked_evaluation_equals_one_batch():
    x = inputs()
    plane = make_plane(COSINE, x, PARAMS, "random")
    whole = loss_surface(COSINE, x, PARAMS, plane, resolution=9)
    chunked = loss_surface(COSINE, x, PARAMS, plane, resolution=9, budget_bytes=1)  # one point at a time
    np.testing.assert_allclose(chunked.loss, whole.loss, rtol=1e-14)


def test_one_dimensional_slice_passes_through_the_current_point():
    x = inputs()
    plane = make_plane(COSINE, x, PARAMS, "gradient")
    slice_ = loss_surface(COSINE, x, PARAMS, plane, resolution=11, one_dimensional=True)
    assert slice_.b is None and slice_.loss.shape == (11,)
    assert slice_.loss[5] == pytest.approx(slice_.center_loss, rel=1e-12)  # a = 0 is the middle


def test_input_plane_for_feature_size_two_uses_absolute_coordinates():
    x = inputs((3, 2))
    plane = make_plane(COSINE, x, PARAMS, "input plane", row=1)
    assert plane.center == (float(x[0][1, 0]), float(x[0][1, 1]))
    assert plane.labels == ("x1[1, 0]", "x1[1, 1]")
    surface = loss_surface(COSINE, x, PARAMS, plane, resolution=41)
    # the target (x2's row direction at x1's norm) is where the loss is lowest along that circle
    ta, tb = surface.target
    assert np.hypot(ta, tb) == pytest.approx(np.hypot(*plane.center), rel=1e-9)
    with pytest.raises(LabError, match="feature size 2"):
        make_plane(COSINE, inputs((3, 4)), PARAMS, "input plane")


@pytest.mark.parametrize(
    "kwargs, words",
    [({"mode": "nope"}, "Unknown plane"), ({"mode": "coordinates", "coordinates": (3, 3)}, "two different"), ({"index": 5}, "no input 5")],
)
def test_bad_plane_settings_say_what_is_wrong(kwargs, words):
    mode = kwargs.pop("mode", "random")
    with pytest.raises(LabError, match=words):
        make_plane(COSINE, inputs(), PARAMS, mode, **kwargs)


def test_resolution_limits():
    x = inputs()
    plane = make_plane(COSINE, x, PARAMS)
    with pytest.raises(LabError, match="outside"):
        loss_surface(COSINE, x, PARAMS, plane, resolution=202)
    with pytest.raises(LabError, match="outside"):
        gradient_field(COSINE, x, PARAMS, plane, ["corrected"], resolution=100)


def test_tutorial_field_points_the_other_way_on_unit_norm_inputs():
    x1, x2 = inputs((1, 2))
    x1, x2 = x1 / x1.norm(), x2 / x2.norm()
    plane = make_plane(COSINE, (x1, x2), PARAMS, "input plane")
    at_input = torch.tensor([plane.center], dtype=torch.float64)
    g_tutorial = gradients_at(COSINE, (x1, x2), PARAMS, plane, at_input, "tutorial")
    g_corrected = gradients_at(COSINE, (x1, x2), PARAMS, plane, at_input, "corrected")
    torch.testing.assert_close(g_tutorial, -g_corrected)
    field = gradient_field(COSINE, (x1, x2), PARAMS, plane, ["tutorial", "corrected"], resolution=5, span=0.2)
    for formula in ("tutorial", "corrected"):
        assert all(d.shape == (5, 5) for d in field.directions[formula])
    assert field.errors["corrected"].max() < 1e-6 * np.abs(field.directions["corrected"][0]).max()
    assert field.errors["tutorial"].max() > 0.1
    # away from the unit circle the flipped field differs from the corrected one in direction
    da_t, db_t = field.directions["tutorial"]
    da_c, db_c = field.directions["corrected"]
    agreement = (da_t * da_c + db_t * db_c) / (np.hypot(da_t, db_t) * np.hypot(da_c, db_c))
    assert np.nanmedian(agreement) < 0


def test_field_keeps_working_when_a_formula_raises():
    x = inputs((2, 3, 4))  # the tutorial's backward cannot broadcast (B, L, 1) against (B, C, L)
    plane = make_plane(COSINE, x, PARAMS, "random")
    field = gradient_field(COSINE, x, PARAMS, plane, ["tutorial", "corrected"], resolution=3)
    assert "corrected" in field.directions and "tutorial" not in field.directions
    assert field.problems["tutorial"].startswith("RuntimeError")


def test_random_plane_does_not_repeat_the_inputs_when_seeds_coincide():
    x = inputs(seed=0)
    plane = make_plane(COSINE, x, PARAMS, "random", seed=0)
    for direction in (plane.u, plane.v):
        for xi in x:
            cos = torch.nn.functional.cosine_similarity(direction.reshape(-1), xi.reshape(-1), dim=0)
            assert abs(float(cos)) < 0.5


def test_a_degenerate_plane_still_projects():
    # one element per row: the random plane's two directions are parallel (found by fuzzing)
    x = inputs((1, 1))
    plane = make_plane(COSINE, x, PARAMS, "random")
    surface = loss_surface(COSINE, x, PARAMS, plane, resolution=5)
    assert surface.loss.shape == (5, 5) and surface.target is not None
    assert np.isfinite(plane.coordinates(x[0][None])).all()
