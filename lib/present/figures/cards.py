"""The small picture on a verdict card (``lib.present.cards``), as a plain SVG string: the Jacobian
entries against the truth, or where the formula's gradient is wrong. Titled, both axes labelled,
right and wrong told by shape as well as colour. SVG, not plotly: Home draws one per formula on a
page a newcomer opens first, and plotly's script alone took seconds to load there."""

from __future__ import annotations

import html

import numpy as np

from ...engine.report import GradientReport
from ..cards import Card
from .grids import grid_of

WIDTH, HEIGHT = 300, 205
LEFT, RIGHT_EDGE, TOP, BOTTOM = 46, 292, 38, 160  # the plot area
RIGHT, WRONG, AXIS, FAINT = "#009E73", "#D55E00", "#444444", "#bbbbbb"  # Okabe–Ito green and vermillion
MAX_POINTS = 600  # a seeded sample beyond this: the story is in the shape, not in every point
MAX_CELLS = (24, 48)  # an error map's grid at most; larger inputs are shown by the largest error in each block
FONT = "font-family='Source Sans Pro, sans-serif'"


def card_figure(card: Card, report: GradientReport) -> str | None:
    return entries_scatter(report) if card.picture == "scatter" else error_map(report)


def _truth(report: GradientReport) -> tuple[str, str]:
    """The values the verdict judged by, and their name: the reference (or surrogate) where it was a truth."""
    coverage = report.jacobian.coverage if report.jacobian is not None else None
    if coverage is not None and "reference" in coverage.truths:
        return "reference", coverage.role
    return "numerical", "finite differences"


def _text(x: float, y: float, words: str, size: int = 11, anchor: str = "start", weight: str = "normal", rotate: bool = False,
          color: str = AXIS) -> str:
    turn = f" transform='rotate(-90 {x:.1f} {y:.1f})'" if rotate else ""
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' font-weight='{weight}' fill='{color}' "
            f"{FONT}{turn}>{html.escape(words)}</text>")


def _tick(value: float) -> str:
    return "0" if value == 0 else f"{value:.2g}"


def _frame(title: str, x_title: str, y_title: str, x_span: float, y_span: float) -> list[str]:
    """The title, the axes with ticks at −span, 0, span, and the axis titles."""
    parts = [_text(4, 16, title, 13, weight="bold"),
             f"<rect x='{LEFT}' y='{TOP}' width='{RIGHT_EDGE - LEFT}' height='{BOTTOM - TOP}' fill='none' stroke='{FAINT}'/>"]
    for value, x in ((-x_span, LEFT), (0.0, (LEFT + RIGHT_EDGE) / 2), (x_span, RIGHT_EDGE)):
        parts.append(_text(x, BOTTOM + 13, _tick(value), 10, "middle"))
    for value, y in ((y_span, TOP + 4), (0.0, (TOP + BOTTOM) / 2 + 4), (-y_span, BOTTOM)):
        parts.append(_text(LEFT - 4, y, _tick(value), 10, "end"))
    parts.append(_text((LEFT + RIGHT_EDGE) / 2, BOTTOM + 30, x_title, 11, "middle"))
    parts.append(_text(13, (TOP + BOTTOM) / 2, y_title, 11, "middle", rotate=True))
    return parts


def _svg(parts: list[str], label: str) -> str:
    return (f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {WIDTH} {HEIGHT}' width='100%' role='img' "
            f"aria-label='{html.escape(label)}'>" + "".join(parts) + "</svg>")


