"""The corpus summary and the disk cache it is kept in: an entry read back equals what was computed; the folder
stays within its bound (least recently used out first); a truncated, planted or stale entry is rebuilt, never
trusted; new weights make a new entry; the t-SNE picture of reverse's mirror head puts each query beside the key it
reads; and two processes under torchrun keep the summary one process computes."""
from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from helpers import ROOT
from transformer.analysis import corpus_summary as summaries
from transformer.analysis.corpus_summary import corpus_summary, decode, encode, summarise, summary_key, tsne_picture
from transformer.analysis.qk_space import nearest_keys, projected, queries_keys, top_neuron_examples
from transformer.inference.translation import load_checkpoint
from transformer.io.disk_cache import LOCK, MANIFEST, MAX_ENTRY_BYTES, SUFFIX, DiskCache, key_of, model_digest

MIRROR_HEAD = ("decoder.cross_attn", 1, 0)  # reverse: reads the input position its output position mirrors


@pytest.fixture(scope="module")
def reverse():
    return load_checkpoint(ROOT / "checkpoints" / "reverse")


@pytest.fixture(scope="module")
def pairs(reverse):
    return summaries.corpus_pairs_list(reverse, 40)


@pytest.fixture(scope="module")
def computed(reverse, pairs):
    return summarise(reverse, pairs)


@pytest.fixture
def cache(tmp_path):
    return DiskCache(tmp_path / "cache", max_bytes=64 * 2**20)


def entry(size: int) -> dict[str, np.ndarray]:
    return {"values": np.zeros(size // 4, np.float32)}


# ----------------------------------------------------------------------------- the disk cache

def test_an_entry_reads_back_as_written_and_leaves_no_temporary_file(cache):
    arrays = {"a": np.arange(6, dtype=np.float64).reshape(2, 3), "b": np.array([1, -1], np.int32)}
    assert cache.write(key_of("x"), arrays, {"n": 3, "names": ["é", "▁x"]})
    read, value = cache.read(key_of("x"))
    assert value == {"n": 3, "names": ["é", "▁x"]}
    assert {name: array.tolist() for name, array in read.items()} == {name: a.tolist() for name, a in arrays.items()}
    assert sorted(path.name for path in cache.folder.iterdir()) == sorted(
        [f"{key_of('x')}{SUFFIX}", MANIFEST, LOCK])  # no temporary file left


def test_the_folder_keeps_within_its_bound_the_least_recently_used_going_first(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=3_500_000)
    for name in "abc":
        assert cache.write(key_of(name), entry(1_000_000), None)
        os.utime(cache.path(key_of(name)), (0, {"a": 1000, "b": 2000, "c": 3000}[name]))  # long ago, in this order
    assert cache.read(key_of("a")) is not None  # used now: "b" is the least recently used
    cache.write(key_of("d"), entry(1_000_000), None)
    assert cache.size() <= 3_500_000
    assert {path.stem for path in cache.entries()} == {key_of(name) for name in "acd"}


def test_a_result_larger_than_the_bound_is_not_kept(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=1_000_000)
    assert not cache.write(key_of("big"), entry(2_000_000), None)
    assert cache.entries() == []
    assert MAX_ENTRY_BYTES <= 64 * 2**20


@pytest.mark.parametrize("damage", ["truncated", "planted", "another key", "garbage header", "symlink"])
def test_a_damaged_entry_is_rebuilt_never_trusted(cache, tmp_path, damage):
    key = key_of("entry")
    cache.write(key, {"a": np.ones(100)}, {"ok": True})
    path = cache.path(key)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:-50])
    elif damage == "planted":
        path.write_bytes(b"\x80\x04\x95 a pickle, say" * 10)
    elif damage == "another key":
        cache.write(key_of("other"), {"a": np.zeros(100)}, {"ok": False})
        os.replace(cache.path(key_of("other")), path)
    elif damage == "garbage header":
        path.write_bytes((10**12).to_bytes(8, "little") + b"{" + b"x" * 100)
    else:
        outside = tmp_path / "outside.safetensors"
        outside.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(outside)
    assert cache.read(key) is None
    assert not os.path.lexists(path)  # deleted, so that it is rebuilt
    built = cache.get(key, lambda: ({"a": np.full(100, 2.0)}, {"ok": "rebuilt"}))
    assert built[1] == {"ok": "rebuilt"} and cache.read(key)[1] == {"ok": "rebuilt"}


