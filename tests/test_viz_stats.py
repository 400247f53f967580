"""The scatter of heads' statistics (the library measures them: tests/test_head_statistics.py)."""
import numpy as np
import pandas as pd
import pytest

import viz


def test_statistics_scatter_colours_by_layer_and_names_the_kinds():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"kind": ["encoder.self_attn"] * 6 + ["decoder.cross_attn"] * 2,
                          "layer": [0, 0, 1, 1, 2, 2, 0, 0], "head": [0, 1] * 4,
                          "entropy": rng.random(8), "first_share": rng.random(8), "role": [""] * 7 + ["diagonal"]})
    fig = viz.statistics_scatter(frame, x="entropy", y="first_share")
    assert [t.name for t in fig.data] == ["layer 0", "layer 1", "layer 2", "encoder self attention",
                                          "cross attention"]
    assert fig.data[3].marker.symbol == "circle" and fig.data[4].marker.symbol == "diamond"
    assert fig.data[3].x == (None,)  # the legend names the shapes
    assert list(fig.data[0].marker.symbol) == ["circle", "circle", "diamond", "diamond"]
    assert list(fig.data[0].customdata[-1]) == ["cross", 1, "diagonal"]  # the hover names the kind and the role
    assert "hover" not in viz.SCATTER_CAPTION
    np.testing.assert_allclose(fig.data[1].x, frame.loc[frame.layer == 1, "entropy"])
    np.testing.assert_allclose(fig.data[1].y, frame.loc[frame.layer == 1, "first_share"])
    assert fig.layout.xaxis.title.text == "entropy"
    with pytest.raises(ValueError, match="no column"):
        viz.statistics_scatter(frame, x="nonsense")
