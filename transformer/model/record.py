"""AttentionRecord: the read-only result of one `capture()`, keyed by attention site."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

import torch

from .hooks import ATTENTION_KINDS, attention_name, site_kind

# (query side, key side) of each kind: which sequence gives the rows and which the columns of its weights.
KIND_SIDES = {"encoder.self_attn": ("src", "src"), "decoder.self_attn": ("tgt", "tgt"),
              "decoder.cross_attn": ("tgt", "src")}


class AttentionRecord(Mapping[str, torch.Tensor]):
    """Attention weights by site, in model order: record["decoder.layers.1.cross_attn"] is (batch, heads, q_len,
    k_len). A site is named by its attention module's path, the prefix of its hook names; a short name
    ('decoder.1.cross') is read as the site it names.

    Rows sum to 1 over allowed keys and are exactly 0 on masked keys. `mask(key)` and `scores(key)` give the mask
    (True = may attend) and the raw pre-softmax scores of the same block; `hooks` holds every recorded hook point by
    its full name. The record is filled while its `capture()` block runs and is complete when the block ends.
    """

    def __init__(self, hooks: Mapping[str, torch.Tensor], order: list[str]) -> None:
        self._hooks = hooks
        self._order = order  # every hook name of the model, in model order

    @property
    def hooks(self) -> Mapping[str, torch.Tensor]:
        return MappingProxyType(self._hooks)

    def cpu(self) -> AttentionRecord:
        """The same record with every tensor on the CPU (itself when they all are): for numpy and display."""
        if all(tensor.device.type == "cpu" for tensor in self._hooks.values()):
            return self
        return AttentionRecord({name: tensor.cpu() for name, tensor in self._hooks.items()}, self._order)

    def _part(self, key: str, part: str) -> torch.Tensor:
        site = attention_name(key)
        if site_kind(site) is None:
            raise KeyError(f"{key!r} is not an attention site; sites look like 'encoder.layers.0.self_attn', "
                           "'decoder.layers.1.cross_attn'")
        name = f"{site}.hook_{part}"
        if name not in self._hooks:
            raise KeyError(f"{name} was not captured; capture it with capture(model, names=[{site!r}]) or names=None")
        return self._hooks[name]

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._part(key, "pattern")

    def mask(self, key: str) -> torch.Tensor:
        """(batch, 1, q_len, k_len) bool, True = may attend."""
        return self._part(key, "mask")

    def scores(self, key: str) -> torch.Tensor:
        """(batch, heads, q_len, k_len) q·k/sqrt(d_head) before masking."""
        return self._part(key, "scores")

    def __iter__(self) -> Iterator[str]:
        for name in self._order:
            if name.endswith(".hook_pattern") and name in self._hooks:
                yield name.removesuffix(".hook_pattern")

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keys_of(self, kind: str) -> list[str]:
        """Sites of one kind ('encoder.self_attn', 'decoder.self_attn' or 'decoder.cross_attn'; a short name such
        as 'decoder.cross' is read as the kind it names), layer 0 first."""
        own = attention_name(kind)
        if own not in ATTENTION_KINDS:
            raise KeyError(f"unknown attention kind {kind!r}; kinds are {ATTENTION_KINDS}")
        return [site for site in self if site_kind(site) == own]

    def stack(self, kind: str, item: int = 0, part: str = "pattern") -> torch.Tensor:
        """One batch item's `part` ('pattern', 'scores' or 'mask') for every layer of a kind.

        Returns (layers, heads, q_len, k_len); the mask has 1 head."""
        keys = self.keys_of(kind)
        if not keys:
            raise KeyError(f"no {kind} attention was captured")
        return torch.stack([self._part(key, part)[item] for key in keys])
