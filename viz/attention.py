"""Figures of single heads: one head, the three stages of one head, two heads compared, one decoding step."""
import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Blocked, Tokens, check_matrix, model_mask
from .labels import piece_text
from .layout import LINE_EM, grid_layout, text_px
from .panels import (
    colour_axis,
    matrix_panel,
    panels_figure,
    shared_grid,
    symmetric_limit,
    value_range,
)
from .theme import DIVERGING, Theme, merged, themed

VALUE_TEXT = "0.00"  # what "%{z:.2f}" prints in a cell, at its widest


def head_heatmap(weights: ArrayLike, q_tokens: Tokens, k_tokens: Tokens, *, scores: ArrayLike | None = None,
                 blocked: Blocked | None = None, show_masks: bool = True, fixed_scale: bool = True,
                 show_values: bool = False, title: str = "", theme: Theme = Theme()) -> go.Figure:
    """One head's attention (q_len, k_len): queries top to bottom, keys left to right.

    Hover shows query and key token with their positions, the weight and, when `scores` (raw pre-softmax scores of
    the same shape) is given, the raw score. blocked: reason -> bool mask (see mask_reasons), drawn as translucent
    overlays with a legend when show_masks. fixed_scale: colour scale 0-1 (comparable across figures) instead of
    the head's own range. show_values: print each weight in its cell, only where it fits at no less than
    theme.min_font_size: the columns are widened for them where the theme's width allows; where it does not, the
    numbers are left out (values_shown says whether they are).

    The figure sizes itself so that every token keeps a readable label (see layout.grid_layout): draw it at least
    layout.width x layout.height pixels.
    """
    # Built as dicts (as viz.model_view is): through make_subplots, add_trace and update_layout it
    # is several times slower, on every new input of the Attention and Training views.
    traces, axes = matrix_panel(0, weights, q_tokens, k_tokens, scores=scores, blocked=blocked, show_masks=show_masks)
    grid = shared_grid(1, 1, [], theme)
    del grid["annotations"]  # no panel title
    options = dict(title=title, colour_bars=[("coloraxis", 1)], legend=any(trace["showlegend"] for trace in traces))
    sized, fit = grid_layout(theme, q_tokens, k_tokens, **options)
    if show_values:  # columns wide enough for the numbers, where the width allows
        widened = grid_layout(theme, q_tokens, k_tokens, min_column_px=text_px(VALUE_TEXT, theme.min_font_size) + 4,
                              **options)
        if widened[1].fits(theme):
            sized, fit = widened
    font = value_font(fit.column_px, fit.row_px, fit.font, theme) if show_values else None
    if font:
        traces[0].update(texttemplate="%{z:.2f}", textfont=dict(size=font))
    layout = merged(grid, axes, colour_axis("coloraxis", theme.sequential, *value_range(weights, fixed_scale),
                                            "weight"), sized)
    return themed(traces, layout, theme, title)


def values_shown(fig: go.Figure) -> bool:
    """Whether head_heatmap printed the weights in the cells of `fig`."""
    return bool(fig.data[0].texttemplate)


def value_font(column_px: float, row_px: float, largest: int, theme: Theme) -> int | None:
    """Largest font, from `largest` down to theme.min_font_size, at which VALUE_TEXT fits a cell; None if none."""
    for font in range(largest, theme.min_font_size - 1, -1):
        if text_px(VALUE_TEXT, font) + 4 <= column_px and LINE_EM * font <= row_px:
            return font
    return None


def stages_figure(scores: ArrayLike, blocked: Blocked | None, weights: ArrayLike, q_tokens: Tokens, k_tokens: Tokens,
                  *, show_masks: bool = True, title: str = "", only: int | None = None,
                  theme: Theme = Theme()) -> go.Figure:
    """One head in three stages side by side: raw scores, masked scores, softmax weights (only: that stage alone,
    0-2, as panels_figure draws one panel).

    Masked scores are the raw scores with the cells the model masks left blank: they are -inf before the softmax,
    so they get weight 0. Cells of informational reasons ("padded query") keep their scores, as in the model.
    Both score panels share one colour bar, the weights have their own (0-1).
    """
    scores = check_matrix(scores, q_tokens, k_tokens, name="scores")
    masked_scores = np.where(model_mask(blocked, scores.shape), np.nan, scores)
    # The raw panel names each cell's mask reasons in its hover but draws no overlay: masking comes next.
    return panels_figure(
        [dict(matrix=scores, value_name="raw score", blocked=blocked, show_masks=False),
         dict(matrix=masked_scores, value_name="masked score", blocked=blocked, show_masks=show_masks),
         dict(matrix=weights, colour={"coloraxis": "coloraxis2"}, blocked=blocked, show_masks=show_masks,
              show_legend=False)],
        q_tokens, k_tokens, titles=["raw scores", "masked scores (blank = −∞)", "softmax weights"],
        colour_axes=[colour_axis("coloraxis", theme.sequential, *value_range(scores, False), "score"),
                     colour_axis("coloraxis2", theme.sequential, 0.0, 1.0, "weight")],
        colour_bars=[("coloraxis", 2), ("coloraxis2", 3)], title=title, only=only, theme=theme)


