"""The model view: panels, their order and titles, what the images show, and how big the figure gets."""
import base64
import io
import struct
import zlib

import numpy as np
import plotly.graph_objects as go
import pytest
from PIL import Image

import viz
from benchmarks.model_view import PAYLOAD_LIMIT_BYTES, random_stack, run
from viz.png import indexed_png

BLUES_LOW, BLUES_HIGH = (247, 251, 255), (8, 48, 107)  # the ends of Plotly's "Blues", the light theme's scale


def read_png(data: bytes) -> np.ndarray:
    """Decode an 8-bit palette PNG by the spec (filter type 0 only) into an RGB array (height, width, 3)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, position = {}, 8
    while position < len(data):
        (length,) = struct.unpack(">I", data[position:position + 4])
        kind, body = data[position + 4:position + 8], data[position + 8:position + 8 + length]
        assert struct.unpack(">I", data[position + 8 + length:position + 12 + length])[0] == zlib.crc32(kind + body)
        chunks[kind] = chunks.get(kind, b"") + body
        position += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour_type) == (8, 3)
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), dtype=np.uint8).reshape(height, width + 1)
    assert not rows[:, 0].any()
    palette = np.frombuffer(chunks[b"PLTE"], dtype=np.uint8).reshape(-1, 3)
    return palette[rows[:, 1:]]


def panel_pixels(image: go.Image) -> np.ndarray:
    prefix = "data:image/png;base64,"
    assert image.source.startswith(prefix)
    return read_png(base64.b64decode(image.source[len(prefix):]))


def test_indexed_png_round_trips_through_a_spec_reader():
    indices = np.array([[0, 1, 2], [2, 1, 0]], dtype=np.uint8)
    palette = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], dtype=np.uint8)
    np.testing.assert_array_equal(read_png(indexed_png(indices, palette)), palette[indices])
    with pytest.raises(ValueError, match="outside the palette"):
        indexed_png(np.array([[3]], dtype=np.uint8), palette)


@pytest.mark.parametrize("indices, palette", [
    (np.zeros((2, 2), dtype=np.float32), np.zeros((4, 3), dtype=np.uint8)),  # indices not uint8
    (np.zeros((2, 2, 1), dtype=np.uint8), np.zeros((4, 3), dtype=np.uint8)),  # indices not 2-D
    (np.zeros((2, 2), dtype=np.uint8), np.zeros((4, 4), dtype=np.uint8)),  # not RGB
    (np.zeros((2, 2), dtype=np.uint8), np.zeros((300, 3), dtype=np.uint8)),  # over 256 colours
    (np.zeros((2, 2), dtype=np.uint8), np.zeros((4, 3), dtype=np.float32)),  # palette not uint8
])
def test_indexed_png_refuses_what_a_palette_png_cannot_hold(indices, palette):
    with pytest.raises(ValueError, match="must be"):
        indexed_png(indices, palette)


def test_indexed_png_is_readable_by_pillow():
    indices = np.arange(12, dtype=np.uint8).reshape(3, 4)
    palette = np.stack([np.arange(12) * 20] * 3, axis=1).astype(np.uint8)
    decoded = np.asarray(Image.open(io.BytesIO(indexed_png(indices, palette))).convert("RGB"))
    np.testing.assert_array_equal(decoded, palette[indices])


def test_model_view_has_one_titled_image_per_head_in_layer_major_order():
    stack = random_stack(5, 6, 8)
    tokens = list("abcde")
    fig = viz.model_view(stack, tokens, tokens)
    images = [t for t in fig.data if isinstance(t, go.Image)]
    assert len(images) == 48 and fig.data[:48] == tuple(images)
    hover = [t for t in fig.data if isinstance(t, go.Heatmap)]  # invisible: they carry the hover of each panel
    assert [t.meta for t in hover] == [t.meta for t in images]
    np.testing.assert_array_equal(hover[13].z, stack[1, 5])
    assert list(hover[13].customdata[2, 4]) == ["c", "e"] and "weight: %{z" in hover[13].hovertemplate
    assert all(t.hoverinfo == "skip" for t in images)
    titles = [a.text for a in fig.layout.annotations]
    assert titles[:3] == ["L0 H0", "L0 H1", "L0 H2"] and titles[8] == "L1 H0" and titles[-1] == "L5 H7"
    for index in (0, 13, 47):
        assert list(fig.data[index].meta) == [index // 8, index % 8]
        assert fig.data[index].name == titles[index]


def test_model_view_images_show_the_weights_on_the_shared_scale():
    stack = np.zeros((1, 2, 2, 3))
    stack[0, 1] = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]
    fig = viz.model_view(stack, ["a", "b"], ["a", "b", "c"])
    pixels = panel_pixels(fig.data[1])
    assert pixels.shape == (2, 3, 3)  # one pixel per cell: queries down, keys across
    assert tuple(pixels[0, 0]) == BLUES_HIGH and tuple(pixels[0, 1]) == BLUES_LOW
    middle = tuple(pixels[1, 0])
    assert BLUES_HIGH[0] < middle[0] < BLUES_LOW[0]
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0, 1)
    assert tuple(panel_pixels(fig.data[0])[0, 0]) == BLUES_LOW  # an all-zero head stays light on the shared scale


def test_model_view_blends_masks_like_the_overlays():
    stack = np.zeros((1, 1, 2, 2))
    stack[0, 0, :, 0] = 1.0
    blocked = viz.mask_reasons(2, 2, key_is_pad=np.array([False, True]))
    fig = viz.model_view(stack, ["a", "<pad>"], ["a", "<pad>"], blocked=blocked)
    pixels = panel_pixels(fig.data[0])
    grey, alpha = np.array([100, 100, 100]), 0.6  # the padding overlay colour of viz.theme
    expected = np.rint((1 - alpha) * np.array(BLUES_LOW) + alpha * grey)
    np.testing.assert_array_equal(pixels[:, 1], [expected, expected])
    assert tuple(pixels[0, 0]) == BLUES_HIGH
    legend = [t for t in fig.data if isinstance(t, go.Scatter) and t.showlegend is not False]
    assert [t.name for t in legend] == ["padding"] and legend[0].marker.color == "rgba(100, 100, 100, 0.6)"
    unmasked = panel_pixels(viz.model_view(stack, ["a", "b"], ["a", "b"], blocked=blocked, show_masks=False).data[0])
    assert tuple(unmasked[0, 1]) == BLUES_LOW


def test_model_view_ticks_every_token_on_the_outer_panels_or_on_all_when_few():
    tokens = ["<s>", "▁a", "▁a"]
    fig = viz.model_view(random_stack(3, 2, 4), tokens, tokens)  # 8 panels: the outer ones
    assert fig.layout.xaxis5.ticktext == ("&lt;s&gt;", "·a", "·a")  # bottom-left panel
    assert fig.layout.xaxis5.showticklabels and fig.layout.yaxis5.showticklabels
    assert fig.layout.xaxis.showticklabels is False and fig.layout.yaxis2.showticklabels is False
    assert fig.layout.xaxis.tickvals is None  # unlabelled axes carry no token ticks: each costs the browser time
    few = viz.model_view(random_stack(3, 2, 2), tokens, tokens)  # 4 panels: every one labelled
    assert all(axis.showticklabels and len(axis.tickvals) == 3 for axis in [*few.select_xaxes(), *few.select_yaxes()])
    many = [str(i) for i in range(256)]
    layout = viz.model_view(random_stack(256, 1, 2), many, many).layout
    assert len(layout.xaxis.ticktext) == 256 and layout.xaxis.tickmode == "array"


@pytest.mark.parametrize("rows, cols", [(1, 1), (2, 3), (6, 8)])
def test_shared_grid_links_axes_as_make_subplots_does(rows, cols):
    from plotly.subplots import make_subplots

    from viz.panels import shared_grid

    titles = [f"<{index}>" for index in range(rows * cols)]
    theirs = make_subplots(rows=rows, cols=cols, shared_xaxes=True, shared_yaxes=True,
                           subplot_titles=titles).layout.to_plotly_json()
    ours = shared_grid(rows, cols, titles, viz.Theme())
    axes = sorted(name for name in theirs if name.startswith(("xaxis", "yaxis")))
    assert sorted(name for name in ours if name != "annotations") == axes
    for name in axes:
        linked = {key: value for key, value in theirs[name].items() if key != "domain"}  # domains: grid_layout's
        assert ours[name] == linked, name
    assert [note["text"] for note in ours["annotations"]] == [f"&lt;{index}&gt;" for index in range(rows * cols)]


def test_merged_merges_nested_dicts_key_by_key_without_changing_its_arguments():
    from viz.theme import merged

    base = {"a": {"b": 1, "c": {"d": 2}}, "e": [1]}
    update = {"a": {"c": {"f": 3}, "g": 4}, "e": [2]}
    assert merged(base, update, {"h": 5}) == {"a": {"b": 1, "c": {"d": 2, "f": 3}, "g": 4}, "e": [2], "h": 5}
    assert base == {"a": {"b": 1, "c": {"d": 2}}, "e": [1]}  # not changed in place


def test_token_axes_leave_plotly_js_no_per_label_measuring():
    # Plotly.js measures every tick label once per axis to hide those past the figure's edge (quadratic in the
    # ticks), to grow margins (automargin) and to place axis titles (a template's title standoff); viz lays labels
    # out itself, so each of these is off on every token axis. docs/performance.md has the timings.
    labels = [f"t{i}" for i in range(40)]
    for fig in (viz.model_view(random_stack(40, 2, 3), labels, labels),
                viz.head_heatmap(random_stack(40, 1, 1)[0, 0], labels, labels)):
        labelled = [axis for axis in [*fig.select_xaxes(), *fig.select_yaxes()] if axis.ticktext]
        assert labelled and all(axis.ticklabeloverflow == "allow" and axis.automargin is False for axis in labelled)
        assert all(axis.title.standoff is None for axis in [*fig.select_xaxes(), *fig.select_yaxes()])


def test_model_view_draws_no_grid_under_its_images():
    # The images hide a grid, which Plotly.js draws as one path per tick of every axis: 25,000 paths at 256 tokens
    # and 6 x 8 heads, much of the figure's drawing time in Chromium (benchmarks/: browser render).
    labels = [f"t{i}" for i in range(40)]
    fig = viz.model_view(random_stack(40, 2, 3), labels, labels)
    axes = [*fig.select_xaxes(), *fig.select_yaxes()]
    assert len(axes) == 2 * 2 * 3 and all(axis.showgrid is False and axis.zeroline is False for axis in axes)


def panel_widths(layout, count) -> list[float]:
    return [layout[f"xaxis{index or ''}"].domain[1] - layout[f"xaxis{index or ''}"].domain[0]
            for index in [0] + list(range(2, count + 1))]


@pytest.mark.slow  # kaleido starts a browser
def test_model_view_panels_all_get_the_same_width_as_plotly_js_lays_them_out(plotly_js):
    # Plotly.js locks an image's y axis to its x axis (square pixels) unless told otherwise; with shared y axes it
    # did so for the first column only, whose panels shrank to a fraction of the others' width when drawn.
    tokens = ["<s>", "▁J", "'", "ai", "▁froid", "."], ["▁I", "▁am", "▁cold", ".", "</s>", "<pad>", "<pad>"]
    blocked = viz.mask_reasons(6, 7, key_is_pad=np.array([False] * 5 + [True] * 2))
    fig = viz.model_view(np.random.default_rng(0).dirichlet(np.ones(7), size=(3, 4, 6)), *tokens, blocked=blocked)
    assert all(axis.scaleanchor is False for axis in fig.select_yaxes())  # no panel keeps Plotly.js's default lock
    np.testing.assert_allclose(panel_widths(fig.layout, 12), panel_widths(fig.layout, 12)[0])
    # The domains Plotly.js computes: kaleido (requirements-dev.txt) runs it in the machine's Chromium, offline.
    full = fig.full_figure_for_development(warn=False)
    widths = panel_widths(full.layout, 12)
    np.testing.assert_allclose(widths, widths[0], rtol=1e-6)
    starts = sorted({round(full.layout[f"xaxis{index}"].domain[0], 9) for index in range(2, 5)} | {0.0})
    np.testing.assert_allclose(np.diff(starts), np.diff(starts)[0], rtol=1e-6)  # evenly spaced columns


@pytest.mark.slow
def test_model_view_json_grows_slowly_enough_for_256_tokens():
    # Beyond grid.HOVER_CELLS cells (here from 64 tokens on) the panels are images only, a byte or so per cell.
    small, larger = run(sizes=(64, 80), layers=6, heads=8, repeats=1)
    per_cell = (larger["json_bytes"] - small["json_bytes"]) / (48 * (80 ** 2 - 64 ** 2))
    predicted_256 = small["json_bytes"] + per_cell * 48 * (256 ** 2 - 64 ** 2)
    print(f"64 tokens: {small['json_bytes']} B, {per_cell:.2f} B per added cell, 256 tokens ~ {predicted_256:.0f} B")
    assert small["json_bytes"] < PAYLOAD_LIMIT_BYTES
    assert predicted_256 < PAYLOAD_LIMIT_BYTES


def test_model_view_refuses_a_stack_that_is_not_four_dimensional():
    with pytest.raises(ValueError, match="layers, heads"):
        viz.model_view(np.zeros((3, 3)), ["a"] * 3, ["a"] * 3)


@pytest.mark.parametrize("layers, q_len, large", [(1, 16, False), (3, 10, False), (6, 64, False), (3, 24, True)])
def test_model_view_panels_leave_a_text_line_per_labelled_token(layers, q_len, large):
    theme = viz.Theme(large=large)
    labels = [f"t{i}" for i in range(q_len)]
    fig = viz.model_view(random_stack(q_len, layers, 2), labels, labels, theme=theme)
    margin = fig.layout.margin
    plot_px = fig.layout.height - margin.t - margin.b
    domain = fig.layout.yaxis.domain
    font = fig.layout.yaxis.tickfont.size
    assert font >= theme.min_font_size
    assert plot_px * (domain[1] - domain[0]) / q_len >= 1.3 * font - 0.1  # the height is rounded to a pixel


def test_model_view_names_each_heads_key_value_head_with_grouped_query_attention():
    """heads_per_kv query heads share a key/value head: every panel, its trace and its hover name it; the widest
    title keeps fit_model_view's panels wide enough; 1 (multi-head attention) keeps the plain titles."""
    stack = random_stack(4, 2, 6)
    tokens = list("abcd")
    fig = viz.model_view(stack, tokens, tokens, heads_per_kv=3)
    titles = [a.text for a in fig.layout.annotations]
    assert titles[:6] == ["L0 H0 · kv0", "L0 H1 · kv0", "L0 H2 · kv0", "L0 H3 · kv1", "L0 H4 · kv1", "L0 H5 · kv1"]
    assert fig.data[4].name == "L0 H4 · kv1" and fig.data[4].hovertemplate.startswith("L0 H4 · kv1<br>")
    plain = viz.model_view(stack, tokens, tokens, heads_per_kv=1)
    assert [a.text for a in plain.layout.annotations] == [a.text for a in viz.model_view(stack, tokens, tokens)
                                                           .layout.annotations]
    assert plain.layout.annotations[4].text == "L0 H4"
    theme = viz.Theme(large=True, width=1148, height=720)
    wide = viz.fit_model_view(tokens, tokens, 30, 9, heads_per_kv=3, theme=theme)
    assert wide[1] <= viz.fit_model_view(tokens, tokens, 30, 9, theme=theme)[1]
    window = viz.model_view(random_stack(4, wide[0], wide[1]), tokens, tokens, heads_per_kv=3, theme=theme,
                            first=(27, 0))
    assert window.layout.width <= theme.width  # what fit chose fits with the longer titles


def test_a_window_past_the_first_shows_its_own_heads():
    """A page of the model view (first = its first layer and head) names the model's heads and hovers its own
    weights."""
    stack = random_stack(4, 2, 3)  # layers 4-5, heads 6-8 of a larger model
    tokens = list("abcd")
    fig = viz.model_view(stack, tokens, tokens, first=(4, 6))
    hover = [t for t in fig.data if isinstance(t, go.Heatmap)]
    assert [list(t.meta) for t in hover] == [[4, 6], [4, 7], [4, 8], [5, 6], [5, 7], [5, 8]]
    np.testing.assert_array_equal(hover[4].z, stack[1, 1])
    assert [a.text for a in fig.layout.annotations][:2] == ["L4 H6", "L4 H7"]
