"""BERT (transformers' BertForMaskedLM): a post-LN encoder-only masked language model with learned positions,
token-type embeddings, a LayerNorm on the embeddings, and the prediction head's transform before the output."""
from __future__ import annotations

from pathlib import Path

import torch

from ...model.config import TransformerConfig
from ..tokenizer import JsonTokenizer
from .family import Family, Fields, Tensors, build_config, refuse


def config(hf: dict, tokenizer: JsonTokenizer, source: Path) -> TransformerConfig:
    field = Fields(hf, source)
    if field("position_embedding_type", "absolute", str) != "absolute":
        raise refuse(source, "bert", f"position_embedding_type is {hf.get('position_embedding_type')!r}")
    if field("is_decoder", False, bool) or field("add_cross_attention", False, bool):
        raise refuse(source, "bert", "is_decoder or add_cross_attention is on")
    specials = {piece: tokenizer.token_id(piece) for piece in ("[CLS]", "[SEP]")}
    if None in specials.values():
        raise refuse(source, "bert", "the tokenizer has no [CLS] or [SEP] token")
    vocab = field.size("vocab_size", 30522)
    return build_config(
        source, src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=field.size("hidden_size", 768),
        num_heads=field.size("num_attention_heads", 12), num_encoder_layers=field.size("num_hidden_layers", 12),
        num_decoder_layers=0, d_ff=field.size("intermediate_size", 3072),
        dropout=field("hidden_dropout_prob", 0.1, float), max_len=field.positions("max_position_embeddings", 512),
        positional="learned", activation=field.activation("hidden_act", "bert"),
        pad_id=field("pad_token_id", 0), bos_id=specials["[CLS]"], eos_id=specials["[SEP]"],
        tie_output_embedding=field("tie_word_embeddings", True, bool),
        layer_norm_eps=field("layer_norm_eps", 1e-12, float), scale_embedding=False, stacks="encoder-only",
        type_vocab_size=field("type_vocab_size", 2), embedding_norm=True)


def state(config: TransformerConfig, tensors: Tensors) -> dict[str, torch.Tensor]:
    embeddings = "bert.embeddings."
    out = {"encoder.embed.token.weight": tensors.take(embeddings + "word_embeddings.weight"),
           "encoder.embed.positional.embedding.weight": tensors.take(embeddings + "position_embeddings.weight"),
           "encoder.embed.token_type.weight": tensors.take(embeddings + "token_type_embeddings.weight")}
    out |= tensors.linear("encoder.embed.norm", embeddings + "LayerNorm")
    for i in range(config.num_encoder_layers):
        ours, theirs = f"encoder.layers.{i}.", f"bert.encoder.layer.{i}."
        for mine, hf in (("self_attn.W_q", "attention.self.query"), ("self_attn.W_k", "attention.self.key"),
                         ("self_attn.W_v", "attention.self.value"), ("self_attn.W_o", "attention.output.dense"),
                         ("attn_residual.norm", "attention.output.LayerNorm"),
                         ("feed_forward.linear1", "intermediate.dense"), ("feed_forward.linear2", "output.dense"),
                         ("ff_residual.norm", "output.LayerNorm")):
            out |= tensors.linear(ours + mine, theirs + hf)
    out |= tensors.linear("head.dense", "cls.predictions.transform.dense")
    out |= tensors.linear("head.norm", "cls.predictions.transform.LayerNorm")
    out["generator.weight"] = (tensors.take("cls.predictions.decoder.weight")
                               if tensors.has("cls.predictions.decoder.weight") else out["encoder.embed.token.weight"])
    out["generator.bias"] = tensors.take("cls.predictions.bias", "cls.predictions.decoder.bias")
    if tensors.has("cls.predictions.decoder.bias"):  # a second copy of the same bias
        tensors.take("cls.predictions.decoder.bias")
    return tensors.finish(out)


FAMILY = Family("bert", ("bert",), "BertForMaskedLM", "fill-mask", config, state,
                ("Paris is the [MASK] of France.", "The cat sat on the [MASK]."))
