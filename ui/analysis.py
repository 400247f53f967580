"""Typed, read-only results of the model passes: what views read instead of the model.

Every array is read-only and every sequence a tuple: a pass is one object shared by every session that asks for it
while it stays cached (ui.shared.shared_pass), so that no session can change what another sees, and the figures built
from it are keyed by its content (ui.shared.once hashes tuples, arrays and these frozen dataclasses exactly). Masks
come from the model (the mask it used in this pass); the views never rebuild them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import viz
from viz.conventions import KIND_LABELS as KIND_LABELS  # the kinds as figures and controls name them, for the views


class Unavailable(Exception):
    """A pass the view asked for cannot run (a snapshot or checkpoint that does not load); the message says why."""


def first_difference(first: tuple, second: tuple) -> int | None:
    """The first position where two outputs' pieces differ (one ending counts), None where they are the same."""
    return next((i for i in range(max(len(first), len(second)))
                 if i >= len(first) or i >= len(second) or first[i] != second[i]), None)


def read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class KindAttention:
    """One attention kind of one pass."""

    kind: str  # "encoder.self_attn", "decoder.self_attn" or "decoder.cross_attn"
    query_side: str  # "src" or "tgt": the sequence of the rows
    key_side: str  # the sequence of the columns
    weights: np.ndarray  # (layers, heads, q_len, k_len), rows sum to 1 over allowed keys
    scores: np.ndarray  # (layers, heads, q_len, k_len), before masking
    allowed: np.ndarray  # (q_len, k_len) bool, True = may attend: the mask the model used


@dataclass(frozen=True)
class Attention:
    """The attention of every kind of one pass, and the probability of given labels (teacher-forced passes)."""

    kinds: tuple[KindAttention, ...]
    label_probs: tuple[float, ...] = ()

    def of(self, kind: str) -> KindAttention:
        for attention in self.kinds:
            if attention.kind == kind:
                return attention
        raise KeyError(f"unknown attention kind {kind!r}")

    def stack(self, kind: str, part: str = "weights") -> np.ndarray:
        """(layers, heads, q_len, k_len) weights or scores."""
        return getattr(self.of(kind), part)

    def head(self, kind: str, layer: int, head: int | None, part: str = "weights") -> np.ndarray:
        """(q_len, k_len) of one head, or the mean of the layer's heads when head is None."""
        stack = self.stack(kind, part)
        return stack[layer].mean(axis=0) if head is None else stack[layer, head]


