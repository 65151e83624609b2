"""Fixtures of the real-browser tests: one Streamlit server of the app and one headless Chromium
for the whole session, a fresh browser context (its own Streamlit session) per test.

Debian's Chromium at /usr/bin/chromium (or $GRADIENT_LAB_CHROMIUM) drives the pages through the
plain Playwright sync API; where there is no such browser, every test here is skipped, saying why.
"""

import pytest

from tests.e2e import harness


@pytest.fixture(scope="session")
def browser():
    missing = harness.browser_missing()
    if missing:
        pytest.skip(f"no real-browser tests: {missing}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = harness.launch(playwright)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def app_url(browser):
    """The base URL of ``streamlit run app.py`` on a free port of 127.0.0.1, warmed up by one
    visit to Home (test_cold_start.py covers a cold server), stopped at the end."""
    with harness.streamlit_server() as url:
        harness.warm_up(browser, url)
        yield url


@pytest.fixture
def page(browser):
    page = harness.new_page(browser)
    yield page
    page.context.close()
