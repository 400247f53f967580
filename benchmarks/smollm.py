"""A random model of SmolLM2-135M's shape (a converted Llama-family model: decoder-only, 30 layers of 9 heads sharing 3
key/value heads, d_model 576, gated feed-forward of 1,536, RMSNorm, rotary positions, tied embeddings, a vocabulary of
49,152 tokens) at a 64-token prompt: Enter → attention view, the model view of its 270 heads (paged), capture of every
head ÷ the plain pass, and a server's peak memory.

The checkpoint folder is written once per run in the run's temporary folder (about 540 MB of float32 weights; never
committed): random weights (the timing does not depend on their values) and a tokenizer.json of 49,152 made-up words,
one token each, so that a prompt of 64 words is 64 tokens. The end token is never chosen, so every prompt is
continued by the app's full 20 tokens. --smoke writes a tiny model of the same layout instead.
"""
from __future__ import annotations

import random
import string
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import torch

from transformer import Transformer, TransformerConfig, capture, load_checkpoint
from transformer.io.checkpoint import JSON_TOKENIZER_FILE, ModelCard, model_memory
from transformer.io.convert import write_folder
from transformer.io.safety import MAX_LEN, MB

from .app_latency import checked, new_session, serving
from .common import Setup, result, side_by_side
from .memory import in_fresh_process

FIGURE = "SmolLM2-135M shape"
NAME = "random-smollm2-135m"
PROMPT_TOKENS = 64
ENTER_AT_MOST, MODEL_VIEW_AT_MOST = 1.5, 2.0  # seconds
CAPTURE_AT_MOST = 1.15  # every head's attention captured ÷ the plain pass
SERVER_AT_MOST_MB = 2048
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>")  # ids 0-3; 0 begins, ends and pads, as SmolLM2's

# SmolLM2-135M's config.json as the llama converter maps it (transformer.io.converters.llama.llama_config).
SMOLLM2_135M = TransformerConfig(
    src_vocab_size=49_152, tgt_vocab_size=49_152, d_model=576, num_heads=9, num_kv_heads=3, num_encoder_layers=0,
    num_decoder_layers=30, d_ff=1536, dropout=0.0, max_len=min(8192, MAX_LEN), norm_first=True, positional="rotary",
    activation="silu", pad_id=0, bos_id=0, eos_id=0, tie_output_embedding=True, layer_norm_eps=1e-5,
    scale_embedding=False, stacks="decoder-only", norm="rms", feed_forward="gated", feed_forward_bias=False,
    attention_bias="none", rope_theta=100_000.0)
SMOKE = replace(SMOLLM2_135M, src_vocab_size=512, tgt_vocab_size=512, d_model=36, num_decoder_layers=2, d_ff=48,
                max_len=128)


def word_tokenizer(size: int) -> bytes:
    """A tokenizer.json (the `tokenizers` library's) of `size` tokens: SPECIALS, then made-up lower-case words of 4 to
    9 letters, each one token ("▁" before it, as sentencepiece marks a word's start)."""
    import tokenizers  # as the app: only a converted model's folder needs it

    rng = random.Random(0)
    vocab = {token: i for i, token in enumerate(SPECIALS)}
    while len(vocab) < size:
        vocab.setdefault("▁" + "".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 9))), len(vocab))
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
    tokenizer.decoder = tokenizers.decoders.Metaspace()
    tokenizer.add_special_tokens(list(SPECIALS))
    return tokenizer.to_str().encode("utf-8")


def prompts(folder: Path, tokens: int) -> Iterator[str]:
    """Endless different prompts of exactly `tokens` tokens (a repeated one would be served from the app's cache)."""
    checkpoint = load_checkpoint(folder)
    vocab = range(len(SPECIALS), min(2000, checkpoint.config.tgt_vocab_size))
    words = [piece[1:] for piece in map(checkpoint.src_tokenizer.id_to_piece, vocab)]
    seed = 0
    while True:
        text = " ".join(random.Random(seed).choices(words, k=tokens))
        assert len(checkpoint.src_tokenizer.encode_with_specials(text)) == tokens, text
        yield text
        seed += 1


