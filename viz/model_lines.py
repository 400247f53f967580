"""The model view drawn as lines: every head of a window of layers x heads as a small head view (queries on the
left, keys on the right, one line per pair whose opacity is the weight), the panels of one layer in a row.

A heatmap thumbnail needs a column per token, so at 24 tokens four of them cannot keep 12 px labels across a
projector; a panel of lines is as narrow as its lines need, whatever the tokens. The panels of a row share their
rows: the queries are labelled left of the first panel, the keys right of the last, and a faint rule per row carries
the eye across. Each head keeps its head view colour. A click on a panel's token (a marker whose hover lists that
token's strongest links) reports the panel: traces 0 .. layers * heads - 1 are those markers, one per panel, with
meta=[layer, head]; the lines' meta is [layer, head, opacity].
"""
import math

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Blocked, Tokens, check_stack, model_mask
from .grid import panel_title
from .head_view import HEAD_COLOURS, SOLID_STEP_EM, _link_summaries, list_font, list_height, weight_lines
from .labels import safe_label
from .layout import LINE_EM, axis_domain, text_px, widest_px
from .theme import Theme, merged, theme_layout, themed_figure

PANEL_PX = (110, 220)  # a panel's width: at least (lines steep enough to follow), at most (a list, not a field)
GAP_PX = 18  # between two panels of a row
LABEL_GAP_PX = 16  # between a label column and its panel


def fit_model_lines(q_tokens: Tokens, k_tokens: Tokens, layers: int, heads: int, *, title: str = "",
                    theme: Theme = Theme()) -> tuple[int, int]:
    """(layers, heads) of a model_lines page: the most heads a row that keep panels PANEL_PX[0] wide in
    theme.width, then the most layers whose rows keep theme.min_font_size set solid in theme.height (all, where the
    theme has no bound). At least one of each."""
    font = theme.min_font_size
    labels = sum(_label_columns_px(q_tokens, k_tokens, font, theme)) + 40  # and the margins
    cols = heads if theme.width is None else max(1, min(heads, math.floor(
        (theme.width - labels + GAP_PX) / (PANEL_PX[0] + GAP_PX))))
    rows = max(len(q_tokens), len(k_tokens))
    shown = layers if theme.height is None else next(
        (n for n in range(layers, 0, -1)
         if list_height(theme, rows, bool(title), font, SOLID_STEP_EM, lists=n, headed=True, legend=False)
         <= theme.height), 1)
    return shown, cols


