"""AttentionRecord: the read-only result of one `capture()`, read by attention site."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

import torch

from .hooks import INSIDE_HOOKS, SITE_PARTS
from .sites import ATTENTION_KINDS, Site, parse_kind

SiteName = str | Site  # a Site, or any spelling of one: 'decoder.layers.1.cross_attn', 'decoder.1.cross'


class AttentionRecord(Mapping[str, torch.Tensor]):
    """Attention weights by site, in model order: record["decoder.layers.1.cross_attn"] is (batch, heads, q_len,
    k_len). A site is a `Site` or any spelling `transformer.model.sites.parse` reads ('decoder.1.cross'); iterating
    gives the sites' names, the prefixes of their hook names.

    One method per hook point of a site (pattern, scores, mask, q, k, v, z, result: each docstring gives the shape);
    `hooks` holds every recorded hook point by its full name. The record is filled while its `capture()` block runs
    and is complete when the block ends.
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

    def _part(self, key: SiteName, part: str) -> torch.Tensor:
        try:
            site = Site.parse(key)
        except ValueError as error:
            raise KeyError(f"{key!r:.80} is not an attention site: {error}") from None
        name = site.hook(part)
        if name in self._hooks:
            return self._hooks[name]
        if name not in self._order:
            raise KeyError(f"this model has no {name}")
        wanted = site.name if part in SITE_PARTS else name
        left_out = f" or names='*' (capture(model) leaves out {', '.join(INSIDE_HOOKS)})" \
            if name.endswith(INSIDE_HOOKS) else ""
        raise KeyError(f"{name} was not captured; capture it with capture(model, names=[{wanted!r}]){left_out}")

    def __getitem__(self, key: SiteName) -> torch.Tensor:
        return self.pattern(key)

    def pattern(self, site: SiteName) -> torch.Tensor:
        """(batch, heads, q_len, k_len) the softmax weights: rows sum to 1 over allowed keys, exactly 0 on masked
        keys (a row with every key masked is all 0)."""
        return self._part(site, "pattern")

    def scores(self, site: SiteName) -> torch.Tensor:
        """(batch, heads, q_len, k_len) q·k/sqrt(d_head) of the queries and keys `q` and `k` give (rotated, with rotary
        positions), before masking: masked cells hold their score, not -inf."""
        return self._part(site, "scores")

    def mask(self, site: SiteName) -> torch.Tensor:
        """(batch, 1, q_len, k_len) bool, True = may attend: the mask the block used."""
        return self._part(site, "mask")

    def q(self, site: SiteName) -> torch.Tensor:
        """(batch, heads, q_len, d_head) each head's queries, heads first; rotated by their positions where positions
        are rotary (before the rotation: hooks[site.hook('q_unrotated')]). Captured only when named."""
        return self._part(site, "q")

    def k(self, site: SiteName) -> torch.Tensor:
        """(batch, kv_heads, k_len, d_head) keys, heads first (kv_heads = heads unless grouped-query: query head h
        reads key head h // (heads / kv_heads)); rotated where positions are rotary. Captured only when named."""
        return self._part(site, "k")

    def v(self, site: SiteName) -> torch.Tensor:
        """(batch, kv_heads, k_len, d_head) values, heads first. Captured only when named."""
        return self._part(site, "v")

    def z(self, site: SiteName) -> torch.Tensor:
        """(batch, heads, q_len, d_head) each head's output, pattern @ v, heads first, before W_o (ablation edits
        it)."""
        return self._part(site, "z")

    def result(self, site: SiteName) -> torch.Tensor:
        """(batch, q_len, heads, d_model) each head's z through its own columns of W_o, positions first: summed over
        heads, plus W_o's bias, the block's output. Captured only when named."""
        return self._part(site, "result")

    def __iter__(self) -> Iterator[str]:
        for name in self._order:
            if name.endswith(".hook_pattern") and name in self._hooks:
                yield name.removesuffix(".hook_pattern")

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keys_of(self, kind: str) -> list[str]:
        """The names of the captured sites of one kind ('decoder.cross_attn', or any spelling of a kind such as
        'decoder.cross'), layer 0 first."""
        try:
            own = parse_kind(kind)
        except ValueError:
            raise KeyError(f"unknown attention kind {kind!r:.60}; kinds are {ATTENTION_KINDS}") from None
        return [name for name in self if Site.parse(name).kind == own]

    def stack(self, kind: str, item: int = 0, part: str = "pattern") -> torch.Tensor:
        """One batch item's `part` ('pattern', 'scores' or 'mask') for every layer of a kind.

        Returns (layers, heads, q_len, k_len); the mask has 1 head."""
        keys = self.keys_of(kind)
        if not keys:
            raise KeyError(f"no {kind} attention was captured")
        return torch.stack([self._part(key, part)[item] for key in keys])
