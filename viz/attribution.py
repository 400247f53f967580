"""Figures of attribution, activation patching and the logit lens: arrays and token labels in, Plotly figures out.

Every token of every axis gets its own tick (duplicates stay distinct), and every figure grows with its token
counts so that each tick label keeps a line: ROW_PX pixels per row of tokens, COLUMN_PX per column.
"""
import math
from collections.abc import Collection, Mapping

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Tokens, check_matrix
from .labels import safe_label, token_axis
from .panels import add_matrix, set_colour_axis, subplots, symmetric_limit
from .theme import DIVERGING, Theme, apply_theme

PANELS_PER_ROW = 4
MIN_PANEL_PX = 220


def _line_px(theme: Theme) -> float:
    """Pixels one tick label needs: a line of text and a little air."""
    return 1.6 * theme.font_size


def attribution_figure(methods: Mapping[str, ArrayLike], output_tokens: Tokens, src_tokens: Tokens, *,
                       signed: Collection[str] = (), title: str = "Attribution by method",
                       theme: Theme = Theme()) -> go.Figure:
    """Each method's (output tokens x source tokens) array as a panel, PANELS_PER_ROW panels a row.

    methods: name -> (len(output_tokens), len(src_tokens)); signed: the names of the methods whose values may take
    either sign (as declared, whatever this input's values happen to be). Methods spread their shares very
    differently (flow and rollout thinly, attention on one cell), so each panel is divided by its own peak |value|:
    the others share a 0-to-1 colour bar, signed ones (gradients) a diverging -1-to-1 one. The hover names the peak.
    """
    methods = {name: check_matrix(matrix, output_tokens, src_tokens, name=name) for name, matrix in methods.items()}
    if not methods:
        raise ValueError("no method to draw")
    negative = [name for name, matrix in methods.items() if name not in signed and np.nanmin(matrix) < 0]
    if negative:
        raise ValueError(f"{negative[0]!r} has negative values but is not declared signed")
    cols = min(PANELS_PER_ROW, len(methods))
    rows = math.ceil(len(methods) / cols)
    fig = subplots(rows, cols, titles=list(methods), horizontal_spacing=0.25 / cols, vertical_spacing=0.3 / rows)
    for index, (name, matrix) in enumerate(methods.items()):
        peak = max(float(np.nanmax(np.abs(matrix))), 1e-12)
        axis = "coloraxis2" if name in signed else "coloraxis"
        add_matrix(fig, matrix / peak, output_tokens, src_tokens, row=index // cols + 1, col=index % cols + 1,
                   colour={"coloraxis": axis}, axis_names=("output", "source"),
                   value_name=f"{name} ÷ its peak {peak:.3g}")
    set_colour_axis(fig, "coloraxis", theme.sequential, 0.0, 1.0, "of peak")
    if set(signed) & set(methods):
        set_colour_axis(fig, "coloraxis2", DIVERGING, -1.0, 1.0, "of peak (signed)")
        fig.update_layout(coloraxis2_colorbar=dict(x=1.1, xanchor="left"))
    line = _line_px(theme)
    panel_height = max(MIN_PANEL_PX, line * len(output_tokens) / 0.8)
    panel_width = max(MIN_PANEL_PX, line * len(src_tokens) / 0.8)
    fig.update_layout(height=int(rows * (panel_height + 3 * line) + 160),
                      width=int(cols * (panel_width + 5 * line) + 250))
    return apply_theme(fig, theme, title)


def token_attribution_figure(methods: Mapping[str, ArrayLike], src_tokens: Tokens, row: int, output_token: str, *,
                             title: str = "", theme: Theme = Theme()) -> go.Figure:
    """One output token's attribution by every method: methods (rows) x source tokens (columns).

    Each row is that method's row `row`, divided by its largest absolute value so that methods on different scales
    share one diverging colour bar (-1 to 1) and the cell each method rates highest is the darkest red."""
    names = list(methods)
    matrix = np.stack([np.asarray(methods[name], dtype=float)[row] for name in names])  # (methods, src_len)
    peak = np.abs(matrix).max(axis=1, keepdims=True)
    scaled = matrix / np.where(peak > 0, peak, 1.0)
    fig = subplots(1, 1)
    add_matrix(fig, scaled, names, src_tokens, axis_names=("method", "source"), value_name="share of the row's peak")
    set_colour_axis(fig, "coloraxis", DIVERGING, -1.0, 1.0, "of peak")
    line = _line_px(theme)
    fig.update_layout(height=int(max(300, line * len(names) / 0.6 + 160)),
                      width=int(max(500, 3.2 * line * len(src_tokens) + 300)))
    return apply_theme(fig, theme, title or f"Where {output_token!s} comes from, by method")


