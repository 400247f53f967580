"""Attention Atlas' encoder-decoder Transformer: model, per-call capture and ablation, decoding, checkpoints."""
from .analysis.attribution import contrastive
from .analysis.forced import (
    ForcedTarget,
    aligned_foil,
    contrast,
    contrastive_scores,
    force,
    forced_target,
    sequence_log_prob,
)
from .inference.decoding import BeamTree, Sampling, Step, beam_search, beam_tree, decode_steps, greedy
from .inference.translation import (
    Checkpoint,
    Translation,
    load_checkpoint,
)
from .io.caveats import CAVEATS, Caveat
from .io.checkpoint import (
    CheckpointError,
    FolderStatus,
    ModelCard,
    checkpoint_folders,
    checkpoint_status,
    checkpoint_version,
    resolve_checkpoint,
)
from .model.capture import ablate, capture, patch
from .model.config import TransformerConfig
from .model.device import atlas_device, model_device
from .model.hooks import HookPoint, hook_points
from .model.masks import causal_mask, decoder_mask, padding_mask
from .model.model import Transformer
from .model.record import AttentionRecord
from .model.sites import ATTENTION_KINDS, KIND_SIDES, Site

__all__ = [
    "ATTENTION_KINDS",
    "AttentionRecord",
    "CAVEATS",
    "Caveat",
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
    "Site",
]
