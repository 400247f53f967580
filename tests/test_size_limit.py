"""A model's size is bounded by memory, not by a count of parameters: before a byte of its weights is read, the memory
the model and its longest allowed pass would take (transformer.io.checkpoint.model_memory) is compared with a limit,
half of what the process may use (the machine's memory, its cgroup's limit, the address-space limit) or
$ATLAS_MODEL_MEMORY_MB; a model over it is refused with both numbers. The estimate is checked against a real model's
memory in a fresh process."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from transformer import CheckpointError, Transformer, TransformerConfig, checkpoint_status, load_checkpoint
from transformer.io import safety
from transformer.io.checkpoint import (
    CONFIG_FILE,
    JSON_TOKENIZER_FILE,
    WEIGHTS_FILE,
    ModelCard,
    check_model_memory,
    model_memory,
    parameter_count,
)
from transformer.io.converters import llama
from transformer.io.disk_cache import DEFAULT_MAX_BYTES, SIZE_VARIABLE, default_max_bytes
from transformer.io.safety import GB, MEMORY_LIMIT_VARIABLE, memory_limit, usable_memory

ROOT = Path(__file__).resolve().parents[1]
# SmolLM2-135M's config.json (HuggingFaceTB/SmolLM2-135M), the fields the llama converter reads.
SMOLLM2_135M = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 576,
                "intermediate_size": 1536, "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
                "vocab_size": 49152, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000,
                "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu"}
# About 30 billion parameters: 64 + 64 layers of width 4,096 (the Marian converter's hostile case).
THIRTY_BILLION = dict(num_encoder_layers=64, num_decoder_layers=64, d_model=4096, d_ff=16384, num_heads=8)


def smollm_config() -> TransformerConfig:
    return llama.config(SMOLLM2_135M, None, Path(CONFIG_FILE))


@pytest.fixture
def machine(monkeypatch):
    """A machine of `gigabytes` GB and no limit set: machine(24)."""
    monkeypatch.delenv(MEMORY_LIMIT_VARIABLE, raising=False)

    def of(gigabytes: float) -> None:
        monkeypatch.setattr(safety, "usable_memory", lambda: (int(gigabytes * GB), "this machine has"))
    return of


def test_smollm2_135m_is_accepted_on_a_24_gb_machine(machine):
    machine(24)
    estimate = check_model_memory(smollm_config(), Path(CONFIG_FILE))
    assert 134_000_000 < estimate.parameters < 135_000_000  # 134.5M, and the zero bias of Llama's output projection
    assert estimate.weights == 4 * estimate.parameters + 4 * 2 * 2048 * 64  # float32, and the rotary tables
    assert estimate.pass_tokens == 352  # 270 heads: the pass budget cuts max_len 2,048 to this
    assert estimate.total == estimate.weights + max(estimate.loading, estimate.attention + estimate.activations)
    assert 1.0 * GB < estimate.total < 1.5 * GB  # far below the 12 GB allowed


def test_a_30_billion_parameter_config_is_refused_with_both_numbers(machine):
    machine(24)
    config = TransformerConfig(src_vocab_size=32_000, tgt_vocab_size=32_000, **THIRTY_BILLION)
    started = time.process_time()
    with pytest.raises(CheckpointError) as refused:
        check_model_memory(config, Path(CONFIG_FILE))
    assert time.process_time() - started < 2  # counted from one layer a stack on the meta device: nothing is built
    estimate = model_memory(config)
    assert 29e9 < estimate.parameters < 31e9
    message = str(refused.value)
    assert message.startswith(f"{CONFIG_FILE}: the model would have {estimate.parameters:,} parameters, more than "
                              "this server's memory allows: it needs about ")
    assert f"it needs about {estimate.total / GB:.1f} GB ({estimate.weights / GB:.1f} GB of float32 weights" in message
    assert message.endswith("and this server allows 12.0 GB (50% of the 24.0 GB this machine has; "
                            f"{MEMORY_LIMIT_VARIABLE} sets another limit)")


def test_the_limit_follows_the_machine_the_cgroup_and_the_variable(machine, monkeypatch):
    config = smollm_config()
    machine(2)  # a small machine: 1 GB allowed, 1.3 GB needed
    with pytest.raises(CheckpointError, match=r"needs about 1\.3 GB .* this server allows 1\.0 GB \(50% of the 2\.0 "):
        check_model_memory(config, Path(CONFIG_FILE))
    machine(24)
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, "500")  # the variable lowers it
    with pytest.raises(CheckpointError, match=rf"this server allows 500 MB \({MEMORY_LIMIT_VARIABLE}=500\)$"):
        check_model_memory(config, Path(CONFIG_FILE))
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, "65536")  # ... or raises it above the default
    assert memory_limit() == (64 * GB, f"{MEMORY_LIMIT_VARIABLE}=65536")


@pytest.mark.parametrize("setting", ["0", "-1", "8GB", "1.5", "1e9", "²", "9" * 40])
def test_a_limit_that_is_not_a_whole_number_of_mb_is_refused(setting):
    with pytest.raises(ValueError, match=rf"{MEMORY_LIMIT_VARIABLE} must be a whole number of MB"):
        memory_limit({MEMORY_LIMIT_VARIABLE: setting})
    assert memory_limit({MEMORY_LIMIT_VARIABLE: " 2048 "})[0] == 2 * GB


@pytest.mark.parametrize("setting", ["abc", "nan", "inf", "-1", "1e400", "0x10"])
def test_a_cache_size_that_is_not_a_number_of_mb_names_the_variable(setting):
    with pytest.raises(ValueError, match=rf"^{SIZE_VARIABLE} must be a number of MB, at least 0, got '{setting}'$"):
        default_max_bytes({SIZE_VARIABLE: setting})
    assert default_max_bytes({SIZE_VARIABLE: " 0.5 "}) == 2**19 and default_max_bytes({}) == DEFAULT_MAX_BYTES


@pytest.fixture
def memory_of(monkeypatch, tmp_path):
    """usable_memory() on a machine of `physical` bytes whose cgroup files say `v2` and `v1` (None: no such file),
    with an address-space limit of `address_space` bytes (None: unlimited)."""
    def usable(physical: int, v2: str | None = None, v1: str | None = None, address_space: int | None = None):
        files = (tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes")
        for file, text in zip(files, (v2, v1)):
            file.unlink(missing_ok=True)
            if text is not None:
                file.write_text(text + "\n")
        page = 4096
        monkeypatch.setattr(safety, "CGROUP_LIMITS", files)
        monkeypatch.setattr(safety.os, "sysconf", {"SC_PHYS_PAGES": physical // page, "SC_PAGE_SIZE": page}.get)
        limit = safety.resource.RLIM_INFINITY if address_space is None else address_space
        monkeypatch.setattr(safety.resource, "getrlimit", lambda which: (limit, safety.resource.RLIM_INFINITY))
        return usable_memory()
    return usable


def test_usable_memory_is_the_least_of_the_machine_its_cgroup_and_its_address_space(memory_of):
    machine = 24 * GB
    assert memory_of(machine) == (machine, "this machine has")  # no cgroup files (not Linux, or no limit)
    assert memory_of(machine, v2="max") == (machine, "this machine has")  # cgroup v2 without a limit
    assert memory_of(machine, v2=str(4 * GB)) == (4 * GB, "its cgroup allows")  # a container's limit
    assert memory_of(machine, v2=str(64 * GB)) == (machine, "this machine has")  # a limit above the machine's
    assert memory_of(machine, v1="9223372036854771712") == (machine, "this machine has")  # v1: "none" as 2**63
    assert memory_of(machine, v1=str(2 * GB)) == (2 * GB, "its cgroup allows")
    assert memory_of(machine, v2="garbage") == (machine, "this machine has")
    assert memory_of(machine, v2=str(8 * GB), address_space=3 * GB) == (3 * GB, "its address-space limit allows")


def test_the_default_limit_is_half_of_the_usable_memory(memory_of, monkeypatch):
    monkeypatch.delenv(MEMORY_LIMIT_VARIABLE, raising=False)
    memory_of(24 * GB, v2=str(8 * GB))
    assert memory_limit() == (4 * GB, f"50% of the 8.0 GB its cgroup allows; {MEMORY_LIMIT_VARIABLE} sets another "
                                      "limit")


def test_a_folder_over_the_limit_is_refused_before_its_weights_are_read(tiny_checkpoint, tmp_path, monkeypatch):
    """Listed with the message, and loading it never opens the weights file (here there is none)."""
    folder = shutil.copytree(tiny_checkpoint, tmp_path / "checkpoints" / "huge")
    (folder / WEIGHTS_FILE).unlink()
    values = json.loads((folder / CONFIG_FILE).read_text()) | THIRTY_BILLION
    (folder / CONFIG_FILE).write_text(json.dumps(values))
    monkeypatch.setattr(safety, "usable_memory", lambda: (24 * GB, "this machine has"))
    monkeypatch.delenv(MEMORY_LIMIT_VARIABLE, raising=False)
    pattern = r"config.json: the model would have [\d,]+ parameters, more than this server's memory allows: it needs "
    with pytest.raises(CheckpointError, match=pattern + r"about [\d.]+ GB .* allows 12.0 GB"):
        load_checkpoint(folder)
    [(name, error)] = checkpoint_status(folder.parent)
    assert name == "huge" and "this server allows 12.0 GB" in error


def test_the_variable_refuses_a_small_model(monkeypatch):
    shipped = ROOT / "checkpoints" / "reverse"  # 668 thousand parameters: about 5 MB with its longest pass
    monkeypatch.delenv(MEMORY_LIMIT_VARIABLE, raising=False)
    load_checkpoint(shipped)
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, "2")
    with pytest.raises(CheckpointError, match=r"needs about 5.1 MB \(2.6 MB of float32 weights and up to 2.5 MB beside "
                                              rf"them, while they load or for its longest pass of 34 tokens\), and "
                                              rf"this server allows 2.0 MB \({MEMORY_LIMIT_VARIABLE}=2\)$"):
        load_checkpoint(shipped)


def test_no_config_the_schema_allows_has_more_parameters_than_a_card_may_say():
    """The card schema's bound on `parameters` (MAX_PARAMETERS) is above the largest model a config may describe:
    every field at its cap, two stacks, untied, gated."""
    largest = TransformerConfig(
        src_vocab_size=safety.MAX_VOCAB_SIZE, tgt_vocab_size=safety.MAX_VOCAB_SIZE, d_model=safety.MAX_D_MODEL,
        num_heads=8, num_encoder_layers=safety.MAX_LAYERS, num_decoder_layers=safety.MAX_LAYERS, d_ff=safety.MAX_D_FF,
        max_len=safety.MAX_LEN, positional="learned", position_offset=safety.MAX_POSITION_OFFSET,
        type_vocab_size=safety.MAX_TYPE_VOCAB, feed_forward="gated", tie_output_embedding=False, embedding_norm=True)
    assert 40e9 < parameter_count(largest) < safety.MAX_PARAMETERS


# ------------------------------------------------------------------------------------ the estimate, measured

# Llama's layout, about 33 million parameters (130 MB as float32): the weights dominate what torch itself allocates.
MEASURED = replace(smollm_config(), src_vocab_size=8000, tgt_vocab_size=8000, d_model=512, num_heads=8,
                   num_kv_heads=4, num_decoder_layers=8, d_ff=1536, max_len=128)
MEASURE = """
import ctypes, gc, json, sys
import torch
from transformer import Checkpoint, capture
from transformer.io.checkpoint import LoadedCheckpoint