def test_an_entry_that_fails_its_check_is_rebuilt(cache):
    key = key_of("checked")
    cache.write(key, {"a": np.ones(3)}, None)
    calls = []

    def check(arrays, value):
        if arrays["a"].shape != (4,):
            raise ValueError("not this shape")

    arrays, _ = cache.get(key, lambda: calls.append(1) or ({"a": np.ones(4)}, None), check)
    assert calls == [1] and arrays["a"].shape == (4,)
    cache.get(key, lambda: calls.append(2) or ({"a": np.ones(4)}, None), check)
    assert calls == [1]  # the rebuilt entry is read, not built again


def test_an_unwritable_folder_computes_without_keeping(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    cache = DiskCache(tmp_path / "file" / "cache")
    arrays, value = cache.get(key_of("x"), lambda: ({"a": np.ones(2)}, 7))
    assert value == 7 and cache.entries() == []


def test_a_trim_removes_only_the_caches_own_entries(tmp_path):
    """A folder named as the cache may hold files of others (a checkpoint's weights, a file named like an entry):
    the trim removes only entries of the cache's manifest, and counts nothing else."""
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"w" * 600_000)
    lookalike = tmp_path / f"{key_of('not written here')}{SUFFIX}"
    lookalike.write_bytes(b"x" * 600_000)
    os.utime(weights, (0, 1))  # the least recently used files of the folder: a trim by age would take them first
    os.utime(lookalike, (0, 1))
    cache = DiskCache(tmp_path, max_bytes=450_000)
    for name in "ab":
        assert cache.write(key_of(name), entry(200_000), None)
    assert cache.write(key_of("c"), entry(200_000), None)  # past the bound: the trim runs
    assert weights.read_bytes() == b"w" * 600_000 and lookalike.read_bytes() == b"x" * 600_000
    assert {path.stem for path in cache.entries()} == {key_of(name) for name in "bc"}
    assert cache.size() <= 450_000


def test_a_planted_manifest_never_makes_the_trim_remove_a_foreign_file(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=100_000)
    foreign = tmp_path / f"{key_of('foreign')}{SUFFIX}"
    foreign.write_bytes(b"f" * 200_000)
    (tmp_path / ".attention-atlas-cache.json").write_text("{not json")  # damaged: read as empty
    assert cache.write(key_of("mine"), entry(40_000), None)
    assert foreign.exists() and [path.stem for path in cache.entries()] == [key_of("mine")]


@pytest.mark.parametrize("dtype", ["BF16", "F8_E4M3", "F8_E5M2", "F4", "F6_E2M3", "F8_E8M0"])
def test_an_entry_of_a_dtype_numpy_cannot_hold_is_rebuilt(cache, dtype):
    """Every dtype safetensors can name is read or its entry rebuilt (numpy has no bfloat16 or float8)."""
    key = key_of("planted")
    header = json.dumps({"__metadata__": {"key": key, "value": "null"},
                         "a": {"dtype": dtype, "shape": [8], "data_offsets": [0, 8]}}).encode()
    cache.folder.mkdir(parents=True)
    cache.path(key).write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    assert cache.read(key) is None and not cache.path(key).exists()
    arrays, _ = cache.get(key, lambda: ({"a": np.ones(2, np.float32)}, None))
    assert cache.read(key)[0]["a"].tolist() == [1.0, 1.0]


def test_the_weights_digest_changes_with_any_weight(reverse):
    model = reverse.model
    before = model_digest(model)
    weight = next(model.parameters())
    original = weight.detach().clone()
    with torch.no_grad():
        weight.view(-1)[5] += 1e-6
    try:
        assert model_digest(model) != before
    finally:
        with torch.no_grad():
            weight.copy_(original)
    assert model_digest(model) == before


# ----------------------------------------------------------------------------- the summary

def test_a_summary_read_from_its_entry_equals_the_one_computed(reverse, computed):
    read = decode(reverse, "k", *encode(computed))
    assert read.pairs == computed.pairs and read.pieces == computed.pieces
    np.testing.assert_array_equal(read.patterns.divergence, computed.patterns.divergence)
    np.testing.assert_array_equal(read.patterns.statistics.to_numpy(), computed.patterns.statistics.to_numpy())
    assert read.points.keys() == computed.points.keys()
    for head in computed.points:
        assert read.picture(head).equals(computed.picture(head))
    for layer, frame in computed.neurons.items():
        pd.testing.assert_frame_equal(read.neurons[layer], frame, check_dtype=False, rtol=1e-6)


