"""Figures of landscapes: loss slices and surfaces, gradient fields, optimizer trajectories."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .style import SEQUENTIAL, base_layout, color_for
from ...explore.landscape import GradientField, Surface
from ...explore.trajectory import TrajectorySet

LOSS = "loss"


def _log_values(values: np.ndarray, log: bool) -> np.ndarray:
    """log10 of the values for a log colour scale (non-positive values become NaN: gaps)."""
    if not log:
        return values
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(values > 0, np.log10(np.where(values > 0, values, 1.0)), np.nan)


def _markers(surface: Surface, with_target: bool = True) -> list[go.Scatter]:
    traces = [
        go.Scatter(
            x=[surface.center[0]], y=[surface.center[1]], mode="markers", name=f"current point (loss {surface.center_loss:.4g})",
            marker={"symbol": "x", "size": 12, "color": "black", "line": {"width": 1, "color": "white"}},
            hovertemplate="current point<br>a=%{x:.4g}<br>b=%{y:.4g}<extra></extra>",
        )
    ]
    if with_target and surface.target is not None:
        traces.append(
            go.Scatter(
                x=[surface.target[0]], y=[surface.target[1]], mode="markers", name="target (projected)",
                marker={"symbol": "star", "size": 14, "color": "gold", "line": {"width": 1, "color": "black"}},
                hovertemplate="target<br>a=%{x:.4g}<br>b=%{y:.4g}<extra></extra>",
            )
        )
    return traces


def loss_slice_figure(surface: Surface, log: bool = False) -> go.Figure:
    """A 1-D slice: the loss along direction a, the current point marked."""
    fig = go.Figure(
        [
            go.Scatter(x=surface.a, y=surface.loss, mode="lines", name=LOSS, line={"color": "#0072B2"},
                       hovertemplate="a=%{x:.4g}<br>loss=%{y:.6g}<extra></extra>"),
            go.Scatter(x=[surface.center[0]], y=[surface.center_loss], mode="markers", name="current point",
                       marker={"symbol": "x", "size": 12, "color": "black"}, hovertemplate="current point<br>loss=%{y:.6g}<extra></extra>"),
        ]
    )
    fig.update_yaxes(type="log" if log else "linear")
    return base_layout(fig, "Loss along a 1-D slice", surface.labels[0], "loss" + (" (log scale)" if log else ""))


def loss_contour_figure(surface: Surface, log: bool = False, trajectories: TrajectorySet | None = None) -> go.Figure:
    """The loss on the plane as filled contours, the current point and target marked, with
    optimizer paths drawn over it when given."""
    z = _log_values(surface.loss, log)
    title = "log10 loss" if log else "loss"
    fig = go.Figure(
        go.Contour(
            x=surface.a, y=surface.b, z=z, colorscale=SEQUENTIAL, name=title, colorbar={"title": {"text": title}},
            customdata=surface.loss, hovertemplate="a=%{x:.4g}<br>b=%{y:.4g}<br>loss=%{customdata:.6g}<extra></extra>",
            contours={"coloring": "heatmap", "showlines": True}, line={"width": 0.5},
        )
    )
    for trace in _markers(surface):
        fig.add_trace(trace)
    if trajectories is not None:
        for position, (formula, run) in enumerate(trajectories.runs.items()):
            fig.add_trace(_path_trace(formula, run.plane_path, position))
    fig.update_xaxes(range=[surface.a[0], surface.a[-1]])
    assert surface.b is not None  # contours are of a 2-D grid
    fig.update_yaxes(range=[surface.b[0], surface.b[-1]], scaleanchor="x" if surface.plane_mode == "input plane" else None)
    heading = "Loss surface" + (" with optimizer paths" if trajectories is not None else "")
    return base_layout(fig, heading, surface.labels[0], surface.labels[1])


def loss_surface_3d_figure(surface: Surface, log: bool = False) -> go.Figure:
    """The same surface in 3-D, the current point raised to its loss."""
    z = _log_values(surface.loss, log)
    z_title = "log10 loss" if log else "loss"
    center_z = _log_values(np.array([surface.center_loss]), log)[0]
    fig = go.Figure(
        [
            go.Surface(x=surface.a, y=surface.b, z=z, colorscale=SEQUENTIAL, name=z_title, colorbar={"title": {"text": z_title}},
                       customdata=surface.loss, hovertemplate="a=%{x:.4g}<br>b=%{y:.4g}<br>loss=%{customdata:.6g}<extra></extra>"),
            go.Scatter3d(x=[surface.center[0]], y=[surface.center[1]], z=[center_z], mode="markers", name="current point",
                         marker={"size": 6, "color": "black", "symbol": "x"}),
        ]
    )
    fig.update_layout(scene={"xaxis": {"title": {"text": surface.labels[0]}}, "yaxis": {"title": {"text": surface.labels[1]}},
                             "zaxis": {"title": {"text": z_title}}})
    return base_layout(fig, "Loss surface (3-D)")


def _arrows(a: np.ndarray, b: np.ndarray, da: np.ndarray, db: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Line segments with two-stroke heads for a quiver, as one trace's x and y: per arrow its
    shaft, a gap, its head's two strokes, a gap (NaN: a break in the line), in arrays (a list of
    floats costs plotly a check per number)."""
    aa, bb = np.meshgrid(a, b)
    x0, y0, u, v = aa.ravel(), bb.ravel(), da.ravel(), db.ravel()
    keep = np.isfinite(u) & np.isfinite(v)
    x0, y0, u, v = x0[keep], y0[keep], u[keep], v[keep]
    x1, y1 = x0 + u, y0 + v
    angle, head = np.arctan2(v, u), 0.3 * np.hypot(u, v)
    gap = np.full_like(x0, np.nan)
    xs = np.stack([x0, x1, gap, x1 - head * np.cos(angle - 0.4), x1, x1 - head * np.cos(angle + 0.4), gap], axis=1)
    ys = np.stack([y0, y1, gap, y1 - head * np.sin(angle - 0.4), y1, y1 - head * np.sin(angle + 0.4), gap], axis=1)
    return xs.ravel(), ys.ravel()


