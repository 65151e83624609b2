"""Results in a notebook (Jupyter, VS Code): a report as its verdict card, the parity, precision and
determinism results as their line, in self-contained HTML; and each as one line in a console.

The words are the card's (``lib.present.cards``) and the picture is the card's SVG
(``lib.present.figures.cards``), so a notebook says what the dashboard and the HTML report say. No
script, no plotly.js and no address: a notebook saved with its outputs shows them offline, and one
opened untrusted (Jupyter strips its scripts) shows them whole. The engine's ``_repr_html_`` and
``__repr__`` import this module only when a result is shown.
"""

from __future__ import annotations

from html import escape

from ..engine.report import LEADS, WRITERS, Determinism, GradientReport, Parity, Precision
from .cards import (PARITY_COLUMNS, PRECISION_COLUMNS, Card, card, determinism_line, headline, parity_line, parity_rows,
                    precision_rows, precision_verdict_line)

# (background, text) per colour, and a mark per outcome: a verdict reads without telling red from green
COLOURS = {"green": ("#dcf3e4", "#0b6b3a"), "red": ("#f9d5d5", "#a32020"), "orange": ("#fde4c4", "#8a4b00"),
           "blue": ("#dbe9f9", "#1d4f91"), "gray": ("#ececec", "#444444")}
BADGES = {"pass": ("✓", "green"), "fail": ("✗", "red"), "no verdict": ("?", "orange"), "not differentiable": ("✗", "red"),
          "raises": ("✗", "red"), "hides it": ("?", "orange"), "by design": ("i", "blue")}  # any other outcome: gray, "–"
BADGE_WORDS = {"as plain": "as without"}  # the dashboard's badge says it so

CARD_STYLE = ("border:1px solid #d0d0d0;border-radius:8px;padding:12px 16px;margin:4px 0;max-width:860px;display:flex;"
              "flex-wrap:wrap;gap:12px 24px;align-items:center;font-family:system-ui,-apple-system,'Segoe UI',sans-serif;"
              "line-height:1.45")
MUTED = "opacity:0.7"
TABLE_STYLE = "border-collapse:collapse;font-size:0.85em;margin-top:8px"
CELL_STYLE = "border:1px solid #d0d0d0;padding:2px 6px;text-align:left;vertical-align:top"


def badge(outcome: str) -> str:
    mark, colour = BADGES.get(outcome, ("–", "gray"))
    background, text = COLOURS[colour]
    return (f"<span style='background:{background};color:{text};border-radius:4px;padding:1px 6px;font-size:0.85em;"
            f"font-weight:600;white-space:nowrap'>{mark} {escape(BADGE_WORDS.get(outcome, outcome))}</span>")


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def _lower_first(text: str) -> str:  # a line after its name: "Parity: agrees in …"
    return text[:1].lower() + text[1:]


def _line(outcome: str, words: str) -> str:
    return f"<div>{badge(outcome)} {escape(words)}</div>"


def _inline_svg(svg: str) -> str:
    # inside HTML the parser gives <svg> its namespace itself: without the URI the card holds no address at all
    return svg.replace(" xmlns='http://www.w3.org/2000/svg'", "")


def _picture(shown: Card, report: GradientReport) -> str:
    from .figures.cards import card_figure  # SVG, no plotly: it draws without the dashboard's extra

    svg = card_figure(shown, report)
    if svg is None:
        return ""
    # a white ground: the picture's grey text stays readable under a dark notebook theme
    return f"<div style='flex:2 1 260px;max-width:340px;background:#ffffff;border-radius:6px'>{_inline_svg(svg)}</div>"


