"""Text placed in figures: tokens are user text, so every label goes through safe_label()."""
import html


def safe_label(text) -> str:
    """Escape `<`, `>` and `&` so Plotly shows `text` literally instead of reading it as its HTML subset.

    Tokens like "<s>" or "</s>" would otherwise vanish (unknown tags) or style the label ("<b>x</b>").
    """
    return html.escape(str(text), quote=False)


def token_axis(tokens) -> dict:
    """Axis settings that put one tick per token at its integer position, so duplicated tokens stay distinct."""
    return dict(tickmode="array", tickvals=list(range(len(tokens))), ticktext=[safe_label(t) for t in tokens])
