"""Single-head figures and masks: what a user sees on the axes, in the hover, and under the overlays."""
import json

import numpy as np
import pytest

import viz

TOKENS = ["<s>", "▁the", "▁cat", "▁the", "<pad>"]
ESCAPED = ("&lt;s&gt;", "·the", "·cat", "·the", "&lt;pad&gt;")  # tick labels: the word-start marker as a dot
N = len(TOKENS)
KEY_IS_PAD = np.array([False, False, False, False, True])


def _trace(fig, name):
    (trace,) = [t for t in fig.data if t.name == name]
    return trace


def _weights():
    """Causal, pad key masked: row q spreads its weight over keys 0..q (but never key 4)."""
    weights = np.zeros((N, N))
    for q in range(N):
        allowed = list(range(min(q, 3) + 1))
        weights[q, allowed] = np.arange(1, len(allowed) + 1) / sum(range(1, len(allowed) + 1))
    return weights


def test_mask_reasons_builds_one_array_per_reason():
    blocked = viz.mask_reasons(N, N, key_is_pad=KEY_IS_PAD, causal=True, query_is_pad=KEY_IS_PAD)
    assert list(blocked) == ["padding", "causal", "padded query"]
    assert blocked["padding"][:, 4].all() and not blocked["padding"][:, :4].any()
    assert blocked["causal"][1, 2] and not blocked["causal"][2, 1] and not blocked["causal"][2, 2]
    assert blocked["causal"].sum() == N * (N - 1) // 2
    assert blocked["padded query"][4].all() and not blocked["padded query"][:4].any()
    assert viz.mask_reasons(2, 3) == {}


def test_mask_reasons_rejects_flags_of_the_wrong_length():
    with pytest.raises(ValueError, match="key_is_pad"):
        viz.mask_reasons(N, N, key_is_pad=np.array([True, False]))


def test_model_mask_leaves_out_padded_queries():
    blocked = viz.mask_reasons(N, N, key_is_pad=KEY_IS_PAD, query_is_pad=KEY_IS_PAD)
    expected = np.zeros((N, N), dtype=bool)
    expected[:, 4] = True
    np.testing.assert_array_equal(viz.model_mask(blocked, (N, N)), expected)


def test_head_heatmap_ticks_are_the_escaped_tokens_in_order():
    fig = viz.head_heatmap(_weights(), TOKENS, TOKENS)
    assert fig.layout.xaxis.ticktext == ESCAPED and fig.layout.yaxis.ticktext == ESCAPED
    assert fig.layout.xaxis.tickvals == (0, 1, 2, 3, 4)
    assert fig.layout.xaxis.range == (-0.5, 4.5) and fig.layout.yaxis.range == (4.5, -0.5)  # first query on top


def test_head_heatmap_hover_carries_tokens_weight_and_raw_score_of_a_cell():
    weights, scores = _weights(), np.arange(N * N, dtype=float).reshape(N, N) - 7
    fig = viz.head_heatmap(weights, TOKENS, TOKENS, scores=scores)
    heatmap = fig.data[0]
    assert heatmap.z[3, 1] == weights[3, 1]
    assert list(heatmap.customdata[3, 1]) == ["·the", "·the", "", scores[3, 1]]
    assert list(heatmap.customdata[0, 2][:2]) == ["&lt;s&gt;", "·cat"]
    assert "raw score: %{customdata[3]" in heatmap.hovertemplate
    assert "(%{y:d})" in heatmap.hovertemplate  # positions as numbers: %{y} alone would show the tick token
    assert "raw score" not in viz.head_heatmap(weights, TOKENS, TOKENS).data[0].hovertemplate


def test_overlays_cover_exactly_the_blocked_cells_and_hover_names_the_reasons():
    blocked = viz.mask_reasons(N, N, key_is_pad=KEY_IS_PAD, causal=True)
    fig = viz.head_heatmap(_weights(), TOKENS, TOKENS, blocked=blocked)
    for reason in ("padding", "causal"):
        overlay = _trace(fig, reason)
        np.testing.assert_array_equal(np.isfinite(np.asarray(overlay.z, dtype=float)), blocked[reason])
        assert overlay.showlegend and overlay.hoverinfo == "skip"
    assert fig.data[0].customdata[1, 4][2] == "<br>mask: padding, causal"
    assert fig.data[0].customdata[1, 2][2] == "<br>mask: causal"
    assert fig.data[0].customdata[2, 1][2] == ""


