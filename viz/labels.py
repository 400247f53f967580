"""Text placed in figures: tokens are user text, so every label goes through safe_label()."""
import html
from collections.abc import Sequence

# Sentencepiece's word-start marker "▁" is a low bar: written upwards on a column label it reads as "|" beside the
# piece ("|July"). Every text that shows a piece (tick labels, hovers, titles, the UI's tables and lists) shows it as a
# middle dot, a mark that reads the same at any angle: one convention everywhere. Exports keep the piece as it is.
WORD_START, WORD_START_SHOWN = "▁", "·"


def piece_text(text: object) -> str:
    """A piece, or any text holding pieces, as it is shown: word-start markers as middle dots."""
    return str(text).replace(WORD_START, WORD_START_SHOWN)


def safe_label(text: object) -> str:
    """A label for Plotly: `<`, `>` and `&` escaped, so that Plotly shows `text` literally instead of reading it as
    its HTML subset (tokens like "<s>" or "</s>" would otherwise vanish, as unknown tags, or style the label, as
    "<b>x</b>"), and word-start markers shown as middle dots (piece_text)."""
    return html.escape(piece_text(text), quote=False)


def token_axis(tokens: Sequence[object]) -> dict:
    """Axis settings that put one tick per token at its integer position, so duplicated tokens stay distinct.

    ticklabeloverflow="allow": Plotly.js otherwise measures every label against the figure's edge to hide those
    past it, and that pass is quadratic in the ticks of an axis (seconds to minutes at hundreds to thousands of ticks;
    docs/performance.md). viz.layout sizes margins so that no label passes the edge.
    """
    return dict(tickmode="array", tickvals=list(range(len(tokens))), ticktext=[safe_label(t) for t in tokens],
                ticklabeloverflow="allow")


def token_range(count: int, top_down: bool = False) -> dict:
    """A fixed range for `count` cells at positions 0 .. count - 1 (the one Plotly.js would pick), the first at the
    top when top_down (queries). Fixed, because matched axes left to autorange make every Plotly.react (Streamlit
    sends a copy of each chart it has drawn) draw the whole figure again."""
    low, high = -0.5, count - 0.5
    return dict(range=[high, low] if top_down else [low, high], autorange=False)