def patching_figure(heads: Mapping[str, ArrayLike], positions: Mapping[str, ArrayLike],
                    position_tokens: Mapping[str, Tokens], *, title: str = "Activation patching",
                    theme: Theme = Theme()) -> go.Figure:
    """Effects of patching on the measured log-probability, on one diverging scale centred at 0.

    heads: attention kind -> (layers, heads); positions: stack ("encoder", "decoder") -> (layers, len(tokens)),
    position_tokens: stack -> its tokens. Top row: a layer x head panel per attention kind; bottom row: a
    layer x position panel per stack, one tick per token."""
    tables = [*heads.values(), *positions.values()]
    limit = symmetric_limit(np.concatenate([np.asarray(t, dtype=float).ravel() for t in tables]))
    cols = max(len(heads), len(positions))
    titles = [f"{kind}: layer x head" for kind in heads] + [""] * (cols - len(heads))
    titles += [f"{stack} residual stream: layer x position" for stack in positions]
    fig = subplots(2, cols, titles=titles, vertical_spacing=0.3, horizontal_spacing=0.08)
    for col, (kind, table) in enumerate(heads.items(), start=1):
        table = np.asarray(table, dtype=float)
        layer_names = [f"L{layer}" for layer in range(table.shape[0])]
        add_matrix(fig, table, layer_names, [f"H{head}" for head in range(table.shape[1])], row=1, col=col,
                   axis_names=("layer", "head"), value_name="Δ log p")
    for col, (stack, table) in enumerate(positions.items(), start=1):
        table = np.asarray(table, dtype=float)
        add_matrix(fig, table, [f"L{layer}" for layer in range(table.shape[0])], position_tokens[stack], row=2,
                   col=col, axis_names=("layer", "position"), value_name="Δ log p")
    set_colour_axis(fig, "coloraxis", DIVERGING, -limit, limit, "Δ log p")
    longest = max(len(tokens) for tokens in position_tokens.values())
    fig.update_layout(height=700, width=int(max(900, cols * max(300, 1.2 * _line_px(theme) * longest))))
    return apply_theme(fig, theme, title)


def logit_lens_figure(stages: Tokens, positions: Tokens, top_pieces: ArrayLike, top_probs: ArrayLike, *,
                      title: str = "Logit lens", theme: Theme = Theme()) -> go.Figure:
    """What each decoder stage would predict: stages (rows) x decoder positions (columns).

    Colour = probability of the stage's top piece; the piece is written in its cell (hover adds the runners-up).
    top_pieces: (stages, positions, k) strings, most likely first; top_probs: same shape."""
    top_probs = np.asarray(top_probs, dtype=float)
    pieces = np.asarray(top_pieces, dtype=object)
    if top_probs.shape[:2] != (len(stages), len(positions)) or pieces.shape != top_probs.shape:
        raise ValueError(f"top_pieces {pieces.shape} and top_probs {top_probs.shape} must be "
                         f"(stages={len(stages)}, positions={len(positions)}, k)")
    labels = np.vectorize(safe_label, otypes=[object])(pieces)
    hover = np.array([[f"{safe_label(stages[s])}, after {safe_label(positions[p])} ({p}):<br>" + "<br>".join(
        f"{labels[s, p, i]}: {top_probs[s, p, i]:.3f}" for i in range(pieces.shape[2]))
        for p in range(len(positions))] for s in range(len(stages))], dtype=object)
    fig = go.Figure(go.Heatmap(
        z=top_probs[:, :, 0], text=labels[:, :, 0], texttemplate="%{text}", textfont_size=theme.font_size,
        zmin=0.0, zmax=1.0,
        colorscale=theme.sequential, colorbar=dict(title=dict(text="top probability")), customdata=hover,
        hovertemplate="%{customdata}<extra></extra>",
    ))
    fig.update_xaxes(token_axis(positions), title_text="decoder input (the piece after it is predicted)")
    fig.update_yaxes(token_axis(stages), autorange="reversed", title_text="residual stream after")
    line = _line_px(theme)
    fig.update_layout(height=int(max(350, 1.5 * line * len(stages) + 200)),
                      width=int(max(600, 3.5 * line * len(positions) + 250)))
    return apply_theme(fig, theme, title)
