"""What the real-browser tests, the screenshot script and the load benchmark share: a Streamlit
server of this app on a free local port, Debian's Chromium driven by Playwright, and ways to tell
when a rerun has finished, what the charts hold and what the widgets show.

No pytest here: ``docs/screenshots.py`` and ``benchmarks/bench_load.py`` import it too.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, urlencode, urlsplit

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("GRADIENT_LAB_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1440, "height": 900}

# The pages, as Streamlit's legacy pages/ mode serves them.
PAGES = {
    "home": "/",
    "gradient_check": "/Gradient_check",
    "gradient_field": "/Gradient_field",
    "loss_surface": "/Loss_surface",
    "perturbation_lab": "/Perturbation_lab",
    "training": "/Training",
    "anatomy": "/Anatomy",
}

APP = "[data-testid='stApp']"
IDLE = f"{APP}[data-test-script-state='notRunning']"

# Counts the script runs the server reports finished, with the page's clock, so that a rerun's time
# can be read without polling from Python. It reads the top-level fields of every ForwardMsg that
# arrives on Streamlit's websocket: field 6 is script_finished (0: finished, 3: a fragment finished;
# 2, cut short for another rerun, is not counted). The stApp element's data-test-script-state is
# not enough: under load both messages of a run arrive in one tick and the attribute never moves.
RUN_COUNTER = """
window.__runs = {finished: 0, times: []};
(() => {
  const Native = window.WebSocket;
  function varint(bytes, pos) {
    let value = 0, shift = 0, b;
    do { b = bytes[pos++]; value += (b & 0x7f) * Math.pow(2, shift); shift += 7; } while (b & 0x80);
    return [value, pos];
  }
  function inspect(data) {
    if (!(data instanceof ArrayBuffer)) return;
    const bytes = new Uint8Array(data);
    let pos = 0, tag, value;
    while (pos < bytes.length) {
      [tag, pos] = varint(bytes, pos);
      const field = Math.floor(tag / 8), wire = tag & 7;
      if (wire === 0) {
        [value, pos] = varint(bytes, pos);
        if (field === 6 && (value === 0 || value === 3)) {
          window.__runs.finished++;
          window.__runs.times.push(performance.now());
        }
      } else if (wire === 2) { [value, pos] = varint(bytes, pos); pos += value; }
      else if (wire === 1) pos += 8;
      else if (wire === 5) pos += 4;
      else return;
    }
  }
  window.WebSocket = function (...args) {
    const socket = new Native(...args);
    socket.addEventListener('message', event => inspect(event.data));
    return socket;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
})();
"""

# True once the script has finished and nothing is still being laid out.
IDLE_JS = """() => {
  const app = document.querySelector("[data-testid='stApp']");
  return !!app && app.getAttribute('data-test-script-state') === 'notRunning'
    && document.querySelectorAll("[data-testid='stSkeleton']").length === 0;
}"""

RERUN_DONE_JS = """(before) => {
  const app = document.querySelector("[data-testid='stApp']");
  return window.__runs.finished > before && !!app && app.getAttribute('data-test-script-state') === 'notRunning'
    && document.querySelectorAll("[data-testid='stSkeleton']").length === 0;
}"""

STATE_JS = """() => ({
  state: document.querySelector("[data-testid='stApp']")?.getAttribute('data-test-script-state'),
  skeletons: document.querySelectorAll("[data-testid='stSkeleton']").length,
  finished: window.__runs.finished, url: location.href,
  status: document.querySelector("[data-testid='stStatusWidget']")?.innerText,
  dialog: document.querySelector("[role='dialog']")?.innerText,
})"""

# Per drawn plotly chart: its widget key, how many traces it has, how many marks are drawn
# (trace groups and heatmap images) and a deterministic text of its data (trace uids are random,
# so they are left out) and title, to tell whether a chart changed.
CHARTS_JS = """() => Array.from(document.querySelectorAll("[data-testid='stPlotlyChart']")).map(chart => {
  const plot = chart.querySelector('.js-plotly-plot');
  const box = chart.closest("[data-testid='stElementContainer']");
  const key = box ? (box.className.match(/st-key-(\\S+)/) || [null, null])[1] : null;
  const data = plot && plot.data ? plot.data : [];
  const title = plot && plot._fullLayout && plot._fullLayout.title ? plot._fullLayout.title.text || '' : '';
  const text = JSON.stringify([data, title], (k, v) => k === 'uid' ? undefined
                 : (ArrayBuffer.isView(v) ? Array.from(v) : v));
  return {
    key: key,
    svg: chart.querySelectorAll('.main-svg').length,
    traces: data.length,
    marks: chart.querySelectorAll('g.trace, .cartesianlayer image, .heatmaplayer image').length,
    text: text,
  };
})"""

# Uncaught exceptions, and failures that lib/ui.py's guard turned into words ("<what> failed: <Type>: ...").
# Other error boxes are the app's own verdicts ("corrected fails: ...") or messages about bad input.
ERRORS_JS = """() => [
  ...Array.from(document.querySelectorAll("[data-testid='stException']")).map(e => 'exception: ' + e.innerText),
  ...Array.from(document.querySelectorAll("[data-testid='stAlertContentError']")).map(e => e.innerText)
     .filter(t => / failed: [A-Za-z_.]+(Error|Exception)\b/.test(t)).map(t => 'failure: ' + t),
]"""


def browser_missing() -> str | None:
    """Why no browser test can run here, or None."""
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (install Debian's: apt-get install -y chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements-dev.txt)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=timeout) as response:
            return response.status == 200 and response.read().strip() == b"ok"
    except OSError:
        return False


RUN_LOG = "GRADIENT_LAB_RUN_LOG"

# ``python -m streamlit``, with every script run timed on the server: Streamlit runs a page of the
# pages/ folder without app.py, but every run of either goes through one st.Page.run, so that is
# what is timed (time.perf_counter, in the server's own process) and appended to $GRADIENT_LAB_RUN_LOG
# as one JSON line: Streamlit's session id, the page, the milliseconds (and the CPU milliseconds of
# the script's own thread: the rest is waiting for the CPU or the GIL), and how the run ended
# ("finished", or the exception that ended it: RerunException, StopException).
RUN_TIMER = """
import json, os, threading, time
from streamlit.navigation.page import StreamlitPage
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.web.cli import main

path, lock, run = os.environ["GRADIENT_LAB_RUN_LOG"], threading.Lock(), StreamlitPage.run

def timed(page):
    start, cpu, ended = time.perf_counter(), time.thread_time(), "finished"
    try:
        return run(page)
    except BaseException as error:
        ended = type(error).__name__
        raise
    finally:
        ms, cpu_ms = (time.perf_counter() - start) * 1000, (time.thread_time() - cpu) * 1000
        ctx = get_script_run_ctx()
        line = {"session": ctx.session_id if ctx else None, "page": page.url_path or "home", "ms": round(ms, 1),
                "cpu_ms": round(cpu_ms, 1), "ended": ended}
        with lock, open(path, "a") as log:
            log.write(json.dumps(line) + "\\n")

StreamlitPage.run = timed
main(prog_name="streamlit")
"""


@contextmanager
def streamlit_server(port: int | None = None, ready_timeout: float = 90.0,
                     env: dict[str, str] | None = None) -> Iterator[str]:
    """``streamlit run app.py`` headless on 127.0.0.1, yielding its base URL once
    ``/_stcore/health`` answers ok; the server (its whole process group) is stopped after.

    ``env``: more environment variables for the server. With ``GRADIENT_LAB_RUN_LOG`` (a file)
    among them, the server times each script run into that file (``RUN_TIMER``, for the load
    benchmark); without it, the server is plain ``python -m streamlit``."""
    port = port or free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix="gradient-lab-e2e-", suffix=".log", delete=False)
    command = [
        sys.executable, *(("-c", RUN_TIMER) if env and env.get(RUN_LOG) else ("-m", "streamlit")), "run", "app.py",
        "--server.headless", "true", "--server.port", str(port), "--server.address", "127.0.0.1",
        "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
    ]
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, **env} if env else None)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while not healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"the Streamlit server did not come up on {url} "
                                   f"(exit code {process.poll()}); its log:\n{log.read()[-4000:]}")
            time.sleep(0.25)
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        log.close()
        os.unlink(log.name)


def deep_link(base: str, page: str, **query: object) -> str:
    path = PAGES.get(page, page)
    return f"{base}{path}" + (f"?{urlencode({k: str(v) for k, v in query.items()})}" if query else "")


def query_of(url: str) -> dict[str, str]:
    """The URL's query parameters, one value each."""
    return {k: v[-1] for k, v in parse_qs(urlsplit(url).query).items()}


def signature(charts: list[dict]) -> str:
    """One hash of every chart's data and title. Streamlit's frontend wraps a title in <b> once
    more each time it redraws the same chart, so the tags are left out."""
    text = [(c["key"], c["text"].replace("<b>", "").replace("</b>", "")) for c in charts]
    return hashlib.sha256(json.dumps(text).encode()).hexdigest()


def widget(key: str) -> str:
    """The element container of the widget (or chart, or dataframe) with this key."""
    return f".st-key-{key}"


# ---- the sync API (tests, screenshots) ---------------------------------------------------------------


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)


