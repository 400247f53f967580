"""BART (transformers' BartForConditionalGeneration): Marian's post-LN encoder-decoder, with learned positions that
start at row 2 of their table and a LayerNorm on each stack's embeddings."""
from __future__ import annotations

from pathlib import Path

import torch

from ...model.config import TransformerConfig
from ..tokenizer import JsonTokenizer
from .family import Family, Fields, Tensors, build_config, refuse, seq2seq_state

BART_POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding's offset: its first two rows are never used


def config(hf: dict, tokenizer: JsonTokenizer, source: Path) -> TransformerConfig:
    field = Fields(hf, source)
    for encoder_side, decoder_side in (("encoder_attention_heads", "decoder_attention_heads"),
                                       ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf.get(encoder_side) != hf.get(decoder_side):
            raise refuse(source, "bart", f"{encoder_side} ({hf.get(encoder_side)}) differs from {decoder_side} "
                         f"({hf.get(decoder_side)}); our model has one value for both stacks")
    vocab, eos = field.size("vocab_size", 50265), field("eos_token_id", 2)
    return build_config(
        source, src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=field.size("d_model", 1024),
        num_heads=field.size("encoder_attention_heads", 16), num_encoder_layers=field.size("encoder_layers", 12),
        num_decoder_layers=field.size("decoder_layers", 12), d_ff=field.size("encoder_ffn_dim", 4096),
        dropout=field("dropout", 0.1, float), max_len=field.positions("max_position_embeddings", 1024),
        positional="learned", activation=field.activation("activation_function", "bart"),
        pad_id=field("pad_token_id", 1), bos_id=field("decoder_start_token_id", eos), eos_id=eos,
        tie_output_embedding=field("tie_word_embeddings", True, bool), share_embeddings=True,
        scale_embedding=field("scale_embedding", False, bool), position_offset=BART_POSITION_OFFSET,
        embedding_norm=True)


def state(config: TransformerConfig, tensors: Tensors) -> dict[str, torch.Tensor]:
    out = seq2seq_state(config, tensors)
    for side in ("encoder", "decoder"):
        out[f"{side}.embed.positional.embedding.weight"] = tensors.take(f"model.{side}.embed_positions.weight")
        out |= tensors.linear(f"{side}.embed.norm", f"model.{side}.layernorm_embedding")
    return tensors.finish(out)


FAMILY = Family("bart", ("bart",), "BartForConditionalGeneration", "translate", config, state,
                ("The quick brown fox jumps over the lazy dog.",))
