"""Load: 8 browser sessions at once against one server, each making changes that miss the cache for 30 s.

Each session is a browser context of its own (its own Streamlit session) on a page of its own or
with its own rows and features. Each change types a seed that no session has used yet into the
sidebar, so the rerun misses every cache and recomputes; the session waits for that rerun to finish,
then thinks for 1 s before the next change. At the end: no session shows an exception or a failure,
each still shows its own settings (widgets and URL: nothing leaked from another session), and the
server still answers ``/_stcore/health``.

Two times per change:
- on the server: the script run itself, timed in the server's own process. The server is started
  with ``GRADIENT_LAB_RUN_LOG`` set, which makes tests/e2e/harness.py's ``RUN_TIMER`` time every
  st.Page.run (every page's whole script run) with time.perf_counter and append it to that file;
  each session's first run (opening its page) is not a change and is left out;
- in the browser: from the change to its finished rerun, as the page's own clock sees it (the
  round trip, the rerun and its wait for the server's CPU under load).

Prints each session's changes, p50/p95 of both, then ``p95_rerun_ms=X`` (the browser's) and last
``p95_server_rerun_ms=T`` (integer ms; the target is at most 1500 ms).

    .venv/bin/python benchmarks/bench_load.py [--seconds 30] [--sessions 8] [--think 1] [--shared-cpus] [--url http://127.0.0.1:8501]

With --url (a server this script did not start) there is no server-side time: its lines say so and
the last line is ``p95_server_rerun_ms=nan``. Needs Chromium at /usr/bin/chromium (without it, it
says so and exits 0). The server is warmed up by one visit to Home first, so the first run's imports
are not counted (tests/e2e/test_cold_start.py is about a cold server). The browsers and the server
share this machine's CPUs. On a real deployment the browsers run on the users' machines, so here
they are confined to the last CPU at the lowest priority (harness.confine_browsers; --shared-cpus
lets them use every CPU) and leave the server a CPU of its own; the browser's times still include
its own rendering on its one CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e import harness  # noqa: E402

TARGET_MS = 1500  # p95 of the server's script run per change


def warm_up(base: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = harness.launch(playwright)
        try:
            harness.warm_up(browser, base)
        finally:
            browser.close()


def server_runs(log: Path) -> tuple[dict[str, list[float]], int]:
    """The server's finished script runs that followed a change, by page (ms), and how many runs
    ended early (cut short for another rerun, or stopped). A session's first run opened its page."""
    lines = log.read_text().splitlines() if log.exists() else []
    opened: set[str] = set()
    by_page: dict[str, list[float]] = {}
    cpu_by_page: dict[str, list[float]] = {}
    early = 0
    for run in map(json.loads, filter(None, lines)):
        if run["session"] not in opened:
            opened.add(run["session"])
        elif run["ended"] != "finished":
            early += 1
        else:
            by_page.setdefault(run["page"], []).append(run["ms"])
            cpu_by_page.setdefault(run["page"], []).append(run["cpu_ms"])
    return by_page, cpu_by_page, early


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each session keeps changing settings")
    parser.add_argument("--sessions", type=int, default=8, choices=range(1, 9), metavar="1..8")
    parser.add_argument("--think", type=float, default=1.0, help="seconds each session waits after a finished rerun")
    parser.add_argument("--shared-cpus", action="store_true", help="let the browsers use every CPU, as the server does")
    parser.add_argument("--url", help="a running server of this app (default: start one on a free port); "
                                      "no server-side time then")
    args = parser.parse_args()
    missing = harness.browser_missing()
    if missing:  # not a failure of the app: `make bench` goes on to the other benchmarks
        print(f"bench_load skipped: {missing}")
        return

    with tempfile.TemporaryDirectory(prefix="gradient-lab-bench-load-") as folder:
        log = Path(folder) / "runs.jsonl"
        server = (nullcontext(args.url.rstrip("/")) if args.url
                  else harness.streamlit_server(env={harness.RUN_LOG: str(log)}))
        with server as base:
            warm_up(base)
            sessions = harness.load_sessions(args.sessions)
            workload = harness.Workload(seconds=args.seconds, fresh_seeds=True, think=args.think,
                                        confine_browsers=not args.shared_cpus)
            result = harness.run_load(base, sessions, workload)
        by_page, cpu_by_page, early = server_runs(log)
    server_ms = [t for times in by_page.values() for t in times]

    print(f"workload: {len(sessions)} sessions, {workload.describe()}")
    for s in sessions:
        times = sorted(s.rerun_ms)
        median = f"{statistics.median(times):.0f} ms" if times else "-"
        print(f"{s.name:<11} {s.page:<17} {s.changes:3d} changes, median in the browser {median}, ends at "
              + ", ".join(f"{k}={v}" for k, v in {**s.query, **s.expected}.items()))
    print(f"{len(result.rerun_ms)} changes in {result.seconds:.0f} s over {len(sessions)} sessions; "
          f"server healthy after: {result.healthy_after}")
    if args.url:
        print("on the server: not measured (--url: a server this script did not start)")
    else:
        for page, times in sorted(by_page.items()):
            print(f"on the server, {page:<17} {len(times):3d} runs, median {statistics.median(times):.0f} ms, "
                  f"max {max(times):.0f} ms; CPU of its own, median {statistics.median(cpu_by_page[page]):.0f} ms")
        print(f"on the server, script run per change: {len(server_ms)} runs ({early} more ended early), "
              f"p50 {harness.percentile(server_ms, 50):.0f} ms, p95 {harness.percentile(server_ms, 95):.0f} ms, "
              f"max {max(server_ms, default=float('nan')):.0f} ms (target p95 ≤ {TARGET_MS} ms)")
    print(f"in the browser, change to finished rerun: p50 {result.percentile(50):.0f} ms, "
          f"p95 {result.percentile(95):.0f} ms, max {max(result.rerun_ms, default=float('nan')):.0f} ms")
    failed = result.problems + ([] if result.healthy_after else ["the server stopped answering /_stcore/health"])
    failed += [f"{s.name}: no change finished" for s in sessions if not s.changes]
    for problem in failed:
        print(f"PROBLEM {problem[:600]}")
    print(f"changes per second, all sessions together: {len(result.rerun_ms) / result.seconds:.2f}")
    print(f"p95_rerun_ms={result.percentile(95):.0f}")
    server_p95 = harness.percentile(server_ms, 95)
    print(f"p95_server_rerun_ms={server_p95:.0f}" if server_ms else "p95_server_rerun_ms=nan")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
