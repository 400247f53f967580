"""The project's one mask convention, in one place.

A mask is a boolean tensor in which **True means "this query may attend to this key"**. It broadcasts against
attention scores of shape (batch, heads, q_len, k_len), so masks are built as (batch, 1, q_len or 1, k_len).
Blocked scores are set to the dtype's minimum (not -inf) before the softmax and the resulting weights are set to
exactly 0, so a query row whose keys are all blocked gives zero weights and a zero output, never NaN.
torch.nn uses the opposite convention (True = blocked) for `attn_mask` and `key_padding_mask`: invert with `~`.
"""
from __future__ import annotations

import torch


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Keys that are real tokens: (batch, seq_len) ids -> (batch, 1, 1, seq_len) bool."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(size: int, device: torch.device | None = None, last: int | None = None) -> torch.Tensor:
    """Each position may attend to itself and earlier ones: (1, 1, size, size) lower-triangular bool; with `last`,
    only the rows of the last `last` positions, (1, 1, last, size) (incremental decoding's new queries)."""
    rows = size if last is None else last
    return torch.ones(rows, size, dtype=torch.bool, device=device).tril(size - rows)[None, None]


def decoder_mask(tgt: torch.Tensor, pad_id: int, last: int | None = None) -> torch.Tensor:
    """Decoder self-attention: causal and not padding. (batch, tgt_len) -> (batch, 1, tgt_len, tgt_len) bool, or
    (batch, 1, last, tgt_len) for the queries of the last `last` tokens only."""
    return padding_mask(tgt, pad_id) & causal_mask(tgt.size(1), tgt.device, last)
