"""The next-piece distribution as sampling reshapes it: the model's probabilities, after temperature, and after
top-k / top-p truncation (what the piece is drawn from), as grouped bars, one row of three per piece."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Tokens
from .labels import safe_label
from .layout import LINE_EM, widest_px
from .theme import Theme, theme_layout, themed_figure

STAGES = ("model", "after temperature", "after top-k / top-p (drawn from)")
COLOURS = ("rgb(150, 150, 150)", "rgb(255, 127, 14)", "rgb(31, 119, 180)")
BAR_AREA_PX = {False: 320, True: 420}  # the bars' own width (key: lecture mode)
MARGIN_PX = (12, 60, 64)  # left (beyond the labels), right (value text), top (title)
BOTTOM_EM = 2 + 3 * LINE_EM  # under the bars: the axis, then the legend, one stage a line
ROW_EM = 2.4  # a piece's three bars and the gap to the next, in font sizes


def distribution_figure(pieces: Tokens, probs: ArrayLike, drawn: int | None, *, title: str = "",
                        width_px: float = 900, theme: Theme = Theme()) -> go.Figure:
    """pieces: the pieces shown, most likely first (the last may be a bin for all the others); probs: (3, pieces)
    each piece's probability by the model, after temperature, after truncation; drawn: the index of the piece drawn
    (its label says so) or None. The figure is at most `width_px` wide."""
    probs = np.asarray(probs, dtype=float)
    if probs.shape != (3, len(pieces)):
        raise ValueError(f"probs must be (3, {len(pieces)}): model, after temperature, after truncation; "
                         f"got {probs.shape}")
    labels = [safe_label(piece) + ("  ← drawn" if index == drawn else "") for index, piece in enumerate(pieces)]
    font = theme.font_size
    label_px = widest_px([f"{piece}  ← drawn" for piece in pieces], font) + 12
    bars_px = min(BAR_AREA_PX[theme.large], width_px - label_px - MARGIN_PX[0] - MARGIN_PX[1])
    row_px = ROW_EM * font
    data = [dict(type="bar", orientation="h", name=stage, x=probs[index], y=list(range(len(pieces))),
                 marker=dict(color=colour), text=[f"{p:.2f}" if p >= 0.005 else "" for p in probs[index]],
                 textposition="outside", textfont=dict(size=font * 0.7), cliponaxis=False,
                 hovertemplate=f"{stage}: %{{x:.4f}}<extra></extra>")
            for index, (stage, colour) in enumerate(zip(STAGES, COLOURS))]
    layout = theme_layout(theme, title)
    left, right, top = MARGIN_PX
    bottom = BOTTOM_EM * font
    layout.update(
        barmode="group", bargap=0.15, bargroupgap=0,
        width=int(left + label_px + bars_px + right), height=int(top + len(pieces) * row_px + bottom),
        margin=dict(l=int(left + label_px), r=right, t=top, b=bottom, autoexpand=False),
        xaxis=dict(range=[0, 1], fixedrange=True),
        yaxis=dict(tickmode="array", tickvals=list(range(len(pieces))), ticktext=labels, autorange=False,
                   range=[len(pieces) - 0.5, -0.5], fixedrange=True, ticklabeloverflow="allow"),
        legend=dict(orientation="v", yref="container", y=0, yanchor="bottom", x=0, xanchor="left",
                    font=dict(size=font)))
    return themed_figure(data, layout, theme)
