"""viz as a whole: user text is escaped in every figure, the theme and toolbar, and what viz may import."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

import viz
from viz.labels import safe_label, token_axis
from viz.layout import text_px

HOSTILE = ["<script>", "<b>x</b>", "a&b", "▁the", "▁the"]


def test_safe_label_escapes_html():
    assert safe_label("<script>") == "&lt;script&gt;"
    assert safe_label("<b>x</b>") == "&lt;b&gt;x&lt;/b&gt;"
    assert safe_label("a&b") == "a&amp;b"
    assert safe_label("&lt;") == "&amp;lt;"  # an escape typed by the user stays visible as typed
    assert safe_label("▁the") == "·the"  # the word-start marker as every text shows it


def test_token_axis_keeps_duplicates_at_their_positions():
    axis = token_axis(["<s>", "▁the", "▁the"])
    assert axis["tickvals"] == [0, 1, 2]
    assert axis["ticktext"] == ["&lt;s&gt;", "·the", "·the"]


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple, np.ndarray)):
        for item in value:
            yield from _strings(item)


def _figures_of(tokens):
    n = len(tokens)
    weights = np.full((n, n), 1.0 / n)
    stack = np.broadcast_to(weights, (2, 2, n, n))
    blocked = viz.mask_reasons(n, n, causal=True)
    return {
        "head": viz.head_heatmap(weights, tokens, tokens, scores=weights, blocked=blocked, title=tokens[0]),
        "masks": viz.mask_figure(blocked, tokens, tokens),
        "stages": viz.stages_figure(weights, blocked, weights, tokens, tokens),
        "compare": viz.compare_figure(weights, weights, tokens, tokens, tokens[0], tokens[1]),
        "decoding": viz.decoding_step_figure(stack[:, :, 0], tokens, tokens, 0),
        "model view": viz.model_view(stack, tokens, tokens, blocked={tokens[1]: blocked["causal"]}),
        "snapshots": viz.snapshots_figure([(tokens[0], weights)], tokens, tokens),
        "rollout": viz.rollout_figure(weights, tokens, tokens),
    }


@pytest.mark.parametrize("name", list(_figures_of(HOSTILE)))
def test_no_figure_lets_tokens_through_as_html(name):
    fig = _figures_of(HOSTILE)[name]
    texts = list(_strings(fig.to_plotly_json()))
    assert not [t for t in texts if "<script>" in t or "<b>" in t or "a&b" in t]
    assert any("&lt;script&gt;" in t for t in texts)  # the token is there, escaped


def test_theme_large_doubles_fonts_and_lines():
    small, large = viz.Theme(), viz.Theme(large=True)
    assert large.font_size == 2 * small.font_size and large.title_size == 1.5 * small.title_size
    assert large.line_width == 2 * small.line_width
    weights = np.eye(2)
    fig_small = viz.head_heatmap(weights, ["a", "b"], ["a", "b"])
    fig_large = viz.head_heatmap(weights, ["a", "b"], ["a", "b"], theme=large)
    assert fig_large.layout.font.size == 2 * fig_small.layout.font.size
    fig = viz.loss_curve([{"step": 1, "train_loss": 1.0}], theme=large)
    assert fig.data[0].line.width == large.line_width


def test_dark_theme_changes_background_and_colour_scale():
    light = viz.head_heatmap(np.eye(2), ["a", "b"], ["a", "b"])
    dark = viz.head_heatmap(np.eye(2), ["a", "b"], ["a", "b"], theme=viz.Theme(dark=True))
    assert dark.layout.paper_bgcolor != light.layout.paper_bgcolor
    assert dark.layout.coloraxis.colorscale != light.layout.coloraxis.colorscale


@pytest.mark.parametrize("image_format", ["png", "svg"])
def test_toolbar_config_exports_the_chosen_format(image_format):
    config = viz.toolbar_config(image_format, filename="head")
    assert config["displaylogo"] is False
    assert config["toImageButtonOptions"]["format"] == image_format
    assert config["toImageButtonOptions"]["filename"] == "head"


def test_toolbar_config_rejects_other_formats():
    with pytest.raises(ValueError, match="png"):
        viz.toolbar_config("jpeg")


def test_viz_imports_neither_torch_streamlit_nor_transformer():
    code = ("import sys, viz; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'streamlit', 'transformer'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.stdout.strip() == "[]"


def _themed_figures(theme) -> dict:
    tokens = ["<s>", "▁Elle", "▁lit", "."]
    n = len(tokens)
    weights = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    blocked = viz.mask_reasons(n, n, causal=True)
    return {
        "head": viz.head_heatmap(weights, tokens, tokens, blocked=blocked, title="t", theme=theme),
        "compare": viz.compare_figure(weights, weights.T, tokens, tokens, theme=theme),
        "model view": viz.model_view(np.broadcast_to(weights, (2, 2, n, n)), tokens, tokens, blocked=blocked,
                                     theme=theme),
        "head view": viz.head_view(weights[None], tokens, tokens, theme=theme),
        "loss": viz.loss_curve([{"step": 1, "train_loss": 2.0}, {"step": 2, "train_loss": 1.0}], theme=theme),
        "positions": viz.pe_heatmap(np.sin(np.arange(24.0)).reshape(6, 4), theme=theme),
    }


def _kept_template(data, layout, theme):
    """themed_figure as it was: the template left on the figure for Plotly.js to apply (arrays listed the same)."""
    fig = go.Figure(dict(data=[viz.theme._listed(trace) for trace in data],
                         layout={key: value for key, value in layout.items() if key != "template"}))
    fig.layout.template = theme.template
    return fig


def _as_drawn(fig) -> dict:
    """The figure as Plotly.js fills it in (kaleido runs Plotly.js in the machine's Chromium), less its template."""
    full = fig.full_figure_for_development(warn=False).to_plotly_json()
    full["layout"].pop("template", None)
    # The line colour of shapes a user would draw (the toolbar has no drawing tools) follows the figure's font
    # colour: the dark theme's once written in, Plotly.js's default while it sat in the template.
    full["layout"]["newshape"]["line"].pop("color")
    for trace in full["data"]:
        trace.pop("uid", None)
    return full


@pytest.mark.slow  # kaleido's Chromium draws every kind of figure light (1-2 s each), two of them dark
@pytest.mark.parametrize("dark, names", [(False, None), (True, ["head", "model view"])])
def test_figures_are_drawn_the_same_with_their_template_written_in(monkeypatch, plotly_js, dark, names):
    # Figures carry no layout.template (Plotly.js would redraw them in full on every Plotly.react) but the values it
    # held: Plotly.js fills each figure in exactly as it did with the template on it.
    theme = viz.Theme(dark=dark)
    written_in = {name: fig for name, fig in _themed_figures(theme).items() if names is None or name in names}
    assert not [name for name, fig in written_in.items() if "template" in fig.to_plotly_json()["layout"]]
    monkeypatch.setattr(viz.theme, "themed_figure", _kept_template)
    monkeypatch.setattr(viz.grid, "themed_figure", _kept_template)
    kept = _themed_figures(theme)
    for name, fig in written_in.items():
        assert _as_drawn(fig) == _as_drawn(kept[name]), name


def test_figures_send_one_dimensional_arrays_as_lists():
    # plotly.py sends a numpy array as a typed array, which Plotly.js compares by identity: Streamlit's copy of a
    # chart then looks like new data and the whole figure is drawn again. Rows of 2-D arrays are compared by the
    # figure's datarevision instead.
    tokens = ["<s>", "▁a", "."]
    for fig in (viz.head_view(np.full((1, 3, 3), 1 / 3), tokens, tokens),
                viz.pe_curves(np.sin(np.arange(24.0)).reshape(6, 4), [0, 1])):
        assert '"bdata"' not in fig.to_json(), fig.layout.title.text


def test_the_word_start_marker_is_a_dot_on_tick_labels_and_in_hovers():
    """"▁" written upwards on a column label read as a bar beside the piece ("|July" on dates); hovers, titles and
    the UI's tables show the same dot (one convention)."""
    assert token_axis(["▁July", "<s>", "1"])["ticktext"] == ["·July", "&lt;s&gt;", "1"]
    fig = viz.head_heatmap(np.eye(2), ["▁a", "b"], ["▁a", "b"])
    assert fig.layout.xaxis.ticktext == ("·a", "b") and list(fig.data[0].customdata[0, 0][:2]) == ["·a", "·a"]
    assert viz.piece_text("▁Elle ▁lit") == "·Elle ·lit" and "▁" not in fig.to_json()


# Advance widths in font sizes, (DejaVu Sans, Liberation Sans): the fonts Plotly's "Open Sans", verdana, arial resolves
# to on Linux (read from the fonts' hmtx tables with fontTools).
MEASURED_EM = {"·professeur": (5.645, 5.002), "Lorsque": (3.985, 3.614), "<pad>": (3.558, 2.836),
               "étudiants": (4.713, 4.059), "WOMAN": (4.071, 3.944), "mmm": (2.922, 2.499),
               "Illinois": (3.173, 2.779), "«Ça», dit-il?": (5.922, 5.336), "0.25": (2.227, 1.946)}


@pytest.mark.parametrize("text", MEASURED_EM)
def test_text_widths_are_estimated_at_least_as_wide_as_either_font_draws_them_and_not_much_wider(text):
    """The margins that hold labels are sized by text_px: narrower than the font and a label is cut; much wider and
    a projector's figure loses the height its rows need."""
    widest = max(MEASURED_EM[text])
    assert widest <= text_px(text, 1) <= 1.1 * widest
    assert text_px(text, 12) == pytest.approx(12 * text_px(text, 1))
