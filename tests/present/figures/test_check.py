"""The comparison figures draw the engine's numbers: real cosine reports in, traces, shapes and titles checked."""

import math

import numpy as np
import plotly.graph_objects as go
import pytest

from gradient_lab.engine.report import SOURCES
from gradient_lab.engine.pipeline import compare_gradients
from gradient_lab.explore.step_sweep import step_sweep
from gradient_lab.contract.conformance import Check
from gradient_lab.app.family import get_family
from gradient_lab.present.figures.check import (
    allowed_error,
    STATUS_FILL,
    conformance_table,
    error_heatmap,
    error_histogram,
    gradient_heatmaps,
    jacobian_heatmaps,
    step_sweep_figure,
    verdict_rows,
    worst_elements,
)

COSINE = get_family("cosine")
AR = ("analytic", "reference")


@pytest.fixture(scope="module")
def tutorial():
    return compare_gradients(COSINE, "tutorial", COSINE.build_inputs((4, 6)))


@pytest.fixture(scope="module")
def corrected():
    return compare_gradients(COSINE, "corrected", COSINE.build_inputs((4, 6)))


@pytest.fixture(scope="module")
def cube():
    # the tutorial's backward raises on 3-D inputs; the corrected formula runs (and has exact zeros)
    return compare_gradients(COSINE, "corrected", COSINE.build_inputs((2, 3, 4)), params={"dim": 1})


@pytest.fixture(scope="module")
def sweep():
    return step_sweep(COSINE, "corrected", COSINE.build_inputs((4, 6)), steps=(1e-2, 1e-10, 1e-6, 1e-4, 1e-8))


def heatmaps(fig):
    return [t for t in fig.data if isinstance(t, go.Heatmap)]


def title(fig):
    return fig.layout.title.text


def test_gradient_heatmaps_share_one_symmetric_scale(tutorial):
    c = tutorial.input("x1")
    fig = gradient_heatmaps(c)
    maps = heatmaps(fig)
    assert [t.name for t in maps] == list(SOURCES)
    limit = max(np.abs(g).max() for g in c.gradients.values())
    for t, source in zip(maps, SOURCES):
        assert t.zmin == pytest.approx(-limit) and t.zmax == pytest.approx(limit)
        np.testing.assert_array_equal(np.asarray(t.z), c.gradients[source])
        assert "x1[%{y}, %{x}]" in t.hovertemplate and "%{z" in t.hovertemplate  # the cell names its element
    assert sum(bool(t.showscale) for t in maps) == 1
    assert maps[1].text is None and maps[1].hovertemplate.startswith("x1[%{y}, %{x}]")  # row and column are the index: no labels to send
    assert fig.layout.xaxis.title.text == "column (dim 1)" and fig.layout.yaxis.title.text == "row (dim 0)"
    assert "x1" in title(fig)


def test_gradient_heatmaps_say_the_shared_scale_under_the_title(tutorial):
    fig = gradient_heatmaps(tutorial.input("x1"), scale="shared")
    maps = heatmaps(fig)
    assert len({(t.zmin, t.zmax) for t in maps}) == 1 and sum(bool(t.showscale) for t in maps) == 1
    assert fig.layout.title.subtitle.text.startswith(f"Colour scale: shared, d loss / d input ±{maps[0].zmax:.3g}")
    assert [a.text for a in fig.layout.annotations] == list(SOURCES)


