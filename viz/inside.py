"""Inside one attention head, step by step, and a layer's feed-forward neurons: arrays and labels in, figures out.

A vector (d_head or d_model numbers per token) is a row of a compact heatmap, one row per token, every row labelled.
A figure is never wider than its `width` (the space it is shown in): a vector's cells narrow to fit (to 1 px) and
its dimension ticks thin out to stay readable; a long input makes a figure taller, never wider. Bars (a number per
token) stand in panels of their own beside the heatmap, their values written on them.
"""
import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Tokens
from .labels import safe_label, token_axis, token_range
from .layout import COLOUR_BAR_PX, LINE_EM, axis_domain, colour_bar_px, text_px, widest_px
from .theme import DIVERGING, Theme, colour_stops, themed

ROW_EM = 1.5  # height of a row of tokens, in font sizes
CLOSE_ROW_EM = 1.2  # on a projector, rows close up to this (a line of text) before the font shrinks
CELL_EM = 1.2  # widest a vector's cell gets, in font sizes: short vectors stay small
BAR_PANEL_EM = 11  # width of a bar panel, in font sizes (room for the bar and its value)
GAP_EM = 1.5  # between panels
MASKED = "masked"  # written instead of a number on a key the mask blocks


def _nice_step(raw: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... at least `raw`."""
    decade = 1
    while True:
        for step in (decade, 2 * decade, 5 * decade):
            if step >= raw:
                return step
        decade *= 10


def _dimension_ticks(count: int, cell_px: float, font: int) -> dict:
    """Ticks at every dimension whose label has room, and at a readable step otherwise."""
    step = _nice_step((text_px(str(count - 1), font) + 0.8 * font) / max(cell_px, 1e-9))
    ticks = list(range(0, count, step))
    return dict(tickmode="array", tickvals=ticks, ticktext=[str(i) for i in ticks], tickangle=0,
                range=[-0.5, count - 0.5], autorange=False)


def _check(vectors, labels, name: str) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=float)
    if vectors.ndim != 2 or vectors.shape[0] != len(labels):
        raise ValueError(f"{name} must be (rows={len(labels)}, dimensions), got {vectors.shape}")
    return vectors


def _bar_trace(values, labels, blocked, axes: tuple[str, str], theme: Theme, name: str) -> list[dict]:
    """Horizontal bars, one per label (top down), the value written beside each; a blocked row gets no bar, only
    the word MASKED."""
    values = np.asarray(values, dtype=float)
    shown = np.where(blocked, 0.0, values)
    text = [MASKED if b else f"{v:.3g}" for v, b in zip(values, blocked)]
    colours = ["rgba(150,150,150,0.6)" if b else ("#d6604d" if v >= 0 else "#4393c3") for v, b in zip(values, blocked)]
    return [dict(type="bar", orientation="h", x=shown.tolist(), y=list(range(len(labels))), text=text,
                 textposition="outside", cliponaxis=False, textfont=dict(size=theme.font_size),
                 marker=dict(color=colours), xaxis=axes[0], yaxis=axes[1], name=name, showlegend=False,
                 customdata=[safe_label(label) for label in labels],
                 hovertemplate=f"%{{customdata}}<br>{safe_label(name)} = %{{text}}<extra></extra>")]


def _bar_range(values, blocked, panel_px: float, font: int) -> list[float]:
    """An x range for bars in a panel `panel_px` wide that leaves room for the written values beside them (and for
    MASKED right of 0)."""
    shown = np.where(blocked, 0.0, np.asarray(values, dtype=float))
    low, high = min(float(shown.min()), 0.0), max(float(shown.max()), 0.0)
    text = widest_px([f"{v:.3g}" for v in shown] + ([MASKED] if np.any(blocked) else []), font) + 6
    left, right = (text if low < 0 else 2.0), (text if high > 0 or np.any(blocked) else 2.0)
    scale = max(panel_px - left - right, 0.2 * panel_px) / ((high - low) or 1.0)  # pixels per unit
    return [low - left / scale, high + right / scale]


def _fitted(theme: Theme, layout_of: Callable[[Theme], dict]) -> Theme:
    """The theme at the largest font, from its own down to its min_font_size, at which the figure's layout (layout_of,
    its _frame at that font) fits theme.height and theme.width; the theme as it is without a height."""
    if theme.height is None:
        return theme
    for font in range(theme.font_size, theme.min_font_size, -1):
        sized = dataclasses.replace(theme, font=font)
        layout = layout_of(sized)
        if layout["height"] <= theme.height and (theme.width is None or layout["width"] <= theme.width):
            return sized
    return dataclasses.replace(theme, font=theme.min_font_size)


def _frame(theme: Theme, labels, title: str, panel_widths: list[float], colour_bar: bool) -> tuple[dict, list]:
    """Layout of panels side by side (pixels), the labels left of the first, and each panel's x domain."""
    font = theme.font_size
    left = 8 + widest_px([safe_label(label) for label in labels], font) + 12
    right = (colour_bar_px(theme) if colour_bar else 0) + 12
    gap = GAP_EM * font
    plot_w = sum(panel_widths) + gap * (len(panel_widths) - 1)
    top = LINE_EM * theme.title_size + 16 + LINE_EM * font + 6  # the title, then the panels' titles
    bottom = LINE_EM * font + 18  # dimension ticks / bar values
    row_px = ROW_EM * font
    if theme.height is not None:  # rows take the height there is, down to CLOSE_ROW_EM (1 px spare for rounding)
        row_px = max(min(row_px, (theme.height - top - bottom - 1) / len(labels)), CLOSE_ROW_EM * font)
    domains, x = [], 0.0
    for panel in panel_widths:
        domains.append(axis_domain(x, x + panel, plot_w))
        x += panel + gap
    right += max(0.0, text_px(title, theme.title_size) + 40 - (left + plot_w + right))  # room for the title
    layout = dict(width=math.ceil(left + plot_w + right), height=math.ceil(top + row_px * len(labels) + bottom),
                  margin=dict(l=left, r=right, t=top, b=bottom), bargap=0.25,
                  title=dict(x=0, xref="container", xanchor="left", y=1, yref="container", yanchor="top",
                             pad=dict(t=8, l=12)))
    return layout, domains