def gradient_field_figure(field: GradientField, surface: Surface | None = None) -> go.Figure:
    """Each formula's negative gradient on the plane as arrows (equal aspect, one colour per
    formula, one common scale), over the loss contours when given, with the target marked."""
    fig = go.Figure()
    if surface is not None:
        # light filled bands (darker is lower loss) under grey lines: visible, yet quieter than the arrows
        fig.add_trace(go.Contour(x=surface.a, y=surface.b, z=surface.loss, colorscale=[[0, "#c8c8c8"], [1, "#ffffff"]],
                                 showscale=False, name="loss", line={"color": "rgba(90,90,90,0.7)", "width": 1},
                                 hovertemplate="a=%{x:.4g}<br>b=%{y:.4g}<br>loss=%{z:.6g}<extra></extra>",
                                 contours={"coloring": "fill"}))
    cell = min(np.diff(field.a).mean(), np.diff(field.b).mean()) if field.a.size > 1 else 1.0
    for position, (formula, (da, db)) in enumerate(field.directions.items()):
        # every arrow drawn 0.8 cells long: the formulas' magnitudes differ by orders (that is
        # one of the tutorial's bugs), which would hide the directions; they are in the hover
        norm = np.hypot(da, db)
        unit = 0.8 * cell / np.where(norm > 0, norm, np.inf)
        xs, ys = _arrows(field.a, field.b, da * unit, db * unit)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"−∇ {formula}", line={"color": color_for(formula, position), "width": 1.6},
                                 hoverinfo="skip"))
        aa, bb = np.meshgrid(field.a, field.b)
        fig.add_trace(go.Scatter(x=aa.ravel(), y=bb.ravel(), mode="markers", marker={"size": 3, "color": color_for(formula, position)},
                                 showlegend=False, name=formula, customdata=np.stack([da.ravel(), db.ravel(), np.hypot(da, db).ravel()], axis=1),
                                 hovertemplate=f"{formula}<br>a=%{{x:.3g}}, b=%{{y:.3g}}<br>−∇·u=%{{customdata[0]:.4g}}<br>−∇·v=%{{customdata[1]:.4g}}"
                                               "<br>length %{customdata[2]:.4g}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[field.center[0]], y=[field.center[1]], mode="markers", name="current point",
                             marker={"symbol": "x", "size": 12, "color": "black"}))
    if field.target is not None:
        fig.add_trace(go.Scatter(x=[field.target[0]], y=[field.target[1]], mode="markers", name="target (projected)",
                                 marker={"symbol": "star", "size": 15, "color": "gold", "line": {"width": 1, "color": "black"}}))
    fig.update_xaxes(range=[field.a[0] - cell, field.a[-1] + cell])
    fig.update_yaxes(range=[field.b[0] - cell, field.b[-1] + cell], scaleanchor="x", scaleratio=1)
    return base_layout(fig, "Descent direction of each formula (−gradient on the plane; equal lengths, sizes in hover)", field.labels[0], field.labels[1])


