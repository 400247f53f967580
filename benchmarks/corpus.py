"""Across inputs: the corpus summary of 1,000 sentences computed once (every head's patterns, every head's queries and
keys, every neuron's top examples), read back from the disk cache as a restarted server does, and each picture built
from it, as the Across inputs view builds them; what a lecturer waits for once: the view's default summary (200
inputs) of every shipped checkpoint, heads matched with a training snapshot, a head followed through the snapshots,
and one head's t-SNE picture (the view's promises and its progress bars are held to these)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from deploy.server import ROOT
from transformer import load_checkpoint
from transformer.analysis.corpus_heads import corpus_unavailable
from transformer.analysis.corpus_summary import SENTENCES as VIEW_SENTENCES
from transformer.analysis.corpus_summary import (
    corpus_pairs_list,
    corpus_summary,
    followed_head,
    matched_heads,
    tsne_picture,
)
from transformer.analysis.qk_space import attended_nearest_share
from transformer.data.tasks import generate
from transformer.io.disk_cache import DiskCache
from viz import head_map_figure, neuron_examples_table, queries_keys_figure

from .common import Setup, result, side_by_side

FIGURE = "corpus summary"
SENTENCES = 1000  # the most the view reads
COMPUTED_AT_MOST = 60.0  # seconds for 1,000 of eng-fra's dev sentences on a 2-core machine
PICTURE_AT_MOST = 1.0  # seconds for each picture once the summary is read
WAIT_AT_MOST = 10.0  # seconds a lecturer waits for one thing the view computes once (summary, match, t-SNE)
SHIPPED = ("reverse", "reverse-1layer", "dates", "induction", "eng-fra", "english-lm")
RANKS = 2  # torchrun's processes against one process of as many threads


def measure(setup: Setup) -> list[dict]:
    checkpoint = load_checkpoint(setup.checkpoint)
    count = 20 if setup.smoke else SENTENCES
    # The checkpoint's own corpus; a random model of no task reads reversed strings (the numbers are the same work).
    pairs = (generate("reverse", count, seed=0) if checkpoint.card.task == "benchmark" or corpus_unavailable(checkpoint)
             else corpus_pairs_list(checkpoint, count))
    cache = DiskCache(setup.workdir / "corpus-cache")
    start = time.perf_counter()
    summary = corpus_summary(checkpoint, pairs=pairs, cache=cache)
    computed = time.perf_counter() - start
    size = cache.path(summary.key).stat().st_size
    note = f"{len(pairs)} sentences, {len(summary.points)} heads, entry {size / 2**20:.1f} MB"
    rows = [result(FIGURE, f"computed and kept, {len(pairs)} sentences", computed, "s",
                   at_most=None if setup.smoke else COMPUTED_AT_MOST, detail=note)]
    head = next(head for head in summary.points if head[0] == "decoder.cross_attn") if any(
        head[0] == "decoder.cross_attn" for head in summary.points) else next(iter(summary.points))
    layer = next(iter(summary.neurons))

    def map_figure():
        return head_map_figure(summary.map())

    def picture_figure():
        frame = summary.picture(head)
        attended_nearest_share(frame, causal=head[0] == "decoder.self_attn")  # the share the caption gives
        return queries_keys_figure(frame)

    def neurons_table():
        return neuron_examples_table(summary.neuron_examples(layer, 0))

    seconds = side_by_side({"read": lambda: corpus_summary(checkpoint, pairs=pairs, cache=cache),
                            "map": map_figure, "picture": picture_figure, "neurons": neurons_table},
                           repeats=setup.repeats)
    rows.append(result(FIGURE, "read back from the disk cache (a restarted server)", seconds["read"], "s",
                       detail=note))
    for name, case in (("map", "map of heads"),
                       ("picture", f"queries and keys of {head[0]} L{head[1]} H{head[2]} (PCA)"),
                       ("neurons", f"top examples of one neuron of the {layer[0]} layer {layer[1]}")):
        rows.append(result(FIGURE, f"{case}, from the summary", seconds[name], "s", at_most=PICTURE_AT_MOST,
                           detail=note))
    rows += _waits(setup, checkpoint, summary, head, cache)
    if not setup.smoke:
        rows += _view_defaults(setup)
    if not setup.smoke and pairs == corpus_pairs_list(checkpoint, count):  # the command reads the card's corpus
        rows += _command_line(setup, count)
    return rows


def _waits(setup: Setup, checkpoint, summary, head, cache: DiskCache) -> list[dict]:
    """What the view computes once from a summary and keeps: heads matched with the first training snapshot, the
    head followed through every snapshot, and the head's t-SNE picture (each timed once, into an empty cache)."""
    rows, note = [], f"{len(summary.pairs)} sentences"
    waits = {f"t-SNE picture of {head[0]} L{head[1]} H{head[2]}": lambda: tsne_picture(checkpoint, summary, head,
                                                                                     cache=cache)}
    if checkpoint.card.snapshots:
        first = checkpoint.card.snapshots[0]["name"]
        waits[f"heads matched with the snapshot {first}"] = lambda: matched_heads(
            checkpoint, checkpoint.load_snapshot(first), summary, cache=cache)
        waits[f"{head[0]} L{head[1]} H{head[2]} followed through {len(checkpoint.card.snapshots)} snapshots"] = \
            lambda: followed_head(checkpoint, summary, head, cache=cache)
    for case, wait in waits.items():
        start = time.perf_counter()
        wait()
        rows.append(result(FIGURE, f"{case}, computed and kept", time.perf_counter() - start, "s",
                           at_most=None if setup.smoke else WAIT_AT_MOST, detail=note))
    return rows


