"""Figures and tables of the comparison engine's results (``lib.engine.report``, ``lib.contract.conformance``).

Pure builders: results in, ``plotly.graph_objects.Figure`` (or plain rows for ``st.dataframe``
and CSV downloads) out. Nothing here imports streamlit or torch.

Heatmaps draw inputs of any rank: 1-D as one row, 2-D as is, N-D as (dim 0, the rest flattened
row-major); hovering names the element by its original index, e.g. ``x1[1, 2, 3]``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ...engine.report import SOURCES, GradientReport, InputComparison
from ...explore.step_sweep import StepSweep
from ...contract.conformance import Check
from .grids import grid_of
from .style import DIVERGING, KINK, SEQUENTIAL, base_layout, color_for
from ...engine.signature import name_element, name_index
from ...engine.tolerances import Tolerances

Pair = tuple[str, str]
DEFAULT_PAIR: Pair = ("analytic", "reference")
STATUS_FILL = {"pass": "#d9f2e3", "fail": "#f8d0c8", "not supported": "#e3e3e3", "skipped": "#f6f6f6", "no verdict": "#fbeec2"}
TABLE_MESSAGE_CHARS = 200  # a table cell is no place for gradcheck's printed Jacobians
BINS_PER_DECADE = 4
# long legend entries go under the plot, where they cannot run into the left-aligned title
LEGEND_BELOW = {
    "legend": {"orientation": "h", "yref": "container", "y": 0.0, "yanchor": "bottom", "x": 0.0, "xanchor": "left"},
    "margin": {"l": 60, "r": 20, "t": 60, "b": 90},
}
VERDICT_COLUMNS = ("formula", "verdict", "second order", "max |analytic − reference|", "max |analytic − numerical|", "cosine to reference",
                   "entries checked one by one", "evaluations")
RELATIVE_FLOOR = 1e-17  # exact matches (relative error 0) are drawn here: below float64's eps
# how the gradient panels share colours: one scale for all, or each its own ±max |value|
SCALES = ("shared", "per panel")
PER_PANEL_SPACING = 0.11  # room between panels for each panel's own colourbar and its tick labels


# ---- shared helpers ------------------------------------------------------------------------------


def _symmetric_limit(*arrays: np.ndarray) -> float:
    """The largest finite |value| over all arrays: one colour scale for several panels, symmetric so
    that 0 is the middle (white) colour everywhere and equal colours mean equal values."""
    limit = max((float(np.abs(a[np.isfinite(a)]).max(initial=0.0)) for a in arrays), default=0.0)
    return limit if limit > 0 else 1.0  # all zeros: any range draws them white


def _where(name: str, ndim: int) -> str:
    """How a hover names the element under the pointer: from the cell's own row and column where
    they are its index (no label per cell to build and send), else from the cell's label."""
    return "%{text}" if ndim > 2 else f"{name}[%{{y}}, %{{x}}]" if ndim == 2 else f"{name}[%{{x}}]" if ndim == 1 else name


def _panels(title: str, panels: dict[str, tuple[np.ndarray, np.ndarray | None]], x_title: str, y_title: str, value: str,
            scale: str = "shared", where: str = "%{text}") -> go.Figure:
    """Heatmaps side by side on a symmetric diverging colour scale. ``panels``: panel title ->
    (2-D values, hover label per cell).

    ``scale="shared"``: one range (the largest finite |value| of all panels) and a single colorbar,
    so equal colours mean equal values across panels. ``scale="per panel"``: each panel its own
    range (its own largest finite |value|) and its own colorbar just right of it, so a panel whose
    values are 100× smaller than its neighbour's still shows its structure."""
    _check_scale(scale)
    per_panel = scale == "per panel"
    shared = _symmetric_limit(*(z for z, _ in panels.values()))
    limits = {name: _symmetric_limit(z) if per_panel else shared for name, (z, _) in panels.items()}
    titles = [f"{name} (colour ±{limits[name]:.3g})" if per_panel else name for name in panels]
    spacing = PER_PANEL_SPACING if per_panel else 0.04
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=titles, shared_yaxes=True, horizontal_spacing=spacing)
    for col, (name, (z, text)) in enumerate(panels.items(), start=1):
        limit = limits[name]
        if per_panel:  # beside its own panel, in the gap before the next one; the subplot title names it
            right = fig.get_subplot(1, col).xaxis.domain[1]
            colorbar = {"x": right + 0.005, "xanchor": "left", "xpad": 4, "thickness": 12, "exponentformat": "power"}
            hover = f"{where}<br>{name}: %{{z:.6g}}<br>(this panel's colour scale: ±{limit:.3g})<extra></extra>"
        else:
            colorbar = {"title": {"text": value}, "exponentformat": "power"}
            hover = f"{where}<br>{name}: %{{z:.6g}}<extra></extra>"
        fig.add_trace(
            go.Heatmap(
                z=z, text=text, name=name, zmin=-limit, zmax=limit, colorscale=DIVERGING,
                showscale=per_panel or col == len(panels), colorbar=colorbar, hoverongaps=False, hovertemplate=hover,
            ),
            row=1, col=col,
        )  # fmt: skip
    base_layout(fig, title)
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title, row=1, col=1)
    fig.update_yaxes(autorange="reversed")  # row 0 at the top, as the tensor prints
    return fig


