"""Positional encoding views: the values drawn are the matrix's own, on honest scales."""
import numpy as np
import pytest

import viz

PE = np.array([[0.0, 1.0, 0.0, 1.0], [0.84, 0.54, 0.01, 1.0], [0.91, -0.42, 0.02, 1.0]])


def test_pe_heatmap_draws_positions_down_and_dimensions_across_centred_at_zero():
    fig = viz.pe_heatmap(PE)
    np.testing.assert_array_equal(fig.data[0].z, PE)
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (-1, 1)
    assert fig.layout.yaxis.autorange == "reversed"
    assert fig.layout.xaxis.title.text == "dimension" and fig.layout.yaxis.title.text == "position"


def test_pe_curves_one_line_per_dimension_at_chosen_positions():
    fig = viz.pe_curves(PE, dims=[0, 2], positions=[0, 2])
    assert [t.name for t in fig.data] == ["dim 0", "dim 2"]
    np.testing.assert_array_equal(fig.data[0].x, [0, 2])
    np.testing.assert_array_equal(fig.data[1].y, [0.0, 0.02])
    np.testing.assert_array_equal(viz.pe_curves(PE, dims=[1]).data[0].y, PE[:, 1])


def test_pe_curves_refuses_dimensions_outside_the_matrix():
    with pytest.raises(ValueError, match=r"dims \[4\]"):
        viz.pe_curves(PE, dims=[0, 4])


def test_pe_similarity_dot_product_and_cosine():
    np.testing.assert_allclose(viz.pe_similarity(PE).data[0].z, PE @ PE.T)
    cosine = np.asarray(viz.pe_similarity(PE, cosine=True).data[0].z)
    np.testing.assert_allclose(np.diag(cosine), 1.0)
    unit = PE / np.linalg.norm(PE, axis=1, keepdims=True)
    assert cosine[0, 2] == pytest.approx(unit[0] @ unit[2])
    assert "cosine" in viz.pe_similarity(PE, cosine=True).layout.title.text


def test_pe_curves_default_to_dimensions_spread_over_the_model_width():
    assert viz.default_pe_dims(256) == [0, 64, 128, 192]
    assert viz.default_pe_dims(32) == [0, 8, 16, 24]
    assert viz.default_pe_dims(2) == [0]
    pe = np.random.default_rng(0).normal(size=(5, 16))
    assert [t.name for t in viz.pe_curves(pe).data] == ["dim 0", "dim 4", "dim 8", "dim 12"]


def test_pe_similarity_is_square():
    fig = viz.pe_similarity(PE)
    assert fig.layout.yaxis.scaleanchor == "x" and fig.layout.yaxis.scaleratio == 1
