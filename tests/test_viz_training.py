"""Training dynamics: snapshots of one head and loss curves with gaps in the history."""
import numpy as np
import pytest

import viz

TOKENS = ["<s>", "▁a", "▁a"]


def test_snapshots_are_small_multiples_in_order_on_one_scale():
    snapshots = [(f"step {s}", np.eye(3) * (i + 1) / 4) for i, s in enumerate([0, 10, 100, 1000, 5000])]
    many = [f"t{i}" for i in range(64)]
    long = viz.snapshots_figure([(label, np.eye(64)) for label, _ in snapshots], many, many, columns=3)
    assert long.layout.xaxis2.anchor == "y2" and long.layout.yaxis2.domain[1] < long.layout.yaxis.domain[0]  # one a row
    fig = viz.snapshots_figure(snapshots, TOKENS, TOKENS, columns=3)
    heatmaps = [t for t in fig.data if t.name == "weight"]
    assert len(heatmaps) == 5
    for (_, weights), heatmap in zip(snapshots, heatmaps):
        np.testing.assert_array_equal(heatmap.z, weights)
        assert heatmap.coloraxis == "coloraxis"
    assert [a.text for a in fig.layout.annotations] == [label for label, _ in snapshots]
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0, 1)
    assert heatmaps[3].xaxis == "x4" and fig.layout.xaxis4.anchor == "y4"  # second row, first column
    own = viz.snapshots_figure(snapshots, TOKENS, TOKENS, fixed_scale=False).layout.coloraxis
    assert (own.cmin, own.cmax) == (0, 1.25)


def test_every_column_of_snapshots_is_labelled_when_the_last_row_is_short():
    """5 snapshots, 3 a row: the third column's bottom cell is empty, so the panel above it carries its keys."""
    fig = viz.snapshots_figure([(f"step {s}", np.eye(3)) for s in range(5)], TOKENS, TOKENS, columns=3)
    labelled = {name for name in fig.layout if name.startswith("xaxis") and fig.layout[name].showticklabels is not False
                and fig.layout[name].visible is not False}
    assert labelled == {"xaxis3", "xaxis4", "xaxis5"}  # column 3 by its first row's panel, 1 and 2 by the bottom row
    assert fig.layout.xaxis6.visible is False and fig.layout.yaxis6.visible is False  # the empty cell
    assert list(fig.layout.xaxis3.ticktext) == list(fig.layout.xaxis4.ticktext)


def test_snapshots_need_at_least_one():
    with pytest.raises(ValueError, match="empty"):
        viz.snapshots_figure([], TOKENS, TOKENS)


def test_loss_curve_draws_each_series_only_where_it_was_logged():
    history = [
        {"step": 0, "train_loss": 4.0, "dev_loss": 4.5, "dev_metric": 0.1},
        {"step": 50, "train_loss": 3.0},
        {"step": 100, "train_loss": 2.0, "dev_loss": 2.5, "dev_metric": 0.4},
    ]
    fig = viz.loss_curve(history, metric_name="BLEU")
    lines = {t.name: t for t in fig.data}
    assert list(lines) == ["train loss", "dev loss", "dev BLEU"]  # readable names, not the history's keys
    np.testing.assert_array_equal(lines["train loss"].x, [0, 50, 100])
    np.testing.assert_array_equal(lines["dev loss"].x, [0, 100])
    np.testing.assert_array_equal(lines["dev BLEU"].y, [0.1, 0.4])
    assert lines["dev loss"].yaxis == "y" and lines["dev BLEU"].yaxis == "y2"  # metrics on the right axis
    assert fig.layout.yaxis2.title.text == "BLEU"
    assert [t.name for t in viz.loss_curve(history).data][2] == "dev metric"


def test_loss_curve_never_joins_numbers_measured_on_different_data():
    """A continued run scored on other corpora: its dev BLEU is another line, named with its data, not a drop of the
    first one."""
    history = [
        {"step": 0, "dev_metric": 40.0, "data": "tatoeba-eng-fra"},
        {"step": 100, "dev_metric": 45.0, "train_loss": 1.6, "data": "tatoeba-eng-fra"},
        {"step": 100, "dev_metric": 17.8, "data": "tatoeba + multi30k"},
        {"step": 200, "dev_metric": 30.0, "train_loss": 2.1, "data": "tatoeba + multi30k"},
    ]
    lines = {t.name: t for t in viz.loss_curve(history, metric_name="BLEU").data}
    assert list(lines) == ["dev BLEU (tatoeba-eng-fra)", "dev BLEU (tatoeba + multi30k)",
                           "train loss (tatoeba-eng-fra)", "train loss (tatoeba + multi30k)"]
    np.testing.assert_array_equal(lines["dev BLEU (tatoeba-eng-fra)"].y, [40.0, 45.0])
    np.testing.assert_array_equal(lines["dev BLEU (tatoeba + multi30k)"].x, [100, 200])
    assert lines["dev BLEU (tatoeba-eng-fra)"].line.dash != lines["dev BLEU (tatoeba + multi30k)"].line.dash
    one = viz.loss_curve([{**entry, "data": "tatoeba"} for entry in history], metric_name="BLEU")
    assert [t.name for t in one.data] == ["dev BLEU", "train loss"]  # one data: nothing to tell apart


def test_loss_curve_escapes_the_names_of_its_series():
    fig = viz.loss_curve([{"step": 0, "<b>x</b>": 1.0}], metric_name="<i>m</i>")
    assert fig.data[0].name == "&lt;b&gt;x&lt;/b&gt;" and fig.layout.yaxis2.title.text == "&lt;i&gt;m&lt;/i&gt;"


def test_loss_curve_without_steps_uses_the_entry_index():
    fig = viz.loss_curve([{"train_loss": 2.0}, {"train_loss": 1.0}])
    np.testing.assert_array_equal(fig.data[0].x, [0, 1])
    assert fig.layout.xaxis.title.text == "entry"


def test_empty_history_says_so():
    fig = viz.loss_curve([])
    assert not fig.data and fig.layout.annotations[0].text == "no training history"


def test_loss_curve_history_keys_are_shown_as_text():
    history = [{"step": 1, "<b>loss</b>": 1.0, "<a href='https://example.com'>metric</a>": 0.5}]
    names = [trace.name for trace in viz.loss_curve(history).data]
    assert names == ["&lt;b&gt;loss&lt;/b&gt;", "&lt;a href='https://example.com'&gt;metric&lt;/a&gt;"]
    assert all(trace.hovertemplate.startswith(trace.name) for trace in viz.loss_curve(history).data)