def _check_scale(scale: str) -> None:
    if scale not in SCALES:
        raise ValueError(f"Colour scale must be one of {', '.join(map(repr, SCALES))}, not {scale!r}.")


def _scale_note(fig: go.Figure, scale: str) -> go.Figure:
    """Say under the title which colour scale the panels use, with room above the subplot titles."""
    if scale == "shared":
        limit = fig.data[0].zmax
        note = f"Colour scale: shared, d loss / d input ±{limit:.3g} in every panel, so equal colours mean equal values."
    else:
        note = "Colour scale: per panel, each ±its own largest |d loss / d input| (in its title): compare patterns, not colours, across panels."
    fig.update_layout(title={"subtitle": {"text": note}}, margin={"t": 110})
    return fig


def _mark_kinks(fig: go.Figure, comparison: InputComparison, grid_shape: tuple[int, ...], panels: int = 1) -> go.Figure:
    """Outline, in their own colour on every panel, the elements where the function has a kink: no
    single derivative is right there, and the verdict judged them against their one-sided slopes."""
    if not comparison.kinks.size:
        return fig
    shape = comparison.gradients[SOURCES[0]].shape
    rows, cols = np.unravel_index(comparison.kinks, grid_shape)
    labels = [name_index(comparison.name, np.unravel_index(int(k), shape)) for k in comparison.kinks]
    name = f"not differentiable here (a kink): {len(labels):,} element{'s' * (len(labels) != 1)}"
    for panel in range(1, panels + 1):
        fig.add_trace(
            go.Scatter(
                x=cols.tolist(), y=rows.tolist(), mode="markers", name=name, text=labels, legendgroup="kinks",
                showlegend=panel == 1, marker={"symbol": "square-open", "size": 14, "color": KINK, "line": {"width": 3}},
                hovertemplate="%{text}: not differentiable here (a kink);<br>judged against its one-sided derivatives<extra></extra>",
            ),
            **({"row": 1, "col": panel} if panels > 1 else {}),
        )  # fmt: skip
    fig.update_layout(showlegend=True, **LEGEND_BELOW)
    return fig


def _blank_note(count: int) -> str:
    return f" · {count} NaN/Inf cells left blank" if count else ""


# ---- gradients and errors ------------------------------------------------------------------------


def gradient_heatmaps(comparison: InputComparison, sources: Sequence[str] = SOURCES, scale: str = "shared") -> go.Figure:
    """The gradients of one input from each of ``sources``, side by side. ``scale`` (one of
    ``SCALES``): "shared" draws every panel on one colour scale, so a gradient 100× too large shows
    as the only coloured panel; "per panel" gives each panel its own range and colorbar, so the
    smaller gradients' structure shows too."""
    _check_scale(scale)
    grids = {s: grid_of(comparison.gradients[s], comparison.name) for s in sources}
    _, _, x_title, y_title = next(iter(grids.values()))
    blank = sum(int(np.isnan(z).sum()) for z, *_ in grids.values())
    shape = tuple(comparison.gradients[sources[0]].shape)
    title = f"Gradient of the loss w.r.t. {comparison.name} {shape}, by source{_blank_note(blank)}"
    fig = _panels(title, {s: (z, text) for s, (z, text, *_) in grids.items()}, x_title, y_title, "d loss / d input", scale,
                  where=_where(comparison.name, len(shape)))
    _mark_kinks(fig, comparison, next(iter(grids.values()))[0].shape, panels=len(sources))
    return _scale_note(fig, scale)


