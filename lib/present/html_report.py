"""The command line's static report: one self-contained HTML file to attach to a pull request.

The verdicts table, then for every formula that failed (declared correct or not) its diagnosis
with the evidence, the analytic-against-truth scatter, each input's gradient and error maps, and
the Taylor test. Plotly's own HTML for each figure, its JavaScript inlined once at the top, so the
file opens offline and draws with no network.
"""

from __future__ import annotations

import html
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import plotly.graph_objects as go

from .cards import (CONDITION_COLUMNS, OWN_LINES, PARITY_COLUMNS, PRECISION_COLUMNS, condition_rows, conditions_line, parity_line,
                    parity_rows, precision_line, precision_rows, stage_title)
from ..app import views
from ..errors import LabError
from .figures.check import diagnosis_scatter, error_heatmap, gradient_heatmaps, stage_curves, step_sweep_figure
from .figures.precision import ulp_histogram

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; color: #222; padding: 0 1rem; }
table { border-collapse: collapse; width: 100%; margin: 1rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.35rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
.ok, .caught { background: #d9f2e3; } .FAILED { background: #f8d0c8; } .warning { background: #fbeec2; }
pre { white-space: pre-wrap; background: #f8f8f8; padding: 0.75rem; font-size: 0.85rem; }
section { border-top: 2px solid #ccc; margin-top: 2rem; }
"""


def _figure(fig: go.Figure | None, first: list[bool]) -> str:
    if fig is None:
        return ""
    include = first[0]
    first[0] = False  # plotly.js once, inlined: the file must draw offline
    return fig.to_html(full_html=False, include_plotlyjs=include, config={"displaylogo": False})


def _table(results) -> str:
    head = ("family", "formula", "declared", "status", "first order", "second order", "diagnosis", "PyTorch's checks")
    rows = []
    for r in results:
        cells = (r.family, r.formula, "correct" if r.correct else "buggy", r.status, r.outcome, r.second_order,
                 r.why or "-", r.conformance_counts())
        rows.append(f'<tr class="{html.escape(r.status)}">' + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"


def _section(result, first: list[bool]) -> str:
    parts = [f"<section><h2>{html.escape(result.family)} / {html.escape(result.formula)}: {html.escape(result.status)}</h2>",
             f"<pre>{html.escape(result.details())}</pre>"]
    report = result.report
    if report is None:
        return "".join(parts) + "</section>"
    if report.diagnosis and report.diagnosis.findings:
        parts.append("<h3>Diagnosis</h3><ul>" + "".join(f"<li><b>{html.escape(f.words)}</b>: {html.escape(f.evidence)}</li>"
                                                      for f in report.diagnosis.findings) + "</ul>")
    rows = condition_rows(report)
    if rows and (line := conditions_line(report)) is not None:
        parts.append(f"<h3>Conditions: {html.escape(line[1])}</h3><table><tr>"
                     + "".join(f"<th>{html.escape(h)}</th>" for h in CONDITION_COLUMNS) + "</tr>"
                     + "".join(f'<tr class="{"FAILED" if row["outcome"] == "fail" else "ok"}">'
                               + "".join(f"<td>{html.escape(str(row[h]))}</td>" for h in CONDITION_COLUMNS) + "</tr>" for row in rows)
                     + "</table>")
    if result.parity is not None:  # however it is run: compile, torch.func, double backward
        parts.append(f"<h3>Parity: {html.escape(parity_line(result.parity)[1])}</h3><table><tr>"
                     + "".join(f"<th>{html.escape(h)}</th>" for h in PARITY_COLUMNS) + "</tr>"
                     + "".join(f'<tr class="{"FAILED" if row["outcome"] in ("differs", "raises") else "ok"}">'
                               + "".join(f"<td>{html.escape(str(row[h]))}</td>" for h in PARITY_COLUMNS) + "</tr>"
                               for row in parity_rows(result.parity)) + "</table>")
        if result.parity.graph_breaks:
            parts.append("<p>Graph breaks: " + html.escape("; ".join(result.parity.graph_breaks)) + "</p>")
        if result.parity.opcheck:
            parts.append("<p>torch.library.opcheck: " + html.escape("; ".join(
                f"{t.name} {'passes' if t.passed else 'fails: ' + t.message}" for t in result.parity.opcheck)) + "</p>")
    if report.provenance is not None:
        parts.append(f"<h3>Where the NaN or Inf was born</h3><p>{html.escape(report.provenance.describe())}</p>")
    if result.determinism is not None:
        parts.append(f"<h3>Determinism</h3><p>{html.escape(result.determinism.describe())}</p>")
    for name, stage in report.stages.items():  # the other stages, each its line and its curves
        if name not in OWN_LINES:
            parts.append(f"<h3>{html.escape(stage_title(name))}: {html.escape(stage.outcome)}</h3><p>{html.escape(stage.describe())}</p>")
            figure = stage_curves(stage, stage_title(name))
            if figure is not None:
                parts.append(_figure(figure, first))
    parts.append(_precision(report, first))
    parts.append(_figure(diagnosis_scatter(report), first))
    for comparison in report.inputs:
        parts.append(_figure(gradient_heatmaps(comparison), first))
        parts.append(_figure(error_heatmap(comparison, tolerances=report.tolerances), first))
    if result.case is not None:
        try:
            parts.append("<h3>Taylor test</h3>" + _figure(step_sweep_figure(views.gradient_sweep(result.case, result.formula)), first))
        except LabError as error:
            parts.append(f"<p>Taylor test not run: {html.escape(str(error))}</p>")
    return "".join(parts) + "</section>"


def _precision(report, first: list[bool]) -> str:
    """Below float64: the precision table and each gradient's ULP histogram, formula beside baseline."""
    precision = report.precision
    if precision is None:
        return ""
    line = precision_line(report)
    parts = [f"<h3>Precision: {html.escape(line[1] if line else precision.describe())}</h3>"]
    if precision.failure:
        return parts[0] + f"<p>{html.escape(precision.failure)}</p>"
    rows = precision_rows(precision)
    parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in PRECISION_COLUMNS) + "</tr>"
                 + "".join(f'<tr class="{"ok" if row["verdict"] == "pass" else "FAILED"}">'
                           + "".join(f"<td>{html.escape(str(row[h]))}</td>" for h in PRECISION_COLUMNS) + "</tr>" for row in rows)
                 + "</table>")
    parts += [_figure(ulp_histogram(r, precision.dtype), first) for r in precision.judged]
    return "".join(parts)


def _precision_section(result, first: list[bool]) -> str:
    """A passing formula's precision and determinism: what a kernel author reads even when nothing fails."""
    repeated = f"<h3>Determinism</h3><p>{html.escape(result.determinism.describe())}</p>" if result.determinism is not None else ""
    return (f"<section><h2>{html.escape(result.family)} / {html.escape(result.formula)}: {html.escape(result.status)}</h2>"
            + repeated + _precision(result.report, first) + "</section>")


def report_html(results: Sequence, source: str = "") -> str:
    first = [True]
    failing = [r for r in results if not r.passed]
    precise = [r for r in results if r.passed and r.report is not None and (r.report.precision is not None or r.determinism is not None)]
    sections = "".join(_section(r, first) for r in failing) + "".join(_precision_section(r, first) for r in precise)
    if first[0] and not precise:  # nothing failed, nothing drawn: no plotly.js needed
        sections = "<p>Every formula passed: nothing to draw.</p>"
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    case = results[0].case if results and results[0].case else None
    where = f" on inputs of shape {case.shape}, {case.dtype}, seed {case.seed}" if case else ""
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Gradient Lab report: {html.escape(source)}</title>"
            f"<style>{STYLE}</style></head><body><h1>Gradient Lab report</h1>"
            f"<p>{html.escape(source)}{html.escape(where)}, written {when}. Each formula's backward is checked against "
            "autograd through the family's reference and against finite differences: every Jacobian entry, and the "
            "second order.</p>" + _table(results) + sections + "</body></html>")


def write_report(results: Sequence, path: str | Path, source: str = "") -> Path:
    path = Path(path)
    path.write_text(report_html(results, source), encoding="utf-8")
    return path
