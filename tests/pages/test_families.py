"""Every family is first-class: every page, for every family (built-in, the example module and a
user's two-input family with no LaTeX), runs without a crash and shows no text of another family."""

import importlib
import re
from pathlib import Path

import pytest

from gradient_lab.app import plugins
from gradient_lab.app import family as family_module
from gradient_lab.app.family import families
from gradient_lab.ui.compute import INTERNAL_ERROR
from tests.pages.conftest import app
from tests.registry import restore

ROOT = Path(__file__).resolve().parents[2]
MODULES = [str(ROOT / "examples" / "my_functions.py"), str(ROOT / "tests" / "specimens" / "modules" / "two_inputs.py"),
           str(ROOT / "tests" / "specimens" / "modules" / "raising_without_reference.py")]
PAGES = [None, "pages/1_Gradient_check.py", "pages/2_Gradient_field.py", "pages/3_Loss_surface.py",
         "pages/4_Perturbation_lab.py", "pages/5_Training.py", "pages/6_Anatomy.py"]
SMALL = {"rows": "3", "features": "4"}
TEXT_KINDS = ("title", "header", "subheader", "markdown", "caption", "info", "warning", "error", "success", "latex", "code")
COSINE_WORDS = ("tutorial", "‖x1‖", "★", "1/(‖x1‖‖x2‖)")  # the specimen's own words


@pytest.fixture(scope="module")
def user_families():
    """The built-in families and those MODULES declare: no other, whatever another test left registered."""
    before, loaded = dict(families()), dict(plugins._LOADED)
    declared = []
    for module in MODULES:
        result = plugins.load(module)
        assert result.error is None, result.error
        declared += result.families
    builtin = [importlib.import_module(module, "gradient_lab.app").FAMILY.name for module in family_module._BUILTIN_MODULES]
    yield {name: families()[name] for name in (*builtin, *declared)}
    restore(before)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)


def main_text(at) -> str:
    return "\n".join(str(e.value) for kind in TEXT_KINDS for e in getattr(at.main, kind))


def foreign_words(family, others) -> set[str]:
    """Words that belong to other families and not to this one: titles, formula names that are no
    plain word ("no-subtract", "forgot chain rule"), input names longer than a letter."""
    mine = {family.title, *family.formulas, *family.input_names}
    words = set()
    for other in others:
        words |= {other.title, *(f for f in other.formulas if re.search(r"[-+ ]", f)), *(n for n in other.input_names if len(n) > 1)}
    if family.name != "cosine":
        words |= set(COSINE_WORDS)
    if len(family.input_names) == 1:
        words |= {"input 2", "second input"}
    return {w for w in words if w not in mine and not any(w in m for m in mine)}


def caught_crashes(at) -> list[str]:
    """Messages of the pages' guard for an exception it did not expect: crashes in words."""
    return [e.value for e in at.error if e.value.startswith(INTERNAL_ERROR)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p or "home")
def test_every_page_reads_right_for_every_family(user_families, page, monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", ",".join(MODULES))
    for name, family in user_families.items():
        at = app(page, family=name, **SMALL)
        assert not at.exception, (name, at.exception)
        assert caught_crashes(at) == [], name
        text = main_text(at)
        others = [f for n, f in user_families.items() if n != name]
        found = sorted(w for w in foreign_words(family, others) if re.search(rf"(?<![\w‖]){re.escape(w)}(?![\w‖])", text))
        assert found == [], f"{page or 'home'} for {name} shows {found}"


def test_a_bug_in_another_inputs_gradient_is_said_in_words(user_families, monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", ",".join(MODULES))
    at = app("pages/5_Training.py", family="pairwise", **SMALL)
    notes = [i.value for i in at.info]
    assert any("**wrong b**'s gradient with respect to a is right" in n and "with respect to b" in n for n in notes), notes
    at = app("pages/2_Gradient_field.py", family="pairwise", **SMALL)
    notes = [i.value for i in at.info]
    assert any("**wrong b**: its gradient with respect to a equals the reference's" in n and "b" in n for n in notes), notes
    assert len(at.get("plotly_chart")) == 1  # the field; no empty error maps: both formulas are right for a


def test_the_home_page_shows_the_buggy_backward_as_a_diff(user_families, monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", ",".join(MODULES))
    at = app(family="pairwise", **SMALL)
    diffs = [c.value for c in at.main.code if c.language == "diff"]
    # the fix: the bug's line removed, the correct one added
    assert len(diffs) == 1 and "+    return g * b, g * a" in diffs[0] and "-    return g * b, g * b" in diffs[0]
    assert not [h.value for h in at.main.markdown if h.value.strip() in ("**What it should compute**",)]


def test_controls_appear_only_where_they_act(user_families, monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", ",".join(MODULES))
    keys = lambda at: {w.key for w in at.sidebar.get("checkbox") + at.sidebar.get("number_input") + at.sidebar.get("select_slider")}  # noqa: E731
    cosine, gelu, pairwise = (keys(app(family=name, **SMALL)) for name in ("cosine", "gelu", "pairwise"))
    assert {"broadcast", "near_zero", "near_zero_factor"} <= cosine
    assert not {"broadcast", "near_zero", "near_zero_factor", "norm2"} & gelu  # one input, no eps
    assert "broadcast" not in pairwise and "norm2" in pairwise  # two inputs, but no broadcasting declared
