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


def causal_mask(size: int, device: torch.device | None = None, last: int | None = None, window: int = 0
                ) -> torch.Tensor:
    """Each position may attend to itself and earlier ones: (1, 1, size, size) lower-triangular bool; with `last`,
    only the rows of the last `last` positions, (1, 1, last, size) (incremental decoding's new queries). With a
    `window`, only to itself and the window - 1 positions before it (Mistral's sliding window, as transformers
    masks it): a band below the diagonal."""
    rows = size if last is None else last
    allowed = torch.ones(rows, size, dtype=torch.bool, device=device).tril(size - rows)  # (rows, size)
    if window:
        allowed = allowed.triu(size - rows - window + 1)
    return allowed[None, None]


def decoder_lengths(tgt: torch.Tensor, pad_id: int) -> torch.Tensor:
    """How many leading positions of each decoder input are real: (batch, tgt_len) -> (batch,).

    Padding is only ever appended, and position 0 (the start token) is always real: Marian models start decoding with
    the pad id itself, so "id == pad" alone would mask their start token. The length is therefore one past the last
    id that is not padding, and at least 1."""
    positions = torch.arange(1, tgt.size(1) + 1, device=tgt.device)  # (tgt_len,) each position's length if last real
    return (positions * (tgt != pad_id)).amax(dim=1).clamp(min=1)


def length_mask(lengths: torch.Tensor, size: int) -> torch.Tensor:
    """Keys before each sequence's length: (batch,) -> (batch, 1, 1, size) bool."""
    return (torch.arange(size, device=lengths.device) < lengths[:, None])[:, None, None, :]


def decoder_mask(tgt: torch.Tensor, pad_id: int, last: int | None = None, window: int = 0) -> torch.Tensor:
    """Decoder self-attention: causal (within a sliding `window` if one is given) and not trailing padding.
    (batch, tgt_len) -> (batch, 1, tgt_len, tgt_len) bool, or (batch, 1, last, tgt_len) for the queries of the last
    `last` tokens only. A padding query whose window holds only padding has every key blocked: zero weights."""
    return length_mask(decoder_lengths(tgt, pad_id), tgt.size(1)) & causal_mask(tgt.size(1), tgt.device, last, window)
