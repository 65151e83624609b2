"""Shared AppTest helpers for the page tests."""

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


def app(page: str | None = None, **query) -> AppTest:
    """A fresh session opened at ``page`` (a file of pages/, relative to app.py; None: home) by a
    deep link with ``query``, run. app.py is the entrypoint, as in the real app, so the
    navigation's links resolve."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in query.items():
        at.query_params[key] = value
    if page:
        at.switch_page(page)
    return at.run()


def messages(at: AppTest) -> list[str]:
    return [e.value for e in at.error] + [w.value for w in at.warning]


@pytest.fixture(autouse=True)
def fresh_cache():
    """Cached results are process-wide: every test starts without them."""
    st.cache_data.clear()
    yield
