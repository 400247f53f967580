"""One head's queries and keys over a corpus as points of one 2-D picture (AttentionViz, Yeh et al. 2023), and the
tokens that most excite feed-forward neurons, as a table."""
import unicodedata
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
from pandas.api.types import is_bool_dtype, is_numeric_dtype

from .labels import piece_text, safe_label
from .layout import picture_height
from .panels import colour_axis
from .theme import Theme, themed

SIDES = {"query": ("queries", "circle"), "key": ("keys", "diamond")}  # side -> legend name, marker symbol
SIDE_COLOURS = {"query": "#1b9e77", "key": "#d95f02"}  # apart for the common colour-vision deficiencies
POSITION_SCALE = "Viridis"  # dark to light along a sentence, on a light or a dark background
CONTEXT = 4  # pieces either side of a point's token in its hover
GL_POINTS = 5_000  # from this many points on, WebGL: SVG draws tens of thousands of markers slowly
REQUIRED = ("x", "y", "side", "sentence", "position", "piece")


def token_class(piece: object) -> str:
    """A piece's class, for colouring points: special (<s>, </s>, <pad>, <unk>), punctuation (or symbols), digit, word
    start (the sentencepiece mark ▁ or a byte-level Ġ), or inside a word."""
    text = str(piece)
    if text.startswith("<") and text.endswith(">") and len(text) > 2:
        return "special"
    bare = text.lstrip("▁Ġ")
    if bare and all(unicodedata.category(c)[0] in "PS" for c in bare):  # punctuation and symbols (+, <, €)
        return "punctuation"
    if bare and bare.isdigit():
        return "digit"
    return "word start" if text[:1] in ("▁", "Ġ") else "inside a word"


def _in_context(pieces: Sequence[object], position: int, width: int, mark: tuple[str, str], show) -> str:
    """Up to `width` pieces either side of pieces[position], each through `show`, the piece between the `mark`s, and
    "…" where the sentence goes on."""
    start, end = max(0, position - width), min(len(pieces), position + width + 1)
    before = [show(piece) for piece in pieces[start:position]]
    after = [show(piece) for piece in pieces[position + 1:end]]
    shown = ["…"] * (start > 0) + before + [mark[0] + show(pieces[position]) + mark[1]] + after + ["…"] * (
        end < len(pieces))
    return " ".join(shown)


def _hover(rows: pd.DataFrame, label: str | None) -> list[str]:
    """Per point: its side, sentence and position, its token in a few pieces of its sentence (escaped, the token in
    bold brackets) and, where points are coloured by a column, that column's value."""
    has_pieces = "pieces" in rows.columns
    texts = []
    for index, row in enumerate(rows.itertuples(index=False)):
        position = int(row.position)
        if has_pieces and 0 <= position < len(row.pieces):
            context = _in_context(row.pieces, position, CONTEXT, ("<b>[", "]</b>"), safe_label)
        else:
            context = f"<b>[{safe_label(row.piece)}]</b>"
        extra = f"<br>{safe_label(label)}: {safe_label(rows[label].iloc[index])}" if label else ""
        texts.append(f"{safe_label(row.side)} · sentence {int(row.sentence)} · position {position}<br>{context}{extra}")
    return texts


def _class_colours(values: Sequence[object]) -> dict:
    """A colour per class (in order of first appearance), Plotly's qualitative palette repeated where they are more."""
    palette = plotly.colors.qualitative.Plotly
    return {value: palette[index % len(palette)] for index, value in enumerate(dict.fromkeys(values))}


