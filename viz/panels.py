"""Shared pieces of the matrix figures: subplot grids, one token-labelled heatmap panel, mask overlays, colour axes.

Every heatmap of tokens against tokens in viz is drawn by matrix_panel(), so ticks, hover and masks look and behave
the same in all of them.
"""
import copy
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike
from plotly.subplots import make_subplots

from .conventions import Blocked, Tokens, check_blocked, check_matrix
from .labels import safe_label, token_axis, token_range
from .layout import grid_layout, text_px
from .theme import Theme, colour_stops, css_colour, mask_rgba, merged, themed


def subplots(rows: int, cols: int, titles: Sequence[str] = (), **kwargs: Any) -> go.Figure:
    """make_subplots with escaped panel titles (they may hold user labels)."""
    return make_subplots(rows=rows, cols=cols, subplot_titles=[safe_label(t) for t in titles], **kwargs)


def subplot_layout(rows: int, cols: int, titles: Sequence[str] = (), **kwargs: Any) -> dict:
    """The layout subplots() makes (the axes' domains and anchors, the escaped titles), as a dict to build a figure
    from: make_subplots validates the whole layout it writes (14 ms for 2 x 4 panels), and a figure of the same
    grid is built for every new input. kwargs: make_subplots' (spacing, specs), JSON values."""
    return copy.deepcopy(_subplot_layout(json.dumps([rows, cols, list(titles), kwargs], sort_keys=True)))


@functools.lru_cache(maxsize=64)
def _subplot_layout(key: str) -> dict:
    rows, cols, titles, kwargs = json.loads(key)
    layout = subplots(rows, cols, titles, **kwargs).layout.to_plotly_json()
    layout.pop("template", None)
    return layout


def axis_names(index: int) -> tuple[str, str]:
    """The (x, y) axis ids of grid panel `index` (0-based, make_subplots order) as traces name them: "x", "y" for
    the first, "x2", "y2" for the next..."""
    suffix = str(index + 1) if index else ""
    return f"x{suffix}", f"y{suffix}"


def shared_grid(rows: int, cols: int, titles: Sequence[str], theme: Theme) -> dict:
    """The layout make_subplots(rows, cols, shared_xaxes=True, shared_yaxes=True, subplot_titles=titles) makes, as
    a dict for go.Figure: each column's x axes match its bottom one, each row's y axes its first, the titles are
    escaped annotations in the theme's font. layout.grid_layout gives the domains and places the titles."""
    layout = {}
    for index in range(rows * cols):
        row, col = divmod(index, cols)
        x_id, y_id = axis_names(index)
        x_axis, y_axis = dict(anchor=y_id), dict(anchor=x_id)
        if row < rows - 1:
            x_axis.update(matches=axis_names((rows - 1) * cols + col)[0], showticklabels=False)
        if col > 0:
            y_axis.update(matches=axis_names(row * cols)[1], showticklabels=False)
        layout[f"xaxis{x_id[1:]}"], layout[f"yaxis{y_id[1:]}"] = x_axis, y_axis
    layout["annotations"] = [dict(text=safe_label(title), showarrow=False, xref="paper", yref="paper",
                                  xanchor="center", yanchor="bottom", font=dict(size=theme.font_size))
                             for title in titles]
    return layout


def value_range(values: ArrayLike, fixed_scale: bool) -> tuple[float, float]:
    """(0, 1) for attention weights on the fixed scale; otherwise the data's own range."""
    values = np.asarray(values, dtype=float)
    return (0.0, 1.0) if fixed_scale else (float(np.nanmin(values)), float(np.nanmax(values)))


def symmetric_limit(values: ArrayLike) -> float:
    """Half-width of a diverging scale centred at 0 that holds every value (positive even when all are 0)."""
    return max(float(np.nanmax(np.abs(values))), 1e-12)


def colour_axis(name: str, colorscale: str | list, cmin: float, cmax: float, title: str) -> dict:
    """The layout of the shared colour axis `name` ("coloraxis", "coloraxis2", ...) and its colour bar, whose title
    is written upwards beside its tick labels (a title on top touches the top tick). layout.grid_layout places the
    bar."""
    colorbar = dict(title=dict(text=safe_label(title), side="right"), thickness=14)
    return {name: dict(colorscale=colour_stops(colorscale), cmin=cmin, cmax=cmax, colorbar=colorbar)}


def set_colour_axis(fig: go.Figure, name: str, colorscale: str | list, cmin: float, cmax: float, title: str) -> None:
    fig.update_layout(colour_axis(name, colorscale, cmin, cmax, title))


