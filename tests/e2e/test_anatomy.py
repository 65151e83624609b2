"""The Anatomy page's graph draws in Chromium: graphviz from a DOT string, no system graphviz."""

import pytest

from tests.e2e import harness

pytestmark = pytest.mark.e2e


def test_the_graph_draws_with_the_custom_node_marked(app_url, page):
    page.goto(harness.deep_link(app_url, "anatomy", rows="4", features="6", anatomy_formula="tutorial"))
    harness.wait_idle(page)
    graph = page.locator("[data-testid='stGraphVizChart'] svg").first
    graph.wait_for(state="visible", timeout=30_000)
    text = graph.text_content()
    assert "custom Function" in text and "output" in text and "x1" in text, text
    assert page.locator("[data-testid='stGraphVizChart'] svg g.node").count() >= 4  # output, the custom node, two inputs
    assert not harness.errors(page)