def test_masks_can_be_switched_off():
    blocked = viz.mask_reasons(N, N, causal=True)
    assert len(viz.head_heatmap(_weights(), TOKENS, TOKENS, blocked=blocked, show_masks=False).data) == 1


def test_fixed_scale_is_zero_to_one_otherwise_the_heads_range():
    weights = _weights() * 0.5
    fixed = viz.head_heatmap(weights, TOKENS, TOKENS).layout.coloraxis
    assert (fixed.cmin, fixed.cmax) == (0, 1)
    own = viz.head_heatmap(weights, TOKENS, TOKENS, fixed_scale=False).layout.coloraxis
    assert (own.cmin, own.cmax) == (0, 0.5)


def test_show_values_prints_the_weights_only_where_they_fit():
    shown = viz.head_heatmap(_weights(), TOKENS, TOKENS, show_values=True).data[0]
    assert shown.texttemplate == "%{z:.2f}" and shown.textfont.size >= viz.Theme().min_font_size
    assert viz.head_heatmap(_weights(), TOKENS, TOKENS).data[0].texttemplate is None
    many = [f"t{i}" for i in range(40)]  # "0.42" needs 30 px a cell: 40 columns need 1,200 px, wider than 930
    crowded = viz.head_heatmap(np.full((40, 40), 1 / 40), many, many, show_values=True, theme=viz.Theme(width=930))
    assert crowded.data[0].texttemplate is None and not viz.values_shown(crowded)
    assert crowded.layout.width <= 930


@pytest.mark.parametrize("count", [10, 24])
def test_numbers_in_cells_widen_the_cells_where_the_width_allows(count):
    """At 10 and 24 pieces a laptop's 930 px hold a number in every cell: the columns widen for them (they were
    left at the labels' 13 px, and the numbers silently left out)."""
    tokens = [f"▁w{i}" for i in range(count)]
    weights = np.full((count, count), 1 / count)
    fig = viz.head_heatmap(weights, tokens, tokens, show_values=True, theme=viz.Theme(width=930))
    assert viz.values_shown(fig) and fig.layout.width <= 930
    assert not viz.values_shown(viz.head_heatmap(weights, tokens, tokens, theme=viz.Theme(width=930)))


def test_weights_that_do_not_match_the_tokens_are_refused():
    with pytest.raises(ValueError, match=r"\(5, 4\)"):
        viz.head_heatmap(np.zeros((5, 5)), TOKENS, TOKENS[:4])


def test_stages_blank_exactly_the_cells_the_model_masks():
    blocked = viz.mask_reasons(N, N, key_is_pad=KEY_IS_PAD, causal=True, query_is_pad=KEY_IS_PAD)
    scores = np.arange(N * N, dtype=float).reshape(N, N)
    fig = viz.stages_figure(scores, blocked, _weights(), TOKENS, TOKENS)
    np.testing.assert_array_equal(_trace(fig, "raw score").z, scores)
    masked = np.asarray(_trace(fig, "masked score").z, dtype=float)
    np.testing.assert_array_equal(np.isnan(masked), blocked["padding"] | blocked["causal"])
    assert masked[4, 0] == scores[4, 0]  # a padded query is not masked by the model
    weights = _trace(fig, "weight")
    assert weights.coloraxis == "coloraxis2" and (fig.layout.coloraxis2.cmin, fig.layout.coloraxis2.cmax) == (0, 1)
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0, N * N - 1)
    assert [a.text for a in fig.layout.annotations][0] == "raw scores"


