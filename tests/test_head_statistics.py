"""Each head's statistics and role, measured once (transformer.analysis.corpus_heads.attention_statistics, the roles
of transformer.analysis.head_map.ROLES): on constructed patterns against values worked out by hand, and on one input
of a shipped checkpoint, where the Heads view's table, the corpus's rows and the map of heads all read them."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from transformer import load_checkpoint
from transformer.analysis.corpus_heads import STATISTICS, after_repeat, attention_statistics
from transformer.analysis.head_map import ROLE_THRESHOLD, ROLES, head_roles, head_statistics

CHECKPOINTS = Path(__file__).parents[1] / "checkpoints"


def measured(weights, *, allowed=None, real=None, eos=None, ids=None) -> pd.Series:
    """One head's statistics and role over one sentence: `weights` (q_len, k_len); `allowed` (q_len, k_len) bool
    (default: every key); `real` the queries that are not padding (default: all); `eos` the keys that are </s>;
    `ids` the sentence's token ids, for self-attention's induction share (None: cross-attention, no share)."""
    weights = torch.tensor(np.asarray(weights, dtype=float))
    q_len, k_len = weights.shape
    allowed = torch.ones(q_len, k_len, dtype=torch.bool) if allowed is None else torch.tensor(allowed)
    real = torch.ones(q_len, dtype=torch.bool) if real is None else torch.tensor(real)
    eos = torch.zeros(k_len, dtype=torch.bool) if eos is None else torch.tensor(eos)
    repeats = None if ids is None else after_repeat(torch.tensor([ids]))
    stats = attention_statistics(weights[None, None], allowed[None, None], real[None], eos[None],
                                 torch.zeros(1, k_len, dtype=torch.bool), repeats)
    frame = pd.DataFrame({name: [float(value)] for name, value in stats.items()})
    frame["role"] = head_roles(frame)
    return frame.iloc[0]


def test_perfect_diagonal():
    row = measured(np.eye(4), eos=[False, False, False, True], ids=[5, 6, 7, 2])
    assert (row.diagonal_share, row.entropy, row.mean_distance) == (1, 0, 0)
    assert (row.previous_share, row.first_share, row.eos_share, row.max_weight) == (0, 0.25, 0.25, 1)
    assert row.role == "diagonal"


def test_uniform_rows_have_entropy_ln_n_and_no_role():
    row = measured(np.full((4, 5), 0.2))
    assert row.entropy == pytest.approx(math.log(5))
    # mean over k of |q - k| for q = 0..3 and k = 0..4: 2, 1.4, 1.2, 1.4
    assert row.mean_distance == pytest.approx((2 + 1.4 + 1.2 + 1.4) / 4)
    assert row.role == ""


def test_an_induction_head_on_a_repeat_looks_at_the_token_after_the_earlier_occurrence():
    ids = [1, 10, 11, 12, 10, 11, 12]  # <s> a b c, then the repeat a b c
    weights = np.tril(np.ones((7, 7)))
    weights /= weights.sum(axis=1, keepdims=True)  # causal and uniform, except on the repeat:
    weights[4:] = 0
    weights[4, 2] = weights[5, 3] = 1.0  # a -> the b after the first a; b -> the c after the first b
    weights[6, 4], weights[6, 6] = 0.25, 0.75  # c: the key after the first c (a, at 4) gets a quarter
    row = measured(weights, allowed=np.tril(np.ones((7, 7), dtype=bool)), ids=ids)
    assert row.induction_share == pytest.approx((1 + 1 + 0.25) / 3)  # only the repeat's rows have an earlier occurrence
    assert row.role == "induction"
    # Cross-attention has no earlier occurrence; a sequence without repeats neither.
    assert math.isnan(measured(np.full((3, 3), 1 / 3)).induction_share)
    assert math.isnan(measured(np.eye(3), ids=[10, 11, 12]).induction_share)


def test_previous_token_pattern():
    weights = np.eye(5, k=-1)
    weights[0, 0] = 1.0  # the first token has no previous one: it looks at itself
    row = measured(weights)
    assert row.previous_share == 1  # averaged over the rows that have a previous token
    assert row.first_share == pytest.approx(2 / 5) and row.diagonal_share == pytest.approx(1 / 5)
    assert row.mean_distance == pytest.approx(4 / 5)
    assert row.role == "previous-token"


def test_first_token_and_end_of_sentence_sinks():
    sink = np.zeros((4, 4))
    sink[:, 0] = 1
    assert measured(sink).role == "first-token"
    eos = np.zeros((4, 4))
    eos[:, 3] = 1
    row = measured(eos, eos=[False, False, False, True])
    assert row.eos_share == 1 and row.role == "end-of-sentence"


def test_no_role_where_no_pattern_takes_the_thresholds_share():
    weights = np.array([[0.35, 0.35, 0.3], [0.3, 0.35, 0.35], [0.35, 0.3, 0.35]])
    row = measured(weights)
    assert max(row[list(ROLES)].fillna(0)) < ROLE_THRESHOLD and row.role == ""


def test_padded_query_rows_are_left_out():
    weights = np.array([[0.75, 0.0, 0.25], [0.0, 0.75, 0.25], [1 / 3, 1 / 3, 1 / 3]])
    row = measured(weights, real=[True, True, False])
    assert row.diagonal_share == pytest.approx(0.75)  # the pad row (1/3 on its diagonal) does not count
    assert row.entropy == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))


def test_a_row_that_may_attend_to_one_key_only_is_left_out():
    n = 4
    weights = np.tril(np.ones((n, n)))
    weights /= weights.sum(axis=1, keepdims=True)  # uniform over the causal keys 0..q
    row = measured(weights, allowed=np.tril(np.ones((n, n), dtype=bool)))
    # Row 0 may attend to key 0 only: forced, so left out of every statistic.
    assert row.entropy == pytest.approx(np.mean([math.log(q + 1) for q in range(1, n)]))
    assert row.diagonal_share == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)  # with row 0 it would pass 0.4


def test_one_input_has_a_row_per_head_of_every_kind_with_the_one_role_table():
    reverse = load_checkpoint(CHECKPOINTS / "reverse")
    config = reverse.config
    src, tgt = reverse.encode("attention42"), reverse.encode("24noitnetta", side="tgt")[:-1]
    frame = head_statistics(reverse, src + [config.pad_id] * 2, tgt)  # padding changes no statistic
    kinds = ("encoder.self_attn", "decoder.self_attn", "decoder.cross_attn")
    assert list(frame.columns) == ["kind", "layer", "head", *STATISTICS, "role"]
    assert list(frame[["kind", "layer", "head"]].itertuples(index=False, name=None)) == [
        (kind, layer, head) for kind in kinds for layer in range(config.layers_of(kind))
        for head in range(config.num_heads)]
    pd.testing.assert_frame_equal(frame, head_statistics(reverse, src, tgt), check_exact=False, atol=1e-6)
    assert set(frame["role"]) - {""} <= set(ROLES.values())
    assert (frame["role"] != "").any()  # reverse's cross-attention reads one mirrored key
    assert frame.loc[frame["kind"] == "decoder.cross_attn", "induction_share"].isna().all()