def new_page(browser):
    """A fresh context (its own Streamlit session) and page at 1440×900, counting finished runs."""
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(RUN_COUNTER)
    return context.new_page()


def warm_up(browser, base: str) -> None:
    """Open Home once, so that the first run's imports (torch, pandas) are done before the
    sessions that are measured or compared start."""
    page = new_page(browser)
    try:
        page.goto(base)
        wait_idle(page)
    finally:
        page.context.close()


def wait_idle(page, timeout: float = 90_000) -> None:
    page.wait_for_selector(IDLE, state="attached", timeout=timeout)
    page.wait_for_function(IDLE_JS, timeout=timeout)


def finished_runs(page) -> int:
    return page.evaluate("window.__runs.finished")


def wait_rerun(page, before: int, timeout: float = 90_000) -> None:
    """Until a run after the ``before``-th has finished and the page is idle."""
    page.wait_for_function(RERUN_DONE_JS, arg=before, timeout=timeout)


def charts(page, settle: float = 0.3, timeout: float = 30.0) -> list[dict]:
    """The drawn charts, once plotly has drawn each and two looks ``settle`` s apart agree."""
    deadline = time.monotonic() + timeout
    previous = None
    while True:
        now = page.evaluate(CHARTS_JS)
        drawn = all(c["svg"] and c["traces"] for c in now)
        if drawn and previous is not None and signature(now) == signature(previous):
            return now
        if time.monotonic() > deadline:
            return now
        previous = now if drawn else None
        time.sleep(settle)


