"""Every page in a real browser: opened by a deep link on a fresh session, drawn without an error,
one slider and one select changed (each reruns, changes what is drawn and the URL), and the
changed URL reloaded into the same view."""

import time
from dataclasses import dataclass

import pytest

from tests.e2e import harness

pytestmark = pytest.mark.e2e

SHAPE = {"rows": "4", "features": "6"}


@dataclass(frozen=True)
class PageCheck:
    page: str
    own: tuple[str, str, str]  # (query param, widget kind, value the widget shows) of the deep link
    slider: str  # moved one step right with the keyboard
    select: tuple[str, str]  # (key, option to pick)


CHECKS = [
    PageCheck("home", ("seed", "number", "3"), slider="step", select=("dtype", "float32")),
    PageCheck("gradient_check", ("check_formula", "select", "corrected"), slider="step", select=("check_input", "x2")),
    PageCheck("gradient_field", ("field_resolution", "slider", "9"), slider="field_resolution", select=("field_plane", "gradient")),
    PageCheck("loss_surface", ("surface_resolution", "slider", "21"), slider="surface_resolution", select=("surface_plane", "gradient")),
    PageCheck("perturbation_lab", ("lab_kind", "select", "eps"), slider="noise1", select=("lab_metric", "cosine to reference")),
    PageCheck("training", ("train_steps", "slider", "50"), slider="train_steps", select=("train_optimizer", "Adam")),
]


def shown(page, key: str, kind: str) -> str:
    return {"number": harness.number_value, "select": harness.select_value, "slider": harness.slider_value}[kind](page, key)


def content(page, check: PageCheck) -> str:
    """What the page draws, as one text to compare: the verdict cards on Home, the charts elsewhere."""
    if check.page == "home":
        return harness.cards_text(page)
    return harness.signature(harness.charts(page))


POLL = 0.25  # seconds between looks at what the page draws


def changed_content(page, check: PageCheck, previous: str, timeout: float = 15.0) -> str:
    """What the page draws once it differs from ``previous`` (the grid and plotly redraw after the
    run has finished), or what it still draws after ``timeout`` seconds."""
    last = None
    for _ in range(int(timeout / POLL)):  # a bounded number of looks, no clock
        now = content(page, check)
        if now != previous and now == last:  # changed, and settled: the same twice
            return now
        last = now
        time.sleep(POLL)
    return content(page, check)


def assert_drawn(page, check: PageCheck) -> None:
    assert harness.errors(page) == []
    if check.page == "home":
        text = harness.cards_text(page)
        assert "corrected" in text and "tutorial" in text  # a card per formula
        assert "fail" in text  # the tutorial's verdict, at any setting
        assert page.locator(f"{harness.CARDS} img[src^='data:image/svg']").count() == page.locator(harness.CARDS).count()  # each its picture
        return
    charts = harness.charts(page)
    assert charts, "no plotly chart on the page"
    for chart in charts:
        assert chart["svg"] and chart["traces"], f"chart {chart['key']} is not drawn"
        assert chart["marks"] > 0, f"chart {chart['key']} draws nothing"
    assert page.locator("[data-testid='stPlotlyChart'] .main-svg").first.is_visible()


@pytest.mark.parametrize("check", CHECKS, ids=[c.page for c in CHECKS])
def test_deep_link_controls_and_reload(page, app_url, check):
    key, kind, value = check.own
    page.goto(harness.deep_link(app_url, check.page, **SHAPE, **{key: value}))
    harness.wait_idle(page)

    # the deep link is honoured and the page is drawn
    assert harness.number_value(page, "rows") == "4" and harness.number_value(page, "features") == "6"
    assert shown(page, key, kind) == value
    assert harness.query_of(page.url) == {**SHAPE, key: value}
    assert_drawn(page, check)
    drawn = content(page, check)

    # one slider, one step right: a rerun, a new value, a new URL, a new drawing
    before_value = harness.slider_value(page, check.slider)
    runs = harness.finished_runs(page)
    harness.press_slider(page, check.slider, "ArrowRight")
    harness.wait_rerun(page, runs)
    moved = harness.slider_value(page, check.slider)
    assert moved != before_value
    assert check.slider in harness.query_of(page.url)
    assert_drawn(page, check)
    after_slider = changed_content(page, check, drawn)
    assert after_slider != drawn, f"moving {check.slider} did not change what is drawn"

    # one select, another option
    select, option = check.select
    assert harness.select_value(page, select) != option
    runs = harness.finished_runs(page)
    harness.pick_option(page, select, option)
    harness.wait_rerun(page, runs)
    assert harness.select_value(page, select) == option
    assert harness.query_of(page.url).get(select) == option
    assert_drawn(page, check)
    after_select = changed_content(page, check, after_slider)
    assert after_select != after_slider, f"picking {option} in {select} did not change what is drawn"

    # the URL now holds the whole view: reloaded, a new session shows the same
    query = harness.query_of(page.url)
    own = moved if key == check.slider else value
    assert query == {**SHAPE, key: own, check.slider: query[check.slider], select: option}
    page.reload()
    harness.wait_idle(page)
    assert harness.query_of(page.url) == query
    assert harness.slider_value(page, check.slider) == moved
    assert harness.select_value(page, select) == option
    assert shown(page, key, kind) == own
    assert_drawn(page, check)
    assert content(page, check) == after_select