def status(field):
    line = next(l for l in open("/proc/self/status") if l.startswith(field + ":"))
    return int(line.split()[1]) * 1024

def settled():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return status("VmRSS")

torch.set_num_threads(1)
with torch.no_grad():  # torch's own first-use allocations, before anything is measured
    torch.nn.functional.scaled_dot_product_attention(*torch.zeros(3, 1, 1, 2, 4)).sum()
before = settled()
checkpoint = Checkpoint(sys.argv[1])
loaded, loading_peak = settled(), status("VmHWM")
translation = checkpoint.translate(" ".join(["abcd"] * 200))  # cut to the longest pass allowed
print(json.dumps({"before": before, "loaded": loaded, "loading_peak": loading_peak, "pass_peak": status("VmHWM"),
                  "tokens": len(translation.tgt_tokens)}))
"""


@pytest.mark.slow  # a fresh process loads a 130 MB checkpoint
def test_the_estimate_is_what_a_loaded_model_and_its_pass_take(tmp_path):
    from benchmarks.smollm import word_tokenizer
    from transformer.io.convert import write_folder

    torch.manual_seed(0)
    model = Transformer(MEASURED).eval()
    card = ModelCard(name="measured", task="generate", description="Random weights.", data="none")
    write_folder(tmp_path / "measured", model, card, {JSON_TOKENIZER_FILE: word_tokenizer(MEASURED.tgt_vocab_size)})
    del model
    done = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "measured")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.splitlines()[-1])
    estimate = model_memory(MEASURED)
    held = measured["loaded"] - measured["before"]  # the model, once loaded
    assert estimate.weights / 1.5 < held < estimate.weights * 1.5, (held, estimate)
    loading = measured["loading_peak"] - measured["before"]  # the most held while it loaded
    assert estimate.weights + estimate.loading / 2 < loading < (estimate.weights + estimate.loading) * 1.5, (
        loading, estimate)
    assert measured["tokens"] == estimate.pass_tokens - 1  # the longest pass was run
    at_most = measured["pass_peak"] - measured["before"]  # the most held at once, loading and the pass included
    assert estimate.total / 2 < at_most < estimate.total * 1.5, (at_most, estimate)
