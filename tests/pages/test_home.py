"""The home page and the shared sidebar: fresh start, deep links, every control, errors in words."""

import pytest

from tests.pages.conftest import app, messages

SIDEBAR_CHANGES = {
    "rows": 3,
    "features": 5,
    "depth": 2,
    "broadcast": True,
    "dtype": "float32",
    "seed": 7,
    "eps": 1e-3,
    "step": 1e-5,
    "noise1": 0.3,
    "noise2": 0.2,
    "norm1": 1.0,
    "norm2": 10.0,
    "near_zero": 2,
    "near_zero_factor": 0.5,
    "align": "antiparallel",
    "align_angle": 10.0,
    "inject": "nan",
    "inject_count": 3,
}


def test_fresh_start_shows_the_verdicts_and_the_specimen():
    at = app()
    assert not at.exception
    assert not messages(at)
    table = at.table[0].value
    assert list(table["formula"]) == ["tutorial", "sign-fixed", "corrected"]
    assert "BUG 1" in at.code[0].value and len(at.latex) >= 3
    assert any("Checked all" in m.value and "Jacobian entries" in m.value for m in at.markdown)  # a card's details


def pictures(at) -> list[str]:
    """The cards' pictures, as the SVG each markdown image carries."""
    import base64
    import re

    return [base64.b64decode(found).decode() for m in at.markdown for found in re.findall(r"\]\(data:image/svg\+xml;base64,([^)]+)\)", m.value)]


def headlines(at) -> list[str]:
    return [m.value.removeprefix("##### ") for m in at.markdown if m.value.startswith("##### ")]


def test_every_formula_gets_one_card_with_a_short_headline_and_a_picture():
    from gradient_lab.present.cards import HEADLINE_WORDS

    at = app()
    shown = headlines(at)
    assert len(shown) == 3 and all(len(h.split()) <= HEADLINE_WORDS + 1 and h[0].isupper() for h in shown)
    assert shown[0].startswith("Sign flipped") and shown[-1] == "Right on every entry"
    drawn = pictures(at)  # one picture a card, drawn as SVG (no plotly on Home), each with its title
    assert len(drawn) == 3 and not at.get("plotly_chart") and not at.get("image")
    assert all(svg.startswith("<svg") and "Jacobian entries" in svg for svg in drawn)
    badges = [m.value for m in at.markdown if "second order" in m.value and "badge[" in m.value]
    assert len(badges) == 3 and ":material/check: pass" in badges[-1] and ":material/close: fail" in badges[0]  # an icon, not colour alone


def test_start_here_links_each_set_the_case_they_say():
    from gradient_lab.present.guide import TUTORIAL

    for step in TUTORIAL:
        query = dict(step.query)
        at = app(step.page, **{k: list(v) if isinstance(v, tuple) else v for k, v in query.items()})
        assert not at.exception and not messages(at) and not [i for i in at.info if "Ignored from the link" in i.value], step.title
        assert at.multiselect(key="formulas_cosine").value == list(query["formulas_cosine"]), step.title
        for key in ("norm1", "norm2"):
            if key in query:
                assert at.select_slider(key=key).value == float(query[key]), step.title


def test_the_presentation_setting_is_a_link_away():
    at = app(present="true")
    assert not at.exception and at.toggle(key="present").value is True
    assert any("font-size" in h.proto.body for h in at.get("html"))


@pytest.mark.parametrize("key, value", list(SIDEBAR_CHANGES.items()))
def test_each_sidebar_control_reruns_cleanly(key, value):
    at = app()
    widget = at.get_by_key(key)
    assert widget is not None and widget.value != value  # a real change
    widget.set_value(value).run()
    assert not at.exception
    assert at.table or messages(at)  # a verdict, or a message in words


def test_formulas_and_family_controls():
    at = app()
    at.multiselect(key="formulas_cosine").set_value(["norm-fixed", "corrected"]).run()
    assert not at.exception and list(at.table[0].value["formula"]) == ["norm-fixed", "corrected"]
    at.multiselect(key="formulas_cosine").set_value([]).run()
    assert not at.exception and any("at least one formula" in m for m in messages(at))


