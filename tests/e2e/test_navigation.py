"""Moving between pages through the app's own sidebar links keeps the case, in the widgets and in
the address, and each page's own settings come back when the user returns to it."""

from urllib.parse import urlsplit

import pytest

from tests.e2e import harness

pytestmark = pytest.mark.e2e

CASE = {"family": "softmax", "rows": "5", "features": "7", "seed": "3", "dtype": "float32"}
TOUR = ["gradient_check", "gradient_field", "loss_surface", "perturbation_lab", "training", "home", "gradient_check"]


def shown_case(page) -> dict[str, str]:
    return {
        "family": harness.select_value(page, "family"),
        "rows": harness.number_value(page, "rows"),
        "features": harness.number_value(page, "features"),
        "seed": harness.number_value(page, "seed"),
        "dtype": harness.select_value(page, "dtype"),
    }


def test_a_case_from_a_link_survives_a_tour_of_every_page(page, app_url):
    page.goto(harness.deep_link(app_url, "home", **CASE))
    harness.wait_idle(page)
    assert shown_case(page) == CASE
    for name in TOUR:
        harness.go_to(page, name)
        assert shown_case(page) == CASE, name
        address = harness.query_of(page.url)
        assert {k: address.get(k) for k in CASE} == CASE, (name, page.url)  # a link copied here reproduces the view
        assert harness.errors(page) == [], name


def open_and_pick(page, url: str, key: str, option: str) -> None:
    """Open ``url``, pick ``option`` in the select ``key``, and wait for the rerun."""
    page.goto(url)
    harness.wait_idle(page)
    runs = harness.finished_runs(page)
    harness.pick_option(page, key, option)
    harness.wait_rerun(page, runs)


def test_a_setting_changed_on_one_page_is_there_on_the_next(page, app_url):
    open_and_pick(page, harness.deep_link(app_url, "training", rows="3"), "dtype", "float32")
    harness.go_to(page, "loss_surface")
    assert harness.select_value(page, "dtype") == "float32" and harness.number_value(page, "rows") == "3"
    assert harness.query_of(page.url).get("dtype") == "float32"


def test_a_pages_own_settings_come_back_when_the_user_returns(page, app_url):
    open_and_pick(page, harness.deep_link(app_url, "training", rows="3"), "train_optimizer", "Adam")
    harness.go_to(page, "home")
    assert "train_optimizer" not in harness.query_of(page.url)  # another page's setting stays with its page
    harness.go_to(page, "training")
    assert harness.select_value(page, "train_optimizer") == "Adam"
    assert harness.query_of(page.url).get("train_optimizer") == "Adam" and harness.number_value(page, "rows") == "3"


def test_the_navigation_names_every_page(page, app_url):
    page.goto(app_url)
    harness.wait_idle(page)
    sidebar = page.locator("[data-testid='stSidebar']")
    labels = [link.inner_text().strip().split("\n")[-1] for link in sidebar.get_by_role("link").all()]  # after the icon
    assert labels == list(harness.NAV_LABELS.values())
    paths = ["/" + urlsplit(link.get_attribute("href")).path.lstrip("/") for link in sidebar.get_by_role("link").all()]
    assert paths == [harness.PAGES[name] for name in harness.NAV_LABELS]
    assert page.locator("[data-testid='stSidebarNav']").count() == 0  # Streamlit's own links (with "app") are hidden


def _shown_story(page) -> dict:
    """What a page shows of the story: its address's case, the formulas picked, the banner's words and each card's verdict."""
    # the family as the sidebar shows it: the address leaves out a value that is the default, or not, as it was reached
    return {"case": {k: v for k, v in harness.query_of(page.url).items() if k != "family"}, "family": harness.select_value(page, "family"),
            "formulas": [t for t in page.locator(".st-key-formulas_cosine").inner_text().splitlines()[1:] if t.strip()],
            "banner": page.locator(".st-key-story_banner").inner_text()}


def test_each_start_here_step_clicked_from_home_shows_what_its_pasted_link_shows(page, app_url):
    from gradient_lab.present.guide import TUTORIAL

    for number, step in enumerate(TUTORIAL, 1):
        page.goto(app_url)
        harness.wait_idle(page)
        page.locator(".st-key-start_here").get_by_role("button", name=step.title).click()
        path = "/" + step.page.split("/")[-1].removesuffix(".py").split("_", 1)[1]
        page.wait_for_function("p => window.location.pathname === p && window.location.search.includes('story=')", arg=path)
        harness.wait_idle(page)
        clicked = _shown_story(page)
        assert clicked["case"]["story"] == str(number) and f"Step {number} of {len(TUTORIAL)}" in clicked["banner"]
        assert clicked["formulas"] == list(dict(step.query)["formulas_cosine"]), step.title
        assert harness.errors(page) == [], step.title
        if number < 3:  # the first two steps set the formulas alone, as the third and fourth do with more: those are compared whole
            continue
        pasted = harness.new_page(page.context.browser)  # a session of its own, as a link pasted elsewhere
        try:
            pasted.goto(page.url)
            harness.wait_idle(pasted)
            assert _shown_story(pasted) == clicked, step.title
        finally:
            pasted.context.close()