def model_lines(stack: ArrayLike, q_tokens: Tokens, k_tokens: Tokens, *, blocked: Blocked | None = None,
                title: str = "", first: tuple[int, int] = (0, 0), heads_per_kv: int = 1,
                theme: Theme = Theme()) -> go.Figure:
    """Every head of `stack` (layers, heads, q_len, k_len) as lines, layers in rows, heads side by side.

    first: the (layer, head) of stack[0, 0] where `stack` is a window of a larger model (a page of
    fit_model_lines'). blocked: masks as in head_heatmap; pairs the model masks get no line. The tokens take the
    largest font from theme.font_size down to theme.min_font_size that keeps the rows in theme.height; the panels
    share theme.width (draw the figure at layout.width x layout.height)."""
    stack = check_stack(stack, q_tokens, k_tokens)
    layers, heads = stack.shape[:2]
    masked = model_mask(blocked, stack.shape[2:])
    rows = max(len(q_tokens), len(k_tokens))
    font, step_em = list_font(theme, rows, bool(title), lists=layers, headed=True, legend=False)
    left, right = _label_columns_px(q_tokens, k_tokens, font, theme)
    room = (theme.width or 0) - left - right - 40 - (heads - 1) * GAP_PX
    panel = min(max(room / heads, PANEL_PX[0]), PANEL_PX[1]) if theme.width else PANEL_PX[1]
    heading = LINE_EM * theme.font_size + 6
    row_h = rows * step_em * font
    margin = dict(l=20 + left, r=20 + right, t=(LINE_EM * theme.title_size + 24 if title else 16) + heading, b=16)
    plot_w, plot_h = heads * panel + (heads - 1) * GAP_PX, layers * row_h + (layers - 1) * heading

    names = [panel_title(layer + first[0], head + first[1], heads_per_kv) for layer, head in np.ndindex(layers, heads)]
    markers, lines, anchors, axes, headings = [], [], [], {}, []
    thin = dict(width=theme.line_width / 2)
    y_range = [-(rows - 0.5), 0.5]
    for index, (layer, head) in enumerate(np.ndindex(layers, heads)):
        model_layer, model_head = layer + first[0], head + first[1]
        suffix = str(index + 1) if index else ""
        x_id, y_id = f"x{suffix}", f"y{suffix}"
        x0, top = head * (panel + GAP_PX), layer * (row_h + heading)
        axes[f"xaxis{suffix}"] = dict(domain=axis_domain(x0, x0 + panel, plot_w), range=[-0.04, 1.04], visible=False,
                                      fixedrange=True, anchor=y_id)
        axes[f"yaxis{suffix}"] = dict(
            domain=axis_domain(top, top + row_h, plot_h, from_top=True), range=y_range, fixedrange=True, anchor=x_id,
            zeroline=False, showgrid=True, tickfont=dict(size=font), automargin=False,
            **_token_ticks(q_tokens, shown=head == 0))
        colour = plotly.colors.hex_to_rgb(HEAD_COLOURS[model_head % len(HEAD_COLOURS)])
        lines += weight_lines(stack[layer, head], ~masked, colour, thin, [model_layer, model_head],
                              name=names[index], showlegend=False, xaxis=x_id, yaxis=y_id)
        hover = [_link_summaries(side, stack[layer, head][None], masked, q_tokens, k_tokens, [names[index]])
                 for side in ("query", "key")]
        markers.append(dict(
            type="scatter", x=[0.0] * len(q_tokens) + [1.0] * len(k_tokens),
            y=list(-np.arange(len(q_tokens))) + list(-np.arange(len(k_tokens))), mode="markers",
            marker=dict(size=theme.marker_size * 0.7, color="rgba(128, 128, 128, 0.5)"), name=names[index],
            meta=[model_layer, model_head], showlegend=False, xaxis=x_id, yaxis=y_id, hovertext=hover[0] + hover[1],
            hovertemplate="%{hovertext}<extra></extra>"))
        headings.append(dict(text=safe_label(names[index]), x=(x0 + panel / 2) / plot_w, y=1 - top / plot_h,
                             xref="paper", yref="paper", xanchor="center", yanchor="bottom", yshift=2,
                             showarrow=False, font=dict(size=theme.font_size)))
        if head == heads - 1:  # the keys' labels, right of the row's last panel
            key_axis = str(len(names) + layer + 1)
            # The axis needs a trace, or Plotly.js draws no ticks on it.
            anchors.append(dict(type="scatter", x=[None], y=[None], xaxis=x_id, yaxis=f"y{key_axis}",
                                showlegend=False, hoverinfo="skip"))
            axes[f"yaxis{key_axis}"] = dict(overlaying=y_id, side="right", anchor=x_id, range=y_range, fixedrange=True,
                                  showgrid=False, zeroline=False, tickfont=dict(size=font), automargin=False,
                                  **_token_ticks(k_tokens, shown=True))
    # The sides named over the label columns, on the first row's heading line.
    for text, x, anchor in (("query", -LABEL_GAP_PX / plot_w, "right"), ("key", 1 + LABEL_GAP_PX / plot_w, "left")):
        headings.append(dict(text=text, x=x, y=1, xref="paper", yref="paper", xanchor=anchor, yanchor="bottom",
                             yshift=2, showarrow=False, font=dict(size=theme.font_size)))
    width = max(margin["l"] + plot_w + margin["r"], text_px(title, theme.title_size) + 40)
    layout = merged(dict(width=round(width), height=round(margin["t"] + plot_h + margin["b"]), margin=margin,
                         annotations=headings, showlegend=False, clickmode="event+select", hovermode="closest",
                         **axes),
                    theme_layout(theme, title),
                    dict(title=dict(x=0, xref="container", xanchor="left", y=1, yref="container", yanchor="top",
                                    pad=dict(t=8, l=12))))
    return themed_figure(markers + lines + anchors, layout, theme)


def _label_columns_px(q_tokens: Tokens, k_tokens: Tokens, font: int, theme: Theme) -> tuple[float, float]:
    """The pixels across of the query labels' column (left) and the keys' (right), each as wide as its widest label
    or its heading ("query", "key"), and its gap to the panels."""
    return tuple(max(widest_px(tokens, font), text_px(side, theme.font_size)) + LABEL_GAP_PX
                 for tokens, side in ((q_tokens, "query"), (k_tokens, "key")))


def _token_ticks(tokens: Tokens, shown: bool) -> dict:
    """A row per token (row i at y = -i, as weight_lines draws them) with its rule; the labels where `shown`
    (ticklabeloverflow: see labels.token_axis)."""
    return dict(tickmode="array", tickvals=[-i for i in range(len(tokens))],
                ticktext=[safe_label(token) for token in tokens], ticklabeloverflow="allow", showticklabels=shown,
                ticks="")
