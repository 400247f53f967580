"""Mistral (transformers' MistralForCausalLM): Llama's layout (llama.py) with a sliding window on every layer's
attention: a query sees itself and the sliding_window - 1 tokens before it."""
from __future__ import annotations

from pathlib import Path

from ...model.config import TransformerConfig
from ..tokenizer import JsonTokenizer
from .family import Family, Fields
from .llama import llama_config, state


def config(hf: dict, tokenizer: JsonTokenizer, source: Path) -> TransformerConfig:
    field = Fields(hf, source)
    return llama_config(field, "mistral", "none", sliding_window=field("sliding_window", 0))


FAMILY = Family("mistral", ("mistral",), "MistralForCausalLM", "generate", config, state,
                ("The quick brown fox", "Once upon a time"))
