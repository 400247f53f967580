"""Marian (transformers' MarianMTModel, the opus-mt models): the architecture this project implements (post-LN
encoder-decoder, sinusoidal positions), so its weights go into our own model unchanged. Its tokenizer is two
sentencepiece models numbered by vocab.json (and target_vocab.json where the vocabularies are separate)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ...model.config import TransformerConfig
from ...model.positional import sinusoidal_table
from ..checkpoint import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE, VOCAB_FILES, CheckpointError
from ..safety import MAX_TOKENIZER_BYTES, read_bytes, read_json
from ..tokenizer import VocabTokenizer
from .family import Family, Fields, ReadTokenizer, Tensors, build_config, read_json_object, refuse, seq2seq_state

# Switches of older Marian configs that, when on, mean a layout our model does not compute.
UNSUPPORTED_SWITCHES = {"normalize_before": "pre-LN layers", "add_final_layer_norm": "a final LayerNorm per stack",
                        "normalize_embedding": "a LayerNorm on the embeddings",
                        "add_bias_logits": "a logits bias layer"}
EXAMPLES = {"en": ("I am cold.", "She is reading a book.", "Where is the station?",
                   "The children are playing in the garden.", "We will go to the beach tomorrow.")}  # by source_lang


@dataclass(frozen=True)
class Vocabularies:
    """Marian's source and target tokenizers, and whether tokenizer_config.json says they are separate."""

    src: VocabTokenizer
    tgt: VocabTokenizer
    separate: bool
    folder: Path

    @property
    def vocab_size(self) -> int:
        """The pieces the output reads (the target side's)."""
        return self.tgt.vocab_size

    @property
    def path(self) -> Path:
        return self.tgt.vocab_path


def tokenizer(folder: Path) -> ReadTokenizer:
    """source.spm and target.spm, each numbered by its vocabulary, read under the loading policy; the card's examples
    in the source language (tokenizer_config.json's source_lang) where there are some."""
    settings = folder / "tokenizer_config.json"
    settings = read_json_object(settings, folder) if settings.exists() else {}
    separate = bool(settings.get("separate_vocabs", False))
    files, tokenizers = {}, {}
    for file, spm, vocab in ((SRC_TOKENIZER_FILE, "source.spm", "vocab.json"),
                             (TGT_TOKENIZER_FILE, "target.spm", "target_vocab.json" if separate else "vocab.json")):
        spm_path, vocab_path = folder / spm, folder / vocab
        files[file] = read_bytes(spm_path, folder, MAX_TOKENIZER_BYTES)
        files[VOCAB_FILES[file]] = read_bytes(vocab_path, folder, MAX_TOKENIZER_BYTES)
        try:
            tokenizers[file] = VocabTokenizer(spm_path, vocab_path, files[file],
                                              read_json(vocab_path, folder, MAX_TOKENIZER_BYTES))
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{spm_path}: {error}") from None
    source_lang, target_lang = (str(settings.get(name) or "") for name in ("source_lang", "target_lang"))
    return ReadTokenizer(files, Vocabularies(tokenizers[SRC_TOKENIZER_FILE], tokenizers[TGT_TOKENIZER_FILE], separate,
                                             folder),
                         f"{source_lang} → {target_lang}" if source_lang and target_lang else "",
                         EXAMPLES.get(source_lang.split("_")[0], ()))


