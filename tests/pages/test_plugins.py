"""Users' modules in the running app: named on the command line or in the environment, the
family works on every page; a broken module is named in the sidebar and the rest goes on."""

from pathlib import Path

import pytest

from gradient_lab.app import plugins
from gradient_lab.app.family import families
from tests.pages.conftest import app, messages
from tests.registry import restore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "my_functions.py")
PAGES = ["app.py", "pages/1_Gradient_check.py", "pages/2_Gradient_field.py", "pages/3_Loss_surface.py", "pages/6_Anatomy.py",
         "pages/4_Perturbation_lab.py", "pages/5_Training.py"]


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch):
    before, loaded = dict(families()), dict(plugins._LOADED)  # built-ins imported first
    plugins._LOADED.clear()
    monkeypatch.delenv("GRADIENT_LAB_FUNCTIONS", raising=False)
    yield
    restore(before)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)


def test_example_from_the_environment_shows_up_and_checks(monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", EXAMPLE)
    at = app(family="swish")
    assert not at.exception
    assert "swish" in at.selectbox(key="family").options
    assert list(at.table[0].value["formula"]) == ["forgot chain rule", "swish"]
    assert list(at.table[0].value["verdict"]) == ["fail", "pass"]


def test_example_from_the_command_line(monkeypatch):
    monkeypatch.setattr("sys.argv", ["app.py", "--functions", EXAMPLE])
    at = app(family="swish")
    assert not at.exception and at.selectbox(key="family").value == "swish"


@pytest.mark.parametrize("page", PAGES)
def test_every_page_works_on_a_loaded_family_or_says_why_not(monkeypatch, page):
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", EXAMPLE)
    at = app(page, family="swish", rows="3", features="4")
    assert not at.exception
    assert at.get("plotly_chart") or at.dataframe or at.table or messages(at)


def test_a_broken_module_is_named_and_the_rest_keeps_working(monkeypatch):
    monkeypatch.setenv("GRADIENT_LAB_FUNCTIONS", f"{ROOT / 'tests/specimens/modules/broken_import.py'},{EXAMPLE}")
    at = app()
    assert not at.exception
    said = " ".join(messages(at))
    assert "broken_import.py" in said and "ImportError: this module needs a package" in said
    assert {"cosine", "swish"} <= set(at.selectbox(key="family").options)
    assert list(at.table[0].value["formula"]) == ["tutorial", "sign-fixed", "corrected"]
