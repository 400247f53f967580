"""Figures of attribution, activation patching and the logit lens: arrays and token labels in, Plotly figures out.

Every token of every axis gets its own tick (duplicates stay distinct), laid out in pixels (viz.layout) for the
theme's width: panels wrap, tokens sit closer, the logit lens turns on its side, before a figure gets wider.
"""
import math
from collections.abc import Collection, Mapping

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Tokens, check_matrix
from .labels import safe_label, token_axis
from .layout import LINE_EM, TOKEN_STEP_EM, axis_domain, colour_bar_px, grid_layout, text_px, widest_px
from .panels import (
    colour_axis,
    matrix_panel,
    panels_figure,
    set_colour_axis,
    subplot_layout,
    symmetric_limit,
)
from .theme import DIVERGING, Theme, apply_theme, merged, themed

PANELS_PER_ROW = 4


def attribution_figure(methods: Mapping[str, ArrayLike], output_tokens: Tokens, src_tokens: Tokens, *,
                       signed: Collection[str] = (), title: str = "Attribution by method",
                       theme: Theme = Theme()) -> go.Figure:
    """Each method's (output tokens x source tokens) array as a panel, PANELS_PER_ROW panels a row (fewer where
    the theme's width is narrower).

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
    layout = subplot_layout(rows, cols, list(methods), horizontal_spacing=0.25 / cols, vertical_spacing=0.3 / rows)
    traces = []
    for index, (name, matrix) in enumerate(methods.items()):
        peak = max(float(np.nanmax(np.abs(matrix))), 1e-12)
        axis = "coloraxis2" if name in signed else "coloraxis"
        panel_traces, axes = matrix_panel(index, matrix / peak, output_tokens, src_tokens, colour={"coloraxis": axis},
                                          axis_names=("output", "source"), value_name=f"{name} ÷ its peak {peak:.3g}")
        traces += panel_traces
        layout = merged(layout, axes)
    layout = merged(layout, colour_axis("coloraxis", theme.sequential, 0.0, 1.0, "of peak"))
    bars = [("coloraxis", cols)]
    if set(signed) & set(methods):
        layout = merged(layout, colour_axis("coloraxis2", DIVERGING, -1.0, 1.0, "of peak (signed)"))
        bars.append(("coloraxis2", len(methods)))  # beside the last panel
    # Every panel labels its own axes (methods differ by panel): the panels wrap into as many rows as the width needs.
    sized, _ = grid_layout(theme, output_tokens, src_tokens, rows=rows, cols=cols, panels=len(methods), wrap=True,
                           title=title, titles=layout["annotations"], colour_bars=bars, label_every_panel=True)
    return themed(traces, merged(layout, sized), theme, title)


def token_attribution_figure(methods: Mapping[str, ArrayLike], src_tokens: Tokens, row: int, output_token: str, *,
                             title: str = "", theme: Theme = Theme()) -> go.Figure:
    """One output token's attribution by every method: methods (rows) x source tokens (columns).

    Each row is that method's row `row`, divided by its largest absolute value so that methods on different scales
    share one diverging colour bar (-1 to 1) and the cell each method rates highest is the darkest red."""
    names = list(methods)
    matrix = np.stack([np.asarray(methods[name], dtype=float)[row] for name in names])  # (methods, src_len)
    peak = np.abs(matrix).max(axis=1, keepdims=True)
    scaled = matrix / np.where(peak > 0, peak, 1.0)
    title = title or f"Where {output_token!s} comes from, by method"
    return panels_figure([dict(matrix=scaled, axis_names=("method", "source"), value_name="share of the row's peak")],
                         names, src_tokens, colour_axes=[colour_axis("coloraxis", DIVERGING, -1.0, 1.0, "of peak")],
                         colour_bars=[("coloraxis", 1)], title=title, theme=theme)


def _token_step(theme: Theme, count: int, room: float | None) -> tuple[int, float]:
    """(tick font, pixels per token) for `count` tokens across `room` pixels (None: any): the largest font whose
    labels, written upwards one font size apart, fit; the smallest readable one (wider than room) where none does."""
    for font in range(theme.font_size, theme.min_font_size - 1, -1):
        for step in (TOKEN_STEP_EM * font, 1.1 * font):
            if room is None or count * step <= room:
                return font, step
    return theme.min_font_size, 1.1 * theme.min_font_size


def patching_figure(heads: Mapping[str, ArrayLike], positions: Mapping[str, ArrayLike],
                    position_tokens: Mapping[str, Tokens], *, title: str = "Activation patching",
                    theme: Theme = Theme()) -> go.Figure:
    """Effects of patching on the measured log-probability, on one diverging scale centred at 0.

    heads: attention kind -> (layers, heads); positions: stack ("encoder", "decoder") -> (layers, len(tokens)),
    position_tokens: stack -> its tokens. Top row: a layer x head panel per attention kind (titled by the kind);
    below, a layer x position panel per stack, one tick per token, each as wide as the figure (its tokens take what
    the theme's width leaves). Either may be empty (lecture mode draws one row at a time: all of them do not fit
    a projector's height at 30 pieces)."""
    tables = [*heads.values(), *positions.values()]
    limit = symmetric_limit(np.concatenate([np.asarray(t, dtype=float).ravel() for t in tables]))
    cols, head_rows = max(len(heads), 1), int(bool(heads))
    # The head panels' titles name the kind only (their L and H ticks say the rest): three side by side must fit.
    titles = [str(kind) for kind in heads]
    titles += [f"{stack} residual stream: layer x position" for stack in positions]
    specs = [[{}] * cols] * head_rows + [[{"colspan": cols}] + [None] * (cols - 1) for _ in positions]
    layout = subplot_layout(head_rows + len(positions), cols, titles, specs=specs)
    first_position_panel = cols * head_rows
    panels = []  # (grid panel in make_subplots' order, matrix, row labels, column labels, axis names)
    for index, table in enumerate(heads.values()):  # the top row's panels
        table = np.asarray(table, dtype=float)
        panels.append((index, table, [f"L{layer}" for layer in range(table.shape[0])],
                       [f"H{head}" for head in range(table.shape[1])], ("layer", "head")))
    for row, (stack, table) in enumerate(positions.items()):  # a row each, after the top row's `cols` panels
        table = np.asarray(table, dtype=float)
        panels.append((first_position_panel + row, table, [f"L{layer}" for layer in range(table.shape[0])],
                       position_tokens[stack], ("layer", "position")))
    traces = []
    for index, table, row_labels, col_labels, names in panels:
        panel_traces, axes = matrix_panel(index, table, row_labels, col_labels, axis_names=names,
                                          value_name="Δ log p")
        traces += panel_traces
        layout = merged(layout, axes)
    layout = merged(layout, colour_axis("coloraxis", DIVERGING, -limit, limit, "Δ log p"))
    # Pixel layout (as viz.layout's): the position panels' tokens set the font; the head panels sit above them.
    size = theme.font_size
    layers = max(np.asarray(t).shape[0] for t in tables)
    y_band = 8 + text_px(f"L{layers - 1}", size) + 6
    margin = dict(l=y_band + 10, r=colour_bar_px(theme) + 20, t=LINE_EM * theme.title_size + 16)
    room = None if theme.width is None else theme.width - margin["l"] - margin["r"]
    longest = max((list(tokens) for tokens in position_tokens.values()), key=len, default=[])
    font, step = _token_step(theme, len(longest), room)
    head_count = max((np.asarray(t).shape[1] for t in heads.values()), default=1)
    head_w = max(head_count * 2.2 * size, text_px(max(titles[:cols], key=len), size) + 10)
    plot_w = max(len(longest) * step, cols * head_w + (cols - 1) * y_band)
    if room is not None and plot_w > room and len(longest) * step <= room:  # the head panels' titles are wider
        plot_w, head_w = room, (room - (cols - 1) * y_band) / cols
    title_band, row_h = LINE_EM * size + 6, LINE_EM * size * 1.2
    bands = [LINE_EM * size + 14] * head_rows + [widest_px(longest, font) + 14] * len(positions)  # x labels
    heights = [layers * row_h] * (head_rows + len(positions))
    top, domains = [], {}
    y = 0.0
    for height, band in zip(heights, bands):
        top.append(y + title_band)
        y += title_band + height + band
    plot_h, margin["b"] = y - bands[-1], bands[-1] + 10
    for index in range(len(heads)):
        left = index * (head_w + y_band)
        domains[f"xaxis{index + 1 if index else ''}"] = dict(domain=axis_domain(left, left + head_w, plot_w))
        domains[f"yaxis{index + 1 if index else ''}"] = dict(domain=axis_domain(top[0], top[0] + heights[0], plot_h,
                                                                           from_top=True))
    for row in range(len(positions)):
        axis, band = first_position_panel + row + 1, head_rows + row
        axis_name = axis if axis > 1 else ""
        domains[f"xaxis{axis_name}"] = dict(domain=axis_domain(0, len(position_tokens[list(positions)[row]]) * step,
                                                          plot_w), tickfont=dict(size=font), tickangle=-90)
        domains[f"yaxis{axis_name}"] = dict(domain=axis_domain(top[band], top[band] + heights[band], plot_h,
                                                          from_top=True))
    layout = merged(layout, domains, dict(
        width=round(margin["l"] + plot_w + margin["r"]), height=round(margin["t"] + plot_h + margin["b"]),
        margin=margin, coloraxis=dict(colorbar=dict(x=1, xanchor="left", xpad=10, y=1, yanchor="top",
                                                    lenmode="pixels", len=min(plot_h, 12 * LINE_EM * size)))))
    for index, annotation in enumerate(layout["annotations"]):  # panel titles above their panels
        head_panel = index < len(heads)
        row = 0 if head_panel else index - len(heads) + head_rows
        annotation.update(y=1 - top[row] / plot_h, yanchor="bottom", yshift=2,
                          x=(index * (head_w + y_band) + head_w / 2) / plot_w if head_panel else 0, xanchor=(
                              "center" if head_panel else "left"))
    return themed(traces, layout, theme, title)


# A logit lens cell's height, in fonts: room around the piece written in it, then closer on a projector's height
# (1.15: text set solid, the last resort of its 40 decoder pieces at 1280 x 720).
LENS_ROW_EMS = (LINE_EM * 1.3, LINE_EM, 1.2, 1.15)
LENS_CELL_PAD_PX = 10  # across a cell, beside its piece


def logit_lens_figure(stages: Tokens, positions: Tokens, top_pieces: ArrayLike, top_probs: ArrayLike, *,
                      layer_ends: Collection[int] = (), title: str = "Logit lens",
                      theme: Theme = Theme()) -> go.Figure:
    """What each decoder stage would predict: stages (rows) x decoder positions (columns), or, where that is
    wider than the theme's width, positions (rows) x stages (columns).

    Colour = probability of the stage's top piece; the piece is written in its cell (hover adds the runners-up).
    top_pieces: (stages, positions, k) strings, most likely first; top_probs: same shape. The font is the largest
    from theme.font_size down to theme.min_font_size at which the figure fits the theme's width (and height).
    layer_ends: the stages that end a layer (the residual stream after it): where every stage does not fit the
    theme's width and height at a readable font (a projector's 40 decoder pieces leave room for three columns of
    pieces, not nine), only these are drawn, and the title says so."""
    top_probs = np.asarray(top_probs, dtype=float)
    pieces = np.asarray(top_pieces, dtype=object)
    if top_probs.shape[:2] != (len(stages), len(positions)) or pieces.shape != top_probs.shape:
        raise ValueError(f"top_pieces {pieces.shape} and top_probs {top_probs.shape} must be "
                         f"(stages={len(stages)}, positions={len(positions)}, k)")
    shape = _lens_shape(theme, stages, positions, pieces[:, :, 0])
    if not shape["fits"] and theme.height is not None and layer_ends:
        kept = sorted(layer_ends)
        stages, pieces, top_probs = [stages[s] for s in kept], pieces[kept], top_probs[kept]
        title = f"{title} · after each layer"
        shape = _lens_shape(theme, stages, positions, pieces[:, :, 0])
    labels = np.vectorize(safe_label, otypes=[object])(pieces)
    hover = np.array([[f"{safe_label(stages[s])}, after {safe_label(positions[p])} ({p}):<br>" + "<br>".join(
        f"{labels[s, p, i]}: {top_probs[s, p, i]:.3f}" for i in range(pieces.shape[2]))
        for p in range(len(positions))] for s in range(len(stages))], dtype=object)
    font, down = shape["font"], shape["down"]
    z, text, custom = top_probs[:, :, 0], labels[:, :, 0], hover
    x_labels, y_labels = list(positions), list(stages)
    x_title, y_title = "decoder input (the piece after it is predicted)", "residual stream after"
    if down:
        z, text, custom = z.T, text.T, custom.T
        x_labels, y_labels, x_title, y_title = y_labels, x_labels, y_title, x_title
    fig = go.Figure(go.Heatmap(z=z, text=text, texttemplate="%{text}", textfont_size=font, coloraxis="coloraxis",
                               customdata=custom, hovertemplate="%{customdata}<extra></extra>"))
    set_colour_axis(fig, "coloraxis", theme.sequential, 0.0, 1.0, "top probability")
    axis_text = dict(tickfont=dict(size=font), title_font=dict(size=font), automargin=False)
    fig.update_xaxes(token_axis(x_labels), title_text=x_title, tickangle=-90 if not down else 0, **axis_text)
    fig.update_yaxes(token_axis(y_labels), autorange="reversed", title_text=y_title, **axis_text)
    margin, plot_h = shape["margin"], shape["plot_h"]
    fig.update_layout(width=round(shape["width"]), height=round(shape["height"]), margin=margin,
                      coloraxis_colorbar=dict(x=1, xanchor="left", xpad=10, y=1, yanchor="top", lenmode="pixels",
                                              len=min(plot_h, 12 * LINE_EM * theme.font_size)))
    fig.update_xaxes(title_standoff=shape["x_labels_px"])
    fig.update_yaxes(title_standoff=shape["y_labels_px"])
    return apply_theme(fig, theme, title)


def _lens_shape(theme: Theme, stages: Tokens, positions: Tokens, top: np.ndarray) -> dict:
    """The logit lens's pixels: the first of, at each font from the largest, stages as rows then as columns (down),
    each cell LENS_ROW_EMS fonts tall in turn (the first only, where the theme sets no height), that fits the theme's
    width and height; else the narrowest at the smallest font ("fits" False)."""
    bar = colour_bar_px(theme) + 20
    title_band = LINE_EM * theme.title_size + 16
    tried = []
    for font in range(theme.font_size, theme.min_font_size - 1, -1):
        for row_em in LENS_ROW_EMS if theme.height is not None else LENS_ROW_EMS[:1]:
            for down in (False, True):
                rows, columns = (positions, stages) if down else (stages, positions)
                # The piece written in each cell; the column's label where it stands under it (down: horizontal).
                cell_w = max(widest_px(top.ravel(), font), widest_px(columns, font) if down else font) \
                    + LENS_CELL_PAD_PX
                y_labels_px = 8 + widest_px(rows, font) + 6
                x_labels_px = (LINE_EM * font if down else widest_px(columns, font)) + 14
                margin = dict(l=y_labels_px + LINE_EM * font + 16, r=bar, t=title_band,
                              b=x_labels_px + LINE_EM * font + 16)
                plot_h = len(rows) * row_em * font
                width = margin["l"] + len(columns) * cell_w + margin["r"]
                height = margin["t"] + plot_h + margin["b"]
                shape = dict(font=font, down=down, margin=margin, plot_h=plot_h, width=width, height=height,
                             x_labels_px=x_labels_px, y_labels_px=y_labels_px)
                if (theme.width is None or width <= theme.width) and (theme.height is None or height <= theme.height):
                    return {**shape, "fits": True}
                tried.append(shape)
    return {**min(tried, key=lambda shape: (shape["width"], shape["height"])), "fits": False}
