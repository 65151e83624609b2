"""The command line's HTML report opens in Chromium with no network and draws every figure."""

from pathlib import Path

import pytest

from gradient_lab import cli

pytestmark = pytest.mark.e2e

ROOT = str(Path(__file__).resolve().parents[2])


def test_the_report_draws_offline(tmp_path, page):
    path = tmp_path / "report.html"
    assert cli.main(["check", f"{ROOT}/tests/specimens/modules/broken_correct.py", "--report", str(path)]) == 1
    requested = []

    def offline(route):
        requested.append(route.request.url)
        route.abort()  # anything the file asks of the network fails, as it would on a plane

    page.context.route("http*://**/*", offline)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(path.as_uri())
    expected = path.read_text().count('class="plotly-graph-div"')
    assert expected >= 4  # the diagnosis scatter, the gradient and error maps, the Taylor test
    page.wait_for_function(f"document.querySelectorAll('.plotly-graph-div .main-svg').length >= {expected}", timeout=30_000)
    assert not errors and not requested, (errors, requested)
    assert "square / square: FAILED" in page.inner_text("body")
    assert page.locator(".plotly-graph-div .heatmaplayer, .plotly-graph-div .scatterlayer").count() >= expected
