"""A map of all attention heads (heads that attend alike lie close), and heads of two models matched one-to-one.

Both take the tables of transformer.analysis.head_map: head_map (kind, layer, head, x, y, role, statistics) and
match_heads (kind, layer_a, head_a, layer_b, head_b, divergence).
"""
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .conventions import KIND_LABELS, KIND_SYMBOLS
from .labels import safe_label
from .layout import LEGEND_SYMBOL_PX, LINE_EM, picture_height, text_px
from .theme import Theme, themed

# Shown in a head's hover, where the table has them: the role statistics, then how spread its rows are.
HOVER_STATISTICS = {"previous_share": "previous token", "induction_share": "induction", "diagonal_share": "diagonal",
                    "first_share": "first token", "eos_share": "end of sentence", "entropy": "entropy (nats)"}
MAP_CAPTION = ("One point per head, named by its layer and head: heads that attend alike lie close. Colour is the "
               "layer, shape the kind, and a ring and the name mark a head's role (over 0.4 of its weight on that "
               "pattern).")
ROLE_COLOURS = ("#111111", "#b8860b", "#8b008b", "#008b8b", "#a0522d")  # rings: apart from the layers' fill colours
MATCH_COLOUR = (31, 119, 180)  # the matches' lines: one hue, more opaque where the matched heads attend more alike
MAX_DIVERGENCE = math.log(2)  # the Jensen-Shannon divergence's largest value (natural log)


def _kind_name(kind: object) -> str:
    return KIND_LABELS.get(str(kind), str(kind))


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


AXIS_LINE = "near = alike attention patterns; the axes have no units"
CHOSEN_COLOUR = "#d62728"  # the chosen head's square: apart from the layers' colours and the roles' rings
# Where a head's name may stand round its point: beside it, or further out along a thin line where its neighbours'
# names took the places beside it (a cluster of heads that attend alike), in order of preference.
DIRECTIONS = ((0, -1), (0, 1), (1, 0), (-1, 0), (1, -1), (-1, -1), (1, 1), (-1, 1))  # x right, y down
REACHES = (0.0, 1.5, 3.0, 4.5)  # how far out, in lines of the names' font, beyond the place beside the point
DEFAULT_WIDTH_PX = 800  # a map drawn for no known width
MARGIN_PX = 12  # left and right of the plot


def _label(row: pd.Series, chosen: bool) -> str:
    text = _head_label(row["layer"], row["head"]) + (f" {safe_label(row['role'])}" if row["role"] else "")
    return f"<b>{text}</b>" if chosen else text


def _box(centre: tuple[float, float], size: tuple[float, float]) -> tuple[float, ...]:
    (x, y), (width, height) = centre, size
    return x - width / 2, y - height / 2, x + width / 2, y + height / 2


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _offsets(size: tuple[float, float], gap: float, line: float) -> list[tuple[float, float]]:
    """Candidate centres of a name of `size` relative to its point (pixels, y down), in order of preference."""
    width, height = size
    return [(dx * (gap + width / 2 + reach * line), dy * (gap + height / 2 + reach * line))
            for reach in REACHES for dx, dy in DIRECTIONS]


def _places(points: np.ndarray, sizes: list[tuple[float, float]], area: tuple[float, float], gap: float,
            line: float, first: list[int]) -> list[tuple[float, float]]:
    """Each point's name's centre relative to the point (pixels, y down), chosen greedily (the `first` points, then
    the rest in order): the candidate (_offsets) whose text covers least of the names placed so far, of every point,
    and of what lies outside `area` (width, height); of equal ones the first."""
    marks = [(x - gap, y - gap, x + gap, y + gap) for x, y in points]
    width, height = area
    placed: list[tuple[float, ...]] = []
    offsets = [(0.0, 0.0)] * len(points)
    for index in first + [i for i in range(len(points)) if i not in first]:
        best, best_cost = None, None
        for dx, dy in _offsets(sizes[index], gap, line):
            box = _box((points[index][0] + dx, points[index][1] + dy), sizes[index])
            outside = (box[2] - box[0]) * (box[3] - box[1]) - _overlap(box, (0, 0, width, height))
            cost = sum(_overlap(box, other) for other in placed) + 4 * outside + sum(
                _overlap(box, mark) for i, mark in enumerate(marks) if i != index)
            if best_cost is None or cost < best_cost - 1e-6:
                best, best_cost = (dx, dy), cost
            if cost == 0:
                break
        offsets[index] = best
        placed.append(_box((points[index][0] + best[0], points[index][1] + best[1]), sizes[index]))
    return offsets


