"""Attention sites: the one type, name and reader of an attention block's name.

A site is one attention block: its kind (which stack, which attention) and its layer. Its name is its module path, the
prefix of its hook names: `decoder.layers.1.cross_attn` (`….hook_pattern`, `….hook_q`, ...); its kind's name is that
name less the layer: `decoder.cross_attn`. Links, decks, scripts and the corpus command line have spelled them in
other ways, and `parse` reads every one:

    decoder.layers.1.cross_attn       the name
    decoder.1.cross                   links, decks
    decoder.cross_attn.1              the corpus command line's kind.layer
    decoder.cross_attn, decoder.cross, cross      kinds (no layer; the only cross-attention is the decoder's)
    decoder.layers.1.cross_attn:2, decoder.1.cross:2, decoder.cross_attn.1.2      one head of a site

How figures name and mark each kind ('cross', a diamond) is viz's one table (viz.conventions.KIND_TABLE, keyed by
the kind's name here): viz imports no model code.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

ATTENTION_KINDS = ("encoder.self_attn", "decoder.self_attn", "decoder.cross_attn")  # in model order
# (query side, key side) of each kind: which sequence gives the rows and which the columns of its weights.
KIND_SIDES = {"encoder.self_attn": ("src", "src"), "decoder.self_attn": ("tgt", "tgt"),
              "decoder.cross_attn": ("tgt", "src")}

_PARTS = dict(stack=r"(?P<stack>encoder|decoder)", role=r"(?P<role>self|cross)", layer=r"(?P<layer>[0-9]+)",
              head=r"(?P<head>[0-9]+)")
_SPELLINGS = tuple(re.compile(spelling.format(**_PARTS)) for spelling in (
    r"{stack}\.layers\.{layer}\.{role}_attn(?::{head})?",  # the name, and one of its heads after a colon
    r"{stack}\.{layer}\.{role}(?::{head})?",  # links and decks
    r"{stack}\.{role}_attn\.{layer}(?:\.{head})?",  # the corpus command line: kind.layer.head
    r"{stack}\.{role}(?:_attn)?",  # kinds
    r"(?P<role>cross)(?:_attn)?",  # the decoder's, the only cross-attention
))
_EXAMPLES = ("sites are named like 'decoder.layers.1.cross_attn' or 'decoder.1.cross', kinds like "
             "'decoder.cross_attn', heads like 'decoder.layers.1.cross_attn:2'")


class Name(NamedTuple):
    """What a spelling names: a kind (layer and head None), a site (head None) or one head of a site."""

    kind: str
    layer: int | None
    head: int | None


def parse(text: str | Site) -> Name:
    """The kind, site or head any spelling above names; ValueError if it names none (an encoder has no
    cross-attention; nothing around the name, whitespace included, is read)."""
    if isinstance(text, Site):
        return Name(text.kind, text.layer, None)
    for spelling in _SPELLINGS if isinstance(text, str) else ():
        match = spelling.fullmatch(text)
        if match:
            found = match.groupdict()
            kind = f"{found.get('stack') or 'decoder'}.{found['role']}_attn"
            if kind in ATTENTION_KINDS:
                layer, head = (None if found.get(part) is None else int(found[part]) for part in ("layer", "head"))
                return Name(kind, layer, head)
    raise ValueError(f"{text!r:.80} names no attention site; {_EXAMPLES}")


def parse_kind(text: str) -> str:
    """The kind's name ('decoder.cross_attn') of a spelling of a kind ('decoder.cross', 'cross'); ValueError for
    anything else, a site included."""
    name = parse(text)
    if name.layer is not None:
        raise ValueError(f"{text!r:.80} names a site, not a kind; kinds are {ATTENTION_KINDS}")
    return name.kind


def parse_head(text: str) -> tuple[Site, int]:
    """(site, head) of a spelling of one head ('decoder.0.cross:1', 'decoder.self_attn.1.2'); ValueError otherwise."""
    name = parse(text)
    if name.head is None:
        raise ValueError(f"{text!r:.80} names no head; {_EXAMPLES}")
    return Site(name.kind, name.layer), name.head


def attention_name(text: str) -> str:
    """The own name of the kind, site or head (site:head) that any spelling names; other text comes back unchanged.
    Links and slides are read through it, so that one written with any spelling shows what its own names show, and a
    value that names nothing is still there to be refused with a notice."""
    try:
        name = parse(text)
    except ValueError:
        return text
    if name.layer is None:
        return name.kind
    site = Site(name.kind, name.layer)
    return site.name if name.head is None else f"{site}:{name.head}"


@dataclass(frozen=True)
class Site:
    """One attention block: its kind ('decoder.cross_attn') and layer. `str(site)` is its name,
    'decoder.layers.1.cross_attn'; `Site.parse` reads any spelling of it."""

    kind: str
    layer: int

    def __post_init__(self) -> None:
        if self.kind not in ATTENTION_KINDS:
            raise ValueError(f"unknown attention kind {self.kind!r:.60}; kinds are {ATTENTION_KINDS}")
        if not isinstance(self.layer, int) or isinstance(self.layer, bool) or self.layer < 0:
            raise ValueError(f"a site's layer is a whole number from 0, got {self.layer!r:.40}")

    @classmethod
    def parse(cls, text: str | Site) -> Site:
        """The site any spelling names ('decoder.1.cross', or a Site itself); ValueError for a kind, a head or
        anything else."""
        if isinstance(text, Site):
            return text
        name = parse(text)
        if name.layer is None or name.head is not None:
            raise ValueError(f"{text!r:.80} names a {'kind' if name.layer is None else 'head'}, not a site; "
                             f"{_EXAMPLES}")
        return cls(name.kind, name.layer)

    @property
    def stack(self) -> str:
        """'encoder' or 'decoder'."""
        return self.kind.partition(".")[0]

    @property
    def name(self) -> str:
        """'decoder.layers.1.cross_attn': the attention module's path, the prefix of its hook names."""
        return f"{self.layer_name}.{self.kind.partition('.')[2]}"

    @property
    def layer_name(self) -> str:
        """'decoder.layers.1': the path of the layer that holds the block (and its residual stream's hooks)."""
        return f"{self.stack}.layers.{self.layer}"

    @property
    def sides(self) -> tuple[str, str]:
        """(query side, key side): 'src' or 'tgt', the sequences of its weights' rows and columns."""
        return KIND_SIDES[self.kind]

    def hook(self, part: str) -> str:
        """The name of one of its hook points: hook('q') -> 'decoder.layers.1.cross_attn.hook_q'."""
        return f"{self.name}.hook_{part}"

    def __str__(self) -> str:
        return self.name
