"""The sampling view's bars: thick enough to read, nested so that each stage keeps a row's height, and no tick
label where the pieces' labels end."""
import pytest

import viz


@pytest.mark.parametrize("large", [False, True])
def test_every_stages_bar_is_thick_enough_to_read_and_no_tick_sits_at_zero(large):
    theme = viz.Theme(large=large)
    pieces = ["▁le", "▁la", "▁les", "▁un", "(others)"]
    probs = [[0.5, 0.2, 0.1, 0.1, 0.1], [0.6, 0.2, 0.1, 0.05, 0.05], [0.7, 0.3, 0, 0, 0]]
    fig = viz.distribution_figure(pieces, probs, drawn=0, theme=theme)
    layout = fig.layout
    row_px = (layout.height - layout.margin.t - layout.margin.b) / len(pieces)
    assert layout.barmode == "overlay"
    widths = [trace.width for trace in fig.data]
    assert widths == sorted(widths, reverse=True)  # the stage drawn from on top, the model's behind it
    assert min(widths) * row_px >= 0.9 * theme.font_size  # was a third of 0.85 of a row each: 8 px on a laptop
    assert 0 not in layout.xaxis.tickvals and max(layout.xaxis.tickvals) == 1
    assert [text for text in fig.data[-1].text if text] == ["0.70", "0.30"]  # the values drawn from, written
    assert not any(text for trace in fig.data[:-1] for text in trace.text)
