"""GPT-2 (transformers' GPT2LMHeadModel): a pre-LN decoder-only language model with learned positions.

Its Conv1D layers store weights as (in, out); ours are nn.Linear's (out, in), so every matrix is transposed, and
c_attn's one (d_model, 3 d_model) matrix splits into W_q, W_k, W_v."""
from __future__ import annotations

from pathlib import Path

import torch

from ...model.config import TransformerConfig
from ..tokenizer import JsonTokenizer
from .family import Family, Fields, Tensors, build_config, refuse


def config(hf: dict, tokenizer: JsonTokenizer, source: Path) -> TransformerConfig:
    field = Fields(hf, source)
    for switch, what in (("scale_attn_by_inverse_layer_idx", "attention scaled by 1 / layer"),
                         ("add_cross_attention", "cross-attention")):
        if field(switch, False, bool):
            raise refuse(source, "gpt2", f"{switch} is on ({what})")
    if not field("scale_attn_weights", True, bool):
        raise refuse(source, "gpt2", "scale_attn_weights is off (scores not divided by sqrt(d_head))")
    d_model, eos, vocab = field.size("n_embd", 768), field("eos_token_id", 50256), field.size("vocab_size", 50257)
    return build_config(
        source, src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=d_model, num_heads=field.size("n_head", 12),
        num_encoder_layers=0, num_decoder_layers=field.size("n_layer", 12),
        d_ff=field.size("n_inner", 0, minimum=0) or 4 * d_model,  # 0 or absent: 4 x d_model
        dropout=field("resid_pdrop", 0.1, float), max_len=field.positions("n_positions", 1024), norm_first=True,
        positional="learned", activation=field.activation("activation_function", "gpt2"),
        pad_id=field("pad_token_id", eos),  # GPT-2 pads with its end token
        bos_id=field("bos_token_id", eos), eos_id=eos, tie_output_embedding=field("tie_word_embeddings", True, bool),
        layer_norm_eps=field("layer_norm_epsilon", 1e-5, float), scale_embedding=False, stacks="decoder-only")


def state(config: TransformerConfig, tensors: Tensors) -> dict[str, torch.Tensor]:
    prefix = "transformer." if tensors.has("transformer.wte.weight") else ""  # GPT2LMHeadModel or a bare GPT2Model
    out = {"decoder.embed.token.weight": tensors.take(f"{prefix}wte.weight"),
           "decoder.embed.positional.embedding.weight": tensors.take(f"{prefix}wpe.weight")}
    for i in range(config.num_decoder_layers):
        ours, theirs = f"decoder.layers.{i}.", f"{prefix}h.{i}."
        qkv = tensors.linear("qkv", theirs + "attn.c_attn", transpose=True)  # (3 d_model, d_model): q, k, v rows
        for name, weight, bias in zip("qkv", qkv["qkv.weight"].chunk(3), qkv["qkv.bias"].chunk(3), strict=True):
            out |= {f"{ours}self_attn.W_{name}.weight": weight, f"{ours}self_attn.W_{name}.bias": bias}
        out |= tensors.linear(ours + "self_attn.W_o", theirs + "attn.c_proj", transpose=True)
        out |= tensors.linear(ours + "feed_forward.linear1", theirs + "mlp.c_fc", transpose=True)
        out |= tensors.linear(ours + "feed_forward.linear2", theirs + "mlp.c_proj", transpose=True)
        out |= tensors.linear(ours + "self_attn_residual.norm", theirs + "ln_1")
        out |= tensors.linear(ours + "ff_residual.norm", theirs + "ln_2")
    out |= tensors.linear("decoder.norm", f"{prefix}ln_f")
    out["generator.weight"] = (tensors.take("lm_head.weight") if tensors.has("lm_head.weight")
                               else out["decoder.embed.token.weight"])
    out["generator.bias"] = torch.zeros(config.tgt_vocab_size)  # GPT-2's output projection has no bias
    return tensors.finish(out)


FAMILY = Family("gpt2", ("gpt2",), "GPT2LMHeadModel", "generate", config, state,
                ("The quick brown fox", "Once upon a time"))
