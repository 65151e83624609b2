"""Optimizer trajectories: the corrected formula descends, the tutorial's climbs or diverges."""

import numpy as np
import pytest

from gradient_lab.errors import LabError
from gradient_lab.app.family import get_family
from gradient_lab.explore.landscape import make_plane
from gradient_lab.explore.trajectory import OPTIMIZERS, trajectories

COSINE = get_family("cosine")
PARAMS = dict(COSINE.params)


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_corrected_descends_and_tutorial_climbs(optimizer):
    x = COSINE.build_inputs((8, 16), seed=0)
    plane = make_plane(COSINE, x, PARAMS, "random")
    runs = trajectories(COSINE, x, PARAMS, ["tutorial", "corrected"], plane, optimizer=optimizer, learning_rate=0.1, steps=60).runs
    corrected, tutorial = runs["corrected"], runs["tutorial"]
    assert corrected.diverged_at is None and corrected.loss[-1] < corrected.loss[0]
    assert np.nanmax(tutorial.loss) > tutorial.loss[0]  # its loss goes up
    assert np.nanmax(np.abs(corrected.gradient_cosine[: 10] - 1)) < 1e-9
    assert np.nanmean(tutorial.gradient_cosine[:10]) < 0


def test_run_shapes_projection_and_pca():
    x = COSINE.build_inputs((1, 2), seed=0)
    plane = make_plane(COSINE, x, PARAMS, "input plane")
    result = trajectories(COSINE, x, PARAMS, ["tutorial", "corrected"], plane, optimizer="Adam", learning_rate=0.05, steps=20)
    run = result.runs["corrected"]
    assert run.loss.shape == (21,) and run.gradient_cosine.shape == (20,) and run.plane_path.shape == (21, 2)
    np.testing.assert_allclose(run.plane_path[0], plane.center, atol=1e-12)  # starts at the input
    assert result.pca_paths["corrected"].shape == (21, 2)
    assert sum(result.explained_variance) == pytest.approx(1.0)  # two dimensions: all of it


def test_sgd_on_the_tutorial_diverges_and_is_stopped():
    x = COSINE.build_inputs((8, 16), seed=0)
    plane = make_plane(COSINE, x, PARAMS, "random")
    result = trajectories(COSINE, x, PARAMS, ["tutorial", "corrected"], plane, optimizer="SGD", learning_rate=0.1, steps=300)
    run = result.runs["tutorial"]
    assert run.diverged_at is not None
    assert np.isnan(run.loss[-1]) and np.isfinite(run.loss[0])
    assert all(np.isfinite(result.explained_variance))  # the huge positions do not overflow the PCA


def test_bad_settings_and_a_raising_formula():
    x = COSINE.build_inputs((4, 5))
    plane = make_plane(COSINE, x, PARAMS)
    for kwargs, words in (({"optimizer": "LBFGS"}, "Unknown optimizer"), ({"steps": 0}, "Steps"), ({"learning_rate": -1.0}, "learning rate")):
        with pytest.raises(LabError, match=words):
            trajectories(COSINE, x, PARAMS, ["corrected"], plane, **kwargs)
    x3 = COSINE.build_inputs((2, 3, 4))
    plane3 = make_plane(COSINE, x3, PARAMS)
    runs = trajectories(COSINE, x3, PARAMS, ["tutorial", "corrected"], plane3, steps=5).runs
    assert runs["tutorial"].problem.startswith("RuntimeError") and runs["corrected"].problem is None


def test_principal_components_are_fitted_on_the_runs_that_did_not_diverge():
    x = COSINE.build_inputs((8, 16), seed=0)
    plane = make_plane(COSINE, x, PARAMS, "random")
    result = trajectories(COSINE, x, PARAMS, ["tutorial", "corrected"], plane, optimizer="SGD", learning_rate=0.1, steps=200)
    assert result.runs["tutorial"].diverged_at is not None
    assert result.pca_fitted_on == ("corrected",)
    corrected = result.pca_paths["corrected"]
    assert np.abs(corrected).max() < 100  # on the scale of the corrected run, not of the blow-up


@pytest.mark.parametrize("shape", [(40, 300), (300, 40)], ids=["few long paths", "many short rows"])
def test_top_components_are_the_svds_from_the_smaller_eigenproblem(shape):
    from gradient_lab.explore.trajectory import _top_components

    a = np.random.default_rng(0).normal(size=shape) * np.linspace(3, 1, shape[1])
    components, shares = _top_components(a, 2)
    _, singular, expected = np.linalg.svd(a, full_matrices=False)
    assert np.allclose(np.abs(np.sum(components * expected[:2], axis=1)), 1.0, atol=1e-8)  # the same directions, up to sign
    assert np.allclose(shares, singular[:2] ** 2 / (singular**2).sum())


def test_top_components_of_a_rank_one_cloud_leave_the_second_empty():
    from gradient_lab.explore.trajectory import _top_components

    a = np.outer(np.arange(5.0) - 2, np.ones(7))
    components, shares = _top_components(a, 2)
    assert shares[0] == pytest.approx(1.0) and shares[1] == pytest.approx(0.0, abs=1e-12)
