"""Text placed in figures: tokens are user text, so every label goes through safe_label()."""
import html
from collections.abc import Sequence


def safe_label(text: object) -> str:
    """Escape `<`, `>` and `&` so Plotly shows `text` literally instead of reading it as its HTML subset.

    Tokens like "<s>" or "</s>" would otherwise vanish (unknown tags) or style the label ("<b>x</b>").
    """
    return html.escape(str(text), quote=False)


# Sentencepiece's word-start marker "▁" is a low bar: written upwards on a column label it reads as "|" beside the
# piece ("|July"). Tick labels show it as a middle dot, a mark that reads the same at any angle; hovers keep the piece.
WORD_START, WORD_START_SHOWN = "▁", "·"


def tick_label(token: object) -> str:
    """A token as a tick label: escaped (safe_label), its word-start marker shown as a middle dot."""
    return safe_label(token).replace(WORD_START, WORD_START_SHOWN)


def token_axis(tokens: Sequence[object]) -> dict:
    """Axis settings that put one tick per token at its integer position, so duplicated tokens stay distinct.

    ticklabeloverflow="allow": Plotly.js otherwise measures every label against the figure's edge to hide those
    past it, and that pass is quadratic in the ticks of an axis (seconds to minutes at hundreds to thousands of ticks;
    docs/performance.md). viz.layout sizes margins so that no label passes the edge.
    """
    return dict(tickmode="array", tickvals=list(range(len(tokens))), ticktext=[tick_label(t) for t in tokens],
                ticklabeloverflow="allow")


def token_range(count: int, top_down: bool = False) -> dict:
    """A fixed range for `count` cells at positions 0 .. count - 1 (the one Plotly.js would pick), the first at the
    top when top_down (queries). Fixed, because matched axes left to autorange make every Plotly.react (Streamlit
    sends a copy of each chart it has drawn) draw the whole figure again."""
    low, high = -0.5, count - 0.5
    return dict(range=[high, low] if top_down else [low, high], autorange=False)