def test_gradient_heatmaps_per_panel_give_each_panel_its_own_range_and_colorbar(tutorial):
    c = tutorial.input("x1")
    fig = gradient_heatmaps(c, scale="per panel")
    maps = heatmaps(fig)
    assert [t.name for t in maps] == list(SOURCES)
    for t, source in zip(maps, SOURCES):
        limit = np.abs(c.gradients[source]).max()
        assert t.zmin == pytest.approx(-limit) and t.zmax == pytest.approx(limit)
        np.testing.assert_array_equal(np.asarray(t.z), c.gradients[source])
        assert f"±{limit:.3g}" in t.hovertemplate and "x1[%{y}, %{x}]" in t.hovertemplate
    # the tutorial's analytic gradient is far larger than the true one: the ranges differ
    assert maps[0].zmax > 10 * maps[1].zmax
    assert len({t.zmax for t in maps}) == 3
    # three colorbars, each just right of its own panel and left of the next one: no overlap
    assert all(t.showscale for t in maps)
    domains = [fig.get_subplot(1, col).xaxis.domain for col in (1, 2, 3)]
    bars = [t.colorbar.x for t in maps]
    assert bars == sorted(bars) and len(set(bars)) == 3
    for col, (bar, (_, right)) in enumerate(zip(bars, domains)):
        assert right <= bar < (domains[col + 1][0] if col + 1 < len(domains) else right + 0.05)
        assert maps[col].colorbar.xanchor == "left"
    titles = [a.text for a in fig.layout.annotations]
    assert [t.split(" ")[0] for t in titles] == list(SOURCES) and f"±{maps[0].zmax:.3g}" in titles[0]
    assert "per panel" in fig.layout.title.subtitle.text and "x1" in title(fig)


def test_gradient_heatmaps_per_panel_ignore_non_finite_values():
    x1, x2 = COSINE.build_inputs((4, 5))
    x1[2, 3] = math.nan
    c = compare_gradients(COSINE, "corrected", (x1, x2)).input("x1")
    for t, source in zip(heatmaps(gradient_heatmaps(c, scale="per panel")), SOURCES):
        g = c.gradients[source]
        assert np.isnan(g).any() and t.zmax == pytest.approx(np.abs(g[np.isfinite(g)]).max())


def test_gradient_heatmaps_refuse_an_unknown_scale(tutorial):
    with pytest.raises(ValueError, match=r"Colour scale must be one of 'shared', 'per panel', not 'log'"):
        gradient_heatmaps(tutorial.input("x1"), scale="log")


def test_gradient_heatmaps_flatten_nd_inputs_and_keep_their_indices(cube):
    c = cube.input("x2")
    fig = gradient_heatmaps(c, sources=("analytic", "reference"))
    maps = heatmaps(fig)
    assert len(maps) == 2 and np.asarray(maps[0].z).shape == (2, 12)
    assert maps[0].text[1][2 * 4 + 3] == "x2[1, 2, 3]"
    assert maps[0].z[1][2 * 4 + 3] == c.gradients["analytic"][1, 2, 3]
    assert "flattened dims 1…2" in fig.layout.xaxis.title.text


def test_error_heatmap_draws_the_signed_map_and_marks_the_worst(tutorial):
    c = tutorial.input("x2")
    m = c.errors[AR]
    fig = error_heatmap(c, AR)
    (heat,) = heatmaps(fig)
    np.testing.assert_array_equal(np.asarray(heat.z), m.signed)
    assert heat.zmid == 0 and heat.colorscale[0][1] != heat.colorscale[-1][1]
    (marker,) = [t for t in fig.data if isinstance(t, go.Scatter)]
    assert (marker.x[0], marker.y[0]) == (m.worst[1], m.worst[0])
    assert marker.customdata[0] == pytest.approx(m.signed[m.worst])
    assert f"x2[{m.worst[0]}, {m.worst[1]}]" in marker.name and "NaN" not in title(fig)


def test_relative_error_heatmap_is_log10_with_its_worst_marked(tutorial):
    c = tutorial.input("x1")
    m = c.errors[AR]
    fig = error_heatmap(c, AR, relative=True)
    (heat,) = heatmaps(fig)
    np.testing.assert_allclose(np.asarray(heat.z), np.log10(m.relative))
    assert "log10" in heat.colorbar.title.text
    (marker,) = [t for t in fig.data if isinstance(t, go.Scatter)]
    row, col = np.unravel_index(np.argmax(m.relative), m.relative.shape)
    assert (marker.x[0], marker.y[0]) == (col, row)