def _panel_title(text: str, domain, theme: Theme) -> dict:
    return dict(text=safe_label(text), x=(domain[0] + domain[1]) / 2, y=1, xref="paper", yref="paper",
                xanchor="center", yanchor="bottom", yshift=4, showarrow=False, font=dict(size=theme.font_size))


def vectors_figure(vectors: ArrayLike, labels: Tokens, *, title: str, width: int, heading: str = "",
                   bars: ArrayLike | None = None, bars_heading: str = "", blocked_rows: ArrayLike | None = None,
                   theme: Theme = Theme()) -> go.Figure:
    """Each row of `vectors` (rows, dimensions) as a row of coloured cells (blue below 0, red above, one colour
    scale centred at 0), labelled with its label; `heading` over the cells. `bars` (rows,): a number per row as a
    bar in a panel beside them, headed `bars_heading`; `blocked_rows` (rows,) bool: rows whose bar is MASKED."""
    vectors = _check(vectors, labels, "vectors")
    rows, dims = vectors.shape
    scale = rows >= 3
    # The cells narrow to the width: the font only has to fit the height (and the narrowest cells the width).
    theme = _fitted(theme, lambda sized: _frame(sized, labels, title, [float(dims)] + (
        [BAR_PANEL_EM * sized.font_size] if bars is not None else []), colour_bar=scale)[0])
    font = theme.font_size
    bar_w = BAR_PANEL_EM * font if bars is not None else 0.0
    base, _ = _frame(theme, labels, "", [1.0] + ([bar_w] if bars is not None else []), colour_bar=scale)  # margins
    room = width - base["margin"]["l"] - base["margin"]["r"] - (bar_w + GAP_EM * font if bars is not None else 0)
    cell = max(min(CELL_EM * font, room / dims), 1.0)
    panels = [cell * dims] + ([bar_w] if bars is not None else [])
    layout, domains = _frame(theme, labels, title, panels, colour_bar=scale)
    limit = max(float(np.abs(vectors).max()), 1e-12)
    hover = np.array([[safe_label(label)] * dims for label in labels], dtype=object)
    data = [dict(type="heatmap", z=vectors.tolist(), x=list(range(dims)), y=list(range(rows)),
                 customdata=hover.tolist(), colorscale=colour_stops(DIVERGING), zmin=-limit, zmax=limit,
                 xaxis="x", yaxis="y", hovertemplate="%{customdata}, dimension %{x}: %{z:.4g}<extra></extra>",
                 showscale=scale,  # a colour bar needs a few rows' height; hover tells a lone row's values
                 colorbar=dict(x=1, xanchor="left", xpad=10, thickness=COLOUR_BAR_PX, lenmode="pixels",
                               len=min(layout["height"] - layout["margin"]["t"] - layout["margin"]["b"],
                                       12 * LINE_EM * font), y=1, yanchor="top", title=dict(text="value",
                                                                                            side="right")))]
    layout["xaxis"] = dict(domain=domains[0], **_dimension_ticks(dims, cell, font), showgrid=False, zeroline=False)
    layout["yaxis"] = dict(**token_axis(labels), **token_range(rows, top_down=True), showgrid=False)
    annotations = [_panel_title(heading, domains[0], theme)] if heading else []
    if bars is not None:
        blocked = np.zeros(rows, dtype=bool) if blocked_rows is None else np.asarray(blocked_rows, dtype=bool)
        data += _bar_trace(bars, labels, blocked, ("x2", "y2"), theme, bars_heading or "value")
        layout["xaxis2"] = dict(domain=domains[1], range=_bar_range(bars, blocked, bar_w, font),
                                showticklabels=False, zeroline=True, showgrid=False)
        layout["yaxis2"] = dict(matches="y", showticklabels=False, **token_range(rows, top_down=True))
        annotations.append(_panel_title(bars_heading, domains[1], theme))
    if annotations:  # plotly keeps no empty list
        layout["annotations"] = annotations
    return themed(data, layout, theme, title)


