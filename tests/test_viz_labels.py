"""viz as a whole: user text is escaped in every figure, the theme and toolbar, and what viz may import."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import viz
from viz.labels import safe_label, token_axis

HOSTILE = ["<script>", "<b>x</b>", "a&b", "▁the", "▁the"]


def test_safe_label_escapes_html():
    assert safe_label("<script>") == "&lt;script&gt;"
    assert safe_label("<b>x</b>") == "&lt;b&gt;x&lt;/b&gt;"
    assert safe_label("a&b") == "a&amp;b"
    assert safe_label("&lt;") == "&amp;lt;"  # an escape typed by the user stays visible as typed
    assert safe_label("▁the") == "▁the"


def test_token_axis_keeps_duplicates_at_their_positions():
    axis = token_axis(["<s>", "▁the", "▁the"])
    assert axis["tickvals"] == [0, 1, 2]
    assert axis["ticktext"] == ["&lt;s&gt;", "▁the", "▁the"]


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
    assert large.font_size == 2 * small.font_size and large.title_size == 2 * small.title_size
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
    assert dark.layout.template.layout.paper_bgcolor != light.layout.template.layout.paper_bgcolor
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