def compare_figure(a: ArrayLike, b: ArrayLike, q_tokens: Tokens, k_tokens: Tokens, label_a: str = "A",
                   label_b: str = "B", *, blocked: Blocked | None = None, show_masks: bool = True,
                   fixed_scale: bool = True, title: str = "", only: int | None = None,
                   theme: Theme = Theme()) -> go.Figure:
    """Two heads of the same shape side by side, then A − B on a blue-white-red scale centred at 0 (red: A larger);
    only: that panel alone (0: A, 1: B, 2: A − B), as panels_figure draws one panel.

    Raises ValueError when the shapes differ.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"cannot compare heads of different shapes: {label_a} is {a.shape}, {label_b} is {b.shape}")
    difference = a - b
    limit = symmetric_limit(difference)
    return panels_figure(
        [dict(matrix=a, blocked=blocked, show_masks=show_masks),
         dict(matrix=b, blocked=blocked, show_masks=show_masks, show_legend=False),
         dict(matrix=difference, colour={"coloraxis": "coloraxis2"}, value_name="difference", blocked=blocked,
              show_masks=show_masks, show_legend=False)],
        q_tokens, k_tokens, titles=[label_a, label_b, f"{label_a} − {label_b}"],
        colour_axes=[colour_axis("coloraxis", theme.sequential, *value_range(np.stack([a, b]), fixed_scale), "weight"),
                     colour_axis("coloraxis2", DIVERGING, -limit, limit, "difference")],
        colour_bars=[("coloraxis", 2), ("coloraxis2", 3)], title=title, only=only, theme=theme)


def decoding_step_figure(cross_rows: ArrayLike, src_tokens: Tokens, output_so_far: Tokens, step: int, *,
                         blocked: Blocked | None = None, show_masks: bool = True, fixed_scale: bool = True,
                         theme: Theme = Theme()) -> go.Figure:
    """Generation step `step` (0-based): each head's cross-attention row over the source tokens, one row per head.

    cross_rows: (layers, heads, src_len), the rows of query position `step`. Rows are labelled "L2 H5" (0-based,
    as in the model). blocked: the cross-attention masks (q_len, src_len) of mask_reasons; row `step` is drawn.
    output_so_far: the decoder input up to this step; its last piece is the query, named in the title. The whole
    of it grows with every step and would be cut in a title, so the caller shows
    decoding_step_caption(step, output_so_far) as text above the figure.
    """
    cross_rows = np.asarray(cross_rows, dtype=float)
    if cross_rows.ndim != 3:
        raise ValueError(f"cross_rows must be (layers, heads, src_len); got shape {cross_rows.shape}")
    layers, heads, src_len = cross_rows.shape
    rows = cross_rows.reshape(layers * heads, src_len)
    step_blocked = {reason: np.broadcast_to(np.asarray(mask)[step], rows.shape)
                    for reason, mask in (blocked or {}).items()}
    head_labels = [f"L{layer} H{head}" for layer in range(layers) for head in range(heads)]
    title = f"Step {step} · query {output_so_far[-1]} · every head" if len(output_so_far) else f"Step {step}"
    return panels_figure([dict(matrix=rows, axis_names=("head", "source"), blocked=step_blocked,
                               show_masks=show_masks)], head_labels, src_tokens,
                         colour_axes=[colour_axis("coloraxis", theme.sequential, *value_range(rows, fixed_scale),
                                                  "weight")],
                         colour_bars=[("coloraxis", 1)], title=title, theme=theme)


def decoding_step_caption(step: int, output_so_far: Tokens) -> str:
    """The line to show above decoding_step_figure, as plain text (it holds user pieces: never as Markdown)."""
    return f"Step {step} · output so far: {' '.join(piece_text(piece) for piece in output_so_far)}"
