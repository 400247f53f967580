"""Attribution, patching and logit-lens figures: every token labelled (escaped), values as given, sizes that grow."""
import numpy as np
import pytest

from viz.attribution import attribution_figure, logit_lens_figure, patching_figure, token_attribution_figure
from viz.theme import Theme

SRC = ["<b>", "a", "a", "</s>"]  # a duplicated token and markup that must show literally
OUT = ["x", "y", "</s>"]


def _methods():
    rng = np.random.default_rng(0)
    shares = rng.random((3, 4))
    return {"attention": shares / shares.sum(1, keepdims=True), "gradient": rng.normal(size=(3, 4))}


def test_attribution_panels_label_every_token_and_keep_values_up_to_the_peak():
    methods = _methods()
    fig = attribution_figure(methods, OUT, SRC, signed=("gradient",))
    heatmaps = [trace for trace in fig.data if trace.type == "heatmap"]
    assert len(heatmaps) == 2
    for trace, matrix in zip(heatmaps, methods.values()):
        assert np.allclose(np.asarray(trace.z) * np.abs(matrix).max(), matrix)
    assert heatmaps[0].coloraxis == "coloraxis" and heatmaps[1].coloraxis == "coloraxis2"  # signed: diverging
    assert fig.layout.xaxis.ticktext == ("&lt;b&gt;", "a", "a", "&lt;/s&gt;")
    assert fig.layout.xaxis.tickvals == (0, 1, 2, 3)
    assert fig.layout.yaxis.ticktext == ("x", "y", "&lt;/s&gt;")


def test_the_colour_scale_comes_from_the_declaration_not_the_values():
    """A signed method whose values happen to be all positive stays on the diverging scale; an unsigned method
    with a negative value is refused rather than drawn on a 0-to-1 scale that would hide it."""
    positive = np.abs(_methods()["gradient"])
    fig = attribution_figure({"gradient": positive}, OUT, SRC, signed={"gradient"})
    assert fig.data[0].coloraxis == "coloraxis2"
    assert fig.layout.coloraxis2.cmin == -1.0 and fig.layout.coloraxis2.cmax == 1.0
    assert attribution_figure({"gradient": positive}, OUT, SRC).data[0].coloraxis == "coloraxis"
    with pytest.raises(ValueError, match="'gradient' has negative values but is not declared signed"):
        attribution_figure(_methods(), OUT, SRC)


def test_attribution_figure_grows_with_tokens_and_refuses_wrong_shapes():
    small = attribution_figure(_methods(), OUT, SRC, signed=("gradient",))
    many = [f"t{i}" for i in range(60)]
    big = attribution_figure({"attention": np.full((60, 60), 1 / 60)}, many, many)
    assert big.layout.height > small.layout.height and big.layout.height / 60 >= 1.3 * 10  # a line per label
    with pytest.raises(ValueError):
        attribution_figure({"attention": np.zeros((2, 4))}, OUT, SRC)


def test_token_attribution_rows_are_methods_scaled_to_their_peak():
    methods = _methods()
    fig = token_attribution_figure(methods, SRC, row=1, output_token="y")
    z = np.asarray(fig.data[0].z)
    assert z.shape == (2, 4)
    for values, matrix in zip(z, methods.values()):
        assert np.allclose(values, matrix[1] / np.abs(matrix[1]).max())
    assert fig.layout.yaxis.ticktext == ("attention", "gradient")


def test_patching_figure_has_a_panel_per_kind_and_stack_on_one_centred_scale():
    heads = {"encoder.self_attn": np.array([[0.5, -2.0]]), "decoder.cross_attn": np.array([[1.0, 0.0]])}
    positions = {"encoder": np.array([[0.0, 3.0, 0.0, 0.0]]), "decoder": np.array([[0.0, 0.0, 0.0]])}
    fig = patching_figure(heads, positions, {"encoder": SRC, "decoder": OUT})
    heatmaps = [trace for trace in fig.data if trace.type == "heatmap"]
    assert len(heatmaps) == 4
    assert fig.layout.coloraxis.cmin == -3.0 and fig.layout.coloraxis.cmax == 3.0
    assert fig.layout.xaxis3.ticktext == ("&lt;b&gt;", "a", "a", "&lt;/s&gt;")  # row 2: encoder positions
    assert fig.layout.xaxis4.ticktext == ("x", "y", "&lt;/s&gt;")  # decoder positions


