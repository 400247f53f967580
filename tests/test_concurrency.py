"""Many users at once: 32 threads × 20 mixed calls over one shared checkpoint, each result exactly the one the same
call gives alone. Capture and ablation live in a ContextVar, so no call may see another's
(transformer/model/hooks.py)."""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest
import torch

from helpers import run_together
from transformer import ablate, capture, decode_steps, load_checkpoint

THREADS, CALLS_PER_THREAD = 32, 20
TEXTS = ("abc12", "attention42", "z", "0123456789", "lecture2026", "q1w2e3r4t5y6", "mmmm", "ab€")
ABLATIONS = (({"decoder.layers.0.cross_attn": [0, 2]}, "zero"), ({"encoder.layers.0.self_attn": [1]}, "mean"),
             ({"decoder.layers.0.self_attn": [3]}, "zero"))
DECODE_LEN = 12  # enough steps to interleave with other threads, few enough to keep 640 calls quick


def translation(checkpoint, text: str, beam_size: int) -> list:
    result = checkpoint.translate(text, beam_size=beam_size, max_len=DECODE_LEN)
    return [result.text, result.src_ids, result.tgt_ids, result.output_tokens, result.probs, result.warnings,
            dict(result.attention.hooks)]


def greedy(checkpoint, text: str, index: int) -> list:
    return translation(checkpoint, text, 1)


def beam(checkpoint, text: str, index: int) -> list:
    return translation(checkpoint, text, 3)


def ablated(checkpoint, text: str, index: int) -> list:
    heads, mode = ABLATIONS[index % len(ABLATIONS)]
    with ablate(checkpoint.model, heads, mode):
        return translation(checkpoint, text, 1)


def teacher_forced(checkpoint, text: str, index: int) -> list:
    """A captured pass over the text and, as decoder input, the text reversed (what the model should output)."""
    model = checkpoint.model
    src = torch.tensor([checkpoint.encode(text)])
    tgt = torch.tensor([checkpoint.encode(text[::-1], side="tgt")[:-1]])
    with torch.no_grad(), capture(model) as record:
        logits = model(src, tgt)
    return [logits, dict(record.hooks)]


def step_by_step(checkpoint, text: str, index: int) -> list:
    src = torch.tensor([checkpoint.encode(text)])
    return [[step.prefix, step.token_id, step.prob, step.top, step.cross_attention]
            for step in decode_steps(checkpoint.model, src, max_len=DECODE_LEN)]


KINDS: tuple[Callable, ...] = (greedy, beam, ablated, teacher_forced, step_by_step)
CALLS = [(kind, text, index) for index, text in enumerate(TEXTS) for kind in KINDS]  # 40 different calls


def same(got, expected) -> bool:
    """Exactly equal, tensors included (bit for bit: one intra-op thread makes every kernel deterministic)."""
    if isinstance(expected, torch.Tensor):
        return isinstance(got, torch.Tensor) and got.dtype == expected.dtype and torch.equal(got, expected)
    if isinstance(expected, dict):
        return got.keys() == expected.keys() and all(same(got[key], expected[key]) for key in expected)
    if isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(same(a, b) for a, b in zip(got, expected))
    return got == expected


@pytest.fixture
def one_intra_op_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_32_threads_share_one_checkpoint(tiny_checkpoint, one_intra_op_thread):
    checkpoint = load_checkpoint(tiny_checkpoint)
    expected = [kind(checkpoint, text, index) for kind, text, index in CALLS]  # one at a time
    plans = [random.Random(thread).choices(range(len(CALLS)), k=CALLS_PER_THREAD) for thread in range(THREADS)]
    results: dict[tuple[int, int], list] = {}
    in_flight, most_in_flight = [0], [0]
    lock = threading.Lock()

    def worker(thread: int) -> None:
        for position, call in enumerate(plans[thread]):
            with lock:
                in_flight[0] += 1
                most_in_flight[0] = max(most_in_flight[0], in_flight[0])
            kind, text, index = CALLS[call]
            results[thread, position] = kind(checkpoint, text, index)
            with lock:
                in_flight[0] -= 1

    run_together(worker, THREADS)
    assert most_in_flight[0] > 1  # they did run at the same time
    assert len(results) == THREADS * CALLS_PER_THREAD
    kinds_run = {CALLS[call][0] for plan in plans for call in plan}
    assert kinds_run == set(KINDS)
    for (thread, position), result in results.items():
        call = plans[thread][position]
        assert same(result, expected[call]), (thread, position, CALLS[call][0].__name__, CALLS[call][1])


TURN_TEXTS = ("turns1", "turns22", "turns333", "turns4444", "turn5", "turn66", "turn777", "turn8888")


@pytest.mark.parametrize("turns", [1, 2])
def test_the_apps_passes_take_turns_at_the_model(tiny_checkpoint, one_intra_op_thread, monkeypatch, turns):
    """Eight sessions asking for new passes at once: no more than `turns` of them run the model at a time (twenty
    threads all running the model finish fewer passes than two at a time), and every pass finishes, a pass that asks
    for another pass inside (the decoding view's) included."""
    import ui.passes
    import ui.shared
    import ui.turns
    from transformer import Transformer
    from ui.model_pass import TRANSLATE
    from ui.views.decoding import DECODING_STEPS

    ui.shared.clear()
    monkeypatch.setattr(ui.shared, "MODEL", ui.turns.Turns(turns))
    in_model, most_in_model = [0], [0]
    lock = threading.Lock()
    decode = Transformer.decode

    def slow_decode(self, *args, **kwargs):
        with lock:
            in_model[0] += 1
            most_in_model[0] = max(most_in_model[0], in_model[0])
        time.sleep(0.005)  # long enough for the other threads to come in, if nothing holds them back
        try:
            return decode(self, *args, **kwargs)
        finally:
            with lock:
                in_model[0] -= 1

    monkeypatch.setattr(Transformer, "decode", slow_decode)
    path, version = str(tiny_checkpoint), 0
    checkpoint = ui.passes.load(path, version).checkpoint

    def session(i: int) -> None:
        text = TURN_TEXTS[i]
        if i % 2:
            ui.passes.run(TRANSLATE, path, version, text=text, beam_size=1)
        else:
            ui.passes.run(DECODING_STEPS, path, version, src_ids=tuple(checkpoint.encode(text)))

    run_together(session, len(TURN_TEXTS))
    assert most_in_model[0] == turns
    ui.shared.clear()

