"""The model view as lines: each panel's lines are its head's weights (none where masked), its markers report the
model's layer and head, the outer axes carry every token, and a projector's 24-token page holds 4 heads at 12 px."""
import itertools

import numpy as np
import pytest

import viz
from viz.layout import text_px
from viz.model_lines import PANEL_PX

TOKENS = ["<s>", "▁Elle", "▁lit"]
LECTURE = viz.Theme(large=True, width=860, height=708)  # the figure's room beside the controls at 1280 x 720


def lines_of(fig) -> dict[tuple[int, int, int, int], float]:
    """(layer, head, query, key) -> opacity of every line drawn, read back from the traces' coordinates."""
    lines = {}
    for trace in fig.data:
        if trace.mode != "lines":
            continue
        layer, head, opacity = trace.meta
        xs, ys = np.array(trace.x, dtype=object).reshape(-1, 3), np.array(trace.y, dtype=object).reshape(-1, 3)
        for (x0, x1, _), (y0, y1, _) in zip(xs, ys):
            assert (x0, x1) == (0, 1)
            lines[layer, head, -y0, -y1] = opacity
    return lines


def test_each_panel_draws_its_own_heads_weights_and_reports_the_models_layer_and_head():
    rng = np.random.default_rng(0)
    stack = rng.dirichlet(np.ones(3), size=(2, 3, 3))  # (layers, heads, q_len, k_len)
    blocked = viz.mask_reasons(3, 3, causal=True)
    fig = viz.model_lines(stack, TOKENS, TOKENS, blocked=blocked, first=(4, 6))
    expected = {(4 + layer, 6 + head, q, k): np.rint(stack[layer, head, q, k] * 20) / 20
                for layer, head, q, k in np.ndindex(stack.shape)
                if k <= q and np.rint(stack[layer, head, q, k] * 20) > 0}
    assert lines_of(fig) == pytest.approx(expected)
    markers = fig.data[:6]
    assert [list(trace.meta) for trace in markers] == [[4, 6], [4, 7], [4, 8], [5, 6], [5, 7], [5, 8]]
    assert all(trace.mode == "markers" for trace in markers)
    assert markers[-1].hovertext[1].startswith("query ·Elle (1)<br>L5 H8 → ")  # its keys, by the model's head
    # Every line of a panel stands on that panel's axes.
    for trace in fig.data:
        if trace.mode == "lines":
            layer, head, _ = trace.meta
            index = (layer - 4) * 3 + head - 6
            assert trace.xaxis == (f"x{index + 1}" if index else "x")


def test_the_queries_label_the_first_panel_and_the_keys_the_right_of_the_last():
    q_tokens, k_tokens = ["<s>", "▁Elle"], ["▁She", "▁reads", "</s>"]
    fig = viz.model_lines(np.full((1, 2, 2, 3), 1 / 3), q_tokens, k_tokens)
    layout = fig.layout
    assert layout.yaxis.showticklabels and list(layout.yaxis.ticktext) == ["&lt;s&gt;", "·Elle"]
    assert not layout.yaxis2.showticklabels
    keys = layout.yaxis3
    assert keys.side == "right" and keys.overlaying == "y2" and list(keys.ticktext) == ["·She", "·reads", "&lt;/s&gt;"]
    assert list(keys.tickvals) == [0, -1, -2] and list(layout.yaxis.tickvals) == [0, -1]
    # Labels narrower than their column's heading ("query", "key"): the margins hold the headings.
    fig = viz.model_lines(np.full((1, 1, 2, 2), 0.5), ["a", "b"], ["a", "b"], theme=LECTURE)
    assert fig.layout.margin.l >= text_px("query", LECTURE.font_size) and fig.layout.margin.r >= text_px(
        "key", LECTURE.font_size)


def test_a_projectors_page_at_24_tokens_holds_four_heads_with_12_px_labels():
    tokens = [f"▁word{i}" for i in range(24)]
    layers, heads = viz.fit_model_lines(tokens, tokens, 3, 4, title="Encoder self: every layer and head",
                                        theme=LECTURE)
    assert heads == 4 and layers >= 1
    stack = np.full((layers, heads, 24, 24), 1 / 24)
    fig = viz.model_lines(stack, tokens, tokens, title="Encoder self: every layer and head", theme=LECTURE)
    assert fig.layout.width <= LECTURE.width and fig.layout.height <= LECTURE.height
    assert fig.layout.yaxis.tickfont.size >= 12
    panel = (fig.layout.xaxis.domain[1] - fig.layout.xaxis.domain[0]) * (
        fig.layout.width - fig.layout.margin.l - fig.layout.margin.r)
    assert panel >= PANEL_PX[0] - 0.5
    # A page holds as many layers as the height keeps at 12 px set solid: at 24 tokens one, at 8 all three.
    assert layers == 1
    assert viz.fit_model_lines(tokens[:8], tokens[:8], 3, 4, title="Encoder self", theme=LECTURE) == (3, 4)


@pytest.mark.parametrize("large", [False, True])
def test_every_window_of_layers_and_tokens_gets_domains_plotly_accepts(large):
    """1 - (top + row) / height comes out at -2e-16 for the last row of some windows (3 layers of 3 tokens: the
    Model view of "I am cold." crashed); every domain is kept within [0, 1], the last row still at the bottom."""
    theme = viz.Theme(large=large, width=900, height=None)
    for layers, tokens in itertools.product(range(1, 7), range(1, 12)):
        names = [f"t{i}" for i in range(tokens)]
        layout = viz.model_lines(np.full((layers, 2, tokens, tokens), 1 / tokens), names, names, theme=theme).layout
        domains = [axis.domain for name in layout if name.startswith(("xaxis", "yaxis"))
                   if (axis := layout[name]).domain is not None]
        assert all(0 <= low <= high <= 1 for low, high in domains), (layers, tokens)
        assert min(low for low, _ in domains) == 0
