"""The Anatomy page: every broken rule of the Function contract named for a Function that breaks
it, nothing named for the gallery's correct Functions, and the home page's one line."""

from pathlib import Path

import pytest

from gradient_lab.app import plugins
from gradient_lab.app.family import families
from gradient_lab.ui.compute import INTERNAL_ERROR
from tests.specimens.contracts import BROKEN
from tests.pages.conftest import app
from tests.registry import restore

PAGE = "pages/6_Anatomy.py"
MODULE = str(Path(__file__).resolve().parents[1] / "specimens" / "modules" / "contract_breakers.py")


@pytest.fixture
def contract(monkeypatch):
    before, loaded = dict(families()), dict(plugins._LOADED)
    plugins._LOADED.clear()
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", MODULE)
    yield
    restore(before)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)


def table(at, column: str):
    """The page's table that has ``column`` (AppTest does not keep a dataframe's key)."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def no_crash(at) -> None:
    assert not at.exception
    assert not [e.value for e in at.error if e.value.startswith(INTERNAL_ERROR)]


@pytest.mark.parametrize("name", list(BROKEN))
def test_each_broken_rule_is_named_with_its_tensor_or_input(contract, name):
    _, rule, word = BROKEN[name]
    at = app(PAGE, family="contract", formulas_contract=[name], anatomy_formula=name)
    no_crash(at)
    found = table(at, "rule")
    named = found[found["rule"] == rule]
    assert len(named) and any(word in message for message in named["what"]), found.to_dict("records")
    if (named["severity"] == "error").any():  # the box above the table names it too
        assert "breaks" in at.error[0].value and rule in at.error[0].value


def test_a_function_that_keeps_the_contract_gets_nothing_named_and_its_graph_drawn(contract):
    at = app(PAGE, family="contract", formulas_contract=["good"], anatomy_formula="good")
    no_crash(at)
    assert "keeps every rule" in at.success[0].value
    saved = table(at, "version when saved")
    assert list(saved["kind"]) == ["input x", "input y"] and list(saved["changed in place after saving"]) == ["no", "no"]
    returned = table(at, "needs a gradient")
    assert list(returned["input"]) == ["x", "y"] and list(returned["returned"]) == ["(8, 16)", "(8, 16)"]
    dot = at.get("graphviz_chart")[0].proto.spec
    assert "Good" in dot and "custom Function" in dot and "-> out" in dot


@pytest.mark.parametrize("family", sorted(set(families())))
def test_nothing_is_named_for_the_gallerys_correct_functions(family):
    formula = next(name for name, f in families()[family].formulas.items() if f.correct)
    at = app(PAGE, family=family, anatomy_formula=formula)
    no_crash(at)
    assert at.success and not at.error, [e.value for e in at.error]


def test_home_names_the_broken_contract_in_one_line(contract):
    at = app(family="contract", formulas_contract=["good", "tensor on ctx"])
    no_crash(at)
    lines = [m.value for m in at.markdown if "breaks the Function contract" in m.value]
    assert len(lines) == 1 and "tensor on ctx" in lines[0] and "save_for_backward" in lines[0]


def test_a_formula_without_a_custom_function_is_said_so(monkeypatch, tmp_path):
    module = tmp_path / "plain_ops.py"
    module.write_text("from gradient_lab.app.family import declare\n"
                      "declare('plain', formulas={'square': lambda x: x * x}, correct=('square',), reference=lambda x: x * x)\n")
    before, loaded = dict(families()), dict(plugins._LOADED)
    plugins._LOADED.clear()
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", str(module))
    try:
        at = app(PAGE, family="plain")
        no_crash(at)
        assert "runs no custom autograd.Function" in at.info[0].value and not at.success
    finally:
        restore(before)
        plugins._LOADED.clear()
        plugins._LOADED.update(loaded)
