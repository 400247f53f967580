"""Translations decoded together (Checkpoint.translate_batch, transformer.inference.batching.Batcher) are exactly those
decoded alone: the same tokens, the same probabilities, the same attention bit for bit, for inputs of mixed lengths and
limits, mixed beam sizes and two checkpoints; and each caller gets its own result or its own error."""
from __future__ import annotations

import threading

import pytest
import torch

from helpers import ROOT, WAIT_S, wait_until
from transformer import load_checkpoint
from transformer.inference.batching import Batcher, Cancelled
from transformer.inference.translation import Checkpoint

# Mixed lengths; two of noise that the model never ends (they stop at their own limits, 2 x length + 10, while the
# batch goes on for longer ones), and one longer than anything it trained on.
TEXTS = ("I am cold.", "Where is the station?", "zzz zzz zzz zzz zzz zzz zzz", "He bought a red car.",
         "ab12cd34ef56gh78ij90kl", "The children are playing in the garden.", "Do you speak French?",
         "I I I I I I I I I I I I I I I I I I I I I I I I I I I I I", "Tom is taller than Mary.")
REVERSE_TEXTS = ("abc12", "attention42", "z", "0123456789", "lecture2026")


@pytest.fixture(scope="module")
def eng_fra() -> Checkpoint:
    return load_checkpoint(ROOT / "checkpoints" / "eng-fra")


@pytest.fixture(scope="module")
def reverse() -> Checkpoint:
    return load_checkpoint(ROOT / "checkpoints" / "reverse")


@pytest.fixture(autouse=True)
def one_intra_op_thread():
    """One thread: every kernel sums in one order, so results compare bit for bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def same(got, expected) -> None:
    """Everything a Translation holds equal, its attention record's tensors bit for bit."""
    assert (got.text, got.src_ids, got.tgt_ids, got.output_ids, got.output_tokens, got.src_typed, got.warnings) == (
        expected.text, expected.src_ids, expected.tgt_ids, expected.output_ids, expected.output_tokens,
        expected.src_typed, expected.warnings)
    assert got.probs == expected.probs
    hooks, expected_hooks = got.attention.hooks, expected.attention.hooks
    assert hooks.keys() == expected_hooks.keys()
    for name, tensor in expected_hooks.items():
        assert hooks[name].dtype == tensor.dtype and torch.equal(hooks[name], tensor), name


@pytest.mark.parametrize("beam_size", [1, 4])  # greedy; the card's beam search with its coverage penalty
def test_a_batch_of_mixed_lengths_is_decoded_as_each_alone(eng_fra, beam_size):
    alone = [eng_fra.translate(text, beam_size=beam_size) for text in TEXTS]
    assert any(w.code.startswith("unended") for t in alone for w in t.warnings)  # some rows stop at their limit
    assert len({len(t.tgt_ids) for t in alone}) > 3
    together = eng_fra.translate_batch([eng_fra.prepare(text, beam_size) for text in TEXTS])
    for got, expected in zip(together, alone):
        same(got, expected)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_each_input_keeps_its_own_max_len(eng_fra, beam_size):
    """Limits that cut outputs short, the repetitive ones among them (greedy decoding guesses their next tokens,
    several per step: a row must not keep guesses past its own limit)."""
    texts = TEXTS[2:] + TEXTS[2:]
    limits = (4, 64, 9, 12, 7, 15, 20, 30, 11, 13, 6, 40, 17, 5)
    alone = [eng_fra.translate(text, beam_size=beam_size, max_len=limit) for text, limit in zip(texts, limits)]
    together = eng_fra.translate_batch([eng_fra.prepare(text, beam_size, limit)
                                        for text, limit in zip(texts, limits)])
    for got, expected in zip(together, alone):
        same(got, expected)


def test_a_batch_runs_one_beam_size(eng_fra):
    with pytest.raises(ValueError, match="one beam size"):
        eng_fra.translate_batch([eng_fra.prepare(TEXTS[0], 1), eng_fra.prepare(TEXTS[1], 4)])