def allowed_error(comparison: InputComparison, source: str, tolerances: Tolerances) -> np.ndarray:
    """Per element, the |error| the verdict's tolerance allows against ``source``'s gradient: atol in
    units of its largest |element|, plus rtol times the element's own (as the cards' error map)."""
    truth = np.abs(comparison.gradients[source])
    finite = np.isfinite(truth)
    scale = float(truth[finite].max(initial=0.0)) or 1.0
    return tolerances.atol * scale + tolerances.rtol * np.where(finite, truth, 0.0)


def error_heatmap(comparison: InputComparison, pair: Pair = DEFAULT_PAIR, relative: bool = False,
                  tolerances: Tolerances | None = None) -> go.Figure:
    """The error map of ``pair`` (one of ``lib.engine.report.PAIRS``) on one input: signed a − b on a
    diverging scale centred at 0, or, with ``relative``, log10 of |a − b| / |b| on a sequential
    scale. The worst element (largest |a − b|, or largest relative error) is marked. With the
    verdict's ``tolerances`` the colours span at least what they allow: errors within them (rounding
    noise beside a right formula) are pale, not painted in the scale's strongest colours."""
    a, b = pair
    errors = comparison.errors[pair]
    name = comparison.name
    allowed = allowed_error(comparison, b, tolerances) if tolerances is not None else None
    bound = float(np.nanmax(allowed)) if allowed is not None and allowed.size else 0.0
    if relative:
        measure = np.where(np.isfinite(errors.relative), errors.relative, np.nan)
        shown = np.log10(np.maximum(measure, RELATIVE_FLOOR))  # exact matches would be log10(0) = −inf
        finite = np.isfinite(measure)
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(finite, measure, -1.0))), measure.shape)) if finite.any() else None
        z, text, x_title, y_title = grid_of(shown, name)
        raw, *_ = grid_of(measure, name)
        heatmap = go.Heatmap(
            z=z, text=text, customdata=raw, colorscale=SEQUENTIAL, hoverongaps=False,
            colorbar={"title": {"text": f"log10 |{a} − {b}| / |{b}|"}},
            hovertemplate=f"{_where(name, measure.ndim)}<br>|{a} − {b}| / |{b}|: %{{customdata:.3g}}<br>log10: %{{z:.2f}}<extra></extra>",
        )  # fmt: skip
        what, marker_name = f"relative error |{a} − {b}| / |{b}|, log10 colour", "worst relative error"
        peak = f"max {errors.max_rel:.3g}"
        if allowed is not None:  # from exact (the floor) to at least the tolerance's relative error
            with np.errstate(divide="ignore", invalid="ignore"):
                within = np.log10(np.nanmax(np.where(finite, allowed / np.abs(comparison.gradients[b]), np.nan)))
            top = float(np.nanmax(np.where(np.isfinite(shown), shown, np.nan))) if np.isfinite(shown).any() else within
            heatmap.update(zmin=math.log10(RELATIVE_FLOOR), zmax=max(top, within) if np.isfinite(within) else None)
    else:
        measure, worst = errors.signed, errors.worst
        z, text, x_title, y_title = grid_of(errors.signed, name)
        heatmap = go.Heatmap(
            z=z, text=text, colorscale=DIVERGING, zmid=0.0, hoverongaps=False,
            colorbar={"title": {"text": f"{a} − {b}"}, "exponentformat": "power"},
            hovertemplate=f"{_where(name, errors.signed.ndim)}<br>{a} − {b}: %{{z:.6g}}<extra></extra>",
        )  # fmt: skip
        what, marker_name, peak = f"signed error {a} − {b}", f"worst |{a} − {b}|", f"max |·| {errors.max_abs:.3g}"
        if bound > 0:  # symmetric about 0, out to the tolerance at least
            reach = max(bound, float(np.nan_to_num(errors.max_abs, nan=0.0, posinf=bound)))
            heatmap.update(zmin=-reach, zmax=reach)
    fig = go.Figure(heatmap)
    if worst is not None:
        row, col = np.unravel_index(np.ravel_multi_index(worst, errors.signed.shape), z.shape)
        label = name_index(name, worst)
        peak += f" at {label}"
        fig.add_trace(
            go.Scatter(
                x=[int(col)], y=[int(row)], mode="markers", name=f"{marker_name}: {label}",
                marker={"symbol": "square-open", "size": 16, "color": "black", "line": {"width": 3}},
                hovertemplate=f"{marker_name}<br>{label}: %{{customdata:.6g}}<extra></extra>",
                customdata=[float(measure[worst])],
            )
        )  # fmt: skip
    blank = int(np.isnan(z).sum())
    if bound > 0:
        peak += f"; pale within the tolerance, ±{bound:.2g}" if not relative else "; pale well within the tolerance"
    base_layout(fig, f"{name}: {what} ({peak}){_blank_note(blank)}", x_title, y_title, showlegend=True)
    fig.update_layout(**LEGEND_BELOW)
    _mark_kinks(fig, comparison, z.shape)
    fig.update_yaxes(autorange="reversed")
    return fig