def errors(page) -> list[str]:
    return page.evaluate(ERRORS_JS)


def open_expander_holding(page, key: str) -> None:
    """Sidebar widgets inside a closed expander are hidden: open it."""
    target = page.locator(widget(key))
    if not target.is_visible():
        page.locator(f"[data-testid='stExpander']:has({widget(key)}) summary").click()
        target.wait_for(state="visible")


def slider_value(page, key: str) -> str:
    """What the slider shows (its formatted value)."""
    return page.locator(f"{widget(key)} input[type='range']").get_attribute("aria-valuetext")


def press_slider(page, key: str, press: str = "ArrowRight") -> None:
    """Focus the slider's thumb and press a key: one step, one rerun."""
    open_expander_holding(page, key)
    thumb = page.locator(f"{widget(key)} input[type='range']")
    thumb.focus()
    thumb.press(press)


NAV_LABELS = {"home": "Home", "gradient_check": "Gradient check", "gradient_field": "Gradient field",
              "loss_surface": "Loss surface", "perturbation_lab": "Perturbation lab", "training": "Training",
              "anatomy": "Anatomy"}


def go_to(page, name: str, timeout: float = 90_000) -> None:
    """Click the sidebar's link to page ``name`` (a key of PAGES) and wait until that page has
    finished running, at its own address."""
    runs = finished_runs(page)
    page.locator("[data-testid='stSidebar']").get_by_role("link", name=NAV_LABELS[name], exact=True).click()
    path = PAGES[name]
    page.wait_for_function("path => window.location.pathname === path", arg=path, timeout=timeout)
    wait_rerun(page, runs, timeout)
    wait_idle(page, timeout)


def select_value(page, key: str) -> str:
    return page.locator(f"{widget(key)} input[role='combobox']").input_value()


def select_options(page, key: str) -> list[str]:
    """Open the selectbox and read its options (closes it again)."""
    page.locator(f"{widget(key)} input[role='combobox']").click()
    options = page.get_by_role("option")
    options.first.wait_for()
    names = [t.strip() for t in options.all_inner_texts()]
    page.keyboard.press("Escape")
    return names