@dataclass(frozen=True)
class Analysis:
    """One input translated, and one captured pass over (source, decoder input), possibly padded."""

    text: str  # the output, detokenised
    src_ids: tuple[int, ...]
    tgt_ids: tuple[int, ...]  # the decoder input, starting with BOS
    src_tokens: tuple[str, ...]
    tgt_tokens: tuple[str, ...]
    src_typed: tuple[str, ...]  # the real source pieces as typed (an <unk> shows its text); no padding
    output_tokens: tuple[str, ...]  # one generated piece per real decoder input position
    output_ids: tuple[int, ...]
    probs: tuple[float, ...]  # of each generated piece
    warnings: tuple[str, ...]  # as the app words them (ui.warnings)
    pad_id: int
    attention: Attention

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(attention.kind for attention in self.attention.kinds)

    def ids(self, side: str) -> tuple[int, ...]:
        return {"src": self.src_ids, "tgt": self.tgt_ids}[side]

    def pieces(self, side: str) -> list[str]:
        return list({"src": self.src_tokens, "tgt": self.tgt_tokens}[side])

    def tokens(self, kind: str) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) of a kind."""
        attention = self.attention.of(kind)
        return self.pieces(attention.query_side), self.pieces(attention.key_side)

    def stack(self, kind: str, part: str = "weights") -> np.ndarray:
        return self.attention.stack(kind, part)

    def head(self, kind: str, layer: int, head: int | None, part: str = "weights") -> np.ndarray:
        return self.attention.head(kind, layer, head, part)

    def padded(self) -> bool:
        return self.pad_id in self.src_ids or self.pad_id in self.tgt_ids

    def blocked(self, kind: str) -> dict[str, np.ndarray]:
        """Why each cell is masked, read off the model's own mask: a key no query may attend to is padding; other
        blocked cells after their query mean the kind is causal, which blocks every key after its query (pad keys
        too, as masks add up); other blocked cells before their query are a sliding window's (Mistral's); pad
        queries are shaded (informational). Reasons that block nothing are left out, so that legends only name
        masks that are there."""
        attention = self.attention.of(kind)
        blocked_cells = ~attention.allowed  # (q_len, k_len)
        key_is_pad = blocked_cells.all(axis=0)  # (k_len,)
        query_is_pad = np.array(self.ids(attention.query_side)) == self.pad_id  # (q_len,)
        shape = blocked_cells.shape
        not_padding = blocked_cells & ~key_is_pad[None, :]
        later_keys = np.triu(np.ones(shape, dtype=bool), k=1)
        causal = (not_padding & later_keys).any()
        reasons = {viz.PADDING: np.broadcast_to(key_is_pad[None, :], shape).copy(),
                   viz.CAUSAL: later_keys & blocked_cells if causal else np.zeros(shape, dtype=bool),
                   viz.SLIDING_WINDOW: not_padding & ~later_keys,
                   viz.PADDED_QUERY: np.broadcast_to(query_is_pad[:, None], shape).copy()}
        return {reason: cells for reason, cells in reasons.items() if cells.any()}

    def by_viz_kind(self) -> tuple[dict, dict, dict, dict]:
        """stacks, query tokens, key tokens and masks keyed by viz's kind names, as its multi-kind tables take them."""
        stacks, queries, keys, blocked = {}, {}, {}, {}
        for kind in self.kinds:
            name = KIND_LABELS[kind]
            stacks[name] = self.stack(kind)
            queries[name], keys[name] = self.tokens(kind)
            blocked[name] = self.blocked(kind)
        return stacks, queries, keys, blocked


@dataclass(frozen=True)
class DecodingSteps:
    """Generation one token at a time: greedy, or sampled."""

    src_tokens: tuple[str, ...]
    prefix_tokens: tuple[str, ...]  # the decoder input of the last step: <s> and every piece before the last
    top: tuple[tuple[tuple[str, float], ...], ...]  # per step: its most likely next pieces and their probabilities
    cross: np.ndarray  # (layers, heads, steps, src_len): each step's cross-attention row
    decoder_self: np.ndarray  # (layers, heads, steps, steps): row t is what step t computed (the decoder is causal)
    # Per step: the pieces whose probabilities `shaped` holds (most likely first, then the one drawn if it is not
    # among them, then all the others as one), (3, pieces) by the model, after temperature, after truncation.
    shaped_pieces: tuple[tuple[str, ...], ...] = ()
    shaped: tuple[np.ndarray, ...] = ()
    drawn: tuple[int, ...] = ()  # per step: the index in shaped_pieces of the piece taken


@dataclass(frozen=True)
class BeamTreeView:
    """Every hypothesis of a beam search of one input (transformer.BeamTree), as the decoding view draws it."""

    src_tokens: tuple[str, ...]
    pieces: tuple[str, ...]  # each hypothesis's last piece (the root's is <s>)
    prefixes: tuple[tuple[int, ...], ...]  # each hypothesis's decoder input: its ids but the last (the root: none)
    parents: tuple[int, ...]  # -1 for the root
    log_probs: tuple[float, ...]
    finals: tuple[float, ...]
    kept: tuple[bool, ...]
    best: int
    chosen: tuple[int, ...]  # the path to `best`, root first
    texts: tuple[str, ...]  # each hypothesis's pieces joined, for the node picker