def config(hf: dict, vocabularies: Vocabularies, source: Path) -> TransformerConfig:
    field = Fields(hf, source)
    for name, what in UNSUPPORTED_SWITCHES.items():
        if field(name, False, bool):
            raise refuse(source, "marian", f"{name} is on ({what}), which Marian's layout and ours do not have")
    if not field("static_position_embeddings", True, bool):
        raise refuse(source, "marian", "static_position_embeddings is off (learned positions)")
    for encoder_side, decoder_side in (("encoder_attention_heads", "decoder_attention_heads"),
                                       ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf.get(encoder_side) != hf.get(decoder_side):
            raise refuse(source, "marian", f"{encoder_side} ({hf.get(encoder_side)}) differs from {decoder_side} "
                         f"({hf.get(decoder_side)}); our model has one value for both stacks")
    shared = field("share_encoder_decoder_embeddings", True, bool)
    vocab_size, pad_id = field("vocab_size", 58101), field.required("pad_token_id")
    ours = build_config(
        source, src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size if shared else field("decoder_vocab_size", 0) or vocab_size,
        d_model=field.required("d_model"), num_heads=field.required("encoder_attention_heads"),
        num_encoder_layers=field.required("encoder_layers"), num_decoder_layers=field.required("decoder_layers"),
        d_ff=field.required("encoder_ffn_dim"), dropout=field("dropout", 0.1, float),
        max_len=field("max_position_embeddings", 1024), activation=field.activation("activation_function", "marian"),
        pad_id=pad_id, bos_id=field("decoder_start_token_id", pad_id),  # Marian starts decoding with its pad id
        eos_id=field.required("eos_token_id"), tie_output_embedding=field("tie_word_embeddings", True, bool),
        share_embeddings=shared, scale_embedding=field("scale_embedding", False, bool), positional_layout="halves")
    check_vocabularies(vocabularies, ours)
    return ours


def check_vocabularies(vocabularies: Vocabularies, config: TransformerConfig) -> None:
    """CheckpointError naming the file where the tokenizers and config.json disagree: shared or separate, the number
    of pieces, the pieces at the pad and eos ids."""
    if vocabularies.separate == config.share_embeddings:
        raise CheckpointError(f"{vocabularies.folder / 'tokenizer_config.json'}: separate_vocabs is "
                              f"{vocabularies.separate}, but config.json's share_encoder_decoder_embeddings is "
                              f"{config.share_embeddings}")
    for tokenizer, size in ((vocabularies.src, config.src_vocab_size), (vocabularies.tgt, config.tgt_vocab_size)):
        if tokenizer.vocab_size != size:
            raise CheckpointError(f"{tokenizer.vocab_path}: {tokenizer.vocab_size} pieces, but config.json says {size}")
        for name, token_id, piece in (("pad", config.pad_id, "<pad>"), ("eos", config.eos_id, "</s>")):
            if tokenizer.id_to_piece(token_id) != piece:
                raise CheckpointError(f"{tokenizer.vocab_path}: id {token_id} ({name}_token_id in config.json) is "
                                      f"{tokenizer.id_to_piece(token_id)!r}, not {piece!r}")


def state(config: TransformerConfig, tensors: Tensors) -> dict[str, torch.Tensor]:
    out = seq2seq_state(config, tensors)
    for side in ("encoder", "decoder"):
        positions = f"model.{side}.embed_positions.weight"
        if tensors.has(positions):  # older files store the (fixed) sinusoids: they must be the ones we compute
            stored = tensors.take(positions)
            table = sinusoidal_table(stored.size(0), config.d_model, "halves")
            if stored.shape != table.shape or not torch.allclose(stored.float(), table, atol=1e-4):
                raise CheckpointError(f"{tensors.source}: {positions} is not Marian's sinusoidal table")
    for on, first, second, what in (
            (config.share_embeddings, "encoder.embed.token.weight", "decoder.embed.token.weight",
             "shared encoder and decoder embeddings"),
            (config.tie_output_embedding, "decoder.embed.token.weight", "generator.weight",
             "an output projection tied to the decoder embedding")):
        if on and (out[first].shape != out[second].shape or not torch.equal(out[first], out[second])):
            raise CheckpointError(f"{tensors.source}: config.json asks for {what}, but the weights differ")
    return tensors.finish(out)


FAMILY = Family("marian", ("marian",), "MarianMTModel", "translate", config, state, tokenizer=tokenizer)