def queries_keys_figure(frame: pd.DataFrame, *, colour_by: str = "position", title: str = "",
                        theme: Theme = Theme()) -> go.Figure:
    """The points of `frame` (transformer.analysis.qk_space.projected: x, y, side "query"/"key", sentence, position,
    piece, and optionally pieces, each point's sentence on its side) in one scatter: queries as circles, keys as
    diamonds, a legend entry each. `colour_by`: "position" (one colour scale for both), "side", or another column of
    `frame` (a token class: a colour per value, or a colour scale where numeric). Hovering a point shows its token
    within its sentence; customdata = [sentence, position, side] on every point, for a click to open that sentence.
    The axes have no units (a projection's): equal aspect, no ticks."""
    missing = [column for column in REQUIRED if column not in frame.columns]
    if missing:
        raise ValueError(f"frame lacks column(s) {missing}; it needs {list(REQUIRED)} (analysis.qk_space.projected)")
    if colour_by not in ("position", "side") and colour_by not in frame.columns:
        raise ValueError(f"colour_by must be 'position', 'side' or a column of the frame, got {colour_by!r}")
    classes = colour_by not in ("position", "side") and (is_bool_dtype(frame[colour_by])
                                                         or not is_numeric_dtype(frame[colour_by]))
    scaled = colour_by == "position" or (colour_by != "side" and not classes)
    colours = _class_colours(frame[colour_by]) if classes else {}
    kind = "scattergl" if len(frame) >= GL_POINTS else "scatter"
    label = None if colour_by in ("position", "side") else colour_by
    traces = []
    for side, (name, symbol) in SIDES.items():
        rows = frame[frame["side"] == side]
        if scaled:
            colour = dict(color=rows[colour_by].astype(float).tolist(), coloraxis="coloraxis")
        elif classes:
            colour = dict(color=[colours[value] for value in rows[colour_by]])
        else:
            colour = dict(color=SIDE_COLOURS[side])
        traces.append(dict(
            type=kind, mode="markers", name=name, x=rows["x"].astype(float).tolist(),
            y=rows["y"].astype(float).tolist(), marker=dict(symbol=symbol, size=theme.marker_size, **colour),
            customdata=[[int(s), int(p), str(d)] for s, p, d in zip(rows["sentence"], rows["position"], rows["side"])],
            hovertext=_hover(rows, label), hovertemplate="%{hovertext}<extra></extra>"))
    # The classes' colours in the legend, beside the sides' symbols (as viz.stats names kinds by symbol).
    traces += [dict(type=kind, mode="markers", x=[None], y=[None], name=safe_label(value), legendgroup="classes",
                    marker=dict(symbol="square", color=colour, size=theme.marker_size))
               for value, colour in colours.items()]
    hidden = dict(showticklabels=False, ticks="", showgrid=False, zeroline=False)
    layout = dict(xaxis=dict(hidden), yaxis=dict(hidden, scaleanchor="x", scaleratio=1), hovermode="closest",
                  height=picture_height(theme))
    if scaled:
        values = frame[colour_by].astype(float).to_numpy()
        low, high = (float(np.nanmin(values)), float(np.nanmax(values))) if len(values) else (0.0, 1.0)
        layout.update(colour_axis("coloraxis", POSITION_SCALE if colour_by == "position" else theme.sequential,
                                  low, max(high, low + 1e-9), colour_by))
    if frame.empty:
        layout["annotations"] = [dict(text="no queries or keys", showarrow=False, xref="paper", yref="paper",
                                      x=0.5, y=0.5)]
    return themed(traces, layout, theme, title)


def neuron_examples_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of transformer.analysis.qk_space.top_neuron_examples ready to show: neuron, rank, activation, and
    context, the token in brackets among the pieces around it ("… ·the [·cat] ·sat …", "…" where the sentence goes
    on), then sentence and position. Plain text for a table (pieces as piece_text shows them), not Plotly's HTML."""
    columns = ["neuron", "rank", "activation", "context", "sentence", "position"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    contexts = []
    for row in frame.itertuples(index=False):
        start = row.position - len(row.before)
        shown = ["…"] * (start > 0) + [piece_text(piece) for piece in row.before] + [f"[{piece_text(row.piece)}]"]
        shown += [piece_text(piece) for piece in row.after] + ["…"] * (row.position + len(row.after) + 1 < row.length)
        contexts.append(" ".join(shown))
    table = frame.assign(context=contexts)[columns].reset_index(drop=True)
    return table.astype({"neuron": int, "rank": int, "activation": float, "sentence": int, "position": int})
