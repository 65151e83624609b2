"""The first visit to a fresh server: from the request until Home has drawn its last card, in
Chromium at 1440×900, at defaults. Each repeat starts a server of its own and waits for its health
check before the clock starts, so what is timed is what a user opening the link waits for: the
page's own code loading, the page script, every formula's verdict and second order, and the cards
drawn. Best of N, with the median, for the server as ``make run`` and ``gradient-lab app`` start
it (``python -m gradient_lab.ui.serve``: it checks Home's opening case before it answers) and,
for comparison, a plain ``streamlit run app.py`` (whose first visitor waits for torch's import
and every verdict). Beside them, on each warmed server after its first visit, a visit the cache
cannot answer (another seed: every verdict computed while the page waits).

Prints a line per repeat, ``uncached_home_ms=U``, ``cold_home_plain_streamlit_ms=P``, then
``cold_home_ms=T`` (best of N, the warmed server) last. Target: T <= 3000.

    .venv/bin/python benchmarks/bench_cold_home.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CARDS = 3  # the default case's formulas: tutorial, sign-fixed, corrected
FINAL = "[class*='st-key-card_']"  # a verdict card, second order included
PICTURES = f"{FINAL} img[src^='data:image/svg'], {FINAL} .main-svg"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LAUNCHERS = {"warmed": ["-m", "gradient_lab.ui.serve"], "plain streamlit": ["-m", "streamlit", "run", str(ROOT / "app.py")]}


def _server(port: int, launcher: str) -> subprocess.Popen:
    command = [sys.executable, *LAUNCHERS[launcher], "--server.headless", "true", "--server.port", str(port),
               "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    server = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read() == b"ok":
                return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not answer its health check within 120 s")


def visit(browser, url: str) -> float:
    """Milliseconds from the request to the last card's picture drawn, in a new browser context
    (nothing of the page's own code cached)."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    start = time.perf_counter()
    page.goto(url)
    # each card is done once its picture is there
    page.wait_for_function(f"() => document.querySelectorAll({PICTURES!r}).length >= {CARDS}", timeout=120_000)
    elapsed = (time.perf_counter() - start) * 1e3
    if page.locator(PICTURES).count() < CARDS or page.locator("[data-testid='stException']").count():
        raise SystemExit("Home did not draw its cards")
    page.close()
    return elapsed


def cold_visit(browser, launcher: str, then: str | None = None) -> tuple[float, float | None]:
    """The first visit to a fresh server, and then a visit to ``then`` (a query) on it."""
    port = _free_port()
    server = _server(port, launcher)
    try:
        first = visit(browser, f"http://127.0.0.1:{port}/")
        return first, visit(browser, f"http://127.0.0.1:{port}/?{then}") if then else None
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        times: dict[str, list[float]] = {launcher: [] for launcher in LAUNCHERS}
        uncached: list[float] = []
        for repeat in range(args.repeats):
            for launcher in LAUNCHERS:
                first, then = cold_visit(browser, launcher, then=f"seed={repeat + 1}" if launcher == "warmed" else None)
                times[launcher].append(first)
                print(f"repeat {repeat + 1}, {launcher} server: {first:.0f} ms" + (f", then seed={repeat + 1}: {then:.0f} ms" if then else ""),
                      flush=True)
                if then is not None:
                    uncached.append(then)
        browser.close()
    print(f"uncached_home_ms={min(uncached):.0f}")
    print(f"median_cold_home_ms={statistics.median(times['warmed']):.0f}")
    print(f"cold_home_plain_streamlit_ms={min(times['plain streamlit']):.0f}")
    print(f"cold_home_ms={min(times['warmed']):.0f}")


if __name__ == "__main__":
    main()
