"""A verdict card: what a newcomer reads in five seconds, from a gradient report.

The badge and the name; a headline of a few words that says what is wrong in the user's terms
(the diagnosis's findings, each cut short) or that it is right; two or three key numbers; which
small picture tells the story (the entries against the truth where the diagnosis is about values,
the error map where it is about where they are wrong); and the sentences behind it, each its own
line, for "details". Later checks (conditions, parity, precision, provenance) add lines to
``details``. Plain data: no streamlit, no plotly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

import numpy as np

from ..engine.finding import TRUTH_WORDS, tolerances_text
from ..engine.report import Determinism, GradientReport, Precision, times
from ..engine.kernels import describe_writes, inputs_written, writes_by_kind
from ..triton import INTERPRETER_SEMANTICS

if TYPE_CHECKING:
    from ..engine.report import Parity

HEADLINE_WORDS = 12  # at most, in a card's headline
MAP_KINDS = ("position", "region", "not finite", "summed shape")  # stories about where: the error map shows them
PICTURES = ("scatter", "error map")


@dataclass(frozen=True)
class Number:
    label: str
    value: str
    help: str


@dataclass(frozen=True)
class Card:
    formula: str
    outcome: str  # the first-order verdict's: "pass", "fail", "no verdict"
    headline: str  # at most HEADLINE_WORDS words
    numbers: tuple[Number, ...]
    picture: str  # one of PICTURES
    details: tuple[str, ...]  # sentences, each starting with a capital
    second_order: tuple[str, str] | None  # (outcome, sentence) where it was checked
    conditions: tuple[str, str] | None = None  # (outcome, line) for the conditions (``conditions_line``), where they ran
    precision: tuple[str, str] | None = None  # (outcome, line) below float64 (``precision_line``)
    stages: tuple[tuple[str, str], ...] = ()  # (outcome, line) of each other stage that ran (``stage_lines``): does it train, …
    pending: str = ""  # the stages still running beside a first-order verdict shown early (``pending_line``); "" once all ran


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _cut(text: str, words: int = HEADLINE_WORDS) -> str:
    parts = text.split()
    return text if len(parts) <= words else " ".join(parts[:words]) + "…"


def headline(report: GradientReport) -> str:
    """What is wrong in a few words, or that it is right."""
    verdict = report.verdict
    if verdict.passed and report.precision is not None:
        within = "within rounding" if report.precision.baseline_kind == "rounding" else "as precise as PyTorch's own"
        return f"Right, and {within} in {report.precision.dtype}"
    if verdict.passed:
        return "Right on every entry"
    if verdict.outcome == "no verdict":
        return "Nothing could be compared: the truth is not finite"
    diagnosed = report.diagnosis.headline if report.diagnosis is not None and report.diagnosis.findings else ""
    if precision_failed(report):
        precision = report.precision
        worst = precision.worst
        if worst is not None and worst.first_non_finite >= 0:
            return _cut(f"Not finite in {precision.dtype} where PyTorch's own is")
        base = "the rounded truth's" if precision.baseline_kind == "rounding" else "PyTorch's own"
        return _cut(f"Loses precision in {precision.dtype}: {times(precision.ratio)} {base} error")
    if verdict.condition and verdict.failure is None:
        return _cut(f"Wrong when {verdict.condition}")
    if verdict.failure is not None:
        failure = verdict.failure
        raised = f"the reference raises {failure.kind}" if failure.stage == "reference" else f"raises {failure.kind} in {failure.stage}"
        raised += f" when {failure.when}" if failure.when else ""
        # under a condition alone, the condition is the story: the plain diagnosis is about something else
        return _cut(_capital(" · ".join(filter(None, [diagnosed if not verdict.condition else "", raised]))))
    if verdict.forward:
        return "Its forward differs from the reference's"
    if diagnosed:
        return _cut(_capital(diagnosed))
    return "Wrong Jacobian entries, no single cause found"


def precision_failed(report: GradientReport) -> bool:
    """The verdict fails on precision alone (right in float64 on the same values)."""
    precision = report.precision
    return precision is not None and not precision.passed and report.verdict.finding == precision.finding() and bool(report.verdict.finding)


def precision_line(report: GradientReport) -> tuple[str, str] | None:
    """Below float64, the precision verdict in one line, with its outcome: the ratio to the baseline's error."""
    return precision_verdict_line(report.precision)


