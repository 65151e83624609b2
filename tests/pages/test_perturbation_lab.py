"""The perturbation lab page: fresh start, deep links, every control, bad settings in words."""

import pytest

from gradient_lab.app.family import get_family
from gradient_lab.explore.sweeps import METRICS, SWEEPS, look_for, sweeps_for
from tests.pages.conftest import app, messages

PAGE = "pages/4_Perturbation_lab.py"


def charts(at):
    return at.get("plotly_chart")


def test_fresh_start_draws_the_input_norm_sweep_with_its_caption_and_download():
    at = app(PAGE)
    assert not at.exception and not messages(at)
    assert at.selectbox(key="lab_kind").value == "input norm"
    assert at.selectbox(key="lab_metric").value == "max abs error"
    assert len(charts(at)) == 1
    assert any("What to look for" in c.value and "unit norm" in c.value for c in at.caption)
    assert at.get("download_button")


def test_deep_link_opens_the_eps_sweep_on_the_relative_error():
    at = app(PAGE, lab_kind="eps", lab_metric="max relative error", rows="4", features="6")
    assert not at.exception and not messages(at)
    assert at.selectbox(key="lab_kind").value == "eps" and at.selectbox(key="lab_metric").value == "max relative error"
    assert at.number_input(key="rows").value == 4
    assert len(charts(at)) == 1 and any(look_for(get_family("cosine"), "eps")[:30] in c.value for c in at.caption)


@pytest.mark.parametrize("kind", [k for k in SWEEPS if k != "input norm"])
def test_each_perturbation_kind_reruns_cleanly(kind):
    at = app(PAGE)
    at.selectbox(key="lab_kind").set_value(kind).run()
    assert not at.exception and not messages(at)
    assert len(charts(at)) == 1 and any(look_for(get_family("cosine"), kind)[:30] in c.value for c in at.caption)


@pytest.mark.parametrize("metric", [m for m in METRICS if m != "max abs error"])
def test_each_metric_reruns_cleanly(metric):
    at = app(PAGE)
    at.selectbox(key="lab_metric").set_value(metric).run()
    assert not at.exception and not messages(at) and len(charts(at)) == 1


def test_an_unavailable_device_is_said_in_words():
    at = app(PAGE, device="cuda")
    assert not at.exception and charts(at)  # on the CPU
    assert any("CUDA is not available" in i.value and "runs on the CPU" in i.value for i in at.info)
    assert at.selectbox(key="lab_kind").set_value("dtype").run() and not at.exception  # the controls still work


def test_sweeps_that_cannot_apply_say_why():
    at = app(PAGE, lab_kind="angle", broadcast="true")
    assert not at.exception and not charts(at)
    assert any("broadcasting off" in m for m in messages(at))
    at = app(PAGE, lab_kind="near-zero norm", eps="0")
    assert not at.exception and any("eps above 0" in m for m in messages(at))


def test_a_formula_that_raises_is_a_warning_and_the_others_are_drawn():
    at = app(PAGE, depth="3")
    assert not at.exception and len(charts(at)) == 1
    assert any("tutorial" in w.value and "raised" in w.value and "RuntimeError" in w.value for w in at.warning)


def test_only_the_sweeps_that_act_on_the_family_are_offered():
    assert sweeps_for(get_family("cosine")) == list(SWEEPS)
    assert sweeps_for(get_family("gelu")) == ["input norm", "noise scale", "dtype"]  # no eps, one input
    at = app(PAGE, family="gelu", rows="3", features="4")
    assert at.selectbox(key="lab_kind").options == ["input norm", "noise scale", "dtype"]
    caption = next(c.value for c in at.caption if "What to look for" in c.value)
    assert caption.endswith(SWEEPS["input norm"].look_for) and "‖x1‖" not in caption