def _decades(lo: float, hi: float) -> list[int]:
    step = max(1, math.ceil((hi - lo) / 12))  # at most about a dozen tick labels
    return list(range(math.floor(lo), math.ceil(hi) + 1, step))


def error_histogram(report: GradientReport, pair: Pair = DEFAULT_PAIR) -> go.Figure:
    """How many elements have each size of |a − b|, over all inputs (stacked, one trace per input).

    Bins are log-spaced: the log10 of the nonzero finite errors is binned (``BINS_PER_DECADE`` per
    decade) and the ticks are labelled as powers of ten. Exact zeros and NaN/Inf cannot sit on a
    log axis; they are counted in the title."""
    a, b = pair
    logs, zeros, blank = {}, 0, 0
    for c in report.inputs:
        absolute = np.abs(c.errors[pair].signed).ravel()
        finite = np.isfinite(absolute)
        logs[c.name] = np.log10(absolute[finite & (absolute > 0)])
        zeros += int((absolute[finite] == 0).sum())
        blank += int((~finite).sum())
    every = np.concatenate(list(logs.values()) or [np.zeros(0)])
    lo = math.floor(every.min() * BINS_PER_DECADE) / BINS_PER_DECADE if every.size else -16.0
    hi = max(math.ceil(every.max() * BINS_PER_DECADE) / BINS_PER_DECADE if every.size else 0.0, lo + 1 / BINS_PER_DECADE)
    edges = np.linspace(lo, hi, round((hi - lo) * BINS_PER_DECADE) + 1)
    width = 1 / BINS_PER_DECADE
    fig = go.Figure()
    for position, (name, values) in enumerate(logs.items()):
        counts, _ = np.histogram(values, bins=edges)
        ranges = [[f"{10**left:.3g}", f"{10**(left + width):.3g}"] for left in edges[:-1]]
        fig.add_trace(
            go.Bar(
                x=edges[:-1] + width / 2, y=counts, width=width, name=name, customdata=ranges,
                marker={"color": color_for(name, position), "line": {"width": 0.5, "color": "white"}},
                hovertemplate=f"{name}<br>|{a} − {b}| in [%{{customdata[0]}}, %{{customdata[1]}})<br>elements: %{{y}}<extra></extra>",
            )
        )  # fmt: skip
    notes = [f"{zeros} exact zeros" if zeros else "", f"{blank} NaN/Inf" if blank else ""]
    note = " and ".join(n for n in notes if n)
    title = f"{report.formula}: distribution of |{a} − {b}| over all inputs" + (f" ({note} not shown)" if note else "")
    ticks = _decades(lo, hi)
    base_layout(fig, title, f"|{a} − {b}| (log scale, {BINS_PER_DECADE} bins per decade)", "count of elements", barmode="stack", bargap=0)
    fig.update_xaxes(tickvals=ticks, ticktext=[f"10<sup>{t}</sup>" for t in ticks], range=[lo, hi])
    return fig


def jacobian_heatmaps(comparison: InputComparison) -> go.Figure | None:
    """The analytic, reference and numerical Jacobians d output / d input (rows: output elements,
    columns: input elements, both flat) on one colour scale; None when the engine did not compute
    them (the input was above its ``jacobian_limit``)."""
    if comparison.jacobians is None:
        return None
    name = comparison.name
    shape = comparison.gradients["reference"].shape
    columns = [name_index(name, np.unravel_index(i, shape)) for i in range(int(np.prod(shape, dtype=int)))]
    panels: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    for source in SOURCES:
        z = comparison.jacobians[source]
        text = np.array([[f"∂y[{k}] / ∂{column}" for column in columns] for k in range(z.shape[0])], dtype=object)
        panels[source] = (np.where(np.isfinite(z), z, np.nan), text.reshape(z.shape))
    m, n = comparison.jacobians["reference"].shape
    title = f"Jacobian d output / d {name} ({m} outputs × {n} inputs), by source"
    return _panels(title, panels, f"input element of {name} (flat, row-major)", "output element (flat)", "∂ output / ∂ input")