def test_compare_shows_both_heads_and_their_difference_on_a_centred_scale():
    a = _weights()
    b = np.roll(a, 1, axis=1)
    fig = viz.compare_figure(a, b, TOKENS, TOKENS, "L0 H1", "<i>L2</i>")
    np.testing.assert_allclose(_trace(fig, "difference").z, a - b)
    limit = np.abs(a - b).max()
    assert (fig.layout.coloraxis2.cmin, fig.layout.coloraxis2.cmax) == (-limit, limit)
    # the weight bar stands between panels 2 and 3: its title runs upwards so that it stays out of panel 3
    assert fig.layout.coloraxis.colorbar.x < fig.layout.xaxis3.domain[0]
    assert fig.layout.coloraxis.colorbar.title.side == "right"
    assert fig.layout.coloraxis2.colorbar.x > fig.layout.xaxis3.domain[1]
    assert [a.text for a in fig.layout.annotations] == ["L0 H1", "&lt;i&gt;L2&lt;/i&gt;",
                                                        "L0 H1 − &lt;i&gt;L2&lt;/i&gt;"]


def test_one_panel_of_a_row_is_drawn_alone_with_its_own_title_colour_bar_and_legend():
    """Lecture mode's panel picker: A − B alone keeps its diverging scale and bar; the softmax stage alone its 0-1
    bar and the masks' legend; either as wide as a lone heatmap, not a third of a row."""
    a, b = _weights(), np.roll(_weights(), 1, axis=1)
    blocked = viz.mask_reasons(N, N, key_is_pad=KEY_IS_PAD, causal=True)
    theme = viz.Theme(large=True, width=900, height=600)
    difference = viz.compare_figure(a, b, TOKENS, TOKENS, "A", "B", blocked=blocked, only=2, theme=theme)
    (heatmap,) = [trace for trace in difference.data if trace.type == "heatmap" and trace.coloraxis]
    np.testing.assert_allclose(heatmap.z, a - b)
    assert heatmap.coloraxis == "coloraxis2" and difference.layout.coloraxis2.cmin == -np.abs(a - b).max()
    assert not difference.layout.annotations and difference.layout.title.text == "A − B"
    assert difference.layout.coloraxis2.colorbar.x > difference.layout.xaxis.domain[1]
    assert "xaxis2" not in difference.layout.to_plotly_json()  # one panel, not a row with two empty
    weights = viz.stages_figure(np.zeros((N, N)), blocked, a, TOKENS, TOKENS, only=2, theme=theme)
    assert [trace.name for trace in weights.data if trace.type == "heatmap" and trace.coloraxis] == ["weight"]
    assert any(trace.showlegend for trace in weights.data)  # the masks' legend, which the row gives panel 2
    whole = viz.compare_figure(a, b, TOKENS, TOKENS, "A", "B", blocked=blocked, theme=theme)
    assert difference.layout.width < whole.layout.width


def test_compare_refuses_heads_of_different_shapes():
    with pytest.raises(ValueError, match=r"different shapes: A is \(5, 5\), B is \(5, 4\)"):
        viz.compare_figure(np.zeros((5, 5)), np.zeros((5, 4)), TOKENS, TOKENS)


def test_decoding_step_shows_one_row_per_head_and_the_output_so_far():
    cross_rows = np.random.default_rng(0).random((2, 3, N))
    blocked = viz.mask_reasons(4, N, key_is_pad=KEY_IS_PAD)
    fig = viz.decoding_step_figure(cross_rows, TOKENS, ["<s>", "▁le"], 2, blocked=blocked)
    heatmap = fig.data[0]
    np.testing.assert_array_equal(heatmap.z, cross_rows.reshape(6, N))
    assert fig.layout.yaxis.ticktext == ("L0 H0", "L0 H1", "L0 H2", "L1 H0", "L1 H1", "L1 H2")
    assert fig.layout.xaxis.ticktext == ESCAPED
    assert list(heatmap.customdata[4, 2][:2]) == ["L1 H1", "·cat"]
    assert fig.layout.title.text == "Step 2 · query ·le · every head"  # short: the output so far goes above it
    assert viz.decoding_step_caption(2, ["<s>", "▁le"]) == "Step 2 · output so far: <s> ·le"  # plain text
    padding = np.isfinite(np.asarray(_trace(fig, "padding").z, dtype=float))
    assert padding[:, 4].all() and not padding[:, :4].any()


