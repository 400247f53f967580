"""Activation patching: which heads and which residual positions carry what makes one input's output differ from
another's?

Run the *corrupted* input, replace one component's activation with the *clean* run's, and measure how much of the
clean output's log-probability comes back: effect = log p(y | corrupted, one part clean) - log p(y | corrupted).
Components: each head's output (`hook_z`, one row per layer, one column per head, for every attention kind) and
each layer's residual stream entering the layer (`hook_resid_pre`, one row per layer, one column per position).

The rule on lengths: clean and corrupted sources must have the same number of tokens (position j of one stands for
position j of the other), and both runs read the same decoder input (usually the clean run's output), so decoder
positions match too. Patches are run in batches: row 0 of every batch is the unpatched corrupted run, each other row
patches one component, and effects are measured against the row 0 of the same batch. The decoder is causal, so the
runs stop at the measured position: a decoder position after it cannot reach it (its effect is exactly 0, not run).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from ..model.capture import capture, patch
from ..model.model import Transformer
from ..model.sites import ATTENTION_KINDS, Site

STACKS = ("encoder", "decoder")


@dataclass
class PatchingResult:
    """Effects on log p(target) at one decoder position (positive: the clean part restores the clean output)."""

    heads: dict[str, np.ndarray]  # attention kind -> (layers, heads)
    positions: dict[str, np.ndarray]  # "encoder" -> (layers, src_len), "decoder" -> (layers, tgt_len)
    clean_log_prob: float
    corrupted_log_prob: float


def run_patched(model: Transformer, src: torch.Tensor, tgt: torch.Tensor,
                activations: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Logits of (src, tgt) with each named hook point's tensor replaced by `activations[name]` (same shape)."""
    with patch(model, {name: (lambda _, value=value: value) for name, value in activations.items()}):
        return model(src, tgt)


def _log_probs_at_last(model: Transformer, src: torch.Tensor, tgt: torch.Tensor, target: int) -> torch.Tensor:
    """log p(target) at the last decoder position of each row: (batch,). Only that position is projected."""
    return model.decode(tgt, model.encode(src), src, positions=slice(-1, None))[:, 0].log_softmax(dim=-1)[:, target]


def _components(model: Transformer, src_len: int, tgt_len: int) -> list[tuple[str, str, int, int]]:
    """(table, hook name, row, column) of every component: heads by attention kind, residual positions by stack."""
    config = model.config
    layers = {"encoder": config.num_encoder_layers, "decoder": config.num_decoder_layers}
    components = [(kind, Site(kind, layer).hook("z"), layer, head) for kind in ATTENTION_KINDS
                  for layer in range(config.layers_of(kind)) for head in range(config.num_heads)]
    lengths = {"encoder": src_len, "decoder": tgt_len}
    components += [(stack, f"{stack}.layers.{layer}.hook_resid_pre", layer, position) for stack in STACKS
                   for layer in range(layers[stack]) for position in range(lengths[stack])]
    return components


def _patch_rows(clean: torch.Tensor, rows: list[tuple[int, int]]):
    """An edit writing the clean run's slice [:, column] into each listed batch row (dimension 1 is the head of a
    hook_z and the position of a residual stream, so one edit serves both)."""
    batch_rows = torch.tensor([row for row, _ in rows])
    columns = torch.tensor([column for _, column in rows])

    def edit(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[batch_rows, columns] = clean[0, columns]
        return x

    return edit


@torch.no_grad()
def activation_patching(model: Transformer, clean_src: list[int], corrupted_src: list[int], tgt: list[int],
                        position: int, target: int, batch_size: int = 64) -> PatchingResult:
    """Patch every head and every residual position of the clean run into the corrupted one, one at a time.

    clean_src, corrupted_src: encoder inputs of equal length; tgt: the decoder input both runs read (BOS first);
    position: the decoder position whose prediction is measured; target: the token id whose log-prob is measured
    (usually the clean run's prediction there)."""
    if len(clean_src) != len(corrupted_src):
        raise ValueError(f"clean and corrupted inputs must have the same number of tokens "
                         f"({len(clean_src)} != {len(corrupted_src)}): positions are patched one for one")
    if not 0 <= position < len(tgt):
        raise ValueError(f"position {position} is outside the decoder input (0..{len(tgt) - 1})")
    clean, corrupted = torch.tensor([clean_src]), torch.tensor([corrupted_src])
    tgt_ids = torch.tensor([tgt[: position + 1]])  # (1, position + 1): what reaches the measured position
    with capture(model, ["*.hook_z", "*.hook_resid_pre"]) as record:
        clean_log_prob = _log_probs_at_last(model, clean, tgt_ids, target)[0]
    components = _components(model, len(clean_src), position + 1)
    effects = np.zeros(len(components))
    corrupted_log_prob = None
    for start in range(0, len(components), batch_size - 1):
        chunk = components[start:start + batch_size - 1]
        by_hook: dict[str, list[tuple[int, int]]] = {}
        for row, (_, name, _, column) in enumerate(chunk, start=1):  # row 0 stays unpatched
            by_hook.setdefault(name, []).append((row, column))
        edits = {name: _patch_rows(record.hooks[name], rows) for name, rows in by_hook.items()}
        with patch(model, edits):
            log_probs = _log_probs_at_last(model, corrupted.expand(len(chunk) + 1, -1),
                                           tgt_ids.expand(len(chunk) + 1, -1), target)  # (1 + patches,)
        effects[start:start + len(chunk)] = (log_probs[1:] - log_probs[0]).numpy()
        corrupted_log_prob = float(log_probs[0])
    config = model.config
    layers = {"encoder": config.num_encoder_layers, "decoder": config.num_decoder_layers}
    heads = {kind: np.zeros((config.layers_of(kind), config.num_heads)) for kind in ATTENTION_KINDS}
    positions = {"encoder": np.zeros((layers["encoder"], len(clean_src))),
                 "decoder": np.zeros((layers["decoder"], len(tgt)))}
    for (table, _, row, column), effect in zip(components, effects):
        (heads if table in heads else positions)[table][row, column] = effect
    return PatchingResult(heads, positions, float(clean_log_prob), corrupted_log_prob)


def patch_texts(checkpoint, clean: str, corrupted: str, position: int, batch_size: int = 64):
    """(PatchingResult, the clean Translation): `clean` is translated greedily, both runs read its decoder input,
    and the measured token at decoder `position` is the clean output's piece there. ValueError (a message for the
    user) if the two texts do not have the same number of source tokens."""
    translation = checkpoint.translate(clean)
    if not 0 <= position < len(translation.output_ids):
        raise ValueError(f"position {position} is outside the output (0..{len(translation.output_ids) - 1})")
    result = activation_patching(checkpoint.model, translation.src_ids, checkpoint.encode(corrupted),
                                 translation.tgt_ids, position, translation.output_ids[position], batch_size)
    return result, translation
