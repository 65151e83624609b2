"""The loss surface page: fresh start, deep links, every control, optimizer paths, impossible and
heavy settings."""

import pytest

from gradient_lab.app import views

from tests.pages.conftest import app, messages

PAGE = "pages/3_Loss_surface.py"


def charts(at) -> int:
    return len(at.get("plotly_chart"))


def test_fresh_start_draws_the_contours_and_reruns_from_the_cache(monkeypatch):
    at = app(PAGE)
    assert not at.exception
    assert not messages(at)
    assert at.selectbox(key="surface_plane").value == "random"
    assert at.radio(key="surface_kind").value == "2-D surface"
    assert at.slider(key="surface_resolution").value == 51
    assert charts(at) == 1
    assert len(at.get("download_button")) == 1  # the surface; no paths yet
    computed = []
    monkeypatch.setattr(views, "loss_surface", lambda *a, **k: computed.append(1))
    at.run()  # a rerun at the defaults answers from the cache: the surface is not computed again
    assert not at.exception and charts(at) == 1
    assert computed == []


def test_deep_link_to_the_input_plane_with_paths():
    at = app(PAGE, features="2", rows="1", surface_resolution="21", surface_paths="true", surface_optimizer="Adam",
             surface_lr="0.3", surface_steps="40", surface_span="2", surface_log="true")
    assert not at.exception
    assert not messages(at)
    assert at.selectbox(key="surface_plane").value == "input plane"  # the default for feature size 2
    assert at.slider(key="surface_resolution").value == 21
    assert at.toggle(key="surface_paths").value and at.toggle(key="surface_log").value
    assert at.selectbox(key="surface_optimizer").value == "Adam"
    assert at.select_slider(key="surface_lr").value == 0.3 and at.select_slider(key="surface_span").value == 2.0
    assert at.slider(key="surface_steps").value == 40
    assert charts(at) == 2  # contours with paths, and the curves; no PCA for a 2-element input
    assert len(at.get("download_button")) == 2


def test_deep_link_to_a_fine_slice():
    at = app(PAGE, surface_kind="1-D slice", surface_slice_resolution="401", surface_plane="gradient")
    assert not at.exception and not messages(at)
    assert at.slider(key="surface_slice_resolution").value == 401
    assert charts(at) == 1


CHANGES = [
    ("surface_plane", "gradient"),
    ("surface_plane", "coordinates"),
    ("surface_input", "x2"),
    ("surface_plane_seed", 3),
    ("surface_span", 0.25),
    ("surface_kind", "1-D slice"),
    ("surface_resolution", 11),
    ("surface_log", True),
    ("surface_view", "3-D"),
]


@pytest.mark.parametrize("key, value", CHANGES)
def test_each_control_reruns_cleanly(key, value):
    at = app(PAGE)
    widget = at.get_by_key(key)
    assert widget is not None and widget.value != value  # a real change
    widget.set_value(value).run()
    assert not at.exception
    assert not messages(at)
    assert at.get_by_key(key).value == value
    assert charts(at) == 1


def test_the_slice_has_its_own_resolution_and_no_view_choice():
    at = app(PAGE, surface_kind="1-D slice")
    assert at.slider(key="surface_slice_resolution").value == 101
    at.slider(key="surface_slice_resolution").set_value(21).run()
    assert not at.exception and not messages(at) and charts(at) == 1
    with pytest.raises(KeyError):
        at.get_by_key("surface_view")


@pytest.mark.parametrize("key, value", [("surface_optimizer", "Adam"), ("surface_lr", 0.01), ("surface_steps", 7)])
def test_each_path_control_reruns_cleanly(key, value):
    at = app(PAGE, surface_paths="true", surface_steps="20")
    assert charts(at) == 3  # contours with paths, curves, and the paths' principal components
    at.get_by_key(key).set_value(value).run()
    assert not at.exception
    assert not messages(at)
    assert at.get_by_key(key).value == value
    assert charts(at) == 3


def test_paths_with_a_slice_or_3d_still_show_their_curves():
    at = app(PAGE, surface_paths="true", surface_steps="10", surface_view="3-D")
    assert not at.exception and not messages(at) and charts(at) == 3
    at.radio(key="surface_kind").set_value("1-D slice").run()
    assert not at.exception and not messages(at) and charts(at) == 3
    assert any("contour view" in c.value for c in at.caption)


def test_a_diverging_run_is_a_warning_and_the_rest_still_draws():
    at = app(PAGE, surface_paths="true", surface_optimizer="SGD + momentum")  # sign-fixed climbs the loss and blows up
    assert not at.exception and not at.error
    assert any("sign-fixed" in w.value and "diverged" in w.value for w in at.warning)
    assert charts(at) == 3


@pytest.mark.parametrize("query, words", [
    ({"surface_plane": "input plane"}, "needs feature size 2"),  # features 16
    ({"surface_plane": "input plane", "surface_paths": "true"}, "needs feature size 2"),
    ({"surface_plane": "coordinates", "surface_coord_a": "200"}, "must be two different elements"),
])
def test_impossible_settings_are_said_in_words(query, words):
    at = app(PAGE, **query)
    assert not at.exception
    found = messages(at)
    assert any(words in m for m in found), found
    assert len(found) == 1  # said once, not once per computation
    assert charts(at) == 0


def test_memory_guard_refuses_paths_too_long(monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "100")  # the surface needs about 48 MiB, the paths about 190
    at = app(PAGE, rows="64", features="128", surface_resolution="11", surface_paths="true", surface_steps="500")
    assert not at.exception
    assert any("500 optimizer steps" in m and "budget" in m for m in messages(at))
    assert charts(at) == 1  # the surface itself still draws


@pytest.mark.slow
def test_the_heaviest_surface_runs():
    at = app(PAGE, rows="64", features="128", surface_resolution="201")
    assert not at.exception
    assert not messages(at)
    assert charts(at) == 1