def test_mask_figure_shows_each_reason_then_all():
    blocked = viz.mask_reasons(N, N, key_is_pad=KEY_IS_PAD, causal=True)
    fig = viz.mask_figure(blocked, TOKENS, TOKENS)
    assert [a.text for a in fig.layout.annotations] == ["padding", "causal", "all reasons"]
    combined = [t for t in fig.data if t.name == "blocked"][2]
    np.testing.assert_array_equal(combined.z, (blocked["padding"] | blocked["causal"]).astype(float))
    overlays = [t.name for t in fig.data if t.name != "blocked"]
    assert overlays == ["padding", "causal", "padding", "causal"]


def test_mask_figure_draws_one_panel_alone_for_a_projector():
    """Lecture mode's panel picker: mask_panels names what mask_figure draws, and `only` draws that panel alone, its
    title after the figure's, its overlays kept, and the legend where it names more than the title does."""
    blocked = viz.mask_reasons(N, N, key_is_pad=KEY_IS_PAD, causal=True)
    assert [name for name, _ in viz.mask_panels(blocked)] == ["padding", "causal", "all reasons"]
    theme = viz.Theme(large=True, width=900, height=600)
    causal = viz.mask_figure(blocked, TOKENS, TOKENS, title="Masks", only=1, theme=theme)
    assert causal.layout.title.text == "Masks · causal" and not causal.layout.annotations
    assert [t.name for t in causal.data if t.name != "blocked"] == ["causal"]
    assert causal.layout.showlegend is False and "xaxis2" not in causal.layout.to_plotly_json()  # the title names it
    combined = viz.mask_figure(blocked, TOKENS, TOKENS, only=2, theme=theme)
    assert combined.layout.showlegend is not False and any(t.showlegend for t in combined.data)
    (base,) = [t for t in combined.data if t.name == "blocked"]
    np.testing.assert_array_equal(base.z, (blocked["padding"] | blocked["causal"]).astype(float))
    assert combined.layout.width < viz.mask_figure(blocked, TOKENS, TOKENS, theme=theme).layout.width


def test_a_tall_mask_panel_puts_its_legend_beside_it_where_the_projector_has_no_height_for_it_under():
    """A 42-piece decoder (39 output pieces and 3 pads), all reasons on a projector: under the panel, the legend's
    line would push the figure past the screen's height; beside it, where the width has room, the figure fits. Where
    the height has room (a short input), the legend stays under the panel, as on every other figure."""
    pieces = ["<s>"] + ["▁professeur"] * 38 + ["<pad>"] * 3  # its key labels, written upwards, as long as eng-fra's
    pad = np.array([piece == "<pad>" for piece in pieces])
    blocked = viz.mask_reasons(42, 42, key_is_pad=pad, query_is_pad=pad, causal=True)
    theme = viz.Theme(large=True, width=866, height=708)  # lecture mode's figure column at 1280 x 720
    tall = viz.mask_figure(blocked, pieces, pieces, title="decoder self-attention masks", only=3, theme=theme)
    assert tall.layout.height <= 708 and tall.layout.width <= 866
    assert (tall.layout.legend.orientation, tall.layout.legend.yanchor, tall.layout.legend.y) == ("v", "top", 1)
    assert tall.layout.legend.x > tall.layout.xaxis.domain[1]  # right of the panel, in the margin kept for it
    assert tall.layout.yaxis.tickfont.size >= 12
    short = viz.mask_figure(viz.mask_reasons(N, N, key_is_pad=KEY_IS_PAD, causal=True), TOKENS, TOKENS, only=2,
                            theme=theme)
    assert (short.layout.legend.orientation, short.layout.legend.yanchor) == ("h", "bottom")


def test_mask_figure_draws_a_single_reason_once():
    fig = viz.mask_figure(viz.mask_reasons(N, N, causal=True), TOKENS, TOKENS)
    assert [a.text for a in fig.layout.annotations] == ["causal"]
    assert [t.name for t in fig.data if t.name != "blocked"] == ["causal"]


