"""Qwen2 (transformers' Qwen2ForCausalLM): Llama's layout (llama.py) with biases on the query, key and value
projections, none elsewhere."""
from __future__ import annotations

from pathlib import Path

from ...model.config import TransformerConfig
from ..tokenizer import JsonTokenizer
from .family import Family, Fields, refuse
from .llama import llama_config, state


def config(hf: dict, tokenizer: JsonTokenizer, source: Path) -> TransformerConfig:
    field = Fields(hf, source)
    layer_types = hf.get("layer_types") or []
    if field("use_sliding_window", False, bool) or not isinstance(layer_types, list) or any(
            kind != "full_attention" for kind in layer_types):
        raise refuse(source, "qwen2", "use_sliding_window is on, or layer_types names other than full_attention "
                     "(a window on some layers only)")
    return llama_config(field, "qwen2", "qkv")


FAMILY = Family("qwen2", ("qwen2",), "Qwen2ForCausalLM", "generate", config, state,
                ("The quick brown fox", "Once upon a time"))
