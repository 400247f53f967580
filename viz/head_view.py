"""The head view (as in BertViz): queries in a column on the left, keys on the right, one line per (query, key)
whose opacity is the weight, several heads at once in distinct colours.

It reads as a list, so it stays readable at any length: the figure grows by one line of text per token. Lines are
grouped into OPACITY_LEVELS traces per head (a Plotly trace has one opacity): a line's opacity is its weight
rounded to 1 / OPACITY_LEVELS, and weights that round to 0 draw no line. Pairs the model masks never get a line.
Clicking a token (a Plotly selection event: its customdata is ("query" or "key", position)) lets the caller draw
the figure again with selected=that token: then only that token's lines are drawn. Hovering a token lists the
tokens it gives (or gets) the most weight, per head.
"""
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Blocked, Tokens, check_matrix, model_mask
from .labels import safe_label
from .layout import LINE_EM, TOKEN_STEP_EM, text_px, widest_px
from .theme import Theme, merged, theme_layout, themed_figure

OPACITY_LEVELS = 20
HEAD_COLOURS = plotly.colors.qualitative.D3  # ten distinct hues, readable on white and on dark backgrounds
LINES_PX = 320  # width between the two token columns
TOP_LINKS = 3  # tokens named in a token's hover, per head
LIST_STEP_EM = 1.6  # a list's comfortable line pitch, in fonts (TOKEN_STEP_EM where a projector's height binds)
SOLID_STEP_EM = 1.15  # text set solid: a projector's last resort before the list outgrows its height
SIDES = ("query", "key")


def head_view(weights: ArrayLike, q_tokens: Tokens, k_tokens: Tokens, *, head_names: Sequence[str] | None = None,
              blocked: Blocked | None = None, selected: tuple[str, int] | None = None, title: str = "",
              theme: Theme = Theme()) -> go.Figure:
    """Lines from each query (left) to each key (right) for every head of `weights` (heads, q_len, k_len), or one
    head (q_len, k_len). head_names: legend names (default "head 0", ...); a legend click hides a head.
    blocked: masks as in head_heatmap; masked pairs get no line. selected: ("query", i) or ("key", j) draws only
    the lines of that token. The figure's layout.height grows with the tokens (draw it at that height).
    """
    weights = np.asarray(weights, dtype=float)
    weights = weights[None] if weights.ndim == 2 else weights  # (heads, q_len, k_len)
    for head in weights:
        check_matrix(head, q_tokens, k_tokens)
    head_names = head_names or [f"head {head}" for head in range(len(weights))]
    masked = model_mask(blocked, weights.shape[1:])
    if selected is not None and (selected[0] not in SIDES or not 0 <= selected[1] < len(
            q_tokens if selected[0] == "query" else k_tokens)):
        raise ValueError(f"selected must be ('query', 0..{len(q_tokens) - 1}) or ('key', 0..{len(k_tokens) - 1});"
                         f" got {selected!r}")
    rows = max(len(q_tokens), len(k_tokens))
    font, step_em = list_font(theme, rows, bool(title))
    thin = dict(width=theme.line_width / 2)  # many lines: thin ones
    data = []
    for head, (name, head_weights) in enumerate(zip(head_names, weights)):
        colour = plotly.colors.hex_to_rgb(HEAD_COLOURS[head % len(HEAD_COLOURS)])
        drawn = ~masked
        if selected is not None:
            side, position = selected
            drawn &= (np.arange(len(q_tokens))[:, None] == position) if side == "query" else (
                np.arange(len(k_tokens))[None, :] == position)
        data += weight_lines(head_weights, drawn, colour, thin, [head], name=safe_label(name),
                             legendgroup=f"head {head}", showlegend=False, marker=dict(size=theme.marker_size))
        data.append(dict(type="scatter", x=[None], y=[None], mode="lines", name=safe_label(name),
                         line=dict(color="rgb({}, {}, {})".format(*colour), **thin), legendgroup=f"head {head}",
                         marker=dict(size=theme.marker_size)))
    for side, tokens, x, position in (("query", q_tokens, 0.0, "middle left"), ("key", k_tokens, 1.0,
                                                                                  "middle right")):
        data.append(dict(
            type="scatter", x=np.full(len(tokens), x), y=-np.arange(len(tokens)), mode="markers+text",
            text=[safe_label(token) for token in tokens], textposition=position, name=side, showlegend=False,
            marker=dict(size=theme.marker_size, color="rgba(128, 128, 128, 0.5)"), textfont=dict(size=font),
            line=dict(width=theme.line_width), customdata=[[side, index] for index in range(len(tokens))],
            hovertext=_link_summaries(side, weights, masked, q_tokens, k_tokens, head_names),
            hovertemplate="%{hovertext}<extra></extra>"))
    left, right = widest_px(q_tokens, font) + 16, widest_px(k_tokens, font) + 16
    step = step_em * font
    margin = dict(l=20, r=20, t=LINE_EM * theme.title_size + 24 if title else 16, b=2 * LINE_EM * font + 16)
    width = max(margin["l"] + left + LINES_PX + right + margin["r"], text_px(title, theme.title_size) + 40)
    layout = dict(xaxis=dict(visible=False, range=[-left / LINES_PX, 1 + right / LINES_PX], fixedrange=True),
                  yaxis=dict(visible=False, range=[-(rows - 0.5), 0.5], fixedrange=True),
                  width=round(width), height=round(margin["t"] + rows * step + margin["b"]), margin=margin,
                  clickmode="event+select", hovermode="closest")
    # Built as dicts, with the sizes themed() would give every scatter (the lines' halved).
    layout = merged(layout, theme_layout(theme, title), dict(title=dict(
        x=0, xref="container", xanchor="left", y=1, yref="container", yanchor="top", pad=dict(t=8, l=12))))
    return themed_figure(data, layout, theme)