def head_map_figure(frame: pd.DataFrame, *, title: str = "", theme: Theme = Theme(),
                    chosen: tuple[str, int, int] | None = None) -> go.Figure:
    """Every head of `frame` (head_map's table) a point at (x, y), named beside it ("L1 H3", and its role where it has
    one, e.g. "L0 H1 previous-token"), each name put where it covers least of the others: colour = layer (a legend
    entry per layer), symbol = kind (grey legend entries), and a ring in its role's colour round each head that has
    one (a legend entry per role). `chosen` (kind, layer, head), where given and mapped: that head in a red square,
    its name in bold. The x axis's title says in one line what nearness means (AXIS_LINE); no tick labels: the map's
    axes have no units, only its distances mean something. Equal aspect: both axes have one scale, their ranges set
    so that every name stands inside the plot. The hover names kind, layer, head, role and the main statistics; each
    point's customdata is [kind, layer, head], for a click to open that head (a ring's and the square's too)."""
    if frame.empty:
        return _empty("no heads to map", title, theme)
    frame = frame.assign(role=frame["role"].fillna("") if "role" in frame.columns else "").reset_index(drop=True)
    keys = list(zip(frame["kind"].astype(str), frame["layer"].astype(int), frame["head"].astype(int)))
    chosen_index = keys.index(tuple(chosen)) if chosen is not None and tuple(chosen) in keys else None
    labels = [_label(row, index == chosen_index) for index, row in frame.iterrows()]
    font = round(theme.font_size * (2 / 3 if theme.large else 1))  # a projector's names: 16 px, not 24 (many fit)
    sizes = [(text_px(text.replace("<b>", "").replace("</b>", ""), font) * (1.1 if "<b>" in text else 1.0),
              font * LINE_EM) for text in labels]
    # The plot's pixels: below it the axis line and the legend (the kinds and the chosen head: the layers and roles
    # are named on the map), on as many lines as its entries take.
    width = (theme.width or DEFAULT_WIDTH_PX) - 2 * MARGIN_PX
    legend = [f"{_kind_name(kind)} attention" for kind in frame["kind"].unique()] + (
        [f"chosen: {_kind_name(chosen[0])} L0 H0"] if chosen_index is not None else [])
    legend_lines = math.ceil(sum(LEGEND_SYMBOL_PX + text_px(name, theme.font_size) for name in legend) / width)
    top = int(theme.title_size * 2.2) if title else MARGIN_PX
    bottom = int(theme.font_size * LINE_EM * (legend_lines + 1) + font * LINE_EM + 16)
    height = max(picture_height(theme) - top - bottom, 10 * theme.font_size)
    xy = frame[["x", "y"]].to_numpy(dtype=float)
    gap = theme.marker_size * 1.1 + 2  # a role's ring's radius: a name never covers a ring
    room_x, room_y = max(w for w, _ in sizes) + 2 * gap, 2 * (font * LINE_EM + gap)
    spread = np.maximum(np.ptp(xy, axis=0), 1e-9)
    scale = min((width - room_x) / spread[0], (height - room_y) / spread[1])  # pixels per unit, both axes
    scale = max(scale, 1e-9)
    centre = (xy.min(axis=0) + xy.max(axis=0)) / 2
    x_range = [centre[0] - width / 2 / scale, centre[0] + width / 2 / scale]
    y_range = [centre[1] - height / 2 / scale, centre[1] + height / 2 / scale]
    pixels = np.column_stack([(xy[:, 0] - x_range[0]) * scale, (y_range[1] - xy[:, 1]) * scale])
    first = ([chosen_index] if chosen_index is not None else []) + [i for i in range(len(frame))
                                                                     if frame["role"][i] and i != chosen_index]
    offsets = _places(pixels, sizes, (width, height), gap, font * LINE_EM, first)
    role_colours = {role: ROLE_COLOURS[index % len(ROLE_COLOURS)]
                    for index, role in enumerate(dict.fromkeys(role for role in frame["role"] if role))}

    def customdata(heads: pd.DataFrame) -> list[list]:
        return [[str(kind), int(layer), int(head)] for kind, layer, head in
                zip(heads["kind"], heads["layer"], heads["head"])]

    traces = []
    for layer, heads in frame.groupby("layer", sort=True):
        traces.append(dict(
            type="scatter", mode="markers", name=f"layer {int(layer)}", showlegend=False,
            x=heads["x"].to_numpy(dtype=float), y=heads["y"].to_numpy(dtype=float),
            marker=dict(symbol=[_symbol(kind) for kind in heads["kind"]]),
            customdata=customdata(heads), hovertext=[_hover(row) for _, row in heads.iterrows()],
            hovertemplate="%{hovertext}<extra></extra>"))
    traces += _kind_legend(frame["kind"].unique())
    for role, heads in frame[frame["role"] != ""].groupby("role", sort=False):
        traces.append(dict(
            type="scatter", mode="markers", name=safe_label(role), legendgroup="roles", showlegend=False,
            x=heads["x"].to_numpy(dtype=float), y=heads["y"].to_numpy(dtype=float),
            marker=dict(symbol="circle-open", color=role_colours[role], line=dict(width=2.5)),
            customdata=customdata(heads), hovertext=[_hover(row) for _, row in heads.iterrows()],
            hovertemplate="%{hovertext}<extra></extra>"))
    if chosen_index is not None:
        row = frame.iloc[[chosen_index]]
        traces.append(dict(
            type="scatter", mode="markers", legendgroup="chosen",
            name=safe_label(f"chosen: {_kind_name(chosen[0])} {_head_label(*chosen[1:])}"),
            x=row["x"].to_numpy(dtype=float), y=row["y"].to_numpy(dtype=float),
            marker=dict(symbol="square-open", color=CHOSEN_COLOUR, line=dict(width=3)),
            customdata=customdata(row), hovertext=[_hover(r) for _, r in row.iterrows()],
            hovertemplate="%{hovertext}<extra></extra>"))
    # The names: each an annotation at its point, its text moved by its offset; a thin line back to the point where
    # the name stands further out than beside it.
    names = []
    for index, (dx, dy) in enumerate(offsets):
        far = abs(dx) > gap + sizes[index][0] / 2 + 1 or abs(dy) > gap + sizes[index][1] / 2 + 1
        names.append(dict(x=float(xy[index, 0]), y=float(xy[index, 1]), xref="x", yref="y", text=labels[index],
                          ax=float(dx), ay=float(dy), axref="pixel", ayref="pixel", showarrow=True,
                          arrowhead=0, arrowwidth=1, standoff=gap - 2,
                          arrowcolor="rgba(120, 120, 120, 0.8)" if far else "rgba(0, 0, 0, 0)",
                          font=dict(size=font, **({"color": role_colours[frame["role"][index]]}
                                                  if frame["role"][index] else {}))))
    axis = dict(showticklabels=False, showgrid=False, zeroline=False, ticks="")
    layout = dict(annotations=names,
                  xaxis=dict(axis, range=x_range, title=dict(text=AXIS_LINE, font=dict(size=font), standoff=4)),
                  yaxis=dict(axis, range=y_range), height=picture_height(theme), hovermode="closest",
                  margin=dict(l=MARGIN_PX, r=MARGIN_PX, t=top, b=bottom),
                  legend=dict(traceorder="normal"))  # one row, wrapping: grouped entries would stand in columns
    fig = themed(traces, layout, theme, title)
    # The theme gives every annotation the text's font and every marker one size: the names are smaller, the rings
    # and the chosen head's square larger, so that they surround their point.
    fig.update_annotations(font_size=font)
    fig.update_traces(marker_size=theme.marker_size * 2.2, selector=dict(legendgroup="roles"))
    fig.update_traces(marker_size=theme.marker_size * 3, selector=dict(legendgroup="chosen"))
    return fig


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
