"""Logit lens on the decoder: what would the model predict if it stopped after each sublayer?

Each decoder sublayer's residual stream (after self-attention, after cross-attention, after the feed-forward
network, layer by layer) goes through the decoder's final LayerNorm (pre-LN models; post-LN ones have none, their
stream is normalised inside every sublayer) and the output projection. The last stage is the model's real output.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..model.capture import capture
from ..model.model import Transformer

SUBLAYERS = (("hook_resid_mid", "self"), ("hook_resid_cross", "cross"), ("hook_resid_post", "ffn"))


@dataclass
class LogitLens:
    """Top pieces per stage and decoder position; `stages` names the rows ("L0 self", "L0 cross", "L0 ffn", ...)."""

    stages: list[str]
    top_ids: np.ndarray  # (stages, tgt_len, top_k) ids, most likely first
    top_probs: np.ndarray  # (stages, tgt_len, top_k)
    target_probs: np.ndarray  # (stages, tgt_len) probability of the piece the model finally predicts there

    def top_pieces(self, tokenizer) -> list[list[list[str]]]:
        """top_ids as pieces of `tokenizer` (the checkpoint's target tokenizer): [stage][position][rank]."""
        return [[tokenizer.pieces(ids) for ids in stage] for stage in self.top_ids]


@torch.no_grad()
def logit_lens(model: Transformer, src_ids: list[int], tgt_ids: list[int], output_ids: list[int],
               top_k: int = 3) -> LogitLens:
    """The lens for one input (encoder ids, decoder input ids BOS first, and the piece each position predicts)."""
    names = [f"decoder.layers.{layer}.{hook}" for layer in range(model.config.num_decoder_layers)
             for hook, _ in SUBLAYERS]
    with capture(model, names) as record:
        model(torch.tensor([src_ids]), torch.tensor([tgt_ids]))
    streams = torch.stack([record.hooks[name][0] for name in names])  # (stages, tgt_len, d_model)
    probs = model.generator(model.decoder.norm(streams)).softmax(dim=-1)  # (stages, tgt_len, vocab)
    top = probs.topk(min(top_k, probs.size(-1)), dim=-1)
    stages = [f"L{layer} {label}" for layer in range(model.config.num_decoder_layers) for _, label in SUBLAYERS]
    target_probs = probs[:, torch.arange(len(tgt_ids)), torch.tensor(output_ids)]  # (stages, tgt_len)
    return LogitLens(stages, top.indices.numpy(), top.values.numpy(), target_probs.numpy())