def precision_verdict_line(precision: Precision | None) -> tuple[str, str] | None:
    """``precision_line`` of a precision verdict on its own, where no report is at hand (a notebook shows one)."""
    if precision is None:
        return None
    if precision.failure:
        return "fail", _capital(precision.failure)
    worst = precision.worst
    if worst is None:
        return None
    base = "PyTorch's own" if precision.baseline_kind != "rounding" else "the truth rounded"
    if worst.first_non_finite >= 0:
        words = f"{precision.dtype}: not finite at {worst.element(worst.first_non_finite)}, where {base} is"
    else:
        what = "the output" if worst.name == "output" else worst.name
        words = (f"{precision.dtype}: {what}'s largest error is {times(worst.ratio)} {base} error (allowed {precision.k:g}× plus a "
                 f"floor), SNR {worst.formula.snr_db:.1f} dB")
    return ("pass" if precision.passed else "fail"), words


def _worst_error(report: GradientReport) -> float:
    """The largest |analytic − truth| over the compared entries, in units of the truth's scale."""
    verdict = report.jacobian
    if verdict is None or not verdict.entries:
        return math.nan
    worst = 0.0
    for e, scale in zip(verdict.entries, verdict.scales or [None] * len(verdict.entries)):
        truth = e.values.get("reference", e.values.get("numerical"))
        if truth is None or not e.rows.size:
            continue
        gap = np.abs(e.values["analytic"] - truth)
        gap = gap[np.isfinite(gap)]
        if gap.size:
            worst = max(worst, float(gap.max()) / (scale or 1.0))
    return worst


def numbers(report: GradientReport) -> tuple[Number, ...]:
    """The key numbers. Beside a failing verdict they come from its finding (the comparison that
    failed, whatever upstream showed it), so they show the error the verdict found; beside a
    passing one, from what was covered."""
    coverage = report.jacobian.coverage if report.jacobian is not None else None
    found = report.verdict.found
    precision = report.precision
    lead = [Number(f"error vs PyTorch in {precision.dtype}", times(precision.ratio),
                   f"The formula's largest error in {precision.dtype} over that of {precision.baseline_words}, both against float64 "
                   f"from the same values; it passes up to {precision.k:g}× plus a noise floor")] if precision is not None else []
    if found is not None and found.evidence:
        worst, cosine = found.worst_error, found.cosine
        where = f"the values that showed the failure ({found.shown_by})"
    else:
        worst, cosine, where = _worst_error(report), report.cosine, "the compared Jacobian entries"
    shown = "not finite" if worst == math.inf else "—" if not math.isfinite(worst) else f"{worst:.2g}×" if worst >= 1e-3 else f"{worst:.0e}×"
    worst_number = Number("worst error", shown,
                          f"The largest |formula − truth| over {where}, as a multiple of the truth's largest |entry|")
    found_numbers = [*lead, *([] if precision is not None else [worst_number]),  # below float64 the ratio is the error that matters
                     Number("cosine to truth", "—" if not math.isfinite(cosine) else f"{cosine:.3f}",
                            f"Between the formula's values and the truth's over {where}: 1 points the right way, −1 is flipped")]
    if coverage is not None:
        found_numbers.append(Number("entries checked", f"{coverage.entries:,}",
                                    f"Every Jacobian entry: {coverage.compared:,} one by one, the rest by {coverage.probes} random probes"))
    return tuple(found_numbers)


