"""Attention rollout against small examples multiplied out by hand."""
import numpy as np
import pytest

import viz

# Layer 0, two heads whose mean is [[1, 0], [0.5, 0.5]]; layer 1, one pattern [[0, 1], [0, 1]].
ENCODER = np.array([
    [[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]],
    [[[0.0, 1.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 1.0]]],
])
# A'0 = 0.5 A0 + 0.5 I = [[1, 0], [0.25, 0.75]];  A'1 = [[0.5, 0.5], [0, 1]]
# R = A'1 @ A'0 = [[0.5 + 0.125, 0.375], [0.25, 0.75]]   (A'0 @ A'1 would give [[0.5, 0.5], [0.125, 0.875]])
ENCODER_ROLLOUT = np.array([[0.625, 0.375], [0.25, 0.75]])


def test_encoder_rollout_applies_layer_zero_first():
    np.testing.assert_allclose(viz.encoder_rollout(ENCODER), ENCODER_ROLLOUT)


def test_encoder_rollout_renormalises_rows():
    masked_row = np.array([[[[0.0, 0.0], [0.0, 1.0]]]])  # the first query is fully masked: its row is all 0
    # 0.5 A + 0.5 I = [[0.5, 0], [0, 1]] -> rows renormalised -> I
    np.testing.assert_allclose(viz.encoder_rollout(masked_row), np.eye(2))


def test_decoder_source_rollout_two_layers_by_hand():
    dec_self = np.array([[[[1.0, 0.0], [0.5, 0.5]]], [[[1.0, 0.0], [1.0, 0.0]]]])
    cross = np.array([[[[0.0, 1.0], [0.5, 0.5]]], [[[1.0, 0.0], [1.0, 0.0]]]])
    # Layer 0: S = 0.5 * (cross0 @ E) = 0.5 * [[0.25, 0.75], [0.4375, 0.5625]] (self-attention of 0 is 0)
    # Layer 1: Â1 = [[1, 0], [0.5, 0.5]]; Â1 @ S = [[0.125, 0.375], [0.171875, 0.328125]]
    #          cross1 @ E = [[0.625, 0.375], [0.625, 0.375]]
    #          S = 0.5 * (Â1 @ S) + 0.5 * (cross1 @ E)
    expected = np.array([[0.375, 0.375], [0.3984375, 0.3515625]])
    result = viz.decoder_source_rollout(dec_self, cross, ENCODER_ROLLOUT)
    np.testing.assert_allclose(result, expected)
    np.testing.assert_allclose(result.sum(axis=1), 1 - 0.5 ** 2)  # the rest belongs to the target tokens


def test_decoder_source_rollout_refuses_mismatched_layers():
    with pytest.raises(ValueError, match="do not fit"):
        viz.decoder_source_rollout(np.ones((2, 1, 2, 2)), np.ones((1, 1, 2, 2)), np.eye(2))


def test_rollout_figure_draws_the_matrix_with_token_ticks():
    fig = viz.rollout_figure(ENCODER_ROLLOUT, ["<s>", "a"], ["<s>", "a"])
    np.testing.assert_array_equal(fig.data[0].z, ENCODER_ROLLOUT)
    assert fig.layout.xaxis.ticktext == ("&lt;s&gt;", "a")
    assert fig.layout.coloraxis.cmax == 0.75
