"""Gradient Lab's pytest plugin, registered through the ``pytest11`` entry point.

- ``--gradient-report=FILE.html`` writes one self-contained HTML report of every
  ``assert_gradients_match`` call of the session, passing and failing, each under its test's name
  and its Function's name, with its verdict and diagnosis.
- The ``gradient_lab_check`` fixture checks every family a module declares, as
  ``gradient-lab check`` does, and fails the test when a formula declared correct does not pass:

      def test_my_functions(gradient_lab_check):
          gradient_lab_check("my_functions.py", shape=(8, 16))

Loading the plugin imports neither torch nor streamlit: pytest loads it in every run of every
environment where Gradient Lab is installed, so the checks, the report and the fixture import what
they need when first used. Under pytest-xdist each worker's records travel to the controller
(``workeroutput``), which writes one report in the order of the tests.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

from . import observers

if TYPE_CHECKING:
    from .engine.report import GradientReport

OPTION = "--gradient-report"
OUTSIDE = "(outside a test)"
WORKER_RECORDS = "gradient_lab_records"  # the key of a worker's records in its workeroutput


@dataclass(frozen=True)
class Record:
    """One check of the session: where it ran, what it checked, what came out."""

    test: str  # the test's node id
    function: str  # the Function's (or formula's) name
    passed: bool
    verdict: str
    diagnosis: str
    second_order: str
    details: str  # the assertion's message for a failure, the verdict for a pass


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradient-lab")
    group.addoption(OPTION, metavar="FILE.html", default=None,
                    help="write one HTML report of every assert_gradients_match call (and gradient_lab_check) of the session")


class _Session:
    """The records of one pytest session (or of one xdist worker's part of it), and the test that
    is running."""

    def __init__(self, path: str | None) -> None:
        self.path, self.test = path, OUTSIDE
        self.records: list[Record] = []
        self.order: dict[str, int] = {}  # the tests' node ids in collection order, where xdist told them

    def observe(self, report: GradientReport, order: int, name: str) -> None:
        from . import testing  # loaded already: a check just ran

        second = report.second_order
        wrong = not report.passed(order)
        self.records.append(Record(
            test=self.test, function=name, passed=not wrong, verdict=report.verdict.summary,
            diagnosis=report.diagnosis.words if report.diagnosis and report.diagnosis.findings else "",
            second_order=second.outcome if second is not None and order == 2 else "not checked",
            details=testing.failure_message(report, order) if wrong else f"first order {report.verdict.summary}",
        ))

    def ordered(self) -> list[Record]:
        """The records in the order of the tests (a stable sort: a test's own checks keep theirs);
        checks outside a test last."""
        last = len(self.order)
        return sorted(self.records, key=lambda r: self.order.get(r.test, last + (r.test == OUTSIDE)))

    def write(self) -> Path:
        records = self.ordered()
        rows = "".join(
            f"<tr class='{'pass' if r.passed else 'fail'}'><td>{html.escape(r.test)}</td><td>{html.escape(r.function)}</td>"
            f"<td>{'pass' if r.passed else 'FAIL'}</td><td>{html.escape(r.second_order)}</td><td>{html.escape(r.diagnosis or '-')}</td></tr>"
            for r in records)
        details = "".join(f"<section><h2>{html.escape(r.test)}: {html.escape(r.function)}</h2><pre>{html.escape(r.details)}</pre></section>"
                          for r in records)
        failed = sum(not r.passed for r in records)
        page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Gradient Lab: gradient checks of a test session</title>"
                f"<style>{STYLE}</style></head><body><h1>Gradient checks of a test session</h1>"
                f"<p>{len(records)} checks, {failed} failed.</p><table><tr><th>test</th><th>Function</th><th>first order</th>"
                f"<th>second order</th><th>diagnosis</th></tr>{rows}</table>{details}</body></html>")
        path = Path(self.path or "")
        path.write_text(page, encoding="utf-8")
        return path


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; color: #222; padding: 0 1rem; }
table { border-collapse: collapse; width: 100%; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.35rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } .pass { background: #d9f2e3; } .fail { background: #f8d0c8; }
pre { white-space: pre-wrap; background: #f8f8f8; padding: 0.75rem; font-size: 0.85rem; }
"""

_KEY = pytest.StashKey[_Session]()


def _worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (its records go to the controller)."""
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    session = _Session(config.getoption(OPTION))
    config.stash[_KEY] = session
    observers.OBSERVERS.append(session.observe)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which sends workeroutput to the controller
def pytest_sessionfinish(session: pytest.Session) -> None:
    records = session.config.stash.get(_KEY, None)
    if records is not None and _worker(session.config):
        session.config.workeroutput[WORKER_RECORDS] = [asdict(r) for r in records.records]  # type: ignore[attr-defined]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    session = node.config.stash.get(_KEY, None)
    if session is not None and not session.order:  # every worker collects the same tests in the same order
        session.order = {test: k for k, test in enumerate(ids)}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    session = node.config.stash.get(_KEY, None)
    output = getattr(node, "workeroutput", None) or {}
    if session is not None:
        session.records.extend(Record(**r) for r in output.get(WORKER_RECORDS, ()))


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_KEY, None)
    if session is None:
        return
    if session.observe in observers.OBSERVERS:
        observers.OBSERVERS.remove(session.observe)
    if session.path and not _worker(config):
        written = session.write()
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"gradient report: {written} ({len(session.records)} checks)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    session = item.config.stash.get(_KEY, None)  # setup, call and teardown: a check in a fixture is the test's too
    if session is not None:
        session.test = item.nodeid
    try:
        return (yield)
    finally:
        if session is not None:
            session.test = OUTSIDE


@pytest.fixture
def gradient_lab_check(request: pytest.FixtureRequest) -> Callable[..., list]:
    """``gradient_lab_check(source, family=None, shape=(8, 16), dtype="float64", seed=0)``: every
    formula of every family ``source`` declares, checked as ``gradient-lab check`` checks it; fails
    the test (with each failure's details) when a formula declared correct does not pass, and
    returns the results. Each formula's report joins ``--gradient-report``."""
    from . import cli

    def run(source: str, *, family: str | None = None, shape: tuple[int, ...] = (8, 16), dtype: str = "float64",
            seed: int = 0) -> list:
        results = cli.check_module(str(source), family=family, shape=tuple(shape), dtype=dtype, seed=seed)
        session = request.config.stash.get(_KEY, None)
        for r in results:
            if session is not None and r.report is not None:
                session.observe(r.report, 2, f"{r.family} / {r.formula}")
        failed = [r for r in results if r.status == "FAILED"]
        if failed:
            pytest.fail("\n\n".join(f"{r.family} / {r.formula} is declared correct and fails:\n{r.details()}" for r in failed),
                        pytrace=False)
        return results

    return run