def rotation_figure(before: ArrayLike, after: ArrayLike, labels: Tokens, *, title: str, width: int,
                    headings: tuple[str, str] = ("before", "after"), theme: Theme = Theme()) -> go.Figure:
    """Rotary positions: each row's vector (rows, d_head) before and after the rotation turned it, in two panels side
    by side on one colour scale centred at 0 (blue below 0, red above), a row per label, `headings` over them. Each
    panel is at least as wide as its heading; the two share what `width` leaves beside the labels."""
    before, after = _check(before, labels, "before"), _check(after, labels, "after")
    if before.shape != after.shape:
        raise ValueError(f"before {before.shape} and after {after.shape} must have the same shape")
    rows, dims = before.shape
    scale = rows >= 3
    theme = _fitted(theme, lambda sized: _frame(sized, labels, title, [float(dims)] * 2, colour_bar=scale)[0])
    font = theme.font_size
    base, _ = _frame(theme, labels, "", [1.0, 1.0], colour_bar=scale)  # the margins
    room = width - base["margin"]["l"] - base["margin"]["r"] - GAP_EM * font
    cell = max(min(CELL_EM * font, room / (2 * dims)), widest_px(headings, font) / dims, 1.0)
    layout, domains = _frame(theme, labels, title, [cell * dims] * 2, colour_bar=scale)
    limit = max(float(np.abs(before).max()), float(np.abs(after).max()), 1e-12)
    hover = np.array([[safe_label(label)] * dims for label in labels], dtype=object).tolist()
    data, annotations = [], []
    for index, (vectors, heading, domain) in enumerate(zip((before, after), headings, domains)):
        suffix = str(index + 1) if index else ""
        data.append(dict(type="heatmap", z=vectors.tolist(), x=list(range(dims)), y=list(range(rows)),
                         customdata=hover, colorscale=colour_stops(DIVERGING), zmin=-limit, zmax=limit,
                         xaxis=f"x{suffix}", yaxis=f"y{suffix}", name=heading, showscale=scale and index == 1,
                         hovertemplate=f"%{{customdata}}, {safe_label(heading)}, dimension %{{x}}: %{{z:.4g}}"
                                       "<extra></extra>",
                         colorbar=dict(x=1, xanchor="left", xpad=10, thickness=COLOUR_BAR_PX, lenmode="pixels",
                                       len=min(layout["height"] - layout["margin"]["t"] - layout["margin"]["b"],
                                               12 * LINE_EM * font), y=1, yanchor="top",
                                       title=dict(text="value", side="right"))))
        layout[f"xaxis{suffix}"] = dict(domain=domain, **_dimension_ticks(dims, cell, font), showgrid=False,
                                        zeroline=False)
        layout[f"yaxis{suffix}"] = (dict(**token_axis(labels), **token_range(rows, top_down=True), showgrid=False)
                                    if not index else dict(matches="y", showticklabels=False, showgrid=False,
                                                           **token_range(rows, top_down=True)))
        annotations.append(_panel_title(heading, domain, theme))
    layout["annotations"] = annotations
    return themed(data, layout, theme, title)