def step_sweep_figure(sweep: StepSweep) -> go.Figure:
    """Max |numerical − reference| against the finite-difference step h, log-log, one line per
    dtype with its best step marked. Large h: truncation error; small h: rounding error."""
    fig = go.Figure()
    order = np.argsort(sweep.steps)  # plain increasing h, whatever order the sweep ran in
    steps = [sweep.steps[i] for i in order]
    for position, (dtype, errors) in enumerate(sweep.errors.items()):
        # a log axis has no place for 0 or ±inf: leave a gap there
        values = [errors[i] if math.isfinite(errors[i]) and errors[i] > 0 else None for i in order]
        color = color_for(dtype, position)
        fig.add_trace(
            go.Scatter(
                x=steps, y=values, mode="lines+markers", name=dtype, legendgroup=dtype, line={"color": color},
                hovertemplate=f"{dtype}<br>h = %{{x:.1e}}<br>max |numerical − reference|: %{{y:.3g}}<extra></extra>",
            )
        )  # fmt: skip
        best = sweep.best_step(dtype)
        if not math.isfinite(best):  # no step gave a finite error (NaN inputs, say): nothing to mark
            continue
        fig.add_trace(
            go.Scatter(
                x=[best], y=[errors[sweep.steps.index(best)]], mode="markers", name=f"best h for {dtype}: {best:.2g}",
                legendgroup=dtype, marker={"symbol": "star", "size": 16, "color": color, "line": {"width": 1, "color": "black"}},
                hovertemplate=f"best step for {dtype}<br>h = %{{x:.1e}}<br>max |numerical − reference|: %{{y:.3g}}<extra></extra>",
            )
        )  # fmt: skip
    taylor = [sweep.taylor[i] if i < len(sweep.taylor) and math.isfinite(sweep.taylor[i]) and sweep.taylor[i] > 0 else None for i in order]
    if any(v is not None for v in taylor):
        fig.add_trace(go.Scatter(
            x=steps, y=taylor, mode="lines+markers", name="Taylor test: |numerical − analytic| (float64)",
            line={"color": "#222", "dash": "dot"}, marker={"symbol": "diamond"},
            hovertemplate="h = %{x:.1e}<br>max |numerical − analytic|: %{y:.3g}<extra></extra>",
        ))  # fmt: skip
        # the slope-2 line a right backward follows (central differences: error ∝ h²), through the largest step
        anchor = next((i for i in range(len(steps) - 1, -1, -1) if taylor[i] is not None), None)
        if anchor is not None:
            guide = [taylor[anchor] * (h / steps[anchor]) ** 2 for h in steps]
            fig.add_trace(go.Scatter(x=steps, y=guide, mode="lines", name="slope 2: what a right backward follows",
                                     line={"color": "#999", "width": 1}, hoverinfo="skip"))
    base_layout(fig, "Finite-difference step sweep: error against the step h", "finite-difference step h", "max error over all inputs")
    fig.update_layout(**LEGEND_BELOW)
    fig.update_xaxes(type="log", exponentformat="power")
    fig.update_yaxes(type="log", exponentformat="power")
    # both ends of the curves are high, so the bottom corners are free for the explanation
    for x, side, text in ((0.0, "left", "← smaller h: rounding error grows"), (1.0, "right", "larger h: truncation error grows →")):
        fig.add_annotation(
            text=text, xref="paper", yref="paper", x=x, y=0.0, xanchor=side, yanchor="bottom",
            showarrow=False, font={"size": 12, "color": "#555"},
        )  # fmt: skip
    return fig


# ---- tables and plain rows -----------------------------------------------------------------------


def _cell(message: str) -> str:
    """One line of at most ``TABLE_MESSAGE_CHARS``; < and > escaped, since plotly reads tags in text."""
    message = " ".join(message.split())
    if len(message) > TABLE_MESSAGE_CHARS:
        message = message[: TABLE_MESSAGE_CHARS - 1] + "…"
    return message.replace("<", "&lt;").replace(">", "&gt;")


