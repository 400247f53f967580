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


# ---------------------------------------------------------------------------------------------- rotary positions
# Hand computations on one or two dimension pairs; tests/test_positional_rotary.py compares rotary_scores with the
# model's own rotate() and its captured scores.


def test_rotary_scores_turn_one_pair_by_distance_times_its_angle():
    theta, distances = 0.5, np.arange(6)
    # q = (1, 0) turned by Δθ is (cos Δθ, sin Δθ): against k = (1, 0) its q·k is cos Δθ, against (0, 1) sin Δθ.
    np.testing.assert_allclose(viz.rotary_scores([1, 0], [1, 0], [theta], distances), np.cos(theta * distances))
    np.testing.assert_allclose(viz.rotary_scores([1, 0], [0, 1], [theta], distances), np.sin(theta * distances))
    np.testing.assert_allclose(viz.rotary_scores([0, 1], [1, 0], [theta], distances), -np.sin(theta * distances))
    # At distance 0 nothing turns: q·k itself.
    q, k = np.array([0.3, -1.2, 2.0, 0.7]), np.array([1.5, 0.4, -0.6, 2.2])
    assert viz.rotary_scores(q, k, [1.0, 0.01], [0])[0] == pytest.approx(q @ k)


def test_rotary_scores_pair_dimension_i_with_i_plus_half():
    """d_head 4: pairs (0, 2) and (1, 3). Only pair 1 is non-zero in q and k, so only its angle shows."""
    frequencies, distances = np.array([1.0, 0.25]), np.arange(10)
    q, k = np.array([0.0, 2.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0, -3.0])
    # (a, b) = (2, 1) and (c, d) = (1, -3): (ac + bd) cos Δθ + (ad − bc) sin Δθ = −cos Δθ − 7 sin Δθ
    expected = -np.cos(0.25 * distances) - 7 * np.sin(0.25 * distances)
    np.testing.assert_allclose(viz.rotary_scores(q, k, frequencies, distances), expected, atol=1e-12)
    ones = viz.rotary_scores(np.ones(4), np.ones(4), frequencies, distances)
    np.testing.assert_allclose(ones, 2 * np.cos(distances) + 2 * np.cos(0.25 * distances))  # Σ_i 2 cos Δθ_i


def test_rotary_scores_refuse_a_q_without_one_pair_per_frequency():
    with pytest.raises(ValueError, match=r"\(d_head,\) = \(4,\)"):
        viz.rotary_scores(np.ones(6), np.ones(6), [1.0, 0.1], [0, 1])
    with pytest.raises(ValueError, match="positive"):
        viz.rotary_wavelengths([1.0, 0.0])


def test_rotary_frequencies_figure_draws_wavelengths_on_a_log_scale_with_the_angles_in_the_hover():
    frequencies = np.array([1.0, 0.1, 0.01, 0.001])
    fig = viz.rotary_frequencies_figure(frequencies, context=512)
    (turned,) = [trace for trace in fig.data if trace.mode == "lines+markers"]
    np.testing.assert_allclose(turned.y, 2 * np.pi / frequencies)
    np.testing.assert_array_equal(turned.x, [0, 1, 2, 3])
    np.testing.assert_allclose(np.asarray(turned.customdata)[:, 0], frequencies)  # radians per token
    np.testing.assert_array_equal(np.asarray(turned.customdata)[:, 1], [4, 5, 6, 7])  # each pair's second dimension
    assert fig.layout.yaxis.type == "log" and fig.layout.xaxis.dtick == 1
    assert fig.layout.showlegend is False  # one series: nothing to tell apart
    (line,) = [trace for trace in fig.data if trace.mode == "lines"]
    assert list(line.y) == [512, 512]
    assert [note.text for note in fig.layout.annotations] == ["max_len 512"]
    assert fig.layout.annotations[0].y == pytest.approx(np.log10(512))  # a log axis places annotations by log10


def test_rotary_frequencies_figure_shows_the_unscaled_frequencies_only_where_a_scaling_changed_them():
    scaled, unscaled = np.array([1.0, 0.1 / 8]), np.array([1.0, 0.1])
    fig = viz.rotary_frequencies_figure(scaled, unscaled, context=64, pretrained=16)
    named = {trace.name: trace for trace in fig.data if trace.mode == "lines+markers"}
    assert list(named) == ["before scaling", "scaled, as the model turns"]
    np.testing.assert_allclose(named["before scaling"].y, 2 * np.pi / unscaled)
    np.testing.assert_allclose(named["scaled, as the model turns"].y, 2 * np.pi / scaled)
    assert fig.layout.showlegend is True
    notes = {note.text: note.yanchor for note in fig.layout.annotations}
    assert notes == {"max_len 64": "bottom", "pretrained at 16": "top"}  # two close lines: named apart
    same = viz.rotary_frequencies_figure(unscaled, unscaled.copy())
    assert [trace.name for trace in same.data] == ["as the model turns"]


def test_rotary_score_figure_draws_the_scores_and_marks_the_pair_in_its_input():
    q, k, frequencies = np.array([1.0, 2.0, -1.0, 0.5]), np.array([0.5, -1.0, 2.0, 1.0]), [1.0, 0.05]
    fig = viz.rotary_score_figure(q, k, frequencies, np.arange(20), marked=(7, 1.25))
    curve, mark = fig.data
    np.testing.assert_array_equal(curve.x, np.arange(20))
    np.testing.assert_allclose(curve.y, viz.rotary_scores(q, k, frequencies, np.arange(20)))
    assert (list(mark.x), list(mark.y)) == ([7], [1.25])
    assert mark.marker.size > curve.marker.size
    assert fig.layout.xaxis.title.text.startswith("distance")
    assert len(viz.rotary_score_figure(q, k, frequencies, np.arange(5)).data) == 1


def test_rotary_tables_are_labelled_by_pair():
    assert viz.rotary_dims(8) == [0, 1, 2, 3] and viz.rotary_dims(128) == [0, 16, 32, 48]  # sines only
    assert viz.rotary_dim_names(4) == ["sin · pair 0", "sin · pair 1", "cos · pair 0", "cos · pair 1"]
    table = np.random.default_rng(0).normal(size=(5, 4))
    fig = viz.pe_curves(table, dims=[0, 3], names=viz.rotary_dim_names(4))
    assert [trace.name for trace in fig.data] == ["sin · pair 0", "cos · pair 1"]
    with pytest.raises(ValueError, match="3 names for the 4 dimensions"):
        viz.pe_curves(table, names=["a", "b", "c"])
    assert viz.pe_heatmap(table, x_title="dimension: sin, then cos").layout.xaxis.title.text == \
        "dimension: sin, then cos"
