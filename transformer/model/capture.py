"""The public, per-call ways to look inside a model: `capture` records hook points, `ablate` removes heads, `patch`
replaces what any hook point carries (activation patching, embeddings fed in from outside)."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from .hooks import Capture, Edit, NameFilter, extend_call, hook_points, select_hook_points
from .record import AttentionRecord
from .sites import Site

ABLATION_MODES = ("zero", "mean")


@contextmanager
def capture(model: nn.Module, names: NameFilter = None) -> Iterator[AttentionRecord]:
    """Record the hook points `names` selects (see `select_hook_points`) during the forward passes in the block.

        with capture(model) as record:
            model(src, tgt)
        record["decoder.layers.0.cross_attn"]  # (batch, heads, tgt_len, src_len)

    Only this call sees what it records (a ContextVar, not state on the model); tensors are detached.
    """
    _check_model(model, "capture")
    if not (names is None or isinstance(names, (str, Site)) or callable(names)
            or (isinstance(names, (list, tuple, set, frozenset)) and all(isinstance(n, (str, Site)) for n in names))):
        raise TypeError("capture's names must be None (everything), a hook name or attention site such as "
                        "'decoder.layers.0.cross_attn' (or a Site), a list of those, or a predicate on hook names; "
                        f"got {names!r:.60}")
    points = select_hook_points(model, names)
    store: dict[str, torch.Tensor] = {}
    with extend_call(captures=(Capture(frozenset(points.values()), store),)):
        yield AttentionRecord(store, list(hook_points(model)))


def _check_model(model: object, caller: str) -> None:
    if not isinstance(model, nn.Module) or not hook_points(model):
        raise TypeError(f"{caller} expects a Transformer (an nn.Module with hook points) as its model, "
                        f"got {type(model).__name__}")


def _ablation(heads: Sequence[int], mode: str):
    index = list(heads)

    def edit(z: torch.Tensor) -> torch.Tensor:  # z: (batch, heads, q_len, d_head)
        z = z.clone()
        if mode == "zero":
            z[:, index] = 0.0
        else:  # "mean": each head's output replaced by its average over query positions
            z[:, index] = z[:, index].mean(dim=2, keepdim=True)
        return z

    return edit


@contextmanager
def ablate(model: nn.Module, heads: Mapping[str, Sequence[int]], mode: str = "zero") -> Iterator[None]:
    """Remove heads' contributions during the block: {"decoder.layers.1.cross_attn": [0, 2]} silences heads 0 and 2
    there (a key may be a Site or any spelling of one, such as "decoder.1.cross").

    mode "zero" sets the heads' outputs to 0; "mean" replaces each with its mean over query positions. Per call,
    like `capture`: other threads running the same model are unaffected.
    """
    _check_model(model, "ablate")
    if not isinstance(mode, str) or mode not in ABLATION_MODES:
        raise ValueError(f"mode must be one of {ABLATION_MODES}, got {mode!r:.40}")
    if not isinstance(heads, Mapping):
        raise TypeError("heads must be a mapping such as {'decoder.layers.1.cross_attn': [0, 2]}, "
                        f"got {type(heads).__name__}")
    points = hook_points(model)
    edits = []
    for key, head_list in heads.items():
        if not isinstance(key, (str, Site)):
            raise TypeError("heads' keys must be attention sites such as 'decoder.layers.1.cross_attn' (or Sites), "
                            f"got {key!r:.40}")
        if not isinstance(head_list, (list, tuple, range, set, frozenset)) or not all(
                isinstance(h, int) and not isinstance(h, bool) for h in head_list):
            raise TypeError(f"heads[{key!r}] must be a list of head numbers (integers), got {head_list!r:.60}")
        head_list = sorted(set(head_list))  # a head named twice is removed once
        try:
            site = Site.parse(key)
        except ValueError as error:
            raise KeyError(f"{key!r:.80} is not an attention block of this model: {error}") from None
        if site.hook("z") not in points:
            raise KeyError(f"{key!r:.80} is not an attention block of this model")
        num_heads = model.get_submodule(site.name).num_heads
        bad = [h for h in head_list if not 0 <= h < num_heads]
        if bad:
            raise ValueError(f"head(s) {bad} out of range for {key!r}, which has heads 0..{num_heads - 1}")
        if head_list:
            edits.append((points[site.hook("z")], _ablation(head_list, mode)))
    with extend_call(edits=tuple(edits)):
        yield


@contextmanager
def patch(model: nn.Module, edits: Mapping[str, Edit]) -> Iterator[None]:
    """Replace what hook points carry during the block: {hook name: function of the tensor it carries -> the tensor
    to carry on instead}, e.g. {"encoder.layers.0.hook_resid_pre": lambda x: clean_resid} runs the model on another
    run's residual stream. Per call, like `capture` and `ablate`; nestable with both (edits apply in order)."""
    points = hook_points(model)
    unknown = [name for name in edits if name not in points]
    if unknown:
        raise KeyError(f"{unknown} are not hook points of this model; names look like {next(iter(points))!r}")
    with extend_call(edits=tuple((points[name], edit) for name, edit in edits.items())):
        yield