def mask_note(blocked: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """Per cell, the hover line naming the reasons it is blocked for ("" where none)."""
    note = np.full(shape, "", dtype=object)
    for reason, mask in blocked.items():
        label = safe_label(reason)
        note[mask] = np.where(note[mask] == "", "<br>mask: " + label, note[mask] + ", " + label)
    return note


def _overlays(blocked, show_legend: bool) -> list[dict]:
    """One translucent heatmap per reason over exactly its blocked cells; its legend entry toggles it everywhere."""
    traces = []
    for reason, mask in blocked.items():
        colour = css_colour(mask_rgba(reason))
        traces.append(dict(type="heatmap", z=np.where(mask, 1.0, np.nan), colorscale=[[0, colour], [1, colour]],
                           showscale=False, name=safe_label(reason), legendgroup=reason, showlegend=show_legend,
                           hoverinfo="skip"))
    return traces


def _heatmap(matrix, row_tokens, col_tokens, blocked, *, colour=None, axis_names=("query", "key"),
             value_name="weight", scores=None) -> dict:
    """The panel's heatmap: hover names both tokens with their positions, the value, the raw score (when `scores`
    is given) and the mask reasons of the cell."""
    columns = [
        np.broadcast_to(np.array([safe_label(t) for t in row_tokens], dtype=object)[:, None], matrix.shape),
        np.broadcast_to(np.array([safe_label(t) for t in col_tokens], dtype=object)[None, :], matrix.shape),
        mask_note(blocked, matrix.shape),
    ]
    hover = (f"{axis_names[0]}: %{{customdata[0]}} (%{{y:d}})<br>{axis_names[1]}: %{{customdata[1]}} (%{{x:d}})"
             f"<br>{value_name}: %{{z:.4g}}")
    if scores is not None:
        columns.append(check_matrix(scores, row_tokens, col_tokens, name="scores"))
        hover += "<br>raw score: %{customdata[3]:.4g}"
    return dict(type="heatmap", z=matrix, customdata=np.stack(columns, axis=-1).astype(object),
                hovertemplate=hover + "%{customdata[2]}<extra></extra>", name=value_name, showlegend=False,
                **(colour or {"coloraxis": "coloraxis"}))


def matrix_panel(index: int, matrix: ArrayLike, row_tokens: Tokens, col_tokens: Tokens, *,
                 blocked: Blocked | None = None, show_masks: bool = True, show_legend: bool = True,
                 **heatmap: Any) -> tuple[list[dict], dict]:
    """A token-labelled heatmap panel, as dicts: (its traces on grid panel `index`'s axes (make_subplots order),
    those axes' layout entries), which figures built in one go (layout.grid_layout, theme.themed) take as they are.

    Rows run top to bottom and columns left to right in token order, plotted at integer positions so duplicated
    tokens stay distinct. blocked: masks by reason, drawn as overlays with a legend entry (show_legend) when
    show_masks. heatmap: colour (the trace's colour settings, by default the figure's shared colour axis
    {"coloraxis": "coloraxis"}), axis_names and value_name (as hover names them), scores (raw scores in the hover).
    """
    matrix = check_matrix(matrix, row_tokens, col_tokens, name=heatmap.get("value_name", "weight"))
    blocked = check_blocked(blocked, matrix.shape)
    x_id, y_id = axis_names(index)
    traces = [_heatmap(matrix, row_tokens, col_tokens, blocked, **heatmap)]
    if show_masks:
        traces += _overlays(blocked, show_legend)
    axes = {f"xaxis{x_id[1:]}": {**token_axis(col_tokens), **token_range(len(col_tokens))},
            f"yaxis{y_id[1:]}": {**token_axis(row_tokens), **token_range(len(row_tokens), top_down=True)}}
    return [{**trace, "xaxis": x_id, "yaxis": y_id} for trace in traces], axes


def panels_figure(panels: Sequence[dict], row_tokens: Tokens, col_tokens: Tokens, *, titles: Sequence[str] = (),
                  colour_axes: Sequence[dict] = (), colour_bars: Sequence[tuple[str, int]] = (), title: str = "",
                  legend: bool | int | None = None, only: int | None = None, theme: Theme = Theme()) -> go.Figure:
    """A row of token panels sharing their y axis, built as dicts: what make_subplots(1, n,
    shared_yaxes=True), a heatmap added for each panel, the layout and apply_theme make, several times faster (a new
    input's figures are built on every new input). panels: matrix_panel's arguments for each panel (the matrix as
    "matrix"); titles: the panels' titles (none: no titles); colour_axes: colour_axis() dicts; legend: leave room
    for the legend (None: if a trace shows in it; a number: that many lines, as grid_layout's), under the panels
    or, where the theme's height has no room there, beside them. With more than one
    panel, the panels wrap onto more rows where the theme's width is too narrow for them side by side. only: the
    index of the one panel to draw, its title after the figure's, with its colour bar and legend, as large as the
    theme's space allows (lecture mode shows a row of panels one at a time: three 30-token panels side by side
    cannot keep readable labels on a projector)."""
    if only is not None:  # its title joins the figure's: a row of panel titles would cost the panel a line
        chosen = {**panels[only], "show_legend": True}
        used = chosen.get("colour", {"coloraxis": "coloraxis"}).get("coloraxis")  # None: a panel without a bar
        joined = " · ".join(part for part in (title, titles[only] if titles else "") if part)
        # Wider than the space, the title would widen the figure past it: the panel's own title alone then.
        fits = theme.width is None or text_px(joined, theme.title_size) + 40 <= theme.width
        title = joined if fits or not titles else titles[only]
        panels, titles = [chosen], ()
        colour_bars = [(name, 1) for name, _ in colour_bars if name == used]
    traces, axes = [], {}
    for index, panel in enumerate(panels):
        panel = dict(panel)
        panel_traces, panel_axes = matrix_panel(index, panel.pop("matrix"), row_tokens, col_tokens, **panel)
        traces += panel_traces
        axes.update(panel_axes)
    grid = shared_grid(1, len(panels), titles, theme)
    annotations = grid.pop("annotations")
    names = [trace["name"] for trace in traces if trace.get("showlegend")]
    room = bool(names) if legend is None else legend
    sized, _ = grid_layout(theme, row_tokens, col_tokens, cols=len(panels), wrap=len(panels) > 1, title=title,
                           titles=annotations or None, colour_bars=colour_bars, legend=room,
                           legend_names=names if room else ())
    return themed(traces, merged(grid, axes, *colour_axes, sized), theme, title)
