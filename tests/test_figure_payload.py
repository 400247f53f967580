"""What one figure sends to the browser is bounded: a long input's heatmap (its JSON, one websocket message) is
sent without its per-cell hover data, then with its cells merged into blocks, each the mean of its cells, with a
line that says so; a figure that cannot be lightened is not sent. Measured on the JSON plotly writes."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import plotly.io

import viz
from ui.widgets import bounded_figure, payload_bytes

LIMIT = 1_000_000  # a smaller bound than the app's 10 MB, so that a 250-token heatmap is long enough to pass it


def long_heatmap(tokens: int) -> go.Figure:
    rng = np.random.default_rng(0)
    weights = rng.random((tokens, tokens)).astype(np.float32)
    weights /= weights.sum(axis=1, keepdims=True)
    labels = [f"t{i}" for i in range(tokens)]
    blocked = {"causal": np.triu(np.ones((tokens, tokens), bool), 1)}
    return viz.head_heatmap(weights, labels, labels, scores=rng.standard_normal((tokens, tokens)).astype(np.float32),
                            blocked=blocked, title="a long input")


def sent(fig: go.Figure) -> int:
    return len(plotly.io.to_json(fig, engine="json"))


def test_the_estimate_is_close_to_what_is_sent():
    fig = long_heatmap(120)
    assert 0.8 < payload_bytes(fig) / sent(fig) < 1.25


def test_a_figure_under_the_bound_is_sent_as_it_is():
    fig = long_heatmap(40)
    assert bounded_figure(fig, LIMIT) == (fig, "")


def test_a_long_heatmap_is_sent_in_blocks_under_the_bound_with_a_line_saying_so():
    fig = long_heatmap(250)
    before = sent(fig)
    assert before > 3 * LIMIT
    lighter, line = bounded_figure(fig, LIMIT)
    assert sent(lighter) <= LIMIT
    k = int(line.split("mean of a ")[1].split("×")[0])
    assert line == (f"This figure would send {payload_bytes(fig) / 1e6:.0f} MB to the browser, more than the 1 MB one "
                    "figure may: its hover shows positions and values only, and each cell of its heatmaps is the "
                    f"mean of a {k}×{k} block of cells.")
    weights, overlay = lighter.data[0], lighter.data[1]
    assert np.allclose(weights.z[0, 0], np.asarray(fig.data[0].z)[:k, :k].mean())
    assert (weights.x0, weights.dx, weights.y0, weights.dy) == ((k - 1) / 2, k, (k - 1) / 2, k)  # where its cells were
    assert weights.customdata is None and "mean" in weights.hovertemplate
    assert np.isnan(overlay.z[0, 0]) is np.False_ and np.isnan(overlay.z[1, 0])  # a block with a blocked cell shows it
    assert lighter.layout == fig.layout  # axes, labels and size as they were
    assert np.asarray(fig.data[0].customdata).shape == (250, 250, 4)  # the cached figure itself is untouched


def test_a_figure_without_a_heatmap_to_merge_is_not_sent():
    points = go.Figure(go.Scatter(x=np.arange(300_000), y=np.random.default_rng(0).random(300_000)))
    assert bounded_figure(points, LIMIT) == (None, (
        f"This figure would send {payload_bytes(points) / 1e6:.0f} MB to the browser, more than the 1 MB one figure "
        "may, so it is not drawn: a shorter input draws it."))
