"""Decoding: greedy and beam-4 tokens per second with the key/value cache ÷ without it, at 40 output tokens."""
from __future__ import annotations

import copy

import torch

from transformer import beam_search, greedy, load_checkpoint

from .common import Setup, result, side_by_side
from .fixtures import random_ids, widened

FIGURE = "decoding"
OUTPUT_TOKENS = 40
AT_LEAST = 2.0


def measure(setup: Setup) -> list[dict]:
    model = widened(load_checkpoint(setup.checkpoint).model, OUTPUT_TOKENS + 1)
    endless = copy.deepcopy(model)  # the same compute, but EOS is never chosen: every output has 40 tokens
    with torch.no_grad():
        endless.generator.bias[model.config.eos_id] = -1e4
    src, _ = random_ids(model.config, 1, OUTPUT_TOKENS)
    src[:, -1] = model.config.eos_id
    searches = {"greedy": lambda use_cache: greedy(endless, src, OUTPUT_TOKENS + 1, use_cache=use_cache),
                "beam-4": lambda use_cache: beam_search(endless, src, 4, OUTPUT_TOKENS + 1, use_cache=use_cache)}
    rows = []
    for name, search in searches.items():
        assert torch.equal(search(True), search(False))  # the cache changes no token
        seconds = side_by_side({"cached": lambda: search(True), "uncached": lambda: search(False)},
                               repeats=setup.repeats)
        rows.append(result(FIGURE, f"{name}, tokens/s with cache ÷ without, {OUTPUT_TOKENS} output tokens",
                           seconds["uncached"] / seconds["cached"], "×", at_least=AT_LEAST,
                           cached_tokens_per_s=OUTPUT_TOKENS / seconds["cached"],
                           uncached_tokens_per_s=OUTPUT_TOKENS / seconds["uncached"],
                           model=f"{setup.checkpoint.name} weights, EOS disabled"))
    return rows
