"""Capture overhead: a teacher-forced pass with attention captured ÷ the plain pass (fused attention)."""
from __future__ import annotations

import torch

from transformer import capture, load_checkpoint

from .common import Setup, result, side_by_side
from .fixtures import random_ids, widened

FIGURE = "capture overhead"
TARGET_TOKENS = 64  # the length the targets are set at (eng-fra's max_len)
ALL_AT_MOST, ONE_LAYER_AT_MOST = 1.25, 1.05
ONE_LAYER = ["decoder.layers.0.self_attn", "decoder.layers.0.cross_attn"]  # every attention block of one decoder layer


def measure(setup: Setup) -> list[dict]:
    lengths, batches = ((16, 64), (1, 2)) if setup.smoke else ((16, 64, 256, 512), (1, 16))
    checkpoint = load_checkpoint(setup.checkpoint)
    model = widened(checkpoint.model, max(lengths))
    note = (f"{setup.checkpoint.name} weights" + (f", positions widened from max_len {checkpoint.config.max_len} "
            f"(sinusoidal: no weights)" if model is not checkpoint.model else ""))
    rows = []
    for tokens in lengths:
        for batch in batches:
            src, tgt = random_ids(model.config, batch, tokens)

            def plain(src=src, tgt=tgt):
                return model(src, tgt)

            def captured(names=None, src=src, tgt=tgt):
                with capture(model, names):
                    return model(src, tgt)

            with torch.no_grad():
                torch.testing.assert_close(captured(), plain(), atol=1e-4, rtol=1e-4)  # capture changes no output
                seconds = side_by_side({"plain": plain, "all": captured, "one layer": lambda: captured(ONE_LAYER)},
                                       repeats=setup.repeats if tokens < 512 else max(1, setup.repeats - 2))
            at_target = tokens == TARGET_TOKENS
            for name, label, limit in (("all", "all attention", ALL_AT_MOST),
                                       ("one layer", "one decoder layer", ONE_LAYER_AT_MOST)):
                rows.append(result(FIGURE, f"{label}, {tokens} tokens, batch {batch}", seconds[name] / seconds["plain"],
                                   "×", at_most=limit if at_target else None, tokens=tokens, batch=batch,
                                   plain_s=seconds["plain"], captured_s=seconds[name], model=note,
                                   series=f"capture {label}, batch {batch} (×)"))
    return rows