def pick_option(page, key: str, option: str) -> None:
    """Open the selectbox and click one option of its list."""
    box = page.locator(f"{widget(key)} input[role='combobox']")
    box.evaluate("e => e.scrollIntoView({block: 'center'})")  # a list opened at the window's edge is not drawn
    box.click()
    page.get_by_role("option", name=option, exact=True).click()


def number_value(page, key: str) -> str:
    return page.locator(f"{widget(key)} input").first.input_value()


MAIN_TABLE = "[data-testid='stMain'] [data-testid='stDataFrame']"
CARDS = "[class*='st-key-card_']"  # Home's verdict cards


def cards_text(page) -> str:
    """Every verdict card's words (name, outcome, headline, numbers, details), in order, once the
    first is drawn, and the table of numbers (in its closed expander: all text, shown or not)."""
    page.locator(CARDS).first.wait_for(state="visible")
    tables = page.locator("[data-testid='stMain'] [data-testid='stTable']").all_text_contents()
    return "\n".join(page.locator(CARDS).all_text_contents() + tables)


def table_text(page, selector: str = MAIN_TABLE) -> str:
    """The first dataframe's cells (of the main area, by default), as its accessible grid lists them."""
    return page.locator(f"{selector} table").first.inner_text()


# ---- the load: many sessions at once, async API ---------------------------------------------------


@dataclass
class Session:
    """One browser page of the load: its page, its own settings, and what it changes repeatedly.

    ``slider``: (key, lowest, highest) steps the slider walks between with the arrow keys, counted
    from its deep-linked value. ``select``: (key, options) it cycles through. Neither should reach
    the widget's default, which the URL drops."""

    name: str
    page: str
    query: dict[str, str]
    slider: tuple[str, int, int] | None = None
    select: tuple[str, tuple[str, ...]] | None = None
    rerun_ms: list[float] = field(default_factory=list)
    changes: int = 0
    expected: dict[str, str] = field(default_factory=dict)  # widget key -> value shown, as last set
    expected_url: dict[str, str] = field(default_factory=dict)  # widget key -> its URL value then
    problems: list[str] = field(default_factory=list)


async def _a_wait_idle(page, timeout: float) -> None:
    await page.wait_for_selector(IDLE, state="attached", timeout=timeout)
    await page.wait_for_function(IDLE_JS, timeout=timeout)


async def _a_change(page, session: Session, action, timeout: float) -> None:
    """Do ``action`` (a coroutine factory) and wait for its rerun; records change-to-finish time."""
    before = await page.evaluate("window.__runs.finished")
    start = await page.evaluate("performance.now()")
    await action()
    try:
        await page.wait_for_function(RERUN_DONE_JS, arg=before, timeout=timeout)
    except Exception as error:  # noqa: BLE001 - say what the page looked like
        state = await page.evaluate(STATE_JS)
        raise RuntimeError(f"no finished rerun {timeout / 1000:.0f} s after a change ({state})") from error
    finished = await page.evaluate(f"window.__runs.times[{before}]")
    session.rerun_ms.append(finished - start)
    session.changes += 1


@dataclass(frozen=True)
class Workload:
    """How long each session keeps changing its settings: a fixed number of changes (the tests:
    correctness without a clock) or a number of seconds (the benchmark: throughput).

    ``fresh_seeds``: each change types a seed no session of this load has used yet into the
    sidebar, instead of walking the session's slider and select, so every rerun misses the cache.
    ``think``: seconds a session waits after each finished rerun before its next change."""

    changes: int | None = None
    seconds: float | None = None
    fresh_seeds: bool = False
    think: float = 0.0
    confine_browsers: bool = False  # the browser on one CPU at the lowest priority: the server keeps the other (benchmarks)

    def __post_init__(self) -> None:
        if (self.changes is None) == (self.seconds is None):
            raise ValueError("a workload is either a number of changes or a number of seconds")

    def describe(self) -> str:
        return (f"{self.changes} changes each" if self.changes is not None else f"{self.seconds:g} s each") \
            + (", a fresh seed each change" if self.fresh_seeds else "") + (f", {self.think:g} s think time" if self.think else "")