def test_patching_figure_draws_one_row_alone_for_a_projector():
    """Lecture mode shows the head row or one stack's positions alone: only those panels, no empty one, each row's
    title over it, and a figure less tall than the whole."""
    heads = {"encoder.self_attn": np.array([[0.5, -2.0]]), "decoder.cross_attn": np.array([[1.0, 0.0]])}
    positions = {"encoder": np.array([[0.0, 3.0, 0.0, 0.0]]), "decoder": np.array([[0.0, 0.0, 0.0]])}
    tokens = {"encoder": SRC, "decoder": OUT}
    whole = patching_figure(heads, positions, tokens)
    head_row = patching_figure(heads, {}, tokens)
    assert [a.text for a in head_row.layout.annotations] == list(heads)
    assert len([t for t in head_row.data if t.type == "heatmap"]) == 2 and head_row.layout.height < whole.layout.height
    decoder = patching_figure({}, {"decoder": positions["decoder"]}, tokens)
    (heatmap,) = [t for t in decoder.data if t.type == "heatmap"]
    np.testing.assert_array_equal(heatmap.z, positions["decoder"])
    assert decoder.layout.xaxis.ticktext == ("x", "y", "&lt;/s&gt;") and "xaxis2" not in decoder.layout.to_plotly_json()
    assert [a.text for a in decoder.layout.annotations] == ["decoder residual stream: layer x position"]
    assert decoder.layout.height < whole.layout.height


def test_logit_lens_writes_escaped_pieces_in_cells():
    pieces = np.array([[["<s>", "a"], ["b", "c"]], [["d", "e"], ["</s>", "f"]]], dtype=object)
    probs = np.array([[[0.6, 0.1], [0.5, 0.2]], [[0.9, 0.05], [0.7, 0.1]]])
    fig = logit_lens_figure(["L0 self", "L0 cross"], ["<s>", "x"], pieces, probs)
    assert np.allclose(fig.data[0].z, probs[:, :, 0])
    assert fig.data[0].text[0][0] == "&lt;s&gt;" and fig.data[0].text[1][1] == "&lt;/s&gt;"
    assert "e: 0.050" in fig.data[0].customdata[1][0]
    with pytest.raises(ValueError):
        logit_lens_figure(["L0 self"], ["<s>", "x"], pieces, probs)


@pytest.mark.parametrize(("space", "shown"), [((1339, 1068), "every sublayer"), ((866, 708), "each layer's end"),
                                              ((924, None), "every sublayer")], ids=["1920x1080", "1280x720", "laptop"])
def test_the_logit_lens_fits_its_space_with_a_column_per_layer_where_one_per_sublayer_does_not(space, shown):
    """40 decoder pieces, three layers of three sublayers, ten-letter pieces in every cell: a 1920 x 1080 projector's
    space (ui.screen.figure_space) holds a column per sublayer, 1280 x 720's only one per layer (the residual stream
    after it, and the title says so), a laptop's width all of them; every label at the mode's smallest font or
    larger."""
    stages = [f"L{layer} {sublayer}" for layer in range(3) for sublayer in ("self", "cross", "ffn")]
    positions = [f"·mot{index}" for index in range(40)]
    pieces = np.full((9, 40, 2), "·professeur", dtype=object)
    theme = Theme(large=space[1] is not None, width=space[0], height=space[1])
    fig = logit_lens_figure(stages, positions, pieces, np.full((9, 40, 2), 0.4), layer_ends=[2, 5, 8], theme=theme)
    assert fig.layout.width <= theme.width and (theme.height is None or fig.layout.height <= theme.height)
    assert min(fig.layout.xaxis.tickfont.size, fig.layout.yaxis.tickfont.size, fig.data[0].textfont.size) \
        >= theme.min_font_size
    assert fig.layout.yaxis.ticktext == tuple(positions)  # positions down, stages across
    every = shown == "every sublayer"
    assert fig.layout.xaxis.ticktext == tuple(stages if every else stages[2::3])
    assert ("after each layer" in fig.layout.title.text) != every