def test_deep_link_reproduces_the_case():
    at = app(rows="4", features="6", dtype="float32", formulas_cosine=["corrected"], dim="0")
    assert not at.exception
    assert at.number_input(key="rows").value == 4 and at.selectbox(key="dtype").value == "float32"
    assert at.selectbox(key="dim").value == 0
    assert list(at.table[0].value["formula"]) == ["corrected"]


def test_an_absent_device_is_not_offered_and_a_link_asking_for_it_says_why_once():
    at = app(device="cuda")
    assert not at.exception and "cuda" not in at.selectbox(key="device").options
    assert any("CUDA is not available" in i.value and "runs on the CPU" in i.value for i in at.info)
    assert not messages(at)  # said once, not as a red box on every card
    assert at.code and "BUG 1" in at.code[0].value  # the rest of the page still works


def test_memory_guard_refuses_with_the_estimate_and_the_limit(monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "1")
    at = app(rows="512", features="512")
    assert not at.exception
    refusal = " ".join(messages(at))
    assert "more than the budget of 1.0 MiB" in refusal and "about" in refusal


def test_a_3d_shape_where_the_tutorial_raises_says_so():
    at = app(depth="4")
    assert not at.exception
    assert headlines(at)[0] == "Reduces over the wrong dim · raises RuntimeError in backward"
    assert any(m.value.startswith("- The formula raised in backward: RuntimeError") for m in at.markdown)  # its details
    assert headlines(at)[-1] == "Right on every entry"


def test_each_card_says_which_conditions_its_formula_fails_under(monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", str(Path(__file__).parents[1] / "specimens" / "modules" / "condition_bugs.py"))
    at = app(family="product")
    assert not at.exception
    shown = [m.value for m in at.markdown if "conditions" in m.value and "badge[" in m.value]
    assert len(shown) == 3, shown  # one line per card
    gated, strided, right = shown
    assert ":red-badge" in gated and "only a requires a gradient" in gated and "only b requires a gradient" in gated
    assert ":red-badge" in strided and r"grad\_output is expanded" in strided  # markdown-escaped
    assert ":green-badge" in right and "Holds under all" in right
    assert headlines(at)[0].startswith("Raises UnboundLocalError in backward when only")


def test_a_correct_first_order_function_is_neutral_not_red(monkeypatch):
    from pathlib import Path

    from gradient_lab.app import plugins
    from tests.registry import families_kept

    module = str(Path(__file__).parents[1] / "specimens" / "modules" / "first_order_only.py")
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", module)
    with families_kept():
        at = app(family="cube in numpy")
        plugins._LOADED.pop(module, None)
    assert not at.exception
    badges = [m.value for m in at.markdown if "badge[" in m.value and "order" in m.value]
    assert badges and all("first order only" in b and "red-badge" not in b for b in badges), badges


def test_editing_a_loaded_module_changes_the_next_verdict(monkeypatch, tmp_path):
    from tests.app.test_plugins import MODULE

    path = tmp_path / "edited_on_home.py"
    path.write_text(MODULE.format(factor=1))
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", str(path))
    from tests.registry import families_kept

    with families_kept():
        _check_the_edit(path)


def _check_the_edit(path) -> None:
    from gradient_lab.app import plugins
    from tests.app.test_plugins import MODULE

    try:
        at = app(family="edited square")
        assert not at.exception and any("fail" in m.value and "square" in m.value for m in at.markdown if "badge[" in m.value)
        path.write_text(MODULE.format(factor=2))  # the user fixes the backward; the server is not restarted
        at.run()
        assert not at.exception
        cards = [m.value for m in at.markdown if "badge[" in m.value and "square" in m.value]
        assert cards and all(":material/close: fail" not in c for c in cards), cards
        assert any("Reloaded your functions" in t.value for t in at.toast)
    finally:
        plugins._LOADED.pop(str(path), None)
