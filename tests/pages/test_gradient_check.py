"""The Gradient check page: fresh start, deep links, every control, broken settings in words."""

import json

import pytest

from gradient_lab.app import views
from gradient_lab.app.devices import device_problem
from tests.pages.conftest import app, messages

PAGE = "pages/1_Gradient_check.py"


def titles(at) -> list[str]:
    return [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in at.get("plotly_chart")]


def gradient_maps(at) -> dict:
    """The figure of the gradient maps (the first chart after the diagnosis's scatter, if any)."""
    figures = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    return next(f for f in figures if "Gradient of the loss" in f["layout"]["title"]["text"])


def has(at, words: str) -> bool:
    return any(words in t for t in titles(at))


def boxes(at, kind: str) -> list[str]:
    return [e.value for e in getattr(at, kind)]


def card(at) -> dict[str, str]:
    """The verdict card's words: its badge line, its headline and its details (one text)."""
    markdown = [m.value for m in at.markdown]
    return {"line": next(m for m in markdown if "-badge[:material/" in m),
            "headline": next(m.removeprefix("##### ") for m in markdown if m.startswith("##### ")),
            "details": "\n".join(m for m in markdown if m.startswith("- "))}


def passes(at, formula: str) -> bool:
    shown = card(at)
    return f"**{formula}**" in shown["line"] and shown["line"].count(":material/check: pass") == 2 and shown["headline"] == "Right on every entry"


def test_fresh_start_shows_the_verdict_maps_table_jacobians_downloads_and_script():
    at = app(PAGE)
    assert not at.exception
    assert at.selectbox(key="check_formula").value == "tutorial"
    assert not boxes(at, "error")  # a failing verdict is a card, not an error box
    shown = card(at)
    assert "**tutorial**" in shown["line"] and shown["line"].count(":material/close: fail") == 2  # first and second order
    assert shown["headline"] == "Sign flipped · missing 1/(‖x1‖·‖x2‖) · extra term along each row"
    assert "The Jacobian entry" in shown["details"] and "Checked all" in shown["details"]  # where, and what it covered
    assert "Fails: double backward differs" in shown["details"]
    assert [m.label for m in at.metric] == ["Cosine to reference", "Loss", "Forward evaluations", "Max |forward − reference|"]
    assert float(at.metric[0].value) < 0  # the tutorial's gradient is flipped
    assert any("colour groups" in c.value for c in at.caption)  # how the finite differences were taken
    shown = titles(at)
    assert any("Diagnosis" == h.value for h in at.subheader)
    assert "each Jacobian entry, the formula's backward against" in shown[0]
    shown = shown[1:]  # after the diagnosis's scatter, the maps, the other stages' curves (does it train), the Jacobians' tab
    assert len(shown) == 5 and shown[3] == "Does it train"
    assert "Gradient of the loss w.r.t. x1 (8, 16)" in shown[0] and "signed error analytic − reference" in shown[1]
    assert "distribution of |analytic − reference|" in shown[2] and "Jacobian d output / d x1" in shown[4]
    assert len(at.dataframe) == 1 and len(at.dataframe[0].value) == 10  # the worst elements
    assert len(at.get("download_button")) == 3  # CSV, JSON, the script
    assert "torch.autograd.gradcheck(" in at.code[0].value and "formula = 'tutorial'" in at.code[0].value


@pytest.mark.skipif(bool(views.accelerators()), reason="this machine has an accelerator: the note is not shown")
def test_without_an_accelerator_the_page_says_why():
    at = app(PAGE)
    note = next(c.value for c in at.caption if "No CUDA or MPS device" in c.value)
    assert device_problem("cuda") in note and device_problem("mps") in note


@pytest.mark.skipif(not views.accelerators(), reason="no CUDA or MPS device on this machine")
def test_with_an_accelerator_the_cpu_and_the_device_are_compared():
    at = app(PAGE)
    assert not at.exception
    for device in views.accelerators():
        table = at.get_by_key(f"check_device_{device}").value
        assert list(table["input"]) == ["x1", "x2"]


def test_every_control_reruns_cleanly():
    at = app(PAGE)
    steps = [
        ("check_formula", "corrected", lambda: passes(at, "corrected")),
        ("check_input", "x2", lambda: has(at, "w.r.t. x2") and has(at, "x2: signed error")),
        ("check_pair", ("analytic", "numerical"), lambda: has(at, "signed error analytic − numerical")),
        ("check_pair", ("reference", "numerical"), lambda: has(at, "distribution of |reference − numerical|")),
        ("check_relative", True, lambda: has(at, "relative error |reference − numerical| / |numerical|")),
        ("check_sweep", True, lambda: has(at, "Finite-difference step sweep")),
        ("check_conformance", True, lambda: has(at, "Conformance:")),
        ("check_formula", "sign-fixed", lambda: "**sign-fixed**" in card(at)["line"] and ":material/close: fail" in card(at)["line"]),
        ("check_relative", False, lambda: has(at, "x2: signed error reference − numerical")),
        ("check_sweep", False, lambda: not has(at, "step sweep")),
        ("check_conformance", False, lambda: not has(at, "Conformance")),
    ]
    for key, value, shows in steps:
        at.get_by_key(key).set_value(value).run()
        assert not at.exception, key
        assert at.get_by_key(key).value == value
        assert shows(), (key, value, titles(at))


