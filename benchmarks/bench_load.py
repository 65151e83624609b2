"""Load: 8 browser sessions at once against one server, each changing its own settings for 30 s.

Each session is a browser context of its own (its own Streamlit session) on a page of its own or
with its own rows, features and seed, and walks its own slider and select, waiting for every
rerun to finish. At the end: no session shows an exception or a failure, each still shows its own
settings (widgets and URL: nothing leaked from another session), and the server still answers
``/_stcore/health``. Prints each session's changes, then p50/p95 of the time from a change to its
finished rerun (as the page's own clock sees it), and last ``p95_rerun_ms=X``.

    .venv/bin/python benchmarks/bench_load.py [--seconds 30] [--sessions 8] [--url http://127.0.0.1:8501]

Needs Chromium at /usr/bin/chromium (without it, it says so and exits 0). The server is warmed up by one visit to Home first, so the
first run's imports are not counted (tests/e2e/test_cold_start.py is about a cold server).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e import harness  # noqa: E402


def warm_up(base: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = harness.launch(playwright)
        try:
            harness.warm_up(browser, base)
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each session keeps changing settings")
    parser.add_argument("--sessions", type=int, default=8, choices=range(1, 9), metavar="1..8")
    parser.add_argument("--url", help="a running server of this app (default: start one on a free port)")
    args = parser.parse_args()
    missing = harness.browser_missing()
    if missing:  # not a failure of the app: `make bench` goes on to the other benchmarks
        print(f"bench_load skipped: {missing}")
        return

    with (nullcontext(args.url.rstrip("/")) if args.url else harness.streamlit_server()) as base:
        warm_up(base)
        sessions = harness.load_sessions(args.sessions)
        result = harness.run_load(base, sessions, harness.Workload(seconds=args.seconds))

    for s in sessions:
        times = sorted(s.rerun_ms)
        median = f"{statistics.median(times):.0f} ms" if times else "-"
        print(f"{s.name:<11} {s.page:<17} {s.changes:3d} changes, median rerun {median}, ends at "
              + ", ".join(f"{k}={v}" for k, v in {**s.query, **s.expected}.items()))
    print(f"{len(result.rerun_ms)} reruns in {result.seconds:.0f} s over {len(sessions)} sessions; "
          f"server healthy after: {result.healthy_after}")
    print(f"change to finished rerun: p50 {result.percentile(50):.0f} ms, p95 {result.percentile(95):.0f} ms, "
          f"max {max(result.rerun_ms, default=float('nan')):.0f} ms")
    failed = result.problems + ([] if result.healthy_after else ["the server stopped answering /_stcore/health"])
    failed += [f"{s.name}: no change finished" for s in sessions if not s.changes]
    for problem in failed:
        print(f"PROBLEM {problem[:600]}")
    print(f"changes per second, all sessions together: {len(result.rerun_ms) / result.seconds:.2f}")
    print(f"p95_rerun_ms={result.percentile(95):.0f}")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