def test_its_pictures_and_neurons_are_the_librarys(reverse, computed):
    """Rebuilt from the summary's numbers and pieces, a head's picture is qk_space.projected's over the same
    sentences, and a neuron's examples are qk_space.top_neuron_examples' (up to float32)."""
    head = MIRROR_HEAD
    data = queries_keys(reverse, *head, computed.pairs[:computed.picture_sentences])
    expected = projected(data)
    picture = computed.picture(head)
    columns = ["side", "sentence", "position", "piece", "argmax", "pieces"]
    assert picture[columns].equals(expected[columns])
    # Every head in one pass: its batches, and so the float sums, are not one head's own
    np.testing.assert_allclose(picture[["x", "y"]], expected[["x", "y"]], rtol=1e-5, atol=1e-5)
    library = top_neuron_examples(reverse, "decoder", 1, computed.pairs, top=summaries.TOP_EXAMPLES,
                                  context=summaries.CONTEXT, neurons=[5], max_sentences=len(computed.pairs))
    pd.testing.assert_frame_equal(computed.neuron_examples(("decoder", 1), 5), library, check_dtype=False,
                                  rtol=1e-6)


def test_the_summary_covers_every_head_and_feed_forward_layer(reverse, computed):
    config = reverse.config
    assert len(computed.points) == sum(config.layers_of(kind) for kind in
                                         ("encoder.self_attn", "decoder.self_attn", "decoder.cross_attn")) * 4
    assert set(computed.neurons) == {(stack, layer) for stack in ("encoder", "decoder") for layer in range(2)}
    assert computed.patterns.sentences == len(computed.pairs) == 40
    assert computed.picture_sentences == 40


@pytest.mark.parametrize("part, damage", [("divergence", "shape"), ("divergence", "range"), ("picture", "argmax"),
                                          ("neurons", "sentence"), ("value", "heads")])
def test_an_entry_whose_numbers_do_not_fit_the_model_is_refused(reverse, computed, part, damage):
    arrays, value = encode(computed)
    arrays = dict(arrays)
    if part == "divergence":
        arrays["divergence"] = arrays["divergence"][:-1] if damage == "shape" else arrays["divergence"] + 1.0
    elif part == "picture":
        name = "picture/decoder.cross_attn/1/0/argmax"
        arrays[name] = arrays[name] + 1000
    elif part == "neurons":
        arrays["neurons/encoder/0/sentence"] = arrays["neurons/encoder/0/sentence"] + 10_000
    else:
        value = dict(value, heads=value["heads"][:-1])
    with pytest.raises(ValueError):
        decode(reverse, "k", arrays, value)


