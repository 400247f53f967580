"""Attention Atlas' encoder-decoder Transformer: model, per-call capture and ablation, decoding, checkpoints."""
from .capture import ablate, capture
from .config import TransformerConfig
from .hooks import HookPoint, hook_points
from .masks import causal_mask, decoder_mask, padding_mask
from .model import Transformer
from .record import ATTENTION_KINDS, AttentionRecord

__all__ = [
    "ATTENTION_KINDS",
    "AttentionRecord",
    "HookPoint",
    "Transformer",
    "TransformerConfig",
    "ablate",
    "capture",
    "causal_mask",
    "decoder_mask",
    "hook_points",
    "padding_mask",
]