def test_deep_link():
    at = app(PAGE, check_formula="corrected", check_pair="reference-numerical", check_input="x2", check_sweep="true",
             rows="4", features="6", formulas_cosine=["tutorial", "corrected"])
    assert not at.exception
    assert at.multiselect(key="formulas_cosine").value == ["tutorial", "corrected"]
    assert at.selectbox(key="check_formula").options == ["tutorial", "corrected"]
    assert at.selectbox(key="check_formula").value == "corrected"
    assert passes(at, "corrected") and not boxes(at, "error")
    assert has(at, "w.r.t. x2 (4, 6)") and has(at, "signed error reference − numerical") and has(at, "step sweep")
    assert "shape=(4, 6)," in at.code[0].value and "formula = 'corrected'" in at.code[0].value


def test_a_link_to_an_absent_device_says_why_and_the_page_runs_on_the_cpu():
    at = app(PAGE, device="cuda")
    assert not at.exception and any("CUDA is not available" in i.value and "runs on the CPU" in i.value for i in at.info)
    assert not boxes(at, "error") and "device='cpu'," in at.code[0].value


def test_a_backward_that_raises_is_a_message_with_the_reference_still_drawn():
    at = app(PAGE, depth="3")  # the tutorial's backward reduces the wrong dim of a 3-D input
    assert not at.exception
    errors = boxes(at, "error")
    assert card(at)["headline"] == "Reduces over the wrong dim · raises RuntimeError in backward"
    assert "The formula raised in backward: RuntimeError" in card(at)["details"]
    assert any(e.startswith("The formula raised in backward: RuntimeError") for e in errors)
    assert any("no analytic gradient to compare" in i for i in boxes(at, "info"))  # no error map of it, and why
    assert any("the formula raised" in i for i in boxes(at, "info"))  # no Jacobians, and why
    assert titles(at) == [next(t for t in titles(at) if "w.r.t. x1 (8, 16, 3)" in t)]  # the reference's gradient still drawn
    assert at.metric[0].value == "NaN"
    at.selectbox(key="check_pair").set_value(("reference", "numerical")).run()  # what can still be compared
    assert not at.exception
    assert has(at, "signed error reference − numerical") and has(at, "distribution of |reference − numerical|")


def test_a_large_input_is_drawn_for_its_first_rows_only():
    at = app(PAGE, rows="160", features="128")  # 20,480 elements per input
    assert not at.exception
    cut = next(i for i in boxes(at, "info") if "first rows only" in i)
    assert "x1[:156, :]" in cut
    heatmap = gradient_maps(at)["data"][0]
    assert heatmap["z"]["shape"].replace(" ", "") == "156,128"  # plotly's typed array
    assert any("No Jacobians for x1" in i for i in boxes(at, "info"))


def test_the_upstream_control_redraws_the_maps():
    at = app(PAGE, check_formula="corrected")
    before = gradient_maps(at)
    at.selectbox(key="upstream").set_value("random").run()
    assert not at.exception and at.selectbox(key="upstream").value == "random"
    assert any("random (seeded) upstream gradient" in c.value for c in at.caption)
    assert gradient_maps(at) != before  # a different product is drawn
    assert passes(at, "corrected")


def test_the_colour_scale_can_be_per_panel_so_the_true_gradient_shows():
    at = app(PAGE)  # the tutorial: its gradient is far larger than the true one
    assert at.radio(key="check_scale").value == "shared"
    at.radio(key="check_scale").set_value("per panel").run()
    assert not at.exception
    first = gradient_maps(at)
    panel_titles = [a["text"] for a in first["layout"].get("annotations", [])]
    assert any("reference (colour ±" in t for t in panel_titles), panel_titles


