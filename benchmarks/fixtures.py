"""Models, checkpoint folders and inputs of exact sizes for the benchmarks."""
from __future__ import annotations

import itertools
import random
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import torch

from transformer import Transformer, TransformerConfig
from transformer.io.checkpoint import ModelCard, save_checkpoint
from transformer.io.text import source_ids
from transformer.io.tokenizer import Tokenizer

from .common import Setup

CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def char_tokenizer(folder: Path) -> Tokenizer:
    """A character-level sentencepiece model over lowercase letters and digits: n characters are n tokens."""
    rotations = [CHARACTERS[i:] + CHARACTERS[:i] for i in range(len(CHARACTERS))]
    return Tokenizer.train(rotations, folder / "characters.model", vocab_size=64, model_type="char",
                           add_dummy_prefix=False)


def random_checkpoint(path: Path, config: TransformerConfig, tokenizer: Tokenizer, *, endless: bool = False) -> Path:
    """A checkpoint folder with random weights, for timing only. endless: EOS is never chosen, so every output
    runs to max_len and its length is known in advance."""
    torch.manual_seed(0)
    model = Transformer(config).eval()
    if endless:
        with torch.no_grad():
            model.generator.bias[config.eos_id] = -1e4
    card = ModelCard(name=path.name, task="benchmark", description="Random weights, for timing only.",
                     data="none", examples=[text_of(tokenizer, 3)])
    save_checkpoint(path, model, card, tokenizer, tokenizer)
    return path


def tiny_config(vocab_size: int, max_len: int) -> TransformerConfig:
    """The smoke test's model: seconds of work for every benchmark."""
    return TransformerConfig(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=32, num_heads=2,
                             num_encoder_layers=1, num_decoder_layers=1, d_ff=64, max_len=max_len,
                             share_embeddings=True)


def wide_config(vocab_size: int, max_len: int) -> TransformerConfig:
    """eng-fra's width with 6 + 6 layers of 8 heads: the model view's largest grid, as its targets size it."""
    return TransformerConfig(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=256, num_heads=8,
                             num_encoder_layers=6, num_decoder_layers=6, d_ff=512, max_len=max_len,
                             share_embeddings=True)


def widened(model: Transformer, max_len: int) -> Transformer:
    """The same weights in a model that reads `max_len` tokens: the sinusoidal encoding has no weights, only a
    longer table. (A learned encoding has no rows for the new positions: load_state_dict refuses it.)"""
    if max_len <= model.config.max_len:
        return model
    wide = Transformer(replace(model.config, max_len=max_len))
    wide.load_state_dict(model.state_dict())
    return wide.eval()


def token_count(tokenizer: Tokenizer, text: str) -> int:
    return len(source_ids(tokenizer, text, 1 << 30)[0])


def text_of(tokenizer: Tokenizer, tokens: int, seed: int = 0) -> str:
    """A random input the tokenizer turns into exactly `tokens` source ids (EOS included): whole-word pieces
    joined by spaces for a sentencepiece vocabulary of words, single characters for a character vocabulary."""
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    words = [piece[1:] for piece in pieces if piece.startswith("▁") and piece[1:].isalpha() and len(piece) > 3]
    units, separator = (words, " ") if words else ([p for p in pieces if p in CHARACTERS], "")
    rng = random.Random(seed)
    chosen: list[str] = []
    for _ in range(50 * tokens):  # bounded: nearly every unit is one token, so this ends in about `tokens` tries
        if token_count(tokenizer, separator.join(chosen)) == tokens:
            return separator.join(chosen)
        longer = chosen + [rng.choice(units)]
        if token_count(tokenizer, separator.join(longer)) <= tokens:
            chosen = longer
    raise RuntimeError(f"could not write an input of exactly {tokens} tokens with {tokenizer}")


def distinct_texts(tokenizer: Tokenizer, tokens: int) -> Iterator[str]:
    """Endless different inputs of `tokens` tokens: a repeated input would be served from the app's cache."""
    return (text_of(tokenizer, tokens, seed) for seed in itertools.count())


def random_ids(config: TransformerConfig, batch: int, tokens: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, tgt) of `tokens` ids each, no padding, tgt starting with BOS: a teacher-forced pass's input."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, config.src_vocab_size, (batch, tokens), generator=generator)
    tgt = torch.randint(4, config.tgt_vocab_size, (batch, tokens), generator=generator)
    tgt[:, 0] = config.bos_id
    return src, tgt


def app_folder(setup: Setup, checkpoint: Path) -> Path:
    """A checkpoints folder holding only a copy of `checkpoint`: the app loads every folder it finds, and a
    trainer writing into the original must not change what is measured."""
    folder = setup.workdir / f"app-{checkpoint.name}"
    if not folder.exists():
        shutil.copytree(checkpoint, folder / checkpoint.name, ignore=shutil.ignore_patterns("resume.pt"))
    return folder


def wide_checkpoints(setup: Setup) -> dict[int, Path]:
    """Random 6 x 8-head checkpoints (tiny ones in smoke mode) whose inputs and outputs have exactly n tokens each
    (max_len n + 1, EOS never chosen), for the lengths the app and the browser are measured at. Each sits alone in
    its own checkpoints folder; made once per run."""
    tokenizer = char_tokenizer(setup.workdir)
    paths = {}
    for tokens in (8, 16) if setup.smoke else (32, 256):
        config = (tiny_config if setup.smoke else wide_config)(tokenizer.vocab_size, tokens + 1)
        name = f"random-{config.num_encoder_layers}x{config.num_heads}-{tokens}"
        paths[tokens] = setup.workdir / f"app-{name}" / name
        if not paths[tokens].exists():
            random_checkpoint(paths[tokens], config, tokenizer, endless=True)
    return paths