def smollm_checkpoint(setup: Setup) -> Path:
    """The random checkpoint, alone in its checkpoints folder (the app's), written once per run."""
    folder = setup.workdir / f"app-{NAME}" / NAME
    if folder.exists():
        return folder
    config = SMOKE if setup.smoke else SMOLLM2_135M
    torch.manual_seed(0)
    model = Transformer(config).eval()
    with torch.no_grad():
        model.generator.bias[config.eos_id] = -1e4  # never ends: every prompt is continued by the app's 20 tokens
    card = ModelCard(name=NAME, task="generate", data="none", parameters=model.num_parameters(),
                     description="Random weights of SmolLM2-135M's shape, for timing only.")
    folder.parent.mkdir(parents=True, exist_ok=True)
    write_folder(folder, model, card, {JSON_TOKENIZER_FILE: word_tokenizer(config.tgt_vocab_size)})
    return folder


def session_seconds(folder: Path, texts: Iterator[str], repeats: int) -> dict[str, float]:
    """Median seconds of a session's first run (the checkpoint loaded: every cache is cleared before), Enter on a new
    prompt (the attention view drawn) and the model view, over `repeats` fresh sessions after one to warm up: as
    benchmarks.app_latency measures them, with this tokenizer's prompts."""
    session = {}

    def open_session():
        session["app"] = new_session(folder.name, next(texts))

    interactions = {
        "first run": lambda: checked(session["app"].run()),
        "new input": lambda: checked(session["app"].text_input(key="text").set_value(next(texts)).run()),
        "model view": lambda: checked(session["app"].segmented_control(key="view").set_value("model").run()),
    }
    with serving(folder.parent):  # a folder holding this checkpoint alone
        return side_by_side(interactions, repeats, prepare={"first run": open_session})


def capture_ratio(folder: Path, repeats: int) -> tuple[float, dict[str, float]]:
    """A teacher-forced pass over PROMPT_TOKENS tokens with every head's attention captured ÷ the same pass plain."""
    model = load_checkpoint(folder).model
    ids = torch.randint(len(SPECIALS), model.config.tgt_vocab_size, (1, PROMPT_TOKENS),
                        generator=torch.Generator().manual_seed(0))

    def plain():
        return model(None, ids)

    def captured():
        with capture(model):
            return model(None, ids)

    with torch.no_grad():
        torch.testing.assert_close(captured(), plain())  # capture changes no output
        seconds = side_by_side({"plain": plain, "all": captured}, repeats)
    return seconds["all"] / seconds["plain"], seconds


def measure(setup: Setup) -> list[dict]:
    folder = smollm_checkpoint(setup)
    config = load_checkpoint(folder).config
    heads = config.num_decoder_layers * config.num_heads
    shape = f"{config.num_decoder_layers} × {config.num_heads} heads, {PROMPT_TOKENS}-token prompt"
    texts = prompts(folder, PROMPT_TOKENS)
    seconds = session_seconds(folder, texts, max(1, setup.repeats - 2))
    ratio, passes = capture_ratio(folder, setup.repeats)
    server = in_fresh_process("app", folder, next(texts))
    estimate = model_memory(config)
    return [
        result(FIGURE, f"Enter → attention view, {shape} (+ 20 continued)", seconds["new input"], "s",
               at_most=ENTER_AT_MOST),
        result(FIGURE, f"model view ({heads} heads, paged), {shape}", seconds["model view"], "s",
               at_most=MODEL_VIEW_AT_MOST),
        result(FIGURE, f"a session's first run (the checkpoint loaded), {shape}", seconds["first run"], "s"),
        result(FIGURE, f"capture of every head ÷ the plain pass, {PROMPT_TOKENS} tokens, batch 1", ratio, "×",
               at_most=CAPTURE_AT_MOST, plain_s=passes["plain"], captured_s=passes["all"]),
        result(FIGURE, f"server's peak RSS: one app session (first run and model view), {shape}", server["peak_mb"],
               "MB", at_most=SERVER_AT_MOST_MB),
        result(FIGURE, "the model's memory estimate (weights and longest pass, before loading)",
               estimate.total / MB, "MB", parameters=estimate.parameters, weights_mb=estimate.weights / MB,
               pass_tokens=estimate.pass_tokens),
    ]
