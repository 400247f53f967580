"""Attention Atlas' encoder-decoder Transformer: model, per-call capture and ablation, decoding, checkpoints."""
from .attribution import contrastive
from .capture import ablate, capture, patch
from .checkpoint import (
                         Checkpoint,
                         CheckpointError,
                         FolderStatus,
                         ModelCard,
                         Translation,
                         checkpoint_folders,
                         checkpoint_status,
                         checkpoint_version,
                         load_checkpoint,
                         resolve_checkpoint,
)
from .config import TransformerConfig
from .decoding import BeamTree, Sampling, Step, beam_search, beam_tree, decode_steps, greedy
from .device import atlas_device, model_device
from .forced import ForcedTarget, aligned_foil, contrast, contrastive_scores, force, forced_target, sequence_log_prob
from .hooks import HookPoint, hook_points
from .masks import causal_mask, decoder_mask, padding_mask
from .model import Transformer
from .record import ATTENTION_KINDS, KIND_SIDES, AttentionRecord

__all__ = [
    "ATTENTION_KINDS",
    "AttentionRecord",
    "KIND_SIDES",
    "Checkpoint",
    "CheckpointError",
    "FolderStatus",
    "HookPoint",
    "ModelCard",
    "BeamTree",
    "Sampling",
    "ForcedTarget",
    "Step",
    "Translation",
    "beam_search",
    "beam_tree",
    "checkpoint_folders",
    "checkpoint_status",
    "checkpoint_version",
    "decode_steps",
    "greedy",
    "load_checkpoint",
    "model_device",
    "Transformer",
    "TransformerConfig",
    "ablate",
    "atlas_device",
    "capture",
    "aligned_foil",
    "contrast",
    "contrastive",
    "contrastive_scores",
    "force",
    "forced_target",
    "sequence_log_prob",
    "patch",
    "causal_mask",
    "decoder_mask",
    "hook_points",
    "padding_mask",
    "resolve_checkpoint",
]
