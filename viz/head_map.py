"""A map of all attention heads (heads that attend alike lie close), and heads of two models matched one-to-one.

Both take the tables of transformer.analysis.head_map: head_map (kind, layer, head, x, y, role, statistics) and
match_heads (kind, layer_a, head_a, layer_b, head_b, divergence).
"""
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .labels import safe_label
from .layout import picture_height
from .theme import Theme, themed

KIND_NAMES = {"encoder.self_attn": "encoder self", "decoder.self_attn": "decoder self", "decoder.cross_attn": "cross"}
KIND_SYMBOLS = {"encoder.self_attn": "circle", "decoder.self_attn": "square", "decoder.cross_attn": "diamond"}
# Shown in a head's hover, where the table has them: the role statistics, then how spread its rows are.
HOVER_STATISTICS = {"previous_share": "previous token", "induction_share": "induction", "diagonal_share": "diagonal",
                    "first_share": "first token", "eos_share": "end of sentence", "entropy": "entropy (nats)"}
MAP_CAPTION = ("One point per head: heads that attend alike lie close. Colour is the layer, shape the kind, and a "
               "ring marks a head's role (over 0.4 of its weight on that pattern). The axes have no units.")
ROLE_COLOURS = ("#111111", "#b8860b", "#8b008b", "#008b8b", "#a0522d")  # rings: apart from the layers' fill colours
MATCH_COLOUR = (31, 119, 180)  # the matches' lines: one hue, more opaque where the matched heads attend more alike
MAX_DIVERGENCE = math.log(2)  # the Jensen-Shannon divergence's largest value (natural log)


def _kind_name(kind: object) -> str:
    return KIND_NAMES.get(str(kind), str(kind))


def _symbol(kind: object) -> str:
    return KIND_SYMBOLS.get(str(kind), "x")


def _head_label(layer: object, head: object) -> str:
    return f"L{int(layer)} H{int(head)}"


def _hover(row: pd.Series) -> str:
    """A head's kind, layer, head and role, and the statistics of HOVER_STATISTICS the table has (escaped)."""
    lines = [f"{safe_label(_kind_name(row['kind']))} · {_head_label(row['layer'], row['head'])}",
             f"role: {safe_label(row['role']) if row.get('role') else 'none'}"]
    for column, name in HOVER_STATISTICS.items():
        if column in row.index:
            value = row[column]
            lines.append(f"{name}: {'n/a' if pd.isna(value) else f'{float(value):.2f}'}")
    return "<br>".join(lines)


def _kind_legend(kinds) -> list[dict]:
    """A grey legend entry per kind, by its symbol (the layers' traces name the colours)."""
    return [dict(type="scatter", mode="markers", x=[None], y=[None], name=safe_label(f"{_kind_name(kind)} attention"),
                 legendgroup="kinds", marker=dict(symbol=_symbol(kind), color="grey"), hoverinfo="skip")
            for kind in kinds]