def requests(eng_fra, reverse) -> list[tuple[Checkpoint, str, int]]:
    """Requests that must not share a batch with all of the others, interleaved: two checkpoints, greedy and beam
    search."""
    on_eng_fra = [(eng_fra, text, beam) for beam in (1, 4) for text in TEXTS]
    on_reverse = [(reverse, text, beam) for beam in (1, 3) for text in REVERSE_TEXTS]
    return [call for pair in zip(on_eng_fra, on_reverse * 2) for call in pair] + on_eng_fra[len(on_reverse) * 2:]


def test_16_threads_get_what_each_request_gives_alone(eng_fra, reverse, monkeypatch):
    calls = requests(eng_fra, reverse)
    alone = [checkpoint.translate(text, beam_size=beam) for checkpoint, text, beam in calls]
    batched = []  # (checkpoint, beam sizes) of each batch decoded
    decode_batch = Checkpoint.decode_batch

    def recorded(self, batch, model=None):
        batched.append((self, [request.beam_size for request in batch]))
        return decode_batch(self, batch, model)

    monkeypatch.setattr(Checkpoint, "decode_batch", recorded)
    batcher, turn = waiting_batcher()
    results = {}

    def worker(thread: int) -> None:
        for index in range(thread, len(calls), 16):  # each thread asks for every 16th request, in turn
            checkpoint, text, beam = calls[index]
            results[index] = batcher.translate(checkpoint, checkpoint.prepare(text, beam))

    threads = [threading.Thread(target=worker, args=(thread,)) for thread in range(16)]
    for thread in threads:
        thread.start()
    release(batcher, turn, 16)  # the first 16 requests, of both checkpoints and three beam sizes, all wait at once
    finish(threads)
    assert sorted(results) == list(range(len(calls)))
    for index, expected in enumerate(alone):
        same(results[index], expected)
    assert max(batcher.batches) > 1  # they did meet
    assert all(len(set(beams)) == 1 for _, beams in batched)
    assert {checkpoint for checkpoint, _ in batched} == {eng_fra, reverse}


def waiting_batcher(**options) -> tuple[Batcher, threading.Lock]:
    """A Batcher whose turn the test holds: requests queue until it lets go (`release`), then run together."""
    turn = threading.Lock()
    turn.acquire()
    return Batcher(turn=lambda: turn, **options), turn