def test_beside_a_right_formula_the_error_maps_rounding_noise_is_pale_on_the_tolerances_scale(corrected, tutorial):
    c = corrected.input("x1")
    m, allowed = c.errors[AR], allowed_error(c, "reference", corrected.tolerances)
    (heat,) = heatmaps(error_heatmap(c, AR, tolerances=corrected.tolerances))
    assert m.max_abs < 1e-3 * allowed.max()  # rounding noise, far within the tolerance
    assert heat.zmax == pytest.approx(allowed.max()) and heat.zmin == -heat.zmax  # so it sits in the scale's pale middle
    (relative,) = heatmaps(error_heatmap(c, AR, relative=True, tolerances=corrected.tolerances))
    assert relative.zmax > float(np.nanmax(np.asarray(relative.z, dtype=float))) + 2  # decades below the top colour
    # a wrong formula's error is beyond the tolerance: the scale is its own
    wrong = tutorial.input("x1")
    (heat,) = heatmaps(error_heatmap(wrong, AR, tolerances=tutorial.tolerances))
    assert heat.zmax == pytest.approx(wrong.errors[AR].max_abs)


def test_error_heatmap_leaves_nan_blank_and_counts_it():
    x1, x2 = COSINE.build_inputs((4, 5))
    x1[2, 3] = math.nan  # its whole row of gradients becomes NaN
    c = compare_gradients(COSINE, "corrected", (x1, x2)).input("x1")
    fig = error_heatmap(c, ("analytic", "numerical"))
    z = np.asarray(heatmaps(fig)[0].z, dtype=float)
    blank = int(np.isnan(c.errors[("analytic", "numerical")].signed).sum())
    assert blank > 0 and int(np.isnan(z).sum()) == blank
    assert f"{blank} NaN/Inf cells" in title(fig)


def test_error_histogram_bins_log10_of_nonzero_errors_per_input(cube):
    fig = error_histogram(cube, AR)
    assert [t.name for t in fig.data] == ["x1", "x2"]
    errors = np.concatenate([np.abs(c.errors[AR].signed).ravel() for c in cube.inputs])
    zeros = int((errors == 0).sum())
    assert zeros > 0 and f"{zeros} exact zeros" in title(fig)
    assert sum(sum(t.y) for t in fig.data) == np.count_nonzero(errors)
    for t, c in zip(fig.data, cube.inputs):
        assert sum(t.y) == np.count_nonzero(c.errors[AR].signed)
    # x is log10 |a − b|, labelled as powers of ten
    assert all(t.startswith("10<sup>") for t in fig.layout.xaxis.ticktext)
    assert fig.layout.xaxis.range[0] <= np.log10(errors[errors > 0].min())
    assert fig.layout.xaxis.range[1] >= np.log10(errors.max())
    assert "log scale" in fig.layout.xaxis.title.text and fig.layout.yaxis.title.text == "count of elements"


def test_jacobian_heatmaps_are_outputs_by_inputs_or_none(corrected):
    c = corrected.input("x1")
    fig = jacobian_heatmaps(c)
    maps = heatmaps(fig)
    assert len(maps) == 3 and all(np.asarray(t.z).shape == (4, 24) for t in maps)
    np.testing.assert_array_equal(np.asarray(maps[2].z), c.jacobians["numerical"])
    assert len({(t.zmin, t.zmax) for t in maps}) == 1 and maps[0].zmin == -maps[0].zmax
    assert sum(bool(t.showscale) for t in maps) == 1
    assert maps[0].text[2][7] == "∂y[2] / ∂x1[1, 1]"
    assert "output" in fig.layout.yaxis.title.text and "input" in fig.layout.xaxis.title.text
    small = compare_gradients(COSINE, "corrected", COSINE.build_inputs((4, 6)), jacobian_limit=1)
    assert jacobian_heatmaps(small.input("x1")) is None


def test_step_sweep_figure_is_log_log_with_increasing_h(sweep):
    fig = step_sweep_figure(sweep)
    lines = [t for t in fig.data if t.mode == "lines+markers" and not t.name.startswith("Taylor")]
    assert [t.name for t in lines] == list(sweep.errors)
    taylor = next(t for t in fig.data if t.name.startswith("Taylor test"))
    assert list(taylor.y) == [dict(zip(sweep.steps, sweep.taylor))[h] for h in taylor.x]
    assert any(t.name.startswith("slope 2") for t in fig.data)
    for t in lines:
        assert list(t.x) == sorted(sweep.steps)
        by_step = dict(zip(sweep.steps, sweep.errors[t.name]))
        assert list(t.y) == [by_step[h] for h in t.x]
    best = [t for t in fig.data if t.mode == "markers"]
    assert [t.x[0] for t in best] == [sweep.best_step(d) for d in sweep.errors]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.layout.xaxis.autorange != "reversed"
    assert fig.layout.xaxis.title.text == "finite-difference step h"
    assert "max error" in fig.layout.yaxis.title.text
    notes = [a.text for a in fig.layout.annotations]
    assert any("rounding error" in n for n in notes) and any("truncation error" in n for n in notes)


