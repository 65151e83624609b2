"""The app starts: app.py runs from a fresh session without an exception."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def test_home_page_runs_and_lists_the_formulas():
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert "Gradient Lab" in at.title[0].value
    assert any("corrected" in str(t.value) for t in at.table)