def start(batcher: Batcher, checkpoint, texts, outcomes: dict, **options) -> list[threading.Thread]:
    def ask(text: str) -> None:
        try:
            outcomes[text] = batcher.translate(checkpoint, checkpoint.prepare(text, 1), **options.get(text, {}))
        except Exception as error:
            outcomes[text] = error

    threads = [threading.Thread(target=ask, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    return threads


def release(batcher: Batcher, turn: threading.Lock, queued: int) -> None:
    """Let the batches run once `queued` requests wait."""
    wait_until(lambda: batcher.waiting == queued, f"{queued} requests waiting for their batch")
    turn.release()


def finish(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(timeout=WAIT_S)
        assert not thread.is_alive(), "a caller was left waiting"


def test_an_error_reaches_only_its_own_caller(eng_fra, monkeypatch):
    """One input breaks the decoding of its batch, another its own capture; an empty one is refused at once."""
    breaks_decoding, breaks_capture = TEXTS[1], TEXTS[3]
    decode, explained = Checkpoint._decode, Checkpoint._explained

    def failing_decode(self, model, src, beam_size, limits):
        if eng_fra.encode(breaks_decoding) in [row[:len(eng_fra.encode(breaks_decoding))] for row in src.tolist()]:
            raise ValueError("this input breaks the decoding")
        return decode(self, model, src, beam_size, limits)

    def failing_capture(self, model, request, sequence, warnings):
        if request.ids == eng_fra.encode(breaks_capture):
            raise ValueError("this input breaks the capture")
        return explained(self, model, request, sequence, warnings)

    monkeypatch.setattr(Checkpoint, "_decode", failing_decode)
    monkeypatch.setattr(Checkpoint, "_explained", failing_capture)
    batcher, turn = waiting_batcher()
    outcomes: dict = {}
    threads = start(batcher, eng_fra, TEXTS[:5] + ("   ",), outcomes)
    release(batcher, turn, 5)
    finish(threads)
    assert str(outcomes[breaks_decoding]) == "this input breaks the decoding"
    assert str(outcomes[breaks_capture]) == "this input breaks the capture"
    assert "empty" in str(outcomes["   "])  # what is wrong with an input is raised before it queues
    monkeypatch.undo()
    for text in (TEXTS[0], TEXTS[2], TEXTS[4]):
        same(outcomes[text], eng_fra.translate(text, beam_size=1))
    assert list(batcher.batches) == [5, 1, 1, 1, 1, 1]  # the batch failed, and its requests were decoded alone


def test_a_caller_that_left_is_dropped(eng_fra):
    batcher, turn = waiting_batcher()
    outcomes: dict = {}
    threads = start(batcher, eng_fra, TEXTS[:3], outcomes, **{TEXTS[1]: {"alive": lambda: False}})
    release(batcher, turn, 3)
    finish(threads)
    assert isinstance(outcomes[TEXTS[1]], Cancelled)
    assert list(batcher.batches) == [2]
    for text in (TEXTS[0], TEXTS[2]):
        same(outcomes[text], eng_fra.translate(text, beam_size=1))


def test_batches_stay_within_their_bounds(eng_fra, monkeypatch):
    monkeypatch.setattr(Checkpoint, "batch_fits", lambda self, batch: len(batch) <= 3)
    batcher, turn = waiting_batcher(max_batch=5)
    outcomes: dict = {}
    threads = start(batcher, eng_fra, TEXTS, outcomes)
    release(batcher, turn, len(TEXTS))
    finish(threads)
    assert list(batcher.batches) == [3, 3, 3]
    for text in TEXTS:
        same(outcomes[text], eng_fra.translate(text, beam_size=1))


def test_a_request_alone_does_not_wait_for_the_window(eng_fra):
    outcomes: dict = {}
    finish(start(Batcher(window_s=3600), eng_fra, TEXTS[:1], outcomes))
    same(outcomes[TEXTS[0]], eng_fra.translate(TEXTS[0], beam_size=1))


def test_ablated_and_captured_calls_run_alone(eng_fra):
    from transformer import ablate, capture

    batcher = Batcher()
    with ablate(eng_fra.model, {"decoder.layers.0.cross_attn": [1]}):
        ablated = batcher.translate(eng_fra, eng_fra.prepare(TEXTS[0], 1))
        expected = eng_fra.translate(TEXTS[0], beam_size=1)
    same(ablated, expected)
    with capture(eng_fra.model, "decoder.layers.0.cross_attn") as record:
        batcher.translate(eng_fra, eng_fra.prepare(TEXTS[0], 1))
    assert "decoder.layers.0.cross_attn" in record  # the caller's own capture saw the pass: it ran in its thread
    assert list(batcher.batches) == []


def test_batch_settings_from_the_environment():
    batcher = Batcher.from_environment({"ATLAS_BATCH_SIZE": "1", "ATLAS_BATCH_WINDOW_MS": "5"})
    assert (batcher.max_batch, batcher.window_s) == (1, 0.005)
    assert Batcher.from_environment({}).max_batch > 1
    for wrong in ({"ATLAS_BATCH_SIZE": "0"}, {"ATLAS_BATCH_WINDOW_MS": "-3"}, {"ATLAS_BATCH_SIZE": "many"}):
        with pytest.raises(ValueError):
            Batcher.from_environment(wrong)