def test_conformance_table_trims_messages_and_colours_by_status():
    checks = [
        Check("gradcheck (fast)", "pass", "", 0.0123),
        Check("gradgradcheck", "fail", "Jacobian mismatch\n" + "x" * 500, 0.5),
        Check("torch.func.vmap", "not supported", "must override <setup_context>", 0.001),
        Check("gradcheck (slow)", "skipped", "too many elements", 0.0),
    ]
    fig = conformance_table(checks)
    (table,) = fig.data
    names, statuses, times, messages = table.cells.values
    assert list(names) == [c.name for c in checks] and list(statuses) == [c.status for c in checks]
    assert list(times) == ["12.3", "500.0", "1.0", "0.0"]
    assert messages[0] == "" and len(messages[1]) == 200 and messages[1].startswith("Jacobian mismatch x")
    assert messages[2] == "must override &lt;setup_context&gt;"
    assert list(table.cells.fill.color[1]) == [STATUS_FILL[c.status] for c in checks]
    assert len(set(STATUS_FILL.values())) == len(STATUS_FILL)  # every status its own colour
    assert [h.replace("<b>", "").replace("</b>", "") for h in table.header.values] == ["check", "status", "time (ms)", "message"]
    assert title(fig) == "Conformance: 1 pass, 1 fail, 1 not supported, 1 skipped"


def test_verdict_rows_carry_the_report_numbers(tutorial, corrected):
    reports = [tutorial, corrected]
    rows = verdict_rows(reports)
    assert [(r["formula"], r["verdict"]) for r in rows] == [("tutorial", "fail"), ("corrected", "pass")]
    for row, report in zip(rows, reports):
        for pair in (AR, ("analytic", "numerical")):
            assert row[f"max |{pair[0]} − {pair[1]}|"] == max(c.errors[pair].max_abs for c in report.inputs)
        assert row["cosine to reference"] == report.cosine and row["evaluations"] == report.evaluations
    assert [r["second order"] for r in rows] == ["fail", "pass"]  # the tutorial's double backward is wrong too
    assert row["entries checked one by one"] == report.jacobian.coverage.compared > 0


def test_verdict_rows_of_a_formula_that_raised():
    raised = compare_gradients(COSINE, "tutorial", COSINE.build_inputs((2, 3, 4)))
    (row,) = verdict_rows([raised])
    assert row["verdict"] == "fail" and math.isnan(row["max |analytic − reference|"])
    assert row["second order"] == "not checked"


def test_worst_elements_are_sorted_with_the_worst_first(tutorial):
    c = tutorial.input("x1")
    m = c.errors[AR]
    rows = worst_elements(c, AR, k=5)
    assert len(rows) == 5
    errors = [r["abs error"] for r in rows]
    assert errors == sorted(errors, reverse=True)
    assert rows[0]["index"] == f"x1[{m.worst[0]}, {m.worst[1]}]" and errors[0] == m.max_abs
    top = rows[0]
    assert top["analytic"] == c.gradients["analytic"][m.worst] and top["numerical"] == c.gradients["numerical"][m.worst]
    assert top["rel error"] == m.relative[m.worst]
    assert len(worst_elements(c, AR, k=1000)) == m.signed.size


def test_every_figure_has_a_title_and_axis_titles(tutorial, corrected, cube, sweep):
    c = tutorial.input("x1")
    with_axes = [
        gradient_heatmaps(c),
        gradient_heatmaps(cube.input("x1")),
        error_heatmap(c),
        error_heatmap(c, relative=True),
        error_histogram(tutorial),
        jacobian_heatmaps(corrected.input("x2")),
        step_sweep_figure(sweep),
    ]
    for fig in with_axes:
        assert title(fig)
        assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
        if len([t for t in fig.data if t.showlegend is not False and not isinstance(t, go.Heatmap)]) > 1:
            assert fig.layout.showlegend is not False
    assert title(conformance_table([]))