def _table(title: str, header: list[str], columns: list[list], fills: list[str], widths: list[float]) -> go.Figure:
    fig = go.Figure(
        go.Table(
            columnwidth=widths,
            header={"values": [f"<b>{h}</b>" for h in header], "fill_color": "#f0f0f0", "align": "left"},
            cells={"values": columns, "fill_color": [fills] * len(columns), "align": "left", "height": 26},
        )
    )
    lines = sum(1 + len(str(v)) // 90 for v in columns[-1])  # wrapped lines of the widest column
    return base_layout(fig, title, height=110 + 22 * lines + 8 * len(fills))


def conformance_table(checks: list[Check]) -> go.Figure:
    """PyTorch's checks (``lib.contract.conformance``) as a table, one row per check, coloured by status."""
    counts = Counter(c.status for c in checks)
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    columns = [[c.name for c in checks], [c.status for c in checks], [f"{1000 * c.seconds:.1f}" for c in checks], [_cell(c.message) for c in checks]]
    fills = [STATUS_FILL.get(c.status, "white") for c in checks]
    return _table(f"Conformance: {summary or 'no checks'}", ["check", "status", "time (ms)", "message"], columns, fills, [2.2, 1.3, 1, 7])


def _max_over_inputs(report: GradientReport, pair: Pair) -> float:
    values = [c.errors[pair].max_abs for c in report.inputs if math.isfinite(c.errors[pair].max_abs)]
    return max(values) if values else math.nan  # NaN: no finite element, e.g. the formula raised


def verdict_rows(reports: list[GradientReport]) -> list[dict]:
    """One plain row per report (formula), unrounded: Home's table of every formula's numbers, and downloads."""
    return [
        dict(zip(VERDICT_COLUMNS, (
            r.formula,
            r.verdict.outcome,
            r.second_order.outcome if r.second_order else "not checked",
            _max_over_inputs(r, ("analytic", "reference")),
            _max_over_inputs(r, ("analytic", "numerical")),
            r.cosine,
            r.jacobian.coverage.compared if r.jacobian else 0,
            r.evaluations,
        )))  # fmt: skip
        for r in reports
    ]


def table_rows(rows: list[dict]) -> list[dict]:
    """Verdict rows with their numbers written as a page shows them: errors in 3 significant
    digits, the cosine in 4 decimals, counts with thousands separators."""
    def cell(column: str, value):
        if isinstance(value, float):
            return _table_cell(value, ".4f" if column.startswith("cosine") else ".3g")
        return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
    return [{column: cell(column, value) for column, value in row.items()} for row in rows]


def _table_cell(value: float, spec: str) -> str:
    """A table cell: the value formatted, or a dash where there is none (not finite)."""
    return format(value, spec) if math.isfinite(value) else "—"


def worst_elements(comparison: InputComparison, pair: Pair = DEFAULT_PAIR, k: int = 10) -> list[dict]:
    """The ``k`` elements with the largest finite |a − b| for ``pair``, largest first, with the
    three gradients there. NaN/Inf elements are left out (``comparison.non_finite`` lists them)."""
    errors = comparison.errors[pair]
    absolute = np.abs(errors.signed).ravel()
    finite = np.flatnonzero(np.isfinite(absolute))
    order = finite[np.argsort(-absolute[finite], kind="stable")][:k]
    shape = errors.signed.shape
    rows = []
    for flat in order:
        index = np.unravel_index(int(flat), shape)
        rows.append(
            {
                "index": name_index(comparison.name, index),
                **{source: float(comparison.gradients[source][index]) for source in SOURCES},
                "abs error": float(absolute[flat]),
                "rel error": float(errors.relative[index]),
            }
        )
    return rows


MAX_DIAGNOSIS_POINTS = 4_000  # a scatter beyond this is a blur (and slow as SVG); a seeded sample is drawn


def diagnosis_scatter(report: GradientReport) -> go.Figure | None:
    """Every compared Jacobian entry as a point: the truth across, the formula's backward up,
    coloured by output row. A right backward lies on the diagonal; a flipped sign on the other
    diagonal; a constant factor on a line of another slope; a factor per row as a fan of lines."""
    verdict = report.jacobian
    if verdict is None or not verdict.entries:
        return None
    truth_name = "reference" if "reference" in verdict.entries[0].values else "numerical"
    truth = np.concatenate([e.values[truth_name] for e in verdict.entries])
    analytic = np.concatenate([e.values["analytic"] for e in verdict.entries])
    rows = np.concatenate([e.rows for e in verdict.entries])
    labels = np.concatenate([[name_element(e.name, e.shape, c) for c in e.cols] for e in verdict.entries])
    keep = np.isfinite(truth) & np.isfinite(analytic)
    index = np.flatnonzero(keep)
    if index.size > MAX_DIAGNOSIS_POINTS:
        index = np.sort(np.random.default_rng(0).choice(index, MAX_DIAGNOSIS_POINTS, replace=False))
    if not index.size:
        return None
    span = float(max(np.abs(truth[index]).max(), 1e-300))  # the lines over the truth's range; each axis scales to its data
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[-span, span], y=[-span, span], mode="lines", name="right: analytic = truth",
                               line={"color": "#2ca02c", "dash": "dash"}, hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=[-span, span], y=[span, -span], mode="lines", name="sign flipped: analytic = −truth",
                               line={"color": "#d62728", "dash": "dot"}, hoverinfo="skip"))
    fig.add_trace(go.Scatter(
        x=truth[index], y=analytic[index], mode="markers", name="Jacobian entries",
        marker={"size": 5, "color": rows[index], "colorscale": "Viridis", "showscale": True,
                "colorbar": {"title": {"text": "output row"}}},
        customdata=np.stack([labels[index], rows[index]], axis=1),
        hovertemplate="∂out[%{customdata[1]}] / ∂%{customdata[0]}<br>truth %{x:.4g}<br>analytic %{y:.4g}<extra></extra>",
    ))
    shown = f"{index.size:,} of {int(keep.sum()):,}" if index.size < keep.sum() else f"all {index.size:,}"
    fig.update_layout(
        title={"text": f"{report.formula}: each Jacobian entry, the formula's backward against the {truth_name} truth ({shown} entries)"},
        xaxis_title=f"true entry ({truth_name})", yaxis_title="the formula's entry (analytic)", height=480, **LEGEND_BELOW,
    )
    return fig


