"""Landscape figures: traces, shapes and axis titles."""

import numpy as np
import plotly.graph_objects as go

from gradient_lab.app.family import get_family
from gradient_lab.present.figures.landscape import (
    error_field_figure,
    gradient_field_figure,
    loss_contour_figure,
    loss_slice_figure,
    loss_surface_3d_figure,
    trajectory_curves_figure,
    trajectory_pca_figure,
)
from gradient_lab.explore.landscape import gradient_field, loss_surface, make_plane
from gradient_lab.explore.trajectory import trajectories

COSINE = get_family("cosine")
PARAMS = dict(COSINE.params)
X = COSINE.build_inputs((1, 2), seed=0)
PLANE = make_plane(COSINE, X, PARAMS, "input plane")
SURFACE = loss_surface(COSINE, X, PARAMS, PLANE, resolution=11)
FIELD = gradient_field(COSINE, X, PARAMS, PLANE, ["tutorial", "corrected"], resolution=5)
RUNS = trajectories(COSINE, X, PARAMS, ["tutorial", "corrected"], PLANE, optimizer="Adam", learning_rate=0.05, steps=10)


def titles(fig: go.Figure) -> tuple[str, str, str]:
    return fig.layout.title.text, fig.layout.xaxis.title.text, fig.layout.yaxis.title.text


def test_contour_has_the_surface_markers_and_paths():
    fig = loss_contour_figure(SURFACE, trajectories=RUNS)
    contour = fig.data[0]
    assert isinstance(contour, go.Contour) and np.asarray(contour.z).shape == (11, 11)
    names = [t.name for t in fig.data]
    assert any(n.startswith("current point") for n in names) and "target (projected)" in names
    assert "path: tutorial" in names and "path: corrected" in names
    assert titles(fig) == ("Loss surface with optimizer paths", "x1[0, 0]", "x1[0, 1]")
    assert fig.layout.yaxis.scaleanchor == "x"  # the input plane keeps its true aspect


def test_log_scale_shows_log10_and_keeps_the_loss_in_hover():
    fig = loss_contour_figure(SURFACE, log=True)
    np.testing.assert_allclose(np.asarray(fig.data[0].z), np.log10(SURFACE.loss))
    np.testing.assert_allclose(np.asarray(fig.data[0].customdata), SURFACE.loss)
    assert fig.data[0].colorbar.title.text == "log10 loss"


def test_slice_and_3d():
    one_d = loss_surface(COSINE, X, PARAMS, PLANE, resolution=9, one_dimensional=True)
    fig = loss_slice_figure(one_d)
    assert len(fig.data) == 2 and titles(fig)[1:] == ("x1[0, 0]", "loss")
    fig3 = loss_surface_3d_figure(SURFACE)
    assert isinstance(fig3.data[0], go.Surface) and fig3.layout.scene.zaxis.title.text == "loss"


def test_field_draws_arrows_per_formula_in_different_colours_with_equal_aspect():
    fig = gradient_field_figure(FIELD, SURFACE)
    arrows = [t for t in fig.data if t.name and t.name.startswith("−∇")]
    assert [t.name for t in arrows] == ["−∇ tutorial", "−∇ corrected"]
    assert arrows[0].line.color != arrows[1].line.color
    assert int(np.isnan(arrows[0].x).sum()) == 2 * 25  # a shaft and a head per grid point, each ended by a break
    assert fig.layout.yaxis.scaleanchor == "x" and fig.layout.yaxis.scaleratio == 1
    assert "target (projected)" in [t.name for t in fig.data]
    assert all(titles(fig))


def test_error_field_is_log_scaled_with_raw_values_in_hover():
    fig = error_field_figure(FIELD, "tutorial")
    heat = fig.data[0]
    np.testing.assert_allclose(np.asarray(heat.customdata), FIELD.errors["tutorial"])
    assert heat.colorbar.title.text == "log10 ‖error‖" and "tutorial" in fig.layout.title.text


def test_trajectory_curves_and_pca():
    fig = trajectory_curves_figure(RUNS)
    assert len(fig.data) == 3 * 2 and sum(t.showlegend for t in fig.data) == 2
    assert fig.layout.yaxis3.type == "log" and fig.layout.xaxis.title.text == "step"
    assert "Adam" in fig.layout.title.text
    pca = trajectory_pca_figure(RUNS)
    assert len(pca.data) == 2 and "% of variance" in pca.layout.xaxis.title.text