def _more_to_do(session: Session, workload: Workload, deadline: float) -> bool:
    if workload.changes is not None:
        return session.changes < workload.changes
    return time.monotonic() < deadline


async def _a_session(browser, base: str, session: Session, workload: Workload, timeout: float,
                     seeds: Iterator[int]) -> None:
    context = await browser.new_context(viewport=VIEWPORT)
    await context.add_init_script(RUN_COUNTER)
    page = await context.new_page()
    try:
        await page.goto(deep_link(base, session.page, **session.query))
        await _a_wait_idle(page, timeout)
        step, direction = 0, 1
        options = session.select[1] if session.select else ()
        turn = 0
        deadline = time.monotonic() + (workload.seconds or 0.0)
        while _more_to_do(session, workload, deadline):
            if workload.fresh_seeds:
                box = page.locator(f"{widget('seed')} input").first
                seed = str(next(seeds))

                async def type_seed(box=box, seed=seed):
                    await box.fill(seed)
                    await box.press("Enter")

                await _a_change(page, session, type_seed, timeout)
                session.expected["seed"] = seed
                session.expected_url["seed"] = query_of(page.url).get("seed", "")
            elif session.slider and (turn % 2 == 0 or not session.select):
                key, low, high = session.slider
                if not low <= step + direction <= high:
                    direction = -direction
                thumb = page.locator(f"{widget(key)} input[type='range']")
                if not await thumb.is_visible():
                    await page.locator(f"[data-testid='stExpander']:has({widget(key)}) summary").click()
                await thumb.focus()
                await _a_change(page, session, lambda: thumb.press("ArrowRight" if direction > 0 else "ArrowLeft"), timeout)  # noqa: B023 - called at once
                step += direction
                session.expected[key] = await thumb.get_attribute("aria-valuetext")
                session.expected_url[key] = query_of(page.url).get(key, "")
            elif session.select:
                key, _ = session.select
                option = options[(turn // 2 if session.slider else turn) % len(options)]
                box = page.locator(f"{widget(key)} input[role='combobox']")
                if await box.input_value() == option:  # a pick of the value shown would not rerun
                    turn += 1
                    continue
                await box.click()

                async def click(option=option):
                    await page.get_by_role("option", name=option, exact=True).click()

                await _a_change(page, session, click, timeout)
                session.expected[key] = option
                session.expected_url[key] = query_of(page.url).get(key, "")
            turn += 1
            found = await page.evaluate(ERRORS_JS)
            if found:
                session.problems.extend(found)
                break
            if workload.think:
                await asyncio.sleep(workload.think)
        await _a_check(page, session)
    except Exception as error:  # noqa: BLE001 - reported with the session's name
        session.problems.append(f"{type(error).__name__}: {error}")
    finally:
        await context.close()


async def _a_check(page, session: Session) -> None:
    """After the run: the page still shows this session's own settings, and its URL holds them."""
    await _a_wait_idle(page, 30_000)
    session.problems.extend(await page.evaluate(ERRORS_JS))
    url = query_of(page.url)
    for key, value in session.query.items():
        if key not in session.expected and url.get(key) != value:
            session.problems.append(f"URL has {key}={url.get(key)!r}, not its own {value!r}")
    for key in ("rows", "features", "seed"):
        if key in session.query and key not in session.expected:
            shown = await page.locator(f"{widget(key)} input").first.input_value()
            if shown != session.query[key]:
                session.problems.append(f"the sidebar shows {key}={shown!r}, not its own {session.query[key]!r}")
    for key, value in session.expected.items():
        if session.slider and key == session.slider[0]:
            shown = await page.locator(f"{widget(key)} input[type='range']").get_attribute("aria-valuetext")
        elif session.select and key == session.select[0]:
            shown = await page.locator(f"{widget(key)} input[role='combobox']").input_value()
        else:  # the seed, a number input
            shown = await page.locator(f"{widget(key)} input").first.input_value()
        if shown != value:
            session.problems.append(f"the widget {key} shows {shown!r}, not the {value!r} this session set")
        if url.get(key) != session.expected_url[key] or not url.get(key):
            session.problems.append(f"the URL has {key}={url.get(key)!r}, not the {session.expected_url[key]!r} "
                                    f"this session set")


@dataclass
class LoadResult:
    sessions: list[Session]
    healthy_after: bool
    seconds: float

    @property
    def rerun_ms(self) -> list[float]:
        return [t for s in self.sessions for t in s.rerun_ms]

    def percentile(self, q: float) -> float:
        return percentile(self.rerun_ms, q)

    @property
    def problems(self) -> list[str]:
        return [f"{s.name}: {p}" for s in self.sessions for p in s.problems]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (1..100) of ``values``, NaN for none."""
    times = sorted(values)
    if not times:
        return float("nan")
    if len(times) == 1:
        return times[0]
    return statistics.quantiles(times, n=100, method="inclusive")[int(q) - 1] if q < 100 else times[-1]


async def _a_load(base: str, sessions: list[Session], workload: Workload, timeout: float) -> LoadResult:
    from playwright.async_api import async_playwright

    start = time.monotonic()
    # one counter for all sessions, from a random start: every seed typed is new, even on a server
    # that an earlier load already warmed (--url)
    seeds = itertools.count(random.randrange(1, 2**30))
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        try:
            await asyncio.gather(*(_a_session(browser, base, s, workload, timeout, seeds) for s in sessions))
        finally:
            await browser.close()
    return LoadResult(sessions, healthy(base, timeout=10), time.monotonic() - start)


def confine_browsers() -> None:
    """The calling thread, and so every process it starts from now on (the Playwright driver and
    its browser, their renderers), onto the machine's last CPU at the lowest priority. On a real
    deployment the browsers run on the users' machines: confined here, they leave the server a
    CPU of its own, so the server's times are the server's. Call it from a thread of its own."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(0, cpus[-1:])  # Linux: 0 is the calling thread
    os.setpriority(os.PRIO_PROCESS, 0, 19)  # likewise per thread; Chromium may raise its renderers' again


def run_load(base: str, sessions: list[Session], workload: Workload, timeout: float = 120_000) -> LoadResult:
    """Every session at once in one browser (a context each), changing its settings as much as
    ``workload`` says and waiting up to ``timeout`` ms for each change's rerun; run in a thread of
    its own so that it never meets another event loop."""
    import threading

    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            if workload.confine_browsers:
                confine_browsers()
            outcome["result"] = asyncio.run(_a_load(base, sessions, workload, timeout))
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=work, name="load")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["result"]  # type: ignore[return-value]


def load_sessions(count: int) -> list[Session]:
    """``count`` sessions (up to 8), each on its own page or with its own rows and seed, each
    walking its own slider and select; none of the values walked is a widget's default."""
    sessions = [
        Session("field A", "gradient_field", {"rows": "2", "features": "6", "seed": "1", "field_resolution": "7"},
                slider=("field_resolution", 0, 4), select=("field_plane", ("gradient", "coordinates"))),
        Session("training A", "training", {"rows": "3", "features": "5", "seed": "2", "train_steps": "40"},
                slider=("train_steps", 0, 5), select=("train_optimizer", ("Adam", "SGD + momentum"))),
        Session("surface A", "loss_surface", {"rows": "2", "features": "4", "seed": "3", "surface_resolution": "15"},
                slider=("surface_resolution", 0, 4), select=("surface_plane", ("gradient", "coordinates"))),
        Session("check A", "gradient_check", {"rows": "3", "features": "4", "seed": "4", "check_formula": "corrected"},
                slider=("step", 1, 4), select=("check_pair", ("analytic-numerical", "reference-numerical"))),
        Session("field B", "gradient_field", {"rows": "5", "features": "3", "seed": "5", "field_resolution": "20"},
                slider=("field_resolution", -4, 0), select=("field_plane", ("coordinates", "gradient"))),
        Session("training B", "training", {"rows": "4", "features": "3", "seed": "6", "train_steps": "90"},
                slider=("train_steps", -5, 0), select=("train_optimizer", ("SGD + momentum", "Adam"))),
        Session("lab", "perturbation_lab", {"rows": "3", "features": "3", "seed": "7", "lab_kind": "angle"},
                slider=("noise1", 1, 4), select=("lab_metric", ("cosine to reference", "max relative error"))),
        Session("home", "home", {"rows": "2", "features": "7", "seed": "8", "dtype": "float32"},
                slider=("eps", 1, 3), select=None),
    ]
    return sessions[:count]