def parity_error_map(cell, index: int = 0) -> go.Figure | None:
    """One parity cell's error map (``lib.engine.parity``): what this way of running the formula
    gave minus the truth, for entry ``index`` of what it compared (an input's gradient, or the
    output), on a diverging scale centred at 0, its worst element marked. None: nothing differs."""
    if not cell.differences or index >= len(cell.differences):
        return None
    signed = np.asarray(cell.differences[index], dtype=float)
    name = cell.names[index] if index < len(cell.names) else f"entry {index}"
    z, text, x_title, y_title = grid_of(np.where(np.isfinite(signed), signed, np.nan), name)
    fig = go.Figure(go.Heatmap(
        z=z, text=text, colorscale=DIVERGING, zmid=0.0, hoverongaps=False,
        colorbar={"title": {"text": "path − truth"}, "exponentformat": "power"},
        hovertemplate=f"{_where(name, signed.ndim)}<br>path − truth: %{{z:.6g}}<extra></extra>",
    ))  # fmt: skip
    finite = np.isfinite(signed)
    peak = float(np.abs(np.where(finite, signed, 0.0)).max(initial=0.0))
    base_layout(fig, f"{name} under {cell.label}: this path − the truth (max |·| {peak:.3g})", x_title, y_title)
    fig.update_yaxes(autorange="reversed")
    return fig


def stage_curves(result, title: str) -> go.Figure | None:
    """A stage's curves by step (``result.curves()``: label -> values), one line each; where its
    paths part (``result.parted``), a dashed line. None for a stage without curves."""
    curves = getattr(result, "curves", None)
    if curves is None:
        return None
    fig = go.Figure()
    for position, (label, values) in enumerate(curves().items()):
        fig.add_trace(go.Scatter(x=np.arange(len(values)), y=values, mode="lines+markers", name=label,
                                 line={"color": color_for(label, position), "dash": "solid" if position == 0 else "dot"}))
    parted = getattr(result, "parted", -1)
    if parted is not None and parted >= 0:
        fig.add_vline(x=parted, line_dash="dash", line_color="#D55E00", annotation_text=f"paths part at step {parted}",
                      annotation_position="top left")
    return base_layout(fig, title, "step", "loss")
