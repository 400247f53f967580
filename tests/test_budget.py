"""The compute budget: a valid config whose attention would take gigabytes (128 heads, 64 + 64 layers, max_len 2048)
is listed, its inputs are cut to the length whose captured pass fits, with a message, and memory returns after the
pass; a model whose shortest useful pass does not fit is refused when listed; running out of memory and a model
whose finite weights overflow are messages. Each case runs in a forked child under a memory cap
(tests/test_hostile.py's bounded_run)."""
from __future__ import annotations

import ctypes
import dataclasses
import gc
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_hostile import GROWTH_BYTES, _memory_status, bounded_run

from transformer import Caveat, Transformer, checkpoint_status, load_checkpoint
from transformer.inference import translation
from transformer.io import checkpoint as checkpoint_module
from transformer.io.checkpoint import (
    CONFIG_FILE,
    SNAPSHOT_DIR,
    WEIGHTS_FILE,
    attention_values,
    pass_length,
    read_config,
    save_weights,
)
from transformer.io.safety import BYTES_PER_ATTENTION_VALUE, PASS_BUDGET_BYTES

pytestmark = pytest.mark.slow  # forked children
LONG_INPUT = "abcdefghij" * 10  # 100 characters: 3.5 GB of attention on the memory bomb without the budget


@pytest.fixture(scope="module")
def memory_bomb(tiny_checkpoint, tmp_path_factory) -> Path:
    return plant_memory_bomb(tiny_checkpoint, tmp_path_factory.mktemp("budget") / "checkpoints" / "memory-bomb")


def plant_memory_bomb(tiny_checkpoint: Path, folder: Path) -> Path:
    """The tiny checkpoint's tokenizers and card with a model of 128 heads, 64 + 64 layers and max_len 2048
    (d_model 128, d_ff 16: 52 MB of weights, random), at `folder`."""
    shutil.copytree(tiny_checkpoint, folder, ignore=shutil.ignore_patterns(SNAPSHOT_DIR, "resume.pt"))
    small = read_config(folder)
    config = dataclasses.replace(small, d_model=128, num_heads=128, num_encoder_layers=64, num_decoder_layers=64,
                                 d_ff=16, max_len=2048)
    torch.manual_seed(0)
    config.save(folder / CONFIG_FILE)
    save_weights(Transformer(config), folder / WEIGHTS_FILE)
    return folder


def test_the_pass_length_is_the_longest_that_fits(memory_bomb):
    config = read_config(memory_bomb)
    length = pass_length(config)
    assert attention_values(config, length, length) * BYTES_PER_ATTENTION_VALUE <= PASS_BUDGET_BYTES
    assert attention_values(config, length + 1, length + 1) * BYTES_PER_ATTENTION_VALUE > PASS_BUDGET_BYTES
    assert 8 <= length < config.max_len
    shipped = read_config(Path(__file__).parents[1] / "checkpoints" / "eng-fra")
    assert pass_length(shipped) == shipped.max_len  # the budget changes nothing for the shipped models


def _translate_and_measure(folder: Path) -> tuple[list[Caveat], int, int, int]:
    checkpoint = load_checkpoint(folder)
    loaded = _memory_status("VmRSS")
    translation = checkpoint.translate(LONG_INPUT)
    sizes = (len(translation.src_ids), len(translation.tgt_ids))
    warnings = translation.warnings
    del translation
    gc.collect()
    # glibc keeps freed pages in its arenas until asked; what is still referenced stays whatever malloc_trim does
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return warnings, sizes, loaded, _memory_status("VmRSS")


def test_a_memory_bomb_config_is_listed_and_its_long_input_cut_with_a_message(memory_bomb):
    statuses = bounded_run(lambda: dict(checkpoint_status(memory_bomb.parent)))
    assert statuses.value == {"memory-bomb": ""}, statuses
    outcome = bounded_run(lambda: _translate_and_measure(memory_bomb))
    assert outcome.error == "", outcome
    warnings, (src_len, tgt_len), loaded, after = outcome.value
    length = pass_length(read_config(memory_bomb))
    assert src_len <= length and tgt_len <= length
    cut = Caveat("cut_off_pieces_by_memory", {"pieces": len(LONG_INPUT), "cut": len(LONG_INPUT) - (length - 1),
                                              "reads": length - 1, "encoder_layers": 64, "decoder_layers": 64,
                                              "heads": 128})
    assert cut in warnings, warnings
    assert outcome.growth_bytes < GROWTH_BYTES, outcome
    assert after <= 1.2 * loaded, (loaded, after)  # the pass's memory is given back


def test_a_model_whose_shortest_pass_does_not_fit_is_refused_when_listed(memory_bomb, monkeypatch):
    monkeypatch.setattr(checkpoint_module, "PASS_BUDGET_BYTES", 1 << 20)
    (reason,) = dict(checkpoint_status(memory_bomb.parent)).values()
    assert "config.json: one pass over 8 tokens would record" in reason and "more than the 1,048,576" in reason


def test_running_out_of_memory_is_a_message(tiny_checkpoint, monkeypatch):
    checkpoint = load_checkpoint(tiny_checkpoint)

    def no_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(translation, "greedy", no_memory)
    with pytest.raises(ValueError, match=r"ran out of memory .*\(RuntimeError\): try a shorter input") as raised:
        checkpoint.translate("abc", beam_size=1)
    assert raised.value.__context__ is None  # the failed pass's frames (and tensors) are not kept alive


def test_finite_weights_that_overflow_are_named(tiny_checkpoint, tmp_path):
    folder = shutil.copytree(tiny_checkpoint, tmp_path / "huge")
    state = load_file(folder / WEIGHTS_FILE)
    for name in ("W_q", "W_k"):  # each finite; their product, the attention scores, is not
        key = f"encoder.layers.0.self_attn.{name}.weight"
        state[key] = torch.full_like(state[key], 1e30)
    save_file(state, folder / WEIGHTS_FILE)
    with pytest.raises(ValueError, match=r"not a number \(NaN or infinity\).*overflows \(first in encoder"):
        load_checkpoint(folder).translate("abc")


@pytest.mark.parametrize("error", [MemoryError(), torch.OutOfMemoryError("CUDA out of memory"),
                                   RuntimeError("DefaultCPUAllocator: can't allocate memory")])
def test_running_out_of_memory_in_any_views_pass_is_a_message(app, monkeypatch, error):
    """Not only translation: a view whose own pass (here the logit lens of Patching) runs out of memory shows a
    message in its place, the page around it stays, and the next pass runs."""
    import ui.passes

    def no_memory(*args, **kwargs):
        raise error

    monkeypatch.setattr(ui.passes, "logit_lens", no_memory)
    at = app(view="patching")
    assert not at.exception
    assert any("ran out of memory" in message.value and "try a shorter input" in message.value for message in at.error)
    monkeypatch.undo()
    assert not app(view="patching").exception


def test_other_errors_of_a_pass_are_not_taken_for_memory(app, monkeypatch):
    import ui.passes

    def broken(*args, **kwargs):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(ui.passes, "logit_lens", broken)
    at = app(view="patching")
    assert at.exception and "shape mismatch" in at.exception[0].value
