"""Head statistics on constructed patterns, checked against values worked out by hand."""
import math

import numpy as np
import pytest

import viz


def _statistics(weights, q_tokens, k_tokens=None, kind="encoder self", blocked=None):
    k_tokens = q_tokens if k_tokens is None else k_tokens
    stack = np.asarray(weights, dtype=float)[None, None]
    frame = viz.head_statistics({kind: stack}, {kind: q_tokens}, {kind: k_tokens},
                                None if blocked is None else {kind: blocked})
    assert len(frame) == 1
    return frame.iloc[0]


def test_perfect_diagonal():
    row = _statistics(np.eye(4), ["a", "b", "c", "</s>"])
    assert (row.diagonal_share, row.entropy, row.mean_distance) == (1, 0, 0)
    assert (row.previous_share, row.first_share, row.eos_share, row.mean_max_weight) == (0, 0.25, 0.25, 1)
    assert row.role == "diagonal"


def test_uniform_rows_have_entropy_ln_n_and_are_broad():
    row = _statistics(np.full((4, 5), 0.2), list("abcd"), list("vwxyz"), kind="cross")
    assert row.entropy == pytest.approx(math.log(5))
    assert row.entropy_normalised == pytest.approx(1)
    # mean over k of |q - k| for q = 0..3 and k = 0..4: 2, 1.4, 1.2, 1.4
    assert row.mean_distance == pytest.approx((2 + 1.4 + 1.2 + 1.4) / 4)
    assert row.role == "broad"


def test_an_induction_head_on_a_repeat_looks_at_the_token_after_the_earlier_occurrence():
    tokens = list("<abc") + list("abc")  # <s> a b c, then the repeat a b c
    weights = np.tril(np.ones((7, 7)))
    weights /= weights.sum(axis=1, keepdims=True)  # causal and uniform, except on the repeat:
    weights[4:] = 0
    weights[4, 2] = weights[5, 3] = 1.0  # a -> the b after the first a; b -> the c after the first b
    weights[6, 4], weights[6, 6] = 0.25, 0.75  # c: the key after the first c (a, at 4) gets a quarter
    masked = np.triu(np.ones((7, 7), dtype=bool), k=1)
    row = _statistics(weights, tokens, kind="decoder self", blocked={"masked": masked})
    assert row.induction_share == pytest.approx((1 + 1 + 0.25) / 3)  # only the repeat's rows have an earlier occurrence
    assert row.role == "induction"
    # Cross-attention has no earlier occurrence; a sequence without repeats neither.
    assert math.isnan(_statistics(np.full((3, 3), 1 / 3), list("abc"), list("abc"), kind="cross").induction_share)
    assert math.isnan(_statistics(np.eye(3), list("xyz")).induction_share)


def test_previous_token_pattern():
    weights = np.eye(5, k=-1)
    weights[0, 0] = 1.0  # the first token has no previous one: it looks at itself
    row = _statistics(weights, list("abcde"))
    assert row.previous_share == 1  # averaged over the rows that have a previous token
    assert row.first_share == pytest.approx(2 / 5) and row.diagonal_share == pytest.approx(1 / 5)
    assert row.mean_distance == pytest.approx(4 / 5)
    assert row.role == "previous-token"


def test_first_token_sink_and_eos_sink():
    sink = np.zeros((4, 4))
    sink[:, 0] = 1
    assert _statistics(sink, list("abcd")).role == "first-token/positional sink"
    eos = np.zeros((4, 4))
    eos[:, 3] = 1
    row = _statistics(eos, ["a", "b", "c", "</s>"])
    assert row.eos_share == 1 and row.role == "EOS sink"


def test_no_role_when_no_statistic_clearly_dominates():
    weights = np.array([[0.6, 0.4, 0.0], [0.3, 0.3, 0.4], [0.0, 0.6, 0.4]])
    assert _statistics(weights, list("abc")).role == ""


def test_padded_query_rows_are_skipped_and_pad_keys_counted():
    tokens = ["a", "b", "<pad>"]
    weights = np.array([[0.75, 0.0, 0.25], [0.0, 0.75, 0.25], [1 / 3, 1 / 3, 1 / 3]])
    row = _statistics(weights, tokens)
    assert row.pad_share == pytest.approx(0.25)
    assert row.diagonal_share == pytest.approx(0.75)  # the pad row (1/3 on its diagonal) does not count
    expected_entropy = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert row.entropy == pytest.approx(expected_entropy)


def test_normalised_entropy_counts_only_keys_the_row_may_attend_to():
    n = 4
    weights = np.tril(np.ones((n, n)))
    weights /= weights.sum(axis=1, keepdims=True)  # uniform over the causal keys 0..q
    blocked = viz.mask_reasons(n, n, causal=True)
    row = _statistics(weights, list("abcd"), kind="decoder self", blocked=blocked)
    # Row 0 may attend to key 0 only: forced, so left out of every statistic.
    assert row.entropy == pytest.approx(np.mean([math.log(q + 1) for q in range(1, n)]))
    assert row.entropy_normalised == pytest.approx(1)
    assert row.diagonal_share == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)  # with row 0 it would pass 0.5
    assert row.role == "broad"


def test_statistics_have_one_row_per_head_of_every_kind():
    stacks = {"encoder self": np.full((2, 3, 4, 4), 0.25), "cross": np.full((1, 2, 3, 4), 0.25)}
    frame = viz.head_statistics(stacks, {"encoder self": list("abcd"), "cross": list("xyz")},
                                {"encoder self": list("abcd"), "cross": list("abcd")})
    assert len(frame) == 2 * 3 + 1 * 2
    assert list(frame.loc[frame.kind == "encoder self", "head"]) == [0, 1, 2, 0, 1, 2]
    assert list(frame.columns[:3]) == ["kind", "layer", "head"] and frame.columns[-1] == "role"


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="encoder-self"):
        viz.head_statistics({"encoder-self": np.ones((1, 1, 1, 1))}, {"encoder-self": ["a"]}, {"encoder-self": ["a"]})


def test_statistics_scatter_colours_by_layer():
    stacks = {"encoder self": np.random.default_rng(0).dirichlet(np.ones(4), size=(3, 2, 4))}
    frame = viz.head_statistics(stacks, {"encoder self": list("abcd")}, {"encoder self": list("abcd")})
    fig = viz.statistics_scatter(frame, x="entropy", y="first_share")
    assert [t.name for t in fig.data] == ["layer 0", "layer 1", "layer 2", "encoder self attention"]
    assert fig.data[3].marker.symbol == "circle" and fig.data[3].x == (None,)  # the legend names the shapes
    assert "hover" not in viz.SCATTER_CAPTION
    np.testing.assert_allclose(fig.data[1].x, frame.loc[frame.layer == 1, "entropy"])
    np.testing.assert_allclose(fig.data[1].y, frame.loc[frame.layer == 1, "first_share"])
    assert fig.layout.xaxis.title.text == "entropy"
    with pytest.raises(ValueError, match="no column"):
        viz.statistics_scatter(frame, x="nonsense")