def entries_scatter(report: GradientReport) -> str | None:
    """Each compared Jacobian entry: the truth across, the formula's entry up; right ones sit on
    the dashed diagonal (truth = formula). Entries out of tolerance are vermillion crosses."""
    found = report.verdict.found
    if found is not None and found.evidence:  # a failing verdict: the values that showed it, judged as the verdict judged them
        source, name = found.against or "reference", _truth(report)[1]
        truth = np.concatenate([e.truth for e in found.evidence])
        analytic = np.concatenate([e.formula for e in found.evidence])
        wrong = np.concatenate([e.wrong for e in found.evidence])
        title = {"entry": "Jacobian entries: formula against truth", "wrote grad_output": "grad_output: after backward against before",
                 "tied directions": "uᵀJd along tied values", "forward": "Output: formula against reference"}.get(found.kind, f"uᵀJ for {found.shown_by}")
    else:
        verdict = report.jacobian
        if verdict is None or not any(e.rows.size for e in verdict.entries):
            return None
        source, name = _truth(report)
        truth = np.concatenate([e.values.get(source, e.values.get("numerical", e.values["analytic"])) for e in verdict.entries])
        analytic = np.concatenate([e.values["analytic"] for e in verdict.entries])
        wrong, title = None, "Jacobian entries: formula against truth"
    keep = np.flatnonzero(np.isfinite(truth) & np.isfinite(analytic))
    if not keep.size:
        return None
    t_all, a_all = truth[keep], analytic[keep]
    scale = float(max(np.abs(t_all).max(), 1e-300))
    wrong_all = (wrong[keep] if wrong is not None else
                 np.abs(a_all - t_all) > report.tolerances.atol * scale + report.tolerances.rtol * np.abs(t_all))
    counts = {"right": int((~wrong_all).sum()), "wrong": int(wrong_all.sum())}
    shown = np.arange(keep.size)
    if shown.size > MAX_POINTS:  # every wrong one first: the sample must not hide what the verdict found
        wrong_ones, right_ones = shown[wrong_all], shown[~wrong_all]
        rest = max(MAX_POINTS - min(wrong_ones.size, MAX_POINTS // 2), 0)
        shown = np.sort(np.concatenate([np.random.default_rng(0).choice(wrong_ones, min(wrong_ones.size, MAX_POINTS // 2), replace=False),
                                        np.random.default_rng(0).choice(right_ones, min(right_ones.size, rest), replace=False)]))
    t, a, wrong = t_all[shown], a_all[shown], wrong_all[shown]
    x_span, y_span = scale, float(max(np.abs(a).max(), scale * 1e-12, 1e-300))
    to_x = lambda v: LEFT + (v / x_span + 1) / 2 * (RIGHT_EDGE - LEFT)  # noqa: E731
    to_y = lambda v: BOTTOM - (v / y_span + 1) / 2 * (BOTTOM - TOP)  # noqa: E731
    entries = title.startswith("Jacobian")
    parts = _frame(title, f"true entry ({name})" if entries else f"truth ({name})", "formula's entry" if entries else "formula's", x_span, y_span)
    end = min(x_span, y_span)  # the diagonal truth = formula, within both ranges
    parts.append(f"<line x1='{to_x(-end):.1f}' y1='{to_y(-end):.1f}' x2='{to_x(end):.1f}' y2='{to_y(end):.1f}' stroke='#888888' "
                 "stroke-dasharray='4 3'/>")
    for x, y in zip(to_x(t[~wrong]), to_y(a[~wrong])):
        parts.append(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2.4' fill='{RIGHT}' fill-opacity='0.8'/>")
    crosses = "".join(f"M{x - 2.5:.1f} {y - 2.5:.1f}l5 5m0 -5l-5 5" for x, y in zip(to_x(t[wrong]), to_y(a[wrong])))
    if crosses:
        parts.append(f"<path d='{crosses}' stroke='{WRONG}' stroke-width='1.4' fill='none'/>")
    legend_x: float = LEFT + 6
    for label, color, mark in (("right", RIGHT, "●"), ("wrong", WRONG, "✕")):
        if counts[label]:
            words = f"{mark} {label} ({counts[label]:,})"
            parts.append(_text(legend_x, TOP + 13, words, 11, color=color, weight="bold"))
            legend_x += 9 + 6.2 * len(words)
    return _svg(parts, f"{counts['wrong']:,} of {keep.size:,} Jacobian entries wrong")


def _pooled(values: np.ndarray) -> np.ndarray:
    """The grid cut to MAX_CELLS by the largest value in each block (NaN where a block has none)."""
    rows, cols = values.shape
    row_step, col_step = -(-rows // MAX_CELLS[0]), -(-cols // MAX_CELLS[1])
    if row_step == 1 and col_step == 1:
        return values
    padded = np.full((-(-rows // row_step) * row_step, -(-cols // col_step) * col_step), np.nan)
    padded[:rows, :cols] = values
    blocks = padded.reshape(padded.shape[0] // row_step, row_step, padded.shape[1] // col_step, col_step)
    with np.errstate(all="ignore"):
        finite = np.isfinite(blocks).any(axis=(1, 3))
        return np.where(finite, np.nanmax(np.where(np.isfinite(blocks), blocks, -np.inf), axis=(1, 3)), np.nan)


def _shade(fraction: float) -> str:
    """White (0) to vermillion (1), through a light orange: one hue, darker means larger."""
    r, g, b = (int(255 + (end - 255) * fraction) for end in (0xD5, 0x5E, 0x00))
    return f"#{r:02x}{g:02x}{b:02x}"


def error_map(report: GradientReport) -> str | None:
    """|formula − truth| of the drawn gradient over the input where it is largest (white: right)."""
    found = report.verdict.found
    source, name = _truth(report)
    if found is not None and found.evidence and report.precision is None:  # where the verdict found it wrong, as it judged
        evidence = max(found.evidence, key=lambda e: float(np.nan_to_num(e.element_error, nan=-1.0).max(initial=-1.0)))
        input_name, error = evidence.name, evidence.element_error.reshape(evidence.shape)
    else:
        if not report.inputs:
            return None
        pair = ("analytic", source)
        comparison = max(report.inputs, key=lambda c: np.nan_to_num(c.errors[pair].max_abs, nan=-1.0))
        truth, error = comparison.gradients[source], np.abs(comparison.errors[pair].signed)
        finite = np.isfinite(truth)
        scale = float(np.abs(truth[finite]).max(initial=0.0)) or 1.0
        with np.errstate(invalid="ignore"):  # within the verdict's tolerance is right: drawn white
            error = np.where(error <= report.tolerances.atol * scale + report.tolerances.rtol * np.abs(truth), 0.0, error)
        input_name = comparison.name
    grid, _, x_title, y_title = grid_of(error, input_name)
    cells = _pooled(grid)
    largest = float(np.nanmax(cells)) if np.isfinite(cells).any() else 0.0
    rows, cols = cells.shape
    w, h = (RIGHT_EDGE - LEFT) / cols, (BOTTOM - TOP) / rows
    parts = [_text(4, 16, f"|formula − truth| over {input_name} (truth: {name})", 13, weight="bold"),
             _text((LEFT + RIGHT_EDGE) / 2, BOTTOM + 30, x_title, 11, "middle"), _text(13, (TOP + BOTTOM) / 2, y_title, 11, "middle", rotate=True),
             _text(LEFT, BOTTOM + 14, f"white: right · darkest: {largest:.3g}", 10, color=AXIS)]
    for i in range(rows):
        for j in range(cols):
            value = cells[i, j]
            fill = "#dddddd" if not np.isfinite(value) else _shade(value / largest if largest > 0 else 0.0)
            parts.append(f"<rect x='{LEFT + j * w:.1f}' y='{TOP + i * h:.1f}' width='{w + 0.3:.1f}' height='{h + 0.3:.1f}' fill='{fill}'/>")
    parts.append(f"<rect x='{LEFT}' y='{TOP}' width='{RIGHT_EDGE - LEFT}' height='{BOTTOM - TOP}' fill='none' stroke='{FAINT}'/>")
    return _svg(parts, f"the largest error over {input_name} is {largest:.3g}")
