"""The next-piece distribution as sampling reshapes it: the model's probabilities, after temperature, and after
top-k / top-p truncation (what the piece is drawn from), as nested bars, one row per piece: the three stages drawn
over each other, each narrower than the one before, so that every bar is thick enough to read."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Tokens
from .labels import safe_label
from .layout import widest_px
from .theme import Theme, theme_layout, themed_figure

STAGES = ("model", "after temperature", "after top-k / top-p (drawn from)")
COLOURS = ("rgb(150, 150, 150)", "rgb(255, 127, 14)", "rgb(31, 119, 180)")
BAR_AREA_PX = {False: 320, True: 420}  # the bars' own width (key: lecture mode)
MARGIN_PX = (12, 60, 64)  # left (beyond the labels), right (value text), top (title)
BOTTOM_EM = 2.5 + 3 * 1.8  # under the bars: the axis, then the legend (a stage a line) clear of its labels
ROW_EM = 2.4  # a piece's row, in font sizes
BAR_WIDTHS = (0.9, 0.64, 0.38)  # each stage's bar, as a fraction of the row: the last, drawn from, on top
X_TICKS = (0.25, 0.5, 0.75, 1.0)  # no tick at 0: its label would sit under the last piece's


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
    last = len(STAGES) - 1  # its values are written beside the bars; the hover gives every stage's
    data = [dict(type="bar", orientation="h", name=stage, x=probs[index], y=list(range(len(pieces))),
                 width=BAR_WIDTHS[index], marker=dict(color=colour),
                 text=[f"{p:.2f}" if p >= 0.005 and index == last else "" for p in probs[index]],
                 textposition="outside", textfont=dict(size=font * 0.8), cliponaxis=False,
                 hovertemplate=f"{stage}: %{{x:.4f}}<extra></extra>")
            for index, (stage, colour) in enumerate(zip(STAGES, COLOURS, strict=True))]
    layout = theme_layout(theme, title)
    left, right, top = MARGIN_PX
    bottom = BOTTOM_EM * font
    layout.update(
        barmode="overlay",
        width=int(left + label_px + bars_px + right), height=int(top + len(pieces) * row_px + bottom),
        margin=dict(l=int(left + label_px), r=right, t=top, b=bottom, autoexpand=False),
        xaxis=dict(range=[0, 1], fixedrange=True, tickvals=list(X_TICKS)),
        yaxis=dict(tickmode="array", tickvals=list(range(len(pieces))), ticktext=labels, autorange=False,
                   range=[len(pieces) - 0.5, -0.5], fixedrange=True, ticklabeloverflow="allow"),
        legend=dict(orientation="v", yref="container", y=0, yanchor="bottom", x=0, xanchor="left",
                    font=dict(size=font)))
    return themed_figure(data, layout, theme)