def _view_defaults(setup: Setup) -> list[dict]:
    """The view's default summary (VIEW_SENTENCES inputs) of every shipped checkpoint, computed into an empty cache:
    what "Read 200 inputs" makes a lecturer wait for (its progress bar moves once per chunk)."""
    rows = []
    for name in SHIPPED:
        checkpoint = load_checkpoint(ROOT / "checkpoints" / name)
        pairs = corpus_pairs_list(checkpoint, VIEW_SENTENCES)
        start = time.perf_counter()
        corpus_summary(checkpoint, pairs=pairs, cache=DiskCache(setup.workdir / f"view-default-{name}"))
        rows.append(result(FIGURE, f"{name}: the view's default, {len(pairs)} inputs, computed and kept",
                           time.perf_counter() - start, "s", at_most=WAIT_AT_MOST,
                           detail=f"{checkpoint.model.config.d_model} wide, {checkpoint.card.parameters:,} parameters"))
    return rows


def _command_line(setup: Setup, count: int) -> list[dict]:
    """`python -m transformer.corpus cache` in one process of RANKS threads, and under torchrun in RANKS processes of
    one thread each, each into an empty cache: wall seconds of the whole command (Python and torch starting
    included)."""
    with socket.socket() as probe:  # a free port on loopback for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    arguments = ["cache", str(setup.checkpoint), "--count", str(count)]
    commands = {
        "one process": [sys.executable, "-m", "transformer.corpus", *arguments, "--threads", str(RANKS)],
        "torchrun": [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={RANKS}",
                     "--master_addr=127.0.0.1", f"--master_port={port}", "-m", "transformer.corpus", *arguments],
    }
    seconds = {}
    for name, command in commands.items():
        folder = setup.workdir / f"corpus-cache-{name.replace(' ', '-')}"
        start = time.perf_counter()
        subprocess.run([*command, "--cache", str(folder)], cwd=ROOT, check=True, capture_output=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
        seconds[name] = time.perf_counter() - start
    detail = f"{count} sentences; torchrun / one process = {seconds['torchrun'] / seconds['one process']:.2f}"
    return [result(FIGURE, f"`transformer.corpus cache`, one process of {RANKS} threads", seconds["one process"],
                   "s", detail=detail),
            result(FIGURE, f"`transformer.corpus cache` under torchrun, {RANKS} processes of 1 thread",
                   seconds["torchrun"], "s", detail=detail)]
