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
    keys: torch.Tensor | None = None  # (batch, heads, k_len, d_head); while growing, a view of key_room
    values: torch.Tensor | None = None  # (batch, heads, k_len, d_head); while growing, a view of value_room
    # Self-attention writes each step's keys and values into room kept for later steps, (batch, heads, capacity,
    # d_head), doubled when full: appending with torch.cat copied every earlier step's keys at every step, a quarter
    # of a 256-token greedy decode.
    key_room: torch.Tensor | None = None
    value_room: torch.Tensor | None = None

    def keys_values(self, project) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values to attend over; `project()` gives the new ones (called unless they are kept)."""
        if self.keys is not None and not self.grows:
            return self.keys, self.values
        keys, values = project()
        if not self.grows:
            self.keys, self.values = keys, values
            return keys, values
        old = 0 if self.keys is None else self.keys.size(2)
        length = old + keys.size(2)
        if self.key_room is None or self.key_room.size(2) < length:
            capacity = max(length, 2 * old)
            self.key_room = self._room(self.keys, keys, capacity)
            self.value_room = self._room(self.values, values, capacity)
        self.key_room[:, :, old:length] = keys
        self.value_room[:, :, old:length] = values
        self.keys, self.values = self.key_room[:, :, :length], self.value_room[:, :, :length]
        return self.keys, self.values

    @staticmethod
    def _room(kept: torch.Tensor | None, new: torch.Tensor, capacity: int) -> torch.Tensor:
        """(batch, heads, capacity, d_head) holding `kept` at its start."""
        batch, heads, _, d_head = new.shape
        room = new.new_empty(batch, heads, capacity, d_head)
        if kept is not None:
            room[:, :, : kept.size(2)] = kept
        return room

    def select(self, index: torch.Tensor) -> None:
        """Keep rows `index` of the growing keys and values (beam search)."""
        length = self.keys.size(2)
        self.key_room, self.value_room = self.key_room[index], self.value_room[index]
        self.keys, self.values = self.key_room[:, :, :length], self.value_room[:, :, :length]


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

    def truncate(self, length: int) -> None:
        """Forget every token after the first `length` (greedy decoding's guesses that turned out wrong)."""
        self.tokens = self.tokens[:, :length]
        for cache in self.self_attn:
            cache.keys, cache.values = cache.key_room[:, :, :length], cache.value_room[:, :, :length]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (beam search: each new hypothesis continues the row it extends, a row of the same input).

        Cross-attention's keys and values stay as they are: the rows of one input's beams are copies of the same
        memory, so reordering them within an input changes no value (and copied 6 layers of them every step)."""
        self.tokens = self.tokens[index]
        for cache in self.self_attn:
            cache.select(index)

    def keep(self, index: torch.Tensor) -> None:
        """Keep only rows `index`, cross-attention's too (inputs whose beam search has ended leave the batch)."""
        self.reorder(index)
        for cache in self.cross_attn:
            if cache.keys is not None:
                cache.keys, cache.values = cache.keys[index], cache.values[index]