def picture(report: GradientReport) -> str:
    """The error map where the diagnosis is about where it is wrong; else the entries against the
    truth (beside a failing verdict, the values of its finding)."""
    kinds = [f.kind for f in report.diagnosis.findings] if report.diagnosis is not None else []
    if precision_failed(report):  # right as maths: the map of where it loses bits in the dtype says more than the entries
        return "error map"
    if kinds and kinds[0] in MAP_KINDS:
        return "error map"
    found = report.verdict.found
    if found is not None and found.evidence:
        return "scatter"
    if report.jacobian is None or not any(e.rows.size for e in report.jacobian.entries):
        return "error map"
    return "scatter"


def details(report: GradientReport) -> tuple[str, ...]:
    """The evidence behind the headline, one sentence a line."""
    verdict, lines = report.verdict, []
    if verdict.condition:
        lines.append(_capital(f"it fails when {verdict.condition}: {verdict.finding}") + ".")
    if verdict.forward:
        lines.append(_capital(verdict.forward) + ".")
    if verdict.failure is not None and not verdict.condition:
        lines.append(_capital(f"{verdict.failure.whose} raised {verdict.failure}") + ".")
    if report.diagnosis is not None:
        lines += [_capital(f"{f.words}: {f.evidence}") + "." for f in report.diagnosis.findings]
    if verdict.finding and not verdict.condition:
        lines.append(_capital(verdict.finding) + ".")
    if report.precision is not None and not precision_failed(report):
        lines.append(_capital(report.precision.describe()) + ".")
    if report.provenance is not None:  # where the first non-finite value came from
        lines.append(f"Not finite: {report.provenance.describe()}.")
    lines += [f"{line}." for _, line in stage_lines(report)]  # the other stages, in full
    if verdict.coverage:
        lines.append(("Without it, checked " if verdict.condition else "Checked ") + verdict.coverage + ".")
    if report.conditions is not None and (line := conditions_line(report)) is not None:
        lines.append(f"{line[1]}: {report.conditions.covered}.")
        lines += [_capital(note) + "." for note in report.conditions.notes]
    coverage = report.jacobian.coverage if report.jacobian is not None else None
    if coverage is not None:
        truths = [TRUTH_WORDS[coverage.role if t == "reference" else t] for t in coverage.truths]
        lines.append(_capital(f"an entry passes within {tolerances_text(report.tolerances, coverage.truths[0], 1.0, coverage.role)} "
                              f"of the truth ({' and '.join(truths)}), atol in units of the truth's largest |entry|") + ".")
    return tuple(lines)


def conditions_line(report: GradientReport) -> tuple[str, str] | None:
    """The conditions in one line, with its outcome: "fail" (which it fails under), "pass" (it holds
    under all), or "as plain" (none changes the plain verdict's failure)."""
    conditions = report.conditions
    if conditions is None:
        return None
    ran, failed = conditions.ran, conditions.failed
    if failed:
        return "fail", f"Fails under {len(failed)} of {len(ran)} conditions: {'; '.join(r.name for r in failed)}"
    if all(r.outcome == "pass" for r in ran):
        return "pass", f"Holds under all {len(ran)} conditions"
    return "as plain", f"No condition changes its verdict ({len(ran)} tried)"


def determinism_line(determinism: Determinism) -> tuple[str, str]:
    """The determinism check in one line, with its outcome: "fail" where the backward varies from run
    to run or a row's gradient depends on its batch (not by design)."""
    return ("fail" if determinism.flagged else "pass"), _capital(determinism.describe())


# stages every front end shows in a line or section of its own; any other stage is said through ``stage_lines``
OWN_LINES = ("second_order", "conditions", "precision", "parity", "provenance", "determinism")