def test_corpus_summary_is_computed_once_and_rebuilt_for_new_weights(reverse, pairs, cache, monkeypatch):
    calls = []
    real = summaries.summarise
    monkeypatch.setattr(summaries, "summarise", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    first = corpus_summary(reverse, pairs=pairs[:8], cache=cache)
    again = corpus_summary(reverse, pairs=pairs[:8], cache=cache)
    assert calls == [1] and first.key == again.key and cache.path(first.key).exists()
    np.testing.assert_array_equal(first.patterns.divergence, again.patterns.divergence)
    weight = next(reverse.model.parameters())
    original = weight.detach().clone()
    with torch.no_grad():
        weight.view(-1)[0] += 0.5
    try:
        changed = corpus_summary(reverse, pairs=pairs[:8], cache=cache)
    finally:
        with torch.no_grad():
            weight.copy_(original)
    assert calls == [1, 1] and changed.key != first.key and cache.path(changed.key).exists()
    assert cache.path(first.key).exists()  # the old weights' entry stays until the bound ages it out
    assert summary_key(reverse, pairs[:8]) == first.key


def test_each_chunk_runs_in_the_callers_turn(reverse, pairs):
    turns = []

    class Turn:
        def __enter__(self):
            turns.append("in")

        def __exit__(self, *exc):
            turns.append("out")

    summarise(reverse, pairs[:20], turn=Turn)
    assert turns == ["in", "out"] * (len(turns) // 2) and len(turns) // 2 == summaries.chunks(20)


@pytest.mark.slow  # a t-SNE of every query and key (about a minute on a busy core)
def test_the_t_sne_picture_of_the_mirror_head_puts_each_query_beside_the_key_it_reads(reverse, computed, cache):
    frame = tsne_picture(reverse, computed, MIRROR_HEAD, cache=cache)
    queries = frame[frame["side"] == "query"]
    share = float((nearest_keys(frame).loc[queries.index] == queries["argmax"]).mean())
    assert share >= 0.9, share  # measured 0.98 on 100 inputs
    again = tsne_picture(reverse, computed, MIRROR_HEAD, cache=cache)  # read back from the cache
    np.testing.assert_allclose(again[["x", "y"]], frame[["x", "y"]], rtol=1e-6, atol=1e-5)
    pca = computed.picture(MIRROR_HEAD)
    pca_queries = pca[pca["side"] == "query"]
    pca_share = float((nearest_keys(pca).loc[pca_queries.index] == pca_queries["argmax"]).mean())
    assert 0.6 < pca_share < share  # PCA's two directions keep fewer neighbours (0.74 measured)
    assert not math.isnan(pca_share)


def test_the_latest_summary_of_these_weights_is_found_and_a_planted_pointer_is_not_followed(reverse, pairs, cache):
    assert summaries.latest_summary(reverse, 8, cache=cache) is None
    own = [("abc", "cba")] * 8  # a corpus of one's own, which the app cannot read itself
    kept = corpus_summary(reverse, pairs=own, cache=cache)
    found = summaries.latest_summary(reverse, 8, cache=cache)
    assert found.key == kept.key and found.pairs == own
    pointer = summaries._latest_key(model_digest(reverse.model), 8)
    cache.write(pointer, {}, {"summary": "../../etc/passwd"})
    assert summaries.latest_summary(reverse, 8, cache=cache) is None and not cache.path(pointer).exists()


@pytest.mark.slow  # about 40 s: two processes start torch and rendezvous
def test_two_process_torchrun_caches_the_summary_one_process_computes(reverse, tmp_path):
    """`torchrun ... transformer.corpus cache`: the ranks share the chunks (patterns, neurons) and the heads
    (pictures); the entry rank 0 keeps is the one-process summary (sums added in another order: equal to rounding)."""
    count = 150  # five chunks of patterns and three of neurons: both ranks read some
    alone = summarise(reverse, summaries.corpus_pairs_list(reverse, count))
    with socket.socket() as probe:  # a free port on loopback for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
               f"--master_port={port}", "-m", "transformer.corpus", "cache", str(ROOT / "checkpoints" / "reverse"),
               "--count", str(count), "--cache", str(tmp_path / "cache")]
    result = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                            capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("sentences summarised") == 1  # rank 0 alone reports (and writes)
    cache = DiskCache(tmp_path / "cache")
    key = summary_key(reverse, alone.pairs)
    assert [path.name for path in cache.entries()] and cache.read(key) is not None
    shared = decode(reverse, key, *cache.read(key))
    assert shared.pairs == alone.pairs and shared.pieces == alone.pieces
    np.testing.assert_allclose(shared.patterns.divergence, alone.patterns.divergence, atol=1e-9)
    pd.testing.assert_frame_equal(shared.patterns.statistics, alone.patterns.statistics, atol=1e-9)
    assert shared.picture_sentences == alone.picture_sentences and shared.points.keys() == alone.points.keys()
    for head, (xy, argmax) in alone.points.items():
        np.testing.assert_allclose(shared.points[head][0], xy, atol=1e-4)
        np.testing.assert_array_equal(shared.points[head][1], argmax)
    for layer, frame in alone.neurons.items():
        pd.testing.assert_frame_equal(shared.neurons[layer].reset_index(drop=True), frame.reset_index(drop=True),
                                      check_dtype=False, atol=1e-5)


@pytest.mark.parametrize("where", ["a file", "under a file", "inside the checkpoint", "holding the checkpoint"])
def test_the_cache_command_refuses_a_folder_it_cannot_use_before_computing(tmp_path, monkeypatch, capsys, where):
    from transformer import corpus as command
    checkpoint = tmp_path / "checkpoints" / "reverse"
    checkpoint.mkdir(parents=True)
    (tmp_path / "file").write_text("a file")
    folder = {"a file": tmp_path / "file", "under a file": tmp_path / "file" / "cache",
              "inside the checkpoint": checkpoint / "cache", "holding the checkpoint": tmp_path}[where]
    monkeypatch.setattr(command, "Checkpoint", lambda *a: pytest.fail("the checkpoint was read before the check"))
    monkeypatch.setattr(command, "corpus_summary", lambda *a, **k: pytest.fail("computed before the check"))
    with pytest.raises(SystemExit) as refused:
        command.main(["cache", str(checkpoint), "--count", "4", "--cache", str(folder)])
    message = str(refused.value)
    assert message.startswith("error: ") and "\n" not in message and str(folder) in message
    assert (tmp_path / "file").read_text() == "a file" and not (checkpoint / "cache").exists()
