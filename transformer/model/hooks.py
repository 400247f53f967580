"""Hook points, and the per-call state that decides what they record or edit.

Every tensor worth inspecting passes through a `HookPoint`: an identity module whose `name` is its module path
(`decoder.layers.1.cross_attn.hook_pattern`), assigned once when the model is built. What a hook point does depends
only on the *current call's* state, held in a `ContextVar`: each thread (each Streamlit session) and each asyncio
task has its own, so one user's capture or ablation never reaches another's, and nothing is ever stored on the
shared model. With no state set, a hook point returns its input untouched and costs one `ContextVar.get()`.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch
from torch import nn

from .sites import Site

Edit = Callable[[torch.Tensor], torch.Tensor]
NameFilter = str | Site | Iterable[str | Site] | Callable[[str], bool] | None


class HookPoint(nn.Module):
    """Identity on its input; records or edits it when the current call asks for this point."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""  # the module path, set by `name_hook_points` when the model is built

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        call = _current_call.get()
        return x if call is None else call.visit(self, x)

    def extra_repr(self) -> str:
        return self.name


@dataclass(frozen=True)
class Capture:
    """Which hook points one `capture()` records, and the dict it records them into."""

    points: frozenset[HookPoint]
    store: dict[str, torch.Tensor] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class CallState:
    """Everything hook points must do during one call: captures to record into, edits to apply."""

    captures: tuple[Capture, ...] = ()
    edits: tuple[tuple[HookPoint, Edit], ...] = ()

    def wants(self, point: HookPoint) -> bool:
        """Whether this call records or edits `point` (an attention module then computes its weights itself)."""
        return any(point in capture.points for capture in self.captures) or any(t is point for t, _ in self.edits)

    def visit(self, point: HookPoint, x: torch.Tensor) -> torch.Tensor:
        for target, edit in self.edits:
            if target is point:
                x = edit(x)
        for capture in self.captures:
            if point in capture.points:
                capture.store[point.name] = x.detach()  # the last call of a point wins: one record = one pass
        return x


_current_call: ContextVar[CallState | None] = ContextVar("attention_atlas_call", default=None)


@contextmanager
def extend_call(*, captures: tuple[Capture, ...] = (),
                edits: tuple[tuple[HookPoint, Edit], ...] = ()) -> Iterator[None]:
    """Add captures and edits to the current call's state for the duration of a `with` block (nestable)."""
    outer = _current_call.get() or CallState()
    token = _current_call.set(CallState(outer.captures + captures, outer.edits + edits))
    try:
        yield
    finally:
        _current_call.reset(token)


def is_watched(*points: HookPoint) -> bool:
    """True if the current call captures or edits any of these points (the attention module then skips the fused
    path, which never shows its scores or weights)."""
    call = _current_call.get()
    return call is not None and any(call.wants(point) for point in points)


def captures_active() -> bool:
    """True if the current call records some hook point."""
    call = _current_call.get()
    return call is not None and bool(call.captures)


def edits_active() -> bool:
    """True if the current call edits some hook point (an ablation is on)."""
    call = _current_call.get()
    return call is not None and bool(call.edits)


def name_hook_points(model: nn.Module) -> None:
    """Give every hook point its module path as name, and keep them in a table on the model; called once at the end
    of the model's constructor. The table is structure, fixed once the model is built (per-call state never lives
    on the model): it spares every capture() a walk over all modules, which cost more than capturing a layer."""
    model._hook_points = {}
    for name, module in model.named_modules():
        if isinstance(module, HookPoint):
            module.name = name
            model._hook_points[name] = module


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """All hook points of a model by name, in model order (encoder before decoder, layer 0 first)."""
    return dict(model._hook_points)


# Hook points inside attention and the feed-forward block: a vector per head or d_ff neurons per token, many numbers
# each, and hook_result costs a product of its own. A capture records them only where they are named.
INSIDE_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_result", "hook_mlp_post", "hook_q_unrotated", "hook_k_unrotated")
# What naming an attention site to a capture records: its scores, mask and pattern (hook_scores, ...).
SITE_PARTS = ("scores", "mask", "pattern")


def select_hook_points(model: nn.Module, names: NameFilter = None) -> dict[str, HookPoint]:
    """The hook points `names` picks out: None = all but the INSIDE_HOOKS ('*' for those too); a hook name, an
    attention site in any spelling or a Site (its scores, mask and pattern), or a glob such as '*.hook_pattern'; a
    list of those; or a predicate on hook names."""
    points = hook_points(model)
    if names is None:
        return {name: point for name, point in points.items() if not name.endswith(INSIDE_HOOKS)}
    if callable(names):
        return {name: point for name, point in points.items() if names(name)}
    wanted: set[str] = set()
    for pattern in [names] if isinstance(names, (str, Site)) else list(names):
        try:
            site = Site.parse(pattern)
        except ValueError:  # a hook name or a glob
            matched = set(fnmatch.filter(points, pattern))
        else:
            matched = {site.hook(part) for part in SITE_PARTS} & points.keys()
        if not matched:
            raise ValueError(
                f"{pattern!r} matches no hook point of this model; "
                f"names look like {next(iter(points))!r} or attention sites like 'decoder.layers.0.cross_attn'"
            )
        wanted |= matched
    return {name: point for name, point in points.items() if name in wanted}