def _bar_panels(panels: list[tuple[str, ArrayLike, np.ndarray]], labels: Tokens, title: str,
                theme: Theme) -> go.Figure:
    """A bar per label in each of `panels` (heading, values, blocked) side by side, the labels left of the first."""
    def frame(sized: Theme) -> tuple[dict, list]:
        return _frame(sized, labels, title, [BAR_PANEL_EM * sized.font_size] * len(panels), colour_bar=False)

    theme = _fitted(theme, lambda sized: frame(sized)[0])
    layout, domains = frame(theme)
    data, annotations = [], []
    for index, ((heading, values, masked), domain) in enumerate(zip(panels, domains)):
        suffix = str(index + 1) if index else ""
        data += _bar_trace(values, labels, masked, (f"x{suffix}", f"y{suffix}"), theme, heading)
        panel_range = _bar_range(values, masked, BAR_PANEL_EM * theme.font_size, theme.font_size)
        layout[f"xaxis{suffix}"] = dict(domain=domain, range=panel_range, showticklabels=False,
                                        zeroline=True, showgrid=False)
        layout[f"yaxis{suffix}"] = (dict(**token_axis(labels), **token_range(len(labels), top_down=True))
                                    if not index else
                                    dict(matches="y", showticklabels=False,
                                         **token_range(len(labels), top_down=True)))
        annotations.append(_panel_title(heading, domain, theme))
    layout["annotations"] = annotations
    return themed(data, layout, theme, title)


def turned_dots_figure(before: ArrayLike, after: ArrayLike, key_labels: Tokens, *, title: str,
                       theme: Theme = Theme()) -> go.Figure:
    """Rotary positions: q·k for every key (k_len,) with q and k as the projections made them and after their
    positions turned them, a bar per key in two panels."""
    none = np.zeros(len(key_labels), dtype=bool)
    return _bar_panels([("q·k before the turn", before, none), ("q·k after", after, none)], key_labels, title, theme)


def softmax_figure(dots: ArrayLike, scores: ArrayLike, weights: ArrayLike, blocked: ArrayLike, key_labels: Tokens,
                   d_head: int, *, title: str, theme: Theme = Theme()) -> go.Figure:
    """From dot products to weights for one query, a bar per key in three panels: q·k; the score q·k / √d_head, a
    blocked key marked MASKED (the mask adds -∞ there); the softmax of the scores, the attention weights (0 on
    blocked keys). (k_len,) each; blocked: bool, True = the mask blocks that key."""
    blocked = np.asarray(blocked, dtype=bool)
    none = np.zeros_like(blocked)
    panels = [("q · k", dots, none), (f"÷ √{d_head}, masked = score", scores, blocked),
              ("softmax = weight", weights, none)]
    return _bar_panels(panels, key_labels, title, theme)


def neuron_figure(activations: ArrayLike, labels: Tokens, neuron: int, *, title: str = "",
                  theme: Theme = Theme()) -> go.Figure:
    """One feed-forward neuron's activation (len(labels),) at every token, a bar each."""
    activations = np.asarray(activations, dtype=float)
    heading = f"neuron {neuron}"

    def frame(sized: Theme) -> tuple[dict, list]:
        return _frame(sized, labels, title, [2 * BAR_PANEL_EM * sized.font_size], colour_bar=False)

    theme = _fitted(theme, lambda sized: frame(sized)[0])
    panel = 2 * BAR_PANEL_EM * theme.font_size
    layout, domains = frame(theme)
    blocked = np.zeros(len(labels), dtype=bool)
    data = _bar_trace(activations, labels, blocked, ("x", "y"), theme, heading)
    layout["xaxis"] = dict(domain=domains[0], range=_bar_range(activations, blocked, panel, theme.font_size),
                           showticklabels=False, zeroline=True, showgrid=False)
    layout["yaxis"] = dict(**token_axis(labels), **token_range(len(labels), top_down=True))
    layout["annotations"] = [_panel_title(f"activation of {heading}", domains[0], theme)]
    return themed(data, layout, theme, title or f"Neuron {neuron} over the input")


def top_neurons(activations: ArrayLike, labels: Tokens, k: int = 5) -> pd.DataFrame:
    """The k most active neurons at each token: activations (tokens, d_ff) -> a row per token, its label and, for
    each rank, the neuron and its activation ("n 17: 2.31")."""
    activations = np.asarray(activations, dtype=float)
    if activations.ndim != 2 or activations.shape[0] != len(labels):
        raise ValueError(f"activations must be (tokens={len(labels)}, neurons), got {activations.shape}")
    k = min(k, activations.shape[1])
    order = np.argsort(-activations, axis=1, kind="stable")[:, :k]  # (tokens, k)
    table = {"position": list(range(len(labels))), "token": [str(label) for label in labels]}
    for rank in range(k):
        table[f"#{rank + 1}"] = [f"n{order[t, rank]}: {activations[t, order[t, rank]]:.3g}" for t in range(len(labels))]
    return pd.DataFrame(table)
