"""Screenshots of every page for the README, in Debian's Chromium at 1440×900.

    .venv/bin/python docs/screenshots.py                 # starts its own server on a free port
    .venv/bin/python docs/screenshots.py --url http://127.0.0.1:8501   # or uses a running one

Writes docs/screenshots/<page>.png (the first 1440×900 of each page, as a visitor first sees it;
--full-page for the whole length) from deep links that show each page at its most telling.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e import harness  # noqa: E402

SHOTS = {  # file name -> (page, query, key of the widget to scroll to the top of the window, or None)
    "home": ("home", {}, None),
    "gradient_check": ("gradient_check", {}, None),
    # the input plane of one row: the arrows move x1 in its own plane; the controls and the whole field in view
    "gradient_field": ("gradient_field", {"rows": 1, "features": 2, "field_resolution": 11}, "field_plane"),
    # optimizer paths over the contours, each driven by its formula's gradient, on the plane of the true descent
    "loss_surface": ("loss_surface", {"surface_plane": "gradient", "surface_paths": "true", "surface_optimizer": "Adam"},
                     "surface_plane"),
    "perturbation_lab": ("perturbation_lab", {}, None),
    "training": ("training", {}, None),
    "anatomy": ("anatomy", {"anatomy_formula": "tutorial"}, None),
}

SCROLL_JS = """(selector) => {
  const target = document.querySelector(selector);
  const main = document.querySelector("[data-testid='stMain']");
  if (target && main) main.scrollTop += target.getBoundingClientRect().top - 16;
}"""

FULL_HEIGHT_JS = """() => Math.max(...Array.from(document.querySelectorAll(
  "[data-testid='stMain'], [data-testid='stAppViewContainer'], [data-testid='stMainBlockContainer']")).map(e => e.scrollHeight))"""


def shoot(base: str, out: Path, full_page: bool, only: list[str] | None) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as playwright:
        browser = harness.launch(playwright)
        try:
            for name, (page_name, query, top) in SHOTS.items():
                if only and name not in only:
                    continue
                page = harness.new_page(browser)
                try:
                    page.goto(harness.deep_link(base, page_name, **query))
                    harness.wait_idle(page)
                    harness.charts(page)  # every chart drawn and steady
                    problems = harness.errors(page)
                    if problems:
                        raise SystemExit(f"{name}: the page shows an error: {problems[0][:500]}")
                    if full_page:  # Streamlit scrolls inside its main area, not the document: grow the window
                        height = page.evaluate(FULL_HEIGHT_JS)
                        page.set_viewport_size({"width": harness.VIEWPORT["width"], "height": max(height, harness.VIEWPORT["height"])})
                        harness.charts(page)
                    elif top:
                        page.evaluate(SCROLL_JS, harness.widget(top))
                    time.sleep(1.0)  # fonts, the dataframe's canvas
                    path = out / f"{name}.png"
                    page.screenshot(path=str(path), full_page=full_page)
                    written.append(path)
                    print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}  <- {page.url}")
                finally:
                    page.context.close()
        finally:
            browser.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server of this app (default: start one on a free port)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots", help="folder for the PNGs")
    parser.add_argument("--full-page", action="store_true", help="the whole page, not the first 1440×900")
    parser.add_argument("--only", nargs="*", choices=list(SHOTS), help="some pages only")
    args = parser.parse_args()
    missing = harness.browser_missing()
    if missing:
        raise SystemExit(f"cannot take screenshots: {missing}")
    with (nullcontext(args.url.rstrip("/")) if args.url else harness.streamlit_server()) as base:
        shoot(base, args.out, args.full_page, args.only)


if __name__ == "__main__":
    main()
