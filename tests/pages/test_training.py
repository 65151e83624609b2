"""The training page: fresh start, deep links, every control, bad settings in words."""

import pytest

from gradient_lab.explore.trajectory import OPTIMIZERS
from tests.pages.conftest import app, messages

PAGE = "pages/5_Training.py"


def charts(at):
    return at.get("plotly_chart")


def summary(at) -> dict[str, str]:
    table = at.dataframe[0].value
    return dict(zip(table["formula"], table["status"]))


def test_fresh_start_trains_each_formula_and_says_what_happened():
    at = app(PAGE)
    assert not at.exception and not messages(at)
    assert at.selectbox(key="train_optimizer").value == "SGD"
    assert at.select_slider(key="train_lr").value == 0.1 and at.slider(key="train_steps").value == 200
    statuses = summary(at)
    assert statuses["corrected"] == "descends" and statuses["tutorial"] in ("climbs", "diverged")
    assert any("tutorial" in m.value and "up by" in m.value for m in at.markdown)  # its loss goes up
    assert len(charts(at)) == 1
    assert any("upside down" in c.value for c in at.caption)
    assert at.get("download_button")


def test_deep_link_sets_optimizer_rate_and_steps():
    at = app(PAGE, train_optimizer="Adam", train_steps="50", train_lr="0.01")
    assert not at.exception and not messages(at)
    assert at.selectbox(key="train_optimizer").value == "Adam"
    assert at.slider(key="train_steps").value == 50 and at.select_slider(key="train_lr").value == 0.01
    assert summary(at)["corrected"] == "descends" and len(charts(at)) == 1


@pytest.mark.parametrize("optimizer", [o for o in OPTIMIZERS if o != "SGD"])
def test_each_optimizer_reruns_cleanly(optimizer):
    at = app(PAGE)
    at.selectbox(key="train_optimizer").set_value(optimizer).run()
    assert not at.exception and not messages(at) and summary(at)["corrected"] == "descends"


@pytest.mark.parametrize("key, value", [("train_lr", 10.0), ("train_lr", 1e-4), ("train_steps", 7)])
def test_rate_and_steps_rerun_cleanly(key, value):
    at = app(PAGE)
    at.get_by_key(key).set_value(value).run()
    assert not at.exception and at.get_by_key(key).value == value
    assert set(summary(at)) == {"tutorial", "sign-fixed", "corrected"} and charts(at)


def test_an_unavailable_device_is_said_in_words():
    at = app(PAGE, device="cuda")
    assert not at.exception and charts(at)  # on the CPU
    assert any("CUDA is not available" in i.value and "runs on the CPU" in i.value for i in at.info)


def test_a_formula_that_raises_stops_and_says_so():
    at = app(PAGE, depth="3", train_steps="20")
    assert not at.exception
    statuses = summary(at)
    assert statuses["tutorial"] == "raised" and statuses["corrected"] == "descends"
    assert any("tutorial" in m.value and "RuntimeError" in m.value for m in at.markdown)


def test_no_formula_chosen_is_said_in_words():
    at = app(PAGE)
    at.multiselect(key="formulas_cosine").set_value([]).run()
    assert not at.exception and any("at least one formula" in m for m in messages(at))


def test_a_rerun_with_the_same_settings_comes_from_the_cache_cleanly():
    at = app(PAGE, train_steps="30")
    at.run()
    assert not at.exception and not messages(at)
    assert summary(at)["corrected"] == "descends" and len(charts(at)) == 1


def test_presentation_mode_enlarges_the_charts_text_and_height():
    import json

    plain, presented = app(PAGE), app(PAGE, present="true")
    (a,), (b,) = charts(plain), charts(presented)
    a, b = json.loads(a.proto.spec)["layout"], json.loads(b.proto.spec)["layout"]
    assert b["font"]["size"] >= 18 > a.get("font", {}).get("size", 12)
    assert b["height"] > a.get("height", 450)