def drawn_upstream(report: GradientReport) -> str:
    """The upstream gradient the maps draw, in words: the one asked for (the sidebar's) or, where the
    loss's hid the failure, the one that showed it (the finding's own probe, a zero one, else the
    first random probe)."""
    found = report.verdict.found
    if report.upstream != "finding" or found is None:
        asked = {"loss": "the loss's", "ones": "the all-ones", "random": "a random (seeded)", "given": "the given"}
        return f"{asked.get(report.upstream, report.upstream)} upstream gradient (sidebar)"
    which = "a zero upstream gradient" if found.kind == "zero upstream" else f"random upstream gradient {found.probe or 1}"
    return f"{which}, which shows the failure (the loss's upstream gradient hides it)"


def stage_title(name: str) -> str:
    """A stage's name as a heading: "does it train" for ``training``."""
    return {"training": "Does it train", "second_order": "Second order"}.get(name, name.replace("_", " ").capitalize())


def stage_lines(report: GradientReport, skip: tuple[str, ...] = OWN_LINES, short: bool = False) -> tuple[tuple[str, str], ...]:
    """(outcome, line) of each stage that ran, in the stages' order, but those said elsewhere
    (``skip``): every stage's result has an ``outcome`` and a ``describe()``, and may have a
    shorter ``line()`` for a card (``short``); a kernel's line (how it was run) first."""
    said = lambda result: (getattr(result, "line", None) if short else None) or result.describe  # noqa: E731
    kernel = kernel_line(report, short=short)
    return (*((("kernel", kernel),) if kernel else ()),
            *((result.outcome, _capital(said(result)())) for name, result in report.stages.items() if name not in skip))


def kernel_line(report: GradientReport, short: bool = False) -> str | None:
    """How a fused kernel was run (``engine.kernels``): a graph of its own per backward call, its
    native precision and why, Triton's interpreter, and the writes it makes that autograd cannot see
    (named, never a wrong gradient); None for other formulas. ``short``: a card's few words, the
    whole of it in the details."""
    kernel = report.kernel
    if kernel is None:
        return None
    native = kernel.native
    detected = " (detected: it launches Triton kernels)" if kernel.detected else ""
    if short:
        line = "A kernel" + detected + (f", judged in {native.dtype} (its native precision)" if native is not None else "")
        line += ", under Triton's interpreter" if kernel.interpreted else ""
        writes = [_WRITES_SHORT[target](inputs_written(group)) for target, group in writes_by_kind(kernel.writes)]
        return line + (f". Writes autograd cannot see: {'; '.join(writes)}" if writes else "")
    words = [f"A kernel{detected}: each backward call had a fresh forward on fresh copies of the inputs"]
    if native is not None:
        why = (f"its float64 run raises in {native.stage} ({native.kind}: {native.message})" if native.stage else
               f"its float64 output is {native.error:.1e} (relative) from the reference's, {native.dtype}'s rounding")
        words.append(f"judged in {native.dtype}, its native precision, against the float64 truth on the same values: {why}")
    if kernel.interpreted:
        words.append(INTERPRETER_SEMANTICS)
    words += [sentence for _, sentence in describe_writes(kernel.writes)]
    return "; ".join(words)


_WRITES_SHORT = {"input": lambda names: f"into {names} in forward",
                 "saved tensor": lambda names: f"into {names} in backward, saved for it",
                 "grad_output": lambda names: "into grad_output in backward", "a second backward": lambda names: "a second backward differs"}


def pending_line(report: GradientReport) -> str:
    """The stages a first-order verdict shown early still waits for: "Checking second order, conditions and does it train…"."""
    names = [stage_title(name).lower() for name in report.pending]
    if not names:
        return ""
    return f"Checking {' and '.join([', '.join(names[:-1]), names[-1]] if len(names) > 1 else names)}…"


def card(report: GradientReport) -> Card:
    second = report.second_order
    return Card(report.formula, report.verdict.outcome, headline(report), numbers(report), picture(report), details(report),
                (second.outcome, _capital(second.summary) + ".") if second is not None else None, conditions_line(report),
                precision_line(report), stage_lines(report, short=True), pending_line(report))