def test_mask_figure_all_reasons_leaves_padded_queries_unshaded():
    query_is_pad = np.array([False, False, False, True, True])
    blocked = viz.mask_reasons(N, N, key_is_pad=KEY_IS_PAD, query_is_pad=query_is_pad)
    fig = viz.mask_figure(blocked, TOKENS, TOKENS)
    assert [a.text for a in fig.layout.annotations] == ["padding", "padded query", "all reasons"]
    combined = [t for t in fig.data if t.name == "blocked"][2]
    np.testing.assert_array_equal(combined.z, blocked["padding"].astype(float))  # what the model blocks
    overlays = [t.name for t in fig.data if t.name != "blocked"]
    assert overlays == ["padding", "padded query", "padding"]


@pytest.mark.parametrize("show_masks", [True, False])
def test_a_heatmap_built_as_dicts_is_the_one_plotlys_api_builds(show_masks):
    """head_heatmap builds its panel as dicts (viz.panels.matrix_panel, layout.grid_layout): the same head through
    plotly.py's figure API (make_subplots, add_trace, update_xaxes and update_layout) must come out the same."""
    import plotly.graph_objects as go
    import plotly.io as pio

    from viz.layout import grid_layout
    from viz.panels import matrix_panel, set_colour_axis, subplots
    from viz.theme import apply_theme

    rng = np.random.default_rng(4)
    weights, scores = rng.dirichlet(np.ones(7), size=7), rng.normal(size=(7, 7))
    tokens, blocked = ["<s>", "a", "b&", "a", "c", "</s>", "<pad>"], {"causal": np.triu(np.ones((7, 7), bool), 1)}
    theme = viz.Theme(large=True)
    fig = subplots(1, 1)
    traces, axes = matrix_panel(0, weights, tokens, tokens, scores=scores, blocked=blocked, show_masks=show_masks)
    for trace in traces:
        fig.add_trace(go.Heatmap(trace), row=1, col=1)
    x_axis, y_axis = axes.values()
    fig.update_xaxes(x_axis, row=1, col=1)
    fig.update_yaxes(y_axis, row=1, col=1)
    set_colour_axis(fig, "coloraxis", theme.sequential, 0.0, 1.0, "weight")
    fig.update_layout(grid_layout(theme, tokens, tokens, title="L0 H1", colour_bars=[("coloraxis", 1)],
                                  legend=any(trace.showlegend for trace in fig.data))[0])
    expected = json.loads(pio.to_json(apply_theme(fig, theme, "L0 H1"), validate=False))
    built = viz.head_heatmap(weights, tokens, tokens, scores=scores, blocked=blocked, show_masks=show_masks,
                             title="L0 H1", theme=theme)
    assert json.loads(pio.to_json(built, validate=False)) == expected


@pytest.mark.parametrize("layout, where", [
    ({"coloraxis": {"colorscale": "Blues"}}, "colorscale"),  # validation writes a named scale's colours
    ({"coloraxis": {"colorbar": {"title_side": "right"}}}, "title_side"),  # and a magic underscore's path
    ({"yaxis": {"matches": None}}, "matches"),  # and drops an unset key
])
def test_a_figure_written_otherwise_than_validation_leaves_it_is_caught(monkeypatch, layout, where):
    """The server sends viz's dicts unvalidated (viz.theme.themed_figure); where ATLAS_VALIDATE_FIGURES=1, as the
    test suite sets it, a figure that validation would change raises, so every figure of the tests is held to it."""
    from viz.theme import colour_stops, themed_figure

    data = [dict(type="heatmap", z=[[0.5]], coloraxis="coloraxis")]
    monkeypatch.setenv("ATLAS_VALIDATE_FIGURES", "1")
    with pytest.raises(AssertionError, match=where):
        themed_figure(data, layout, viz.Theme())
    themed_figure(data, {"coloraxis": {"colorscale": colour_stops("Blues"), "colorbar": {"title": {"side": "right"}}}},
                  viz.Theme())  # as validation leaves it
    monkeypatch.delenv("ATLAS_VALIDATE_FIGURES")
    sent = themed_figure(data, layout, viz.Theme()).to_dict()["layout"]  # the server sends it as it is
    assert where in json.dumps(sent)
