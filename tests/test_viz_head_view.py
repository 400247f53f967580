"""The head view with lines: each drawn line is a (query, key) pair at the opacity of its weight, none where masked."""
import numpy as np
import pytest

import viz

TOKENS = ["<s>", "▁Elle", "▁lit"]
# Two heads of causal self-attention, worked out by hand; head 1's last row puts 0.02 on <s> (rounds to no line).
WEIGHTS = np.array([
    [[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.1, 0.3, 0.6]],
    [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.02, 0.48, 0.5]],
])


def lines_of(fig) -> dict[tuple[int, int, int], float]:
    """(head, query, key) -> opacity of every line drawn, read back from the traces' coordinates."""
    lines = {}
    for trace in fig.data:
        if trace.mode != "lines" or not trace.meta:  # the legend entries carry no meta
            continue
        xs, ys = np.array(trace.x, dtype=object).reshape(-1, 3), np.array(trace.y, dtype=object).reshape(-1, 3)
        for (x0, x1, _), (y0, y1, _) in zip(xs, ys):
            assert (x0, x1) == (0, 1)  # from the query column to the key column
            head, opacity = trace.meta
            key = (head, -y0, -y1)
            assert key not in lines
            lines[key] = opacity
            assert trace.line.color.endswith(f", {opacity})")
    return lines


def test_each_line_has_the_opacity_of_its_weight_and_masked_pairs_have_none():
    blocked = viz.mask_reasons(3, 3, causal=True)
    fig = viz.head_view(WEIGHTS, TOKENS, TOKENS, blocked=blocked)
    expected = {(0, 0, 0): 1.0, (0, 1, 0): 0.25, (0, 1, 1): 0.75, (0, 2, 0): 0.1, (0, 2, 1): 0.3, (0, 2, 2): 0.6,
                (1, 0, 0): 1.0, (1, 1, 0): 0.5, (1, 1, 1): 0.5, (1, 2, 1): 0.5, (1, 2, 2): 0.5}
    assert lines_of(fig) == pytest.approx(expected)


def test_a_masked_pair_gets_no_line_even_with_weight():
    weights = np.full((3, 3), 1 / 3)  # a head that ignored its mask: the mask still decides what is drawn
    blocked = viz.mask_reasons(3, 3, causal=True)
    drawn = lines_of(viz.head_view(weights, TOKENS, TOKENS, blocked=blocked))
    assert set(drawn) == {(0, q, k) for q in range(3) for k in range(q + 1)}
    assert set(lines_of(viz.head_view(weights, TOKENS, TOKENS))) == {(0, q, k) for q in range(3) for k in range(3)}


def test_heads_have_distinct_colours_and_a_legend_entry_each():
    fig = viz.head_view(WEIGHTS, TOKENS, TOKENS, head_names=["L0 H0", "L0 H1"])
    legend = [trace for trace in fig.data if trace.showlegend is not False]
    assert [trace.name for trace in legend] == ["L0 H0", "L0 H1"]
    assert legend[0].line.color != legend[1].line.color


def test_selecting_a_token_keeps_only_its_lines_and_tokens_carry_what_a_click_reports():
    fig = viz.head_view(WEIGHTS, TOKENS, TOKENS, selected=("key", 1))
    assert set(lines_of(fig)) == {(0, 1, 1), (0, 2, 1), (1, 1, 1), (1, 2, 1)}
    queries, keys = [trace for trace in fig.data if trace.mode == "markers+text"]
    assert list(keys.customdata[1]) == ["key", 1] and queries.text == ("&lt;s&gt;", "·Elle", "·lit")
    assert "·Elle 0.75" in queries.hovertext[1] and "head 0 → ·Elle 0.75, &lt;s&gt; 0.25" in queries.hovertext[1]
    with pytest.raises(ValueError, match="selected"):
        viz.head_view(WEIGHTS, TOKENS, TOKENS, selected=("key", 3))


def test_cross_attention_columns_have_their_own_lengths_and_the_figure_grows_with_tokens():
    src = [f"▁w{i}" for i in range(64)]
    weights = np.random.default_rng(0).dirichlet(np.ones(64), size=(2, 5))
    fig = viz.head_view(weights, TOKENS + ["▁un", "▁livre"], src)
    queries, keys = [trace for trace in fig.data if trace.mode == "markers+text"]
    assert len(queries.x) == 5 and len(keys.x) == 64
    assert fig.layout.height >= 64 * 1.5 * viz.Theme().font_size


def test_on_a_projector_thirty_tokens_fit_its_height_at_readable_text():
    """Lecture mode's height binds: the list's text shrinks (never below 12 px) and its lines close up, so that 31
    tokens fit a 1280 x 720 projector's 680 px; with no height bound, the laptop's comfortable pitch."""
    tokens = [f"▁w{i}" for i in range(31)]
    weights = np.random.default_rng(0).dirichlet(np.ones(31), size=31)
    projector = viz.Theme(large=True, width=880, height=680)
    fig = viz.head_view(weights, tokens, tokens, title="encoder self · layer 0", theme=projector)
    queries, keys = [trace for trace in fig.data if trace.mode == "markers+text"]
    assert fig.layout.height <= 680 and queries.textfont.size >= 12 and keys.textfont.size == queries.textfont.size
    pitch = (fig.layout.height - fig.layout.margin.t - fig.layout.margin.b) / 31  # pixels between two tokens' lines
    assert pitch >= 1.15 * queries.textfont.size  # a line of text set solid: never piled up
    laptop = viz.head_view(weights, tokens, tokens, title="encoder self · layer 0")
    assert laptop.layout.height >= 31 * 1.6 * viz.Theme().font_size
    assert viz.head_view(weights[:8, :8], tokens[:8], tokens[:8], theme=projector).data[-1].textfont.size == 24