def test_the_conditions_table_names_each_condition_and_its_outcome(monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", str(Path(__file__).parents[1] / "specimens" / "modules" / "condition_bugs.py"))
    at = app("pages/1_Gradient_check.py", family="product", check_formula="strided")
    assert not at.exception
    table = at.table[0].value
    outcomes = dict(zip(table["condition"], table["outcome"]))
    assert outcomes["grad_output is expanded (stride 0, as .sum() makes it)"] == "fail"
    assert outcomes["grad_output is transposed"] == "fail" and outcomes["only a requires a gradient"] == "pass"
    assert list(table["outcome"])[:3] == ["fail"] * 3  # the failing ones first
    worst = dict(zip(table["condition"], table["worst entry"]))
    assert worst["grad_output is transposed"].startswith(("a[", "b["))


def test_the_parity_grid_is_opt_in_and_names_the_path_that_differs_with_its_error_map(monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", str(Path(__file__).parents[1] / "specimens" / "modules" / "parity_ops.py"))
    at = app("pages/1_Gradient_check.py", family="parity sine", check_formula="fallback under compile", shape="4,3")
    assert not at.exception and not [d for d in at.dataframe if "way of running it" in d.value.columns]  # off: nothing compiled
    at = app("pages/1_Gradient_check.py", family="parity sine", check_formula="fallback under compile", check_parity="true")
    assert not at.exception and not [e for e in at.error if "Internal error" in e.value]
    (table,) = [d.value for d in at.dataframe if "way of running it" in d.value.columns]
    outcomes = dict(zip(table["way of running it"], table["outcome"]))
    assert outcomes["eager"] == "agrees" and outcomes["torch.compile (aot_eager)"] == "differs"
    assert outcomes["torch.func.grad"] == "agrees" and outcomes["torch.func.jvp (forward mode)"] == "not supported"
    chart = next(c for c in at.get("plotly_chart") if "this path − the truth" in json.loads(c.proto.spec)["layout"]["title"]["text"])
    assert "under torch.compile" in json.loads(chart.proto.spec)["layout"]["title"]["text"]


def test_below_float64_the_precision_section_shows_the_ratio_its_figures_and_a_test_to_paste():
    at = app(PAGE, family="softmax", formulas="corrected", check_formula="corrected", dtype="bfloat16")
    assert not at.exception and not [e for e in at.error if "Internal error" in e.value]
    assert "Precision in bfloat16" in [h.value for h in at.subheader]
    (table,) = [d.value for d in at.dataframe if "error vs baseline" in d.value.columns]
    assert list(table["of"]) == ["gradient of x", "output"] and set(table["verdict"]) == {"pass"}
    assert has(at, "distance from the float64 truth, in bfloat16 ULPs") and has(at, "|error| against |truth|")
    (test,) = [c.value for c in at.code if "assert_close" in c.value]
    assert "TOLERANCES = {'x': (" in test and "def test_softmax_corrected_gradient_in_bfloat16(seed)" in test
    assert any("bfloat16: x's largest error is" in m.value for m in at.markdown)  # the card's precision line
    at = app(PAGE, family="softmax", formulas="no-subtract", check_formula="no-subtract", dtype="float16")
    assert not at.exception and not [c for c in at.code if "assert_close" in c.value]  # no tolerance hides a failing gradient
    assert any("No tolerances are suggested" in c.value for c in at.caption)
    at = app(PAGE, family="softmax", formulas="corrected", check_formula="corrected")
    assert "Precision in float64" not in [h.value for h in at.subheader] and any("Choose float32, bfloat16" in c.value for c in at.caption)


def test_determinism_is_opt_in_and_names_the_spread_and_the_batch_dependence(monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", str(Path(__file__).parents[1] / "specimens" / "modules" / "determinism_functions.py"))
    at = app(PAGE, family="repeat scaled", check_formula="shuffled accumulation")
    assert not at.exception and any("Determinism" in h.value for h in at.subheader) and not has(at, "spread over")
    at = app(PAGE, family="repeat scaled", check_formula="shuffled accumulation", check_determinism="true")
    assert not at.exception and not [e for e in at.error if "Internal error" in e.value]
    assert any("Nondeterministic: over 10 runs" in m.value and "gradcheck passes with it" in m.value for m in at.markdown)
    assert has(at, "spread over 10 runs of the backward")
    at = app(PAGE, family="repeat batch centred", check_formula="centred", check_determinism="true")
    (rows,) = [d.value for d in at.dataframe if "against its batch" in d.value.columns]
    assert set(rows["against its batch"]) == {"different"}


def test_a_gradient_that_is_not_finite_shows_where_it_was_born(monkeypatch):
    from pathlib import Path

    at = app(PAGE, family="normalize", check_formula="unclamped")
    assert "Where the NaN or Inf was born" not in [h.value for h in at.subheader]  # finite: nothing traced
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", str(Path(__file__).parents[1] / "specimens" / "modules" / "nan_families.py"))
    at = app(PAGE, family="nan over zero", check_formula="divides")
    assert not at.exception and "Where the NaN or Inf was born" in [h.value for h in at.subheader]
    (born,) = [e.value for e in at.error if e.value.startswith("**Born** in aten.")]
    assert "functions.py:" in born and "x/0" in born and "fix:" in born


def test_at_a_large_shape_the_script_shown_leaves_the_data_to_the_download():
    at = app(PAGE, rows="256", features="512")
    assert not at.exception
    (code,) = [c.value for c in at.code if "Gradient Lab's check" in c.value]
    assert "the data, embedded in the downloaded script" in code and len(code) < 100_000
    small = app(PAGE)
    (code,) = [c.value for c in small.code if "Gradient Lab's check" in c.value]
    assert "the data, embedded in the downloaded script" not in code  # a small case's script is whole on the page


def test_at_4096_by_4096_the_page_refuses_in_words_without_an_exception():
    at = app(PAGE, rows="4096", features="4096")
    assert not at.exception and not [e for e in at.error if e.icon == "🛑"]  # no crash, caught or not
    assert any("up to 262,144 elements" in m and "16,777,216" in m for m in messages(at))
