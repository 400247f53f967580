"""Word-level merging of sentencepiece pieces, checked against sums and means worked out by hand."""
import numpy as np
import pytest

import viz
from viz.words import merge_blocked, merge_words, produces_labels, word_groups, word_labels

PIECES = ["<s>", "▁Il", "▁lis", "ait", ".", "</s>"]  # words: <s> | ▁Il | ▁lisait. | </s>


def test_word_groups_follow_the_word_start_mark_and_keep_specials_apart():
    assert word_groups(PIECES) == [[0], [1], [2, 3, 4], [5]]
    assert word_labels(PIECES) == ["<s>", "▁Il", "▁lisait.", "</s>"]
    assert word_groups(["ab", "c", "<pad>", "d", "<pad>"]) == [[0, 1], [2], [3], [4]]  # no "▁" at the start
    assert word_groups([]) == []


def test_keys_are_summed_and_queries_averaged_by_hand():
    q_pieces = ["▁lis", "ait", "▁un"]  # query words: ▁lisait (pieces 0, 1), ▁un (piece 2)
    k_pieces = ["<s>", "▁Il", "▁lis", "ait"]  # key words: <s>, ▁Il, ▁lisait (pieces 2, 3)
    weights = np.array([
        [0.1, 0.2, 0.3, 0.4],
        [0.5, 0.1, 0.0, 0.4],
        [0.0, 0.0, 0.5, 0.5],
    ])
    merged, q_words, k_words = merge_words(weights, q_pieces, k_pieces)
    assert (q_words, k_words) == (["▁lisait", "▁un"], ["<s>", "▁Il", "▁lisait"])
    # row ▁lisait = mean of rows 0 and 1 with keys 2 + 3 summed: [(0.1+0.5)/2, (0.2+0.1)/2, (0.7+0.4)/2]
    np.testing.assert_allclose(merged, [[0.3, 0.15, 0.55], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(merged.sum(axis=1), 1.0)


def test_a_whole_stack_merges_head_by_head():
    stack = np.random.default_rng(0).dirichlet(np.ones(6), size=(2, 3, 6))  # (layers, heads, q, k)
    merged, _, _ = merge_words(stack, PIECES, PIECES)
    assert merged.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(merged[1, 2], merge_words(stack[1, 2], PIECES, PIECES)[0])
    np.testing.assert_allclose(merged.sum(axis=-1), 1.0)


def test_a_word_cell_is_blocked_only_when_all_its_piece_cells_are():
    blocked = viz.mask_reasons(6, 6, causal=True)
    words = merge_blocked(blocked, PIECES, PIECES)["causal"]
    # ▁lisait. (pieces 2-4) may see itself: piece 4 sees pieces 2-4; <s> may not see ▁lisait.
    expected = np.array([
        [False, True, True, True],
        [False, False, True, True],
        [False, False, False, True],
        [False, False, False, False],
    ])
    np.testing.assert_array_equal(words, expected)


def test_merge_refuses_weights_that_do_not_match_the_pieces():
    with pytest.raises(ValueError, match=r"\(6, 5\)"):
        merge_words(np.zeros((6, 6)), PIECES, PIECES[:5])


def test_produces_labels_pair_each_decoder_row_with_the_piece_it_makes():
    assert produces_labels(["<s>", "▁Elle", "▁lit", "<pad>"], ["▁Elle", "▁lit", "</s>"]) == [
        "<s> → ▁Elle", "▁Elle → ▁lit", "▁lit → </s>", "<pad>"]