def weight_lines(weights: np.ndarray, drawn: np.ndarray, colour: tuple, line: dict, meta: list,
                 **fields: Any) -> list[dict]:
    """One query's line to each key (x 0 to 1, row i at y = -i) where `drawn` and the weight rounds above 0, as
    OPACITY_LEVELS scatter traces at most (a trace has one opacity). Each trace's meta is `meta` + [its opacity];
    fields: the traces' other properties."""
    levels = np.rint(weights * OPACITY_LEVELS).astype(int)  # (q_len, k_len)
    drawn = drawn & (levels > 0)
    traces = []
    for level in np.unique(levels[drawn]):
        queries, keys = np.nonzero(drawn & (levels == level))
        traces.append(dict(
            type="scatter", x=np.tile([0.0, 1.0, None], len(queries)),
            y=np.column_stack([-queries, -keys, np.full(len(queries), None)]).ravel(), mode="lines",
            line=dict(color="rgba({}, {}, {}, {})".format(*colour, level / OPACITY_LEVELS), **line),
            hoverinfo="skip", meta=[*meta, level / OPACITY_LEVELS], **fields))
    return traces


def list_font(theme: Theme, rows: int, titled: bool, **shape: Any) -> tuple[int, float]:
    """The token font and the line pitch (in fonts) of a list of `rows` tokens: 1.6 fonts a line at the theme's font
    where the list has no height bound; within theme.height (a projector), the largest font down to
    theme.min_font_size at 1.6, then at TOKEN_STEP_EM, then set solid (close, never piled up), that fits; else the
    smallest, and the figure grows past the height. shape: list_height's lists, headed and legend."""
    if theme.height is None:
        return theme.font_size, LIST_STEP_EM
    for font in range(theme.font_size, theme.min_font_size - 1, -1):
        for step_em in (LIST_STEP_EM, TOKEN_STEP_EM, SOLID_STEP_EM):
            if list_height(theme, rows, titled, font, step_em, **shape) <= theme.height:
                return font, step_em
    return theme.min_font_size, SOLID_STEP_EM


def list_height(theme: Theme, rows: int, titled: bool, font: int, step_em: float, *, lists: int = 1,
                headed: bool = False, legend: bool = True) -> float:
    """The pixels down of `lists` lists of `rows` tokens stacked at `font` and `step_em`: the title's band (titled),
    each list's heading line (headed), a two-line legend under them (legend), and the rows."""
    bands = (LINE_EM * theme.title_size + 24 if titled else 16) + (2 * LINE_EM * font if legend else 0) + 16
    headings = lists * (LINE_EM * theme.font_size + 6) if headed else 0
    return bands + headings + lists * rows * step_em * font


def _link_summaries(side, weights, masked, q_tokens, k_tokens, head_names) -> list[str]:
    """Per token of `side`, its TOP_LINKS strongest links of every head as hover text (escaped)."""
    mine, theirs = (q_tokens, k_tokens) if side == "query" else (k_tokens, q_tokens)
    arrow = "→" if side == "query" else "←"
    summaries = []
    for index, token in enumerate(mine):
        lines = [f"{side} {safe_label(token)} ({index})"]
        for name, head_weights in zip(head_names, weights):
            row = np.where(masked, 0.0, head_weights)
            row = row[index] if side == "query" else row[:, index]  # (other side's length,)
            top = np.argsort(-row, kind="stable")[:TOP_LINKS]
            links = ", ".join(f"{safe_label(theirs[other])} {row[other]:.2f}" for other in top if row[other] > 0)
            lines.append(f"{safe_label(name)} {arrow} {links or 'nothing'}")
        summaries.append("<br>".join(lines))
    return summaries