def report_html(report: GradientReport) -> str:
    """The verdict card: badge and name, headline, key numbers, each stage's line, the picture, and the
    evidence under Details, as the dashboard's card shows them."""
    shown = card(report)
    second = f" · {badge(shown.second_order[0])} second order" if shown.second_order is not None else ""
    words = [f"<div>{badge(shown.outcome)} <b>{escape(shown.formula)}</b> <span style='{MUTED}'>{escape(report.dtype)}</span>{second}</div>",
             f"<div style='font-size:1.2em;font-weight:600;margin:4px 0'>{escape(shown.headline)}</div>",
             "<div>" + " · ".join(f"<b>{escape(n.value)}</b> <span style='{MUTED}' title='{escape(_upper_first(n.label))}: {escape(n.help)}.'>"
                                  f"{escape(n.label)}</span>" for n in shown.numbers) + "</div>"]
    lines = [shown.precision, shown.conditions, *shown.stages]
    if report.parity is not None:  # where check_gradients ran them, as the HTML report shows them
        outcome, said = _parity_line(report.parity)
        lines.append((outcome, f"Parity: {_lower_first(said)}"))
    if report.determinism is not None:
        outcome, said = determinism_line(report.determinism)
        lines.append((outcome, f"Determinism: {_lower_first(said)}"))
    words += [_line(outcome, line) for outcome, line in filter(None, lines)]
    if shown.pending:  # a first-order verdict shown early: the stages that may still change it
        words.append(f"<div style='{MUTED}'>{escape(shown.pending)}</div>")
    details = [*shown.details, *([shown.second_order[1]] if shown.second_order is not None else [])]
    words.append("<details><summary>Details</summary><ul style='margin:4px 0'>"
                 + "".join(f"<li>{escape(line)}</li>" for line in details) + "</ul></details>")
    return (f"<div style=\"{CARD_STYLE}\"><div style='flex:3 1 360px;min-width:0'>{''.join(words)}</div>"
            f"{_picture(shown, report)}</div>")


def _table(rows: list[dict], columns: tuple[str, ...]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th style='{CELL_STYLE}'>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td style='{CELL_STYLE}'>{escape(str(row[c]))}</td>" for c in columns) + "</tr>" for row in rows)
    return f"<table style='{TABLE_STYLE}'><tr>{head}</tr>{body}</table>"


def _result_html(title: str, outcome: str, words: str, table: str = "") -> str:
    return (f"<div style=\"{CARD_STYLE}\"><div style='flex:1 1 auto;min-width:0'><div>{badge(outcome)} <b>{escape(title)}</b></div>"
            f"<div>{escape(words)}</div><div style='overflow-x:auto'>{table}</div></div></div>")


def _parity_line(parity: Parity) -> tuple[str, str]:
    line = parity_line(parity)
    assert line is not None  # only no grid has no line
    return line


def _precision_line(precision: Precision) -> tuple[str, str]:
    # nothing compared: no worst input to name, so its own words
    return precision_verdict_line(precision) or ("pass" if precision.passed else "fail", _upper_first(precision.describe()))


def parity_html(parity: Parity) -> str:
    outcome, words = _parity_line(parity)
    return _result_html("Parity", outcome, words, _table(parity_rows(parity), PARITY_COLUMNS))


def precision_html(precision: Precision) -> str:
    outcome, words = _precision_line(precision)
    return _result_html(f"Precision in {precision.dtype}", outcome, words, _table(precision_rows(precision), PRECISION_COLUMNS))


def determinism_html(determinism: Determinism) -> str:
    outcome, words = determinism_line(determinism)
    return _result_html("Determinism", outcome, words)


def _one_line(text: str) -> str:
    return " ".join(text.split())  # an exception's message may span lines; a repr must not


def report_repr(report: GradientReport) -> str:
    """``<GradientReport Square float64: passes — Right on every entry>``: the verdict and the card's headline."""
    return _one_line(f"<GradientReport {report.formula} {report.dtype}: {LEADS[report.verdict.outcome]} — {headline(report)}>")


def parity_repr(parity: Parity) -> str:
    outcome, words = _parity_line(parity)
    return _one_line(f"<Parity: {outcome} — {words}>")


def precision_repr(precision: Precision) -> str:
    outcome, words = _precision_line(precision)
    return _one_line(f"<Precision {precision.dtype}: {outcome} — {words}>")


def determinism_repr(determinism: Determinism) -> str:
    outcome, words = determinism_line(determinism)
    return _one_line(f"<Determinism: {outcome} — {words}>")


# the engine's results show through these (``engine.report.WRITERS``): registered when this module loads, with the public API
WRITERS.update({
    "GradientReport": {"html": report_html, "repr": report_repr},
    "Parity": {"html": parity_html, "repr": parity_repr},
    "Precision": {"html": precision_html, "repr": precision_repr},
    "Determinism": {"html": determinism_html, "repr": determinism_repr},
})
