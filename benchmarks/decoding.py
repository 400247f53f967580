"""Decoding: greedy and beam-4 tokens per second with the key/value cache ÷ without it, at 40 output tokens; and
greedy decoding with its guesses of the next tokens ÷ one token per decoder call, on the card's example sentences
and on the 256-token output of the random 6 x 8 model (which repeats itself, as the model view's benchmark has it)."""
from __future__ import annotations

import copy
import functools

import torch

from transformer import Checkpoint, beam_search, greedy, load_checkpoint
from transformer.inference.decoding import output_limit
from transformer.io.text import source_ids

from .common import Setup, result, side_by_side
from .fixtures import distinct_texts, random_ids, wide_checkpoints, widened

FIGURE = "decoding"
OUTPUT_TOKENS = 40
AT_LEAST = 2.0


def measure(setup: Setup) -> list[dict]:
    checkpoint = load_checkpoint(setup.checkpoint)
    return cache_rows(setup, checkpoint) + guess_rows(setup, checkpoint)


def cache_rows(setup: Setup, checkpoint: Checkpoint) -> list[dict]:
    model = widened(checkpoint.model, OUTPUT_TOKENS + 1)
    endless = copy.deepcopy(model)  # the same compute, but EOS is never chosen: every output has 40 tokens
    with torch.no_grad():
        endless.generator.bias[model.config.eos_id] = -1e4
    src, _ = random_ids(model.config, 1, OUTPUT_TOKENS)
    src[:, -1] = model.config.eos_id
    # One token per call in both: the cache alone is measured.
    searches = {"greedy": lambda use_cache: greedy(endless, src, OUTPUT_TOKENS + 1, use_cache=use_cache, guess=False),
                "beam-4": lambda use_cache: beam_search(endless, src, 4, OUTPUT_TOKENS + 1, use_cache=use_cache)}
    rows = []
    for name, search in searches.items():
        assert torch.equal(search(True), search(False))  # the cache changes no token
        seconds = side_by_side({"cached": functools.partial(search, True),
                                "uncached": functools.partial(search, False)},
                               repeats=setup.repeats)
        rows.append(result(FIGURE, f"{name}, tokens/s with cache ÷ without, {OUTPUT_TOKENS} output tokens",
                           seconds["uncached"] / seconds["cached"], "×", at_least=AT_LEAST,
                           cached_tokens_per_s=OUTPUT_TOKENS / seconds["cached"],
                           uncached_tokens_per_s=OUTPUT_TOKENS / seconds["uncached"],
                           model=f"{setup.checkpoint.name} weights, EOS disabled"))
    return rows


def guess_rows(setup: Setup, examples: Checkpoint) -> list[dict]:
    tokens, path = max(wide_checkpoints(setup).items())
    repeating = load_checkpoint(path)
    cases = {f"{setup.checkpoint.name}, its card's {len(examples.card.examples)} examples one at a time":
             (examples, examples.card.examples),
             f"{repeating.path.name}, one {tokens}-token input (its output repeats itself)":
             (repeating, [next(distinct_texts(repeating.src_tokenizer, tokens))])}
    rows = []
    for case, (checkpoint, texts) in cases.items():
        sources = [torch.tensor([source_ids(checkpoint.src_tokenizer, text, checkpoint.config.max_len)[0]])
                   for text in texts]

        def decode(guess: bool, checkpoint=checkpoint, sources=sources) -> list[torch.Tensor]:
            return [greedy(checkpoint.model, src, output_limit(src.size(1)), guess=guess) for src in sources]

        assert all(map(torch.equal, decode(True), decode(False)))  # the guesses change no token
        seconds = side_by_side({"guessing": lambda: decode(True), "one at a time": lambda: decode(False)},
                               repeats=setup.repeats)
        rows.append(result(FIGURE, f"greedy, guessing ÷ one token per call, {case}",
                           seconds["one at a time"] / seconds["guessing"], "×",
                           guessing_s=seconds["guessing"], one_at_a_time_s=seconds["one at a time"]))
    return rows
