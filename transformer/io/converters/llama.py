"""Llama (transformers' LlamaForCausalLM): a pre-norm decoder-only language model with RMSNorm, rotary positions, a
gated (SwiGLU) feed-forward network and grouped-query attention, without biases. Qwen2 and Mistral are this layout
with one change each (qwen2.py, mistral.py), read by the functions here."""
from __future__ import annotations

from pathlib import Path

import torch

from ...model.config import TransformerConfig
from ..checkpoint import CheckpointError
from ..safety import MAX_LEN
from ..tokenizer import JsonTokenizer
from .family import Family, Fields, Tensors, build_config, refuse

ROPE_TYPES = {"default": "none", "linear": "linear", "llama3": "llama3"}  # transformers' rope_type -> our rope_scaling
# What a rope_parameters (or rope_scaling) object may hold: the keys of the types above. Another type's own keys
# (yarn's beta_fast, longrope's short_factor, a per-layer-type object) would change the rotation unseen.
ROPE_KEYS = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
             "original_max_position_embeddings", "partial_rotary_factor"}


def rope_parameters(hf: dict, source: Path) -> dict:
    """config.json's rotary settings as one object: transformers 5's `rope_parameters`, or the `rope_theta` and
    `rope_scaling` fields that files on the hub were written with."""
    params = hf.get("rope_parameters")
    if params is None:
        scaling = hf.get("rope_scaling") or {}
        params = {"rope_theta": hf.get("rope_theta"), **scaling} if isinstance(scaling, dict) else scaling
    if not isinstance(params, dict):
        raise CheckpointError(f"{source}: rope_parameters (or rope_scaling) is {str(params)[:40]!r}, not an object")
    return params


def rope_fields(hf: dict, source: Path, family: str) -> dict:
    """Our rope_* config fields. A rope type other than the default, linear and llama3 is refused by name."""
    params = rope_parameters(hf, source)
    unknown = sorted(set(params) - ROPE_KEYS, key=str)
    if unknown:
        raise refuse(source, family, f"rope parameters {', '.join(map(repr, unknown[:5]))} are not read")
    field = Fields(params, source)
    kind = field("rope_type", field("type", "default", str), str)
    if kind not in ROPE_TYPES:
        raise refuse(source, family, f"rope type {kind!r} is not computed here (only {', '.join(ROPE_TYPES)})")
    if field("partial_rotary_factor", 1.0, float) != 1.0:
        raise refuse(source, family, "partial_rotary_factor is not 1 (only part of each head turned)")
    values = {"rope_theta": field("rope_theta", 10000.0, float), "rope_scaling": ROPE_TYPES[kind]}
    if kind != "default":
        values["rope_factor"] = field.required("factor", float)
    if kind == "llama3":
        values |= {"rope_low_freq_factor": field.required("low_freq_factor", float),
                   "rope_high_freq_factor": field.required("high_freq_factor", float),
                   "rope_original_max_len": field.required("original_max_position_embeddings")}
    return values


def llama_config(field: Fields, family: str, attention_bias: str, feed_forward_bias: bool = False,
                 sliding_window: int = 0) -> TransformerConfig:
    """Our config for a config.json of Llama's layout; the sizes must be written in it. max_len is the model's
    max_position_embeddings, at most the loading policy's MAX_LEN: rotary positions have no table, so a lower limit
    only bounds the input, and a sliding window at least that long blocks nothing (0)."""
    source = field.source
    heads, d_model = field.size("num_attention_heads"), field.size("hidden_size")
    if field("head_dim", 0) not in (0, d_model // heads) or d_model % heads:
        raise refuse(source, family, f"head_dim ({field('head_dim', 0)}) is not hidden_size / num_attention_heads "
                                     f"({d_model} / {heads})")
    vocab, eos = field.size("vocab_size"), field.required("eos_token_id")
    max_len = min(field.positions("max_position_embeddings", 2048), MAX_LEN)
    return build_config(
        source, src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=d_model, num_heads=heads,
        num_kv_heads=field.size("num_key_value_heads", heads), num_encoder_layers=0,
        num_decoder_layers=field.size("num_hidden_layers"), d_ff=field.size("intermediate_size"),
        dropout=field("attention_dropout", 0.0, float), max_len=max_len, norm_first=True, positional="rotary",
        activation=field.activation("hidden_act", family, default="silu"),
        pad_id=field("pad_token_id", eos),  # no pad token: padding is the end token, as GPT-2's
        bos_id=field("bos_token_id", eos), eos_id=eos, tie_output_embedding=field("tie_word_embeddings", False, bool),
        layer_norm_eps=field("rms_norm_eps", 1e-6, float), scale_embedding=False, stacks="decoder-only", norm="rms",
        feed_forward="gated", feed_forward_bias=feed_forward_bias, attention_bias=attention_bias,
        sliding_window=sliding_window if sliding_window < max_len else 0, **rope_fields(field.hf, source, family))


def config(hf: dict, tokenizer: JsonTokenizer, source: Path) -> TransformerConfig:
    field = Fields(hf, source)
    return llama_config(field, "llama", "all" if field("attention_bias", False, bool) else "none",
                        feed_forward_bias=field("mlp_bias", False, bool))


def layer_names(config: TransformerConfig, i: int) -> list[tuple[str, str, bool]]:
    """(our module, theirs, whether it has a bias) for decoder layer i."""
    qkv, o, ff = config.attention_bias != "none", config.attention_bias == "all", config.feed_forward_bias
    names = [("self_attn.W_q", "self_attn.q_proj", qkv), ("self_attn.W_k", "self_attn.k_proj", qkv),
             ("self_attn.W_v", "self_attn.v_proj", qkv), ("self_attn.W_o", "self_attn.o_proj", o),
             ("feed_forward.gate", "mlp.gate_proj", ff), ("feed_forward.up", "mlp.up_proj", ff),
             ("feed_forward.down", "mlp.down_proj", ff), ("self_attn_residual.norm", "input_layernorm", False),
             ("ff_residual.norm", "post_attention_layernorm", False)]
    return [(f"decoder.layers.{i}.{ours}", f"model.layers.{i}.{theirs}", bias) for ours, theirs, bias in names]


def state(config: TransformerConfig, tensors: Tensors) -> dict[str, torch.Tensor]:
    """Our state_dict from a LlamaForCausalLM's (Qwen2's, Mistral's) tensors. A tied output projection is the
    embedding; a file that also stores lm_head must store the same values."""
    embedding = tensors.take("model.embed_tokens.weight")
    out = {"decoder.embed.token.weight": embedding}
    for i in range(config.num_decoder_layers):
        for ours, theirs, bias in layer_names(config, i):
            out |= tensors.linear(ours, theirs, bias=bias)
    out |= tensors.linear("decoder.norm", "model.norm", bias=False)
    if not config.tie_output_embedding:
        out["generator.weight"] = tensors.take("lm_head.weight")
    elif tensors.has("lm_head.weight") and not torch.equal(tensors.take("lm_head.weight"), embedding):
        raise CheckpointError(f"{tensors.source}: tie_word_embeddings is on, but lm_head.weight differs from "
                              "model.embed_tokens.weight")
    else:
        out["generator.weight"] = embedding
    out["generator.bias"] = torch.zeros(config.tgt_vocab_size)  # Llama's output projection has no bias
    return tensors.finish(out)


FAMILY = Family("llama", ("llama",), "LlamaForCausalLM", "generate", config, state,
                ("The quick brown fox", "Once upon a time"))