def error_field_figure(field: GradientField, formula: str) -> go.Figure:
    """|analytic − reference| over the plane for one formula, on a log colour scale."""
    errors = field.errors[formula]
    fig = go.Figure(
        go.Heatmap(x=field.a, y=field.b, z=_log_values(errors, True), colorscale=SEQUENTIAL, customdata=errors,
                   colorbar={"title": {"text": "log10 ‖error‖"}}, name=formula,
                   hovertemplate="a=%{x:.4g}<br>b=%{y:.4g}<br>‖analytic − reference‖=%{customdata:.3g}<extra></extra>")
    )
    fig.add_trace(go.Scatter(x=[field.center[0]], y=[field.center[1]], mode="markers", name="current point",
                             marker={"symbol": "x", "size": 12, "color": "white", "line": {"width": 1, "color": "black"}}))
    fig.update_yaxes(scaleanchor="x", scaleratio=1)
    return base_layout(fig, f"Gradient error of {formula}: ‖analytic − reference‖ over the plane", field.labels[0], field.labels[1])


def _path_trace(formula: str, path: np.ndarray, position: int) -> go.Scatter:
    steps = np.arange(path.shape[0])
    return go.Scatter(x=path[:, 0], y=path[:, 1], mode="lines+markers", name=f"path: {formula}",
                      line={"color": color_for(formula, position), "width": 2}, marker={"size": 3}, customdata=steps,
                      hovertemplate=f"{formula}<br>step %{{customdata}}<br>(%{{x:.4g}}, %{{y:.4g}})<extra></extra>")


def trajectory_curves_figure(trajectories: TrajectorySet) -> go.Figure:
    """Loss, cosine to the true gradient, and gradient norm per step, a line per formula."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=("loss", "cosine(followed, true gradient)", "‖followed gradient‖"),
                        horizontal_spacing=0.08)
    for position, (formula, run) in enumerate(trajectories.runs.items()):
        color = color_for(formula, position)
        steps = np.arange(run.loss.size)
        for col, values, x in ((1, run.loss, steps), (2, run.gradient_cosine, steps[:-1]), (3, run.gradient_norm, steps[:-1])):
            fig.add_trace(go.Scatter(x=x, y=values, mode="lines", name=formula, legendgroup=formula, showlegend=col == 1,
                                     line={"color": color}, hovertemplate=f"{formula}<br>step %{{x}}<br>%{{y:.4g}}<extra></extra>"),
                          row=1, col=col)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="loss", row=1, col=1)
    fig.update_yaxes(title_text="cosine", range=[-1.05, 1.05], row=1, col=2)
    fig.update_yaxes(title_text="gradient norm", type="log", exponentformat="power", row=1, col=3)
    title = f"{trajectories.optimizer}, learning rate {trajectories.learning_rate:g}, {trajectories.steps} steps"
    base_layout(fig, title)
    # below the panels: above them it would cover the panel titles
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.18, "xanchor": "left", "x": 0.0}, margin={"b": 90})
    return fig


def trajectory_pca_figure(trajectories: TrajectorySet) -> go.Figure:
    """The paths on the top two principal components of all positions, variance on the axes."""
    fig = go.Figure([_path_trace(formula, trajectories.pca_paths[formula], position)
                     for position, formula in enumerate(trajectories.runs)])
    first, second = trajectories.explained_variance
    # the view frames the runs the components were fitted on; a diverged path runs off it
    framed = np.concatenate([trajectories.pca_paths[f] for f in trajectories.pca_fitted_on]) if trajectories.pca_fitted_on else None
    if framed is not None and np.isfinite(framed).any():
        for axis, column in (("xaxis", 0), ("yaxis", 1)):
            low, high = np.nanmin(framed[:, column]), np.nanmax(framed[:, column])
            pad = 0.1 * (high - low) or 1.0
            fig.update_layout({axis: {"range": [low - pad, high + pad]}})
    note = "" if len(trajectories.pca_fitted_on) == len(trajectories.runs) else f" (fitted on {', '.join(trajectories.pca_fitted_on)}: the others diverged)"
    return base_layout(fig, "Optimizer paths on their top two principal components" + note,
                       f"PC1 ({first:.1%} of variance)", f"PC2 ({second:.1%} of variance)")