CONDITION_COLUMNS = ("condition", "outcome", "worst entry", "why")
PARITY_COLUMNS = ("way of running it", "outcome", "worst entry", "why", "seconds")


@overload
def parity_line(parity: None) -> None: ...
@overload
def parity_line(parity: Parity) -> tuple[str, str]: ...
def parity_line(parity: Parity | None) -> tuple[str, str] | None:
    """The grid in one line, with its outcome: "fail" (a path differs or raises), "as plain"
    (every path gives eager's gradient, which is wrong), or "pass" (every supported path agrees)."""
    if parity is None:
        return None
    parted = parity.parted
    outcome = "fail" if parted else "as plain" if any(c.outcome == "as eager" for c in parity.cells) else "pass"
    return outcome, _capital(parity.describe())


def parity_rows(parity) -> list[dict]:
    """The Parity table: one row per way of running the formula, in the grid's order."""
    if parity is None:
        return []
    return [dict(zip(PARITY_COLUMNS, (c.label, c.outcome, c.worst or "—",
                                      _capital(" ".join(w for w in (c.finding, c.note) if w)) if c.finding or c.note else "—",
                                      round(c.seconds, 2))))
            for c in parity.cells]


def condition_rows(report: GradientReport) -> list[dict]:
    """The Conditions table: one row per condition the verdict ran under, the failing ones first."""
    if report.conditions is None:
        return []
    order = {"fail": 0, "as plain": 1, "pass": 2, "not applicable": 3}
    results = sorted(report.conditions.results, key=lambda r: order.get(r.outcome, 4))
    return [dict(zip(CONDITION_COLUMNS, (r.name, r.outcome, r.worst or "—", _capital(r.finding) if r.finding else "—")))
            for r in results]


# the Parity table's rows, coloured by outcome: a difference or a raise stands out, a limit stays quiet
PARITY_COLOURS = {"agrees": "#dcf3e4", "differs": "#f9d5d5", "raises": "#fde4c4", "as eager": "#ececec",
                  "not supported": "#f5f5f5", "skipped": "#f5f5f5"}


def styled_parity(rows: list[dict]):
    """``parity_rows`` as a pandas Styler, each row coloured by its outcome (``PARITY_COLOURS``)."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(PARITY_COLUMNS))
    return frame.style.apply(lambda row: [f"background-color: {PARITY_COLOURS.get(row['outcome'], '')}"] * len(row), axis=1)


PRECISION_COLUMNS = ("of", "verdict", "error vs baseline", "largest error", "baseline's", "allowed", "max ULP", "baseline's max ULP",
                     "relative RMSE", "baseline's RMSE", "SNR dB", "baseline's SNR dB", "mismatch", "baseline's mismatch")


def precision_rows(precision) -> list[dict]:
    """The Precision table: one row per input's gradient and one for the output, formula beside baseline."""
    def number(value: float, spec: str = ".3g") -> str:
        return "∞" if value == math.inf else "−∞" if value == -math.inf else "—" if not math.isfinite(value) else format(value, spec)

    def share(value: float) -> str:
        return "—" if not math.isfinite(value) else f"{100 * value:.2g}%"

    rows = []
    for r in precision.judged:
        f, b = r.formula, r.baseline
        rows.append(dict(zip(PRECISION_COLUMNS, (
            "output" if r.name == "output" else f"gradient of {r.name}", "pass" if r.passed else "fail", times(r.ratio),
            number(f.max_error), number(b.max_error), number(r.allowed), number(f.max_ulp), number(b.max_ulp), number(f.rel_rmse, ".2g"),
            number(b.rel_rmse, ".2g"), number(f.snr_db, ".1f"), number(b.snr_db, ".1f"), share(f.mismatch), share(b.mismatch)))))
    return rows
