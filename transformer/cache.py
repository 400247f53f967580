"""Incremental decoding: the keys and values of earlier steps, kept per decoding call.

With a cache, each generation step runs the decoder on the new token only: self-attention appends that token's key
and value to those of the earlier tokens, and cross-attention projects the encoder memory once. The cache belongs to
one decoding call (a local object, never stored on the model), so concurrent calls stay independent.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionCache:
    grows: bool  # self-attention: append each step's keys; cross-attention: project the memory once and keep it
    keys: torch.Tensor | None = None  # (batch, heads, k_len, d_head)
    values: torch.Tensor | None = None  # (batch, heads, k_len, d_head)

    def keys_values(self, project) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values to attend over; `project()` gives the new ones (called unless they are kept)."""
        if self.keys is not None and not self.grows:
            return self.keys, self.values
        keys, values = project()
        if self.keys is not None:
            keys, values = torch.cat([self.keys, keys], dim=2), torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        return keys, values


class DecoderCache:
    """Everything the decoder needs from earlier steps: per-layer keys/values and the tokens fed so far."""

    def __init__(self, num_layers: int) -> None:
        self.self_attn = [AttentionCache(grows=True) for _ in range(num_layers)]
        self.cross_attn = [AttentionCache(grows=False) for _ in range(num_layers)]
        self.tokens: torch.Tensor | None = None  # (batch, length) decoder input so far, for the padding mask

    @property
    def length(self) -> int:
        return 0 if self.tokens is None else self.tokens.size(1)

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        """Record the new tokens (batch, new_len); returns all tokens so far."""
        self.tokens = tokens if self.tokens is None else torch.cat([self.tokens, tokens], dim=1)
        return self.tokens

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (beam search: each new hypothesis continues the row it extends, a row of the same input).

        Cross-attention's keys and values stay as they are: the rows of one input's beams are copies of the same
        memory, so reordering them within an input changes no value (and copied 6 layers of them every step)."""
        self.tokens = self.tokens[index]
        for cache in self.self_attn:
            cache.keys, cache.values = cache.keys[index], cache.values[index]
