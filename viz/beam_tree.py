"""The beam tree: every hypothesis beam search weighed, step by step, with its score; those pruned greyed, the
chosen path highlighted. Steps run left to right, one column each; a column lists the step's hypotheses under
their parents, each parent's most likely first. Only as many columns as fit `width_px` are drawn: the window of
steps that holds the selected hypothesis (its caller offers the others)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .conventions import Tokens
from .labels import safe_label
from .layout import LINE_EM, text_px
from .theme import Theme, theme_layout, themed_figure

MARKER_PX = 16  # a node's marker and the gap to its label
COLUMN_GAP_PX = 24  # between one column's longest label and the next column's markers
MARGIN_PX = (16, 16, 72, 16)  # left, right, top (title), bottom
CHOSEN = "rgb(214, 39, 40)"
KEPT = {False: "rgb(31, 119, 180)", True: "rgb(120, 180, 240)"}  # key: dark
PRUNED = {False: "rgb(170, 170, 170)", True: "rgb(110, 110, 110)"}


def node_label(piece: str, score: float) -> str:
    return f"{piece} {score:.2f}".replace("-", "−")


def tree_font(theme: Theme) -> int:
    """Node labels between the theme's smallest and its usual size: a column per step must fit the width."""
    return (theme.min_font_size + theme.font_size) // 2


def depths_of(parents: Sequence[int]) -> np.ndarray:
    depth = np.zeros(len(parents), dtype=int)
    for node, parent in enumerate(parents):  # parents come before their children
        depth[node] = 0 if parent < 0 else depth[parent] + 1
    return depth


def tree_window(labels: Sequence[str], parents: Sequence[int], selected: int, width_px: float,
                theme: Theme = Theme()) -> range:
    """The steps (depths) drawn: as many columns as fit `width_px`, the selected node's as central as the tree
    allows."""
    font, depth = tree_font(theme), depths_of(parents)
    last = int(depth.max())
    widths = [MARKER_PX + max(text_px(label, font) for label, d in zip(labels, depth) if d == column) + COLUMN_GAP_PX
              for column in range(last + 1)]
    room = width_px - MARGIN_PX[0] - MARGIN_PX[1]
    start = max(0, min(int(depth[selected]) - 1, last))
    end = start
    while end < last and sum(widths[start:end + 2]) <= room:  # grow to the right, then to the left
        end += 1
    while start > 0 and sum(widths[start - 1:end + 1]) <= room:
        start -= 1
    return range(start, end + 1)


def beam_tree_figure(pieces: Tokens, parents: Sequence[int], scores: Sequence[float], kept: Sequence[bool],
                     chosen: Sequence[int], *, selected: int | None = None, width_px: float = 900,
                     finals: Sequence[float] | None = None, theme: Theme = Theme()) -> go.Figure:
    """pieces: each hypothesis's last piece (the root's is <s>); parents: the index of the one it extends (-1: the
    root; parents come first); scores: summed log-probabilities, shown beside each piece; kept: made the beam at its
    step; chosen: the path of the hypothesis beam search returns, root first; finals: the final scores, for hover.
    Each marker's customdata is its node index (for a selection)."""
    count = len(pieces)
    if not (len(parents) == len(scores) == len(kept) == count) or count == 0:
        raise ValueError("pieces, parents, scores and kept must have one entry per hypothesis, at least the root")
    labels = [node_label(piece, score) if parent >= 0 else str(piece)
              for piece, parent, score in zip(pieces, parents, scores)]
    selected = chosen[-1] if selected is None else selected
    depth = depths_of(parents)
    window = tree_window(labels, parents, selected, width_px, theme)
    font = tree_font(theme)
    # Rows: a column's hypotheses grouped under their parents in the parents' order, each group best first.
    row = np.zeros(count)
    for column in window:
        members = [node for node in range(count) if depth[node] == column]
        members.sort(key=lambda node: (row[parents[node]] if parents[node] >= 0 else 0, -scores[node]))
        row[members] = np.arange(len(members))
    shown = [node for node in range(count) if depth[node] in window]
    on_path = set(chosen)
    widths = [MARKER_PX + max(text_px(labels[n], font) for n in shown if depth[n] == c) + COLUMN_GAP_PX for c in window]
    x_of = dict(zip(window, np.cumsum([0, *widths[:-1]])))  # pixels from the plot's left edge
    x = np.array([x_of[depth[node]] if depth[node] in window else 0 for node in range(count)], dtype=float)
    rows = max(int(row[shown].max()) + 1, 1)
    row_px = LINE_EM * font
    edges = {True: ([], []), False: ([], [])}  # key: on the chosen path
    for node in shown:
        parent = parents[node]
        if parent >= 0 and depth[parent] in window:  # from the end of the parent's label, never across it
            xs, ys = edges[node in on_path and parent in on_path]
            xs += [x[parent] + MARKER_PX / 2 + text_px(labels[parent], font) + 4, x[node], None]
            ys += [row[parent], row[node], None]
    data = [dict(type="scatter", x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                 line=dict(color=CHOSEN if path else PRUNED[theme.dark], width=theme.line_width * (2 if path else 0.5)))
            for path, (xs, ys) in edges.items() if xs]
    # The view's caption says what the colours mean (a legend would need its own width).
    groups = (("chosen path", lambda n: n in on_path, CHOSEN), ("kept in the beam", lambda n: kept[n] and n not in
              on_path, KEPT[theme.dark]), ("pruned", lambda n: not kept[n], PRUNED[theme.dark]))
    for name, belongs, colour in groups:
        members = [node for node in shown if belongs(node)]
        if not members:
            continue
        hover = [f"step {depth[n]} · {safe_label(pieces[n])}<br>log-probability {scores[n]:.3f}"
                 + ("" if finals is None else f"<br>final score {finals[n]:.3f}") + ("" if kept[n] else "<br>pruned")
                 for n in members]
        data.append(dict(type="scatter", x=x[members], y=row[members], mode="markers+text", name=name,
                         text=[safe_label(labels[n]) for n in members], textposition="middle right",
                         textfont=dict(size=font, color=colour), customdata=members, hovertext=hover,
                         hovertemplate="%{hovertext}<extra></extra>",
                         marker=dict(size=font * 0.75, color=colour, line=dict(width=0))))
    if selected in shown:
        data.append(dict(type="scatter", x=[x[selected]], y=[row[selected]], mode="markers", showlegend=False,
                         hoverinfo="skip", marker=dict(size=font * 1.6, color="rgba(0,0,0,0)",
                                                       line=dict(width=theme.line_width, color=CHOSEN))))
    plot_width = sum(widths)
    left, right, top, bottom = MARGIN_PX
    steps = f"steps {window.start}–{window.stop - 1}" if len(window) > 1 else f"step {window.start}"
    title = f"Beam tree · {steps} of {int(depth.max())}"
    layout = theme_layout(theme, title)
    width = min(max(left + plot_width + right, text_px(title, theme.title_size) + left + right), width_px)
    layout.update(
        width=int(width), height=int(top + rows * row_px + 2 * row_px + bottom),
        margin=dict(l=left, r=right, t=top, b=bottom, autoexpand=False),
        xaxis=dict(range=[-MARKER_PX, plot_width - MARKER_PX], visible=False, fixedrange=True),
        yaxis=dict(range=[rows - 0.5 + 1, -1], visible=False, fixedrange=True),
        showlegend=False, clickmode="event+select", dragmode=False)
    return themed_figure(data, layout, theme)
