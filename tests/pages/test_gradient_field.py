"""The gradient field page: fresh start, deep links, every control, impossible settings in words."""

import pytest

from tests.pages.conftest import app, messages

PAGE = "pages/2_Gradient_field.py"


def charts(at) -> int:
    return len(at.get("plotly_chart"))


def shown(at, key: str) -> bool:
    try:
        at.get_by_key(key)
    except KeyError:
        return False
    return True


def test_fresh_start_draws_the_field_and_an_error_map_per_formula():
    at = app(PAGE)
    assert not at.exception
    assert not messages(at)
    assert at.selectbox(key="field_plane").value == "random"  # features 16: no input plane
    assert at.slider(key="field_resolution").value == 15
    formulas = at.multiselect(key="formulas_cosine").value
    assert charts(at) == 1 + len(formulas)  # the field, and one error map per formula
    assert any("★" in c.value and "point away" in c.value for c in at.caption)  # the arrows explained
    assert len(at.get("download_button")) == 1


def test_deep_link_to_the_input_plane_of_one_row():
    at = app(PAGE, features="2", rows="1", field_resolution="9", field_span="2", field_input="x2")
    assert not at.exception
    assert not messages(at)
    assert at.selectbox(key="field_plane").value == "input plane"  # the default for feature size 2
    assert at.slider(key="field_resolution").value == 9
    assert at.select_slider(key="field_span").value == 2.0
    assert at.selectbox(key="field_input").value == "x2"
    assert at.number_input(key="field_row").value == 0
    assert charts(at) >= 2


def test_deep_link_to_chosen_coordinates():
    at = app(PAGE, field_plane="coordinates", field_coord_a="3", field_coord_b="17")
    assert not at.exception and not messages(at)
    assert (at.number_input(key="field_coord_a").value, at.number_input(key="field_coord_b").value) == (3, 17)
    assert charts(at) >= 2


CHANGES = [
    ("field_plane", "gradient"),
    ("field_plane", "coordinates"),
    ("field_input", "x2"),
    ("field_plane_seed", 5),
    ("field_span", 0.25),
    ("field_span", 4.0),
    ("field_resolution", 5),
    ("field_resolution", 41),
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
    assert charts(at) >= 2


def test_the_controls_that_only_some_planes_show():
    at = app(PAGE, features="2", rows="3")
    at.number_input(key="field_row").set_value(2).run()
    assert not at.exception and not messages(at) and charts(at) >= 2
    at.selectbox(key="field_plane").set_value("coordinates").run()
    assert not shown(at, "field_row") and not shown(at, "field_plane_seed")
    at.number_input(key="field_coord_a").set_value(4).run()
    at.number_input(key="field_coord_b").set_value(0).run()
    assert not at.exception and not messages(at) and charts(at) >= 2


@pytest.mark.parametrize("query, words", [
    ({"field_plane": "input plane"}, "needs feature size 2"),  # features 16
    ({"features": "2", "rows": "2", "field_row": "5"}, "There is no row 5"),
    ({"field_plane": "coordinates", "field_coord_a": "2", "field_coord_b": "2"}, "must be two different elements"),
    ({"field_plane": "coordinates", "field_coord_b": "500"}, "must be two different elements"),
])
def test_impossible_settings_are_said_in_words(query, words):
    at = app(PAGE, **query)
    assert not at.exception
    assert any(words in m for m in messages(at)), messages(at)
    assert charts(at) == 0


def test_memory_guard_refuses_a_field_too_large(monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "8")
    at = app(PAGE, rows="64", features="128", field_resolution="41")
    assert not at.exception
    assert any("gradient field of 41×41 points" in m and "budget" in m for m in messages(at))


def test_a_formula_that_raises_is_a_warning_and_the_others_still_draw():
    at = app(PAGE, depth="4")  # the tutorial's backward reduces the wrong dim of a 3-D input
    assert not at.exception
    assert any("tutorial" in w.value and "raised" in w.value for w in at.warning)
    assert charts(at) >= 2  # the field of the other formulas, and their error maps