def _empty(text: str, title: str, theme: Theme) -> go.Figure:
    note = dict(text=safe_label(text), showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    hidden = dict(visible=False)
    return themed([], dict(annotations=[note], xaxis=hidden, yaxis=hidden), theme, title)


def head_map_figure(frame: pd.DataFrame, *, title: str = "", theme: Theme = Theme()) -> go.Figure:
    """Every head of `frame` (head_map's table) a point at (x, y): colour = layer (a legend entry per layer), symbol =
    kind (grey legend entries), and a ring in its role's colour round each head that has one (a legend entry per
    role: names written beside close points would pile up); the hover names kind, layer, head, role and the main
    statistics. Each point's customdata is [kind, layer, head], for a click to open that head (a ring's too). Equal
    aspect and no tick labels: the map's axes have no units, only its distances mean something."""
    if frame.empty:
        return _empty("no heads to map", title, theme)
    frame = frame.assign(role=frame["role"].fillna("") if "role" in frame.columns else "")
    traces = []
    for layer, heads in frame.groupby("layer", sort=True):
        traces.append(dict(
            type="scatter", mode="markers", name=f"layer {int(layer)}",
            x=heads["x"].to_numpy(dtype=float), y=heads["y"].to_numpy(dtype=float),
            marker=dict(symbol=[_symbol(kind) for kind in heads["kind"]]),
            customdata=[[str(kind), int(layer_), int(head)] for kind, layer_, head in
                        zip(heads["kind"], heads["layer"], heads["head"])],
            hovertext=[_hover(row) for _, row in heads.iterrows()],
            hovertemplate="%{hovertext}<extra></extra>"))
    traces += _kind_legend(frame["kind"].unique())
    for index, (role, heads) in enumerate(frame[frame["role"] != ""].groupby("role", sort=False)):
        traces.append(dict(
            type="scatter", mode="markers", name=safe_label(role), legendgroup="roles",
            x=heads["x"].to_numpy(dtype=float), y=heads["y"].to_numpy(dtype=float),
            marker=dict(symbol="circle-open", size=theme.marker_size * 2.2,
                        color=ROLE_COLOURS[index % len(ROLE_COLOURS)], line=dict(width=2.5)),
            customdata=[[str(kind), int(layer_), int(head)] for kind, layer_, head in
                        zip(heads["kind"], heads["layer"], heads["head"])],
            hovertext=[_hover(row) for _, row in heads.iterrows()],
            hovertemplate="%{hovertext}<extra></extra>"))
    axis = dict(showticklabels=False, showgrid=False, zeroline=False, ticks="")
    layout = dict(xaxis=axis, yaxis=dict(axis, scaleanchor="x", scaleratio=1), height=picture_height(theme),
                  hovermode="closest")
    return themed(traces, layout, theme, title)


def _positions(frame: pd.DataFrame, side: str) -> dict[tuple[str, int, int], float]:
    """Each head of one side (a or b) -> its row: kinds in the table's order, a blank row between kinds, each kind's
    heads by layer then head (so the lines cross where the matching permutes heads)."""
    positions, row = {}, 0.0
    for kind in dict.fromkeys(frame["kind"]):
        heads = frame[frame["kind"] == kind][[f"layer_{side}", f"head_{side}"]].drop_duplicates()
        for layer, head in sorted(map(tuple, heads.to_numpy(dtype=int))):
            positions[(kind, layer, head)] = row
            row += 1
        row += 1.5  # room for the next kind's heading
    return positions


def head_matching_figure(frame: pd.DataFrame, *, names: tuple[str, str] = ("A", "B"), title: str = "",
                         theme: Theme = Theme()) -> go.Figure:
    """Heads of two models matched one-to-one (match_heads' table) as a bipartite picture: A's heads down the left,
    B's down the right, each kind a group under its name, a line per match, the more opaque the more alike the
    matched heads attend (1 - divergence / ln 2). Points' customdata is [kind, layer, head] of their own model;
    their hovers name the match and its divergence. `names` heads the two columns (e.g. the checkpoints or
    snapshots compared)."""
    if frame.empty:
        return _empty("no heads to match", title, theme)
    rows_a, rows_b = _positions(frame, "a"), _positions(frame, "b")
    traces, hovers = [], {"a": [], "b": []}
    for match in frame.itertuples(index=False):
        a = (match.kind, int(match.layer_a), int(match.head_a))
        b = (match.kind, int(match.layer_b), int(match.head_b))
        similarity = float(np.clip(1 - match.divergence / MAX_DIVERGENCE, 0.1, 1.0))
        colour = "rgba({}, {}, {}, {:.3f})".format(*MATCH_COLOUR, similarity)
        traces.append(dict(type="scatter", mode="lines", x=[0, 1], y=[rows_a[a], rows_b[b]], showlegend=False,
                           line=dict(color=colour), hoverinfo="skip"))
        text = (f"{safe_label(_kind_name(match.kind))}<br>{safe_label(names[0])} {_head_label(*a[1:])} ↔ "
                f"{safe_label(names[1])} {_head_label(*b[1:])}<br>divergence {match.divergence:.3f}")
        hovers["a"].append((a, text))
        hovers["b"].append((b, text))
    for side, x, position in (("a", 0, "middle left"), ("b", 1, "middle right")):
        heads = hovers[side]
        rows = rows_a if side == "a" else rows_b
        traces.append(dict(
            type="scatter", mode="markers+text", name=safe_label(names[0 if side == "a" else 1]), showlegend=False,
            x=[x] * len(heads), y=[rows[head] for head, _ in heads],
            marker=dict(symbol=[_symbol(kind) for (kind, _, _), _ in heads], color="grey"),
            text=[_head_label(layer, head) for (_, layer, head), _ in heads], textposition=position,
            customdata=[[str(kind), layer, head] for (kind, layer, head), _ in heads],
            hovertext=[text for _, text in heads], hovertemplate="%{hovertext}<extra></extra>"))
    headings = [dict(text=safe_label(_kind_name(kind)), x=0.5, y=min(row for (k, _, _), row in rows_a.items()
                                                                    if k == kind) - 1.0,
                     xref="x", yref="y", showarrow=False)
                for kind in dict.fromkeys(frame["kind"])]
    columns = [dict(text=f"<b>{safe_label(name)}</b>", x=x, y=1.0, xref="x", yref="paper", yanchor="bottom",
                    showarrow=False) for name, x in zip(names, (0, 1))]
    bottom = max(max(rows_a.values()), max(rows_b.values()))
    layout = dict(
        annotations=headings + columns,
        xaxis=dict(visible=False, range=[-0.8, 1.8]),
        yaxis=dict(visible=False, range=[bottom + 0.8, -2.0]),  # first head at the top
        height=int(140 + 1.8 * theme.font_size * (bottom + 3)),
        margin=dict(l=20, r=20))
    return themed(traces, layout, theme, title)
