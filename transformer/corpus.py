"""Heads across a corpus, from the command line.

    python -m transformer.corpus run checkpoints/eng-fra --out heads.parquet        # its dev split
    torchrun --nproc_per_node=2 -m transformer.corpus run checkpoints/eng-fra --out heads.parquet
    python -m transformer.corpus rank heads.parquet --statistic previous_share
    python -m transformer.corpus top heads.parquet --head decoder.self_attn.1.2 --statistic previous_share
    python -m transformer.corpus cache checkpoints/eng-fra --count 1000 --threads 2
    torchrun --nproc_per_node=2 -m transformer.corpus cache checkpoints/eng-fra --count 1000
    python -m transformer.corpus sample checkpoints/eng-fra

`run`, `rank` and `top`: per-sentence statistics of every head in a Parquet file, heads ranked by one, and one head's
top sentences (transformer.analysis.corpus_heads). `cache`: what the app's Across inputs view draws (the map of heads,
every head's queries and keys, neurons' top examples: transformer.analysis.corpus_summary), computed ahead of time
into the disk cache the app reads ($ATLAS_CACHE, default ~/.cache/attention-atlas), so that the view opens at once.
Under torchrun, `run` and `cache` share the corpus between the ranks (chunk i to rank i % N; `cache` also shares the
heads' pictures), and rank 0 writes the result. `sample`: the first pairs of the card's corpus (its dev split, its
held-out sentences) into the checkpoint's folder (transformer.analysis.corpus_sample), for a machine without the
corpus; run it where the corpus is, after each training.
"""
from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from .analysis.corpus_heads import (
    STATISTICS,
    corpus_pairs,
    peak_memory_mib,
    process_share,
    rank_heads,
    run,
    top_sentences,
)
from .analysis.corpus_sample import MAX_SAMPLE_PAIRS, SAMPLE_FILE, write_sample
from .analysis.corpus_summary import SENTENCES, corpus_pairs_list, corpus_summary
from .data.corpora import CorpusSpec, missing_corpus_files
from .data.tasks import CORPUS_TASKS
from .inference.translation import Checkpoint
from .io.disk_cache import DiskCache
from .io.safety import OutputOverInput, refuse_output_over_inputs
from .model.sites import Site, parse_head


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m transformer.corpus", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="statistics of every sentence to Parquet")
    run_parser.add_argument("checkpoint")
    run_parser.add_argument("--out", required=True)
    run_parser.add_argument("--count", type=int, help="at most this many sentences (synthetic tasks: default 1000)")
    run_parser.add_argument("--batch-size", type=int, default=64, help="sentences per chunk (one row group each)")
    cache_parser = commands.add_parser("cache", help="the Across inputs view's summary, into the app's disk cache")
    cache_parser.add_argument("checkpoint")
    cache_parser.add_argument("--count", type=int, default=SENTENCES,
                              help=f"sentences (default {SENTENCES}; the view offers up to 1000)")
    cache_parser.add_argument("--cache", help="the cache folder (default: $ATLAS_CACHE, or ~/.cache/attention-atlas)")
    sample_parser = commands.add_parser("sample", help=f"the first pairs of the card's corpus into {SAMPLE_FILE}")
    sample_parser.add_argument("checkpoint")
    sample_parser.add_argument("--count", type=int, default=MAX_SAMPLE_PAIRS,
                               help=f"pairs (default and at most {MAX_SAMPLE_PAIRS})")
    for sub in (run_parser, cache_parser):
        sub.add_argument("--data", nargs="+", metavar="[NAME=]PATH[,TARGET]",
                         help="translation corpora, if not where the card says")
        sub.add_argument("--threads", type=int, default=1)
    rank_parser = commands.add_parser("rank", help="heads by a statistic's mean over the corpus")
    rank_parser.add_argument("parquet")
    rank_parser.add_argument("--statistic", default="previous_share", choices=list(STATISTICS))
    rank_parser.add_argument("--top", type=int, default=10)
    top_parser = commands.add_parser("top", help="sentences where one head's statistic is highest")
    top_parser.add_argument("parquet")
    top_parser.add_argument("--head", required=True, type=_head,
                            help="one head: kind.layer.head (decoder.self_attn.1.2) or site:head (decoder.1.self:2)")
    top_parser.add_argument("--statistic", default="previous_share", choices=list(STATISTICS))
    top_parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)

    if args.command == "sample":
        print(_sample(args.checkpoint, args.count))
    elif args.command == "rank":
        print(rank_heads(args.parquet, args.statistic).head(args.top).to_string(index=False))
    elif args.command == "top":
        site, head = args.head
        frame = top_sentences(args.parquet, site.kind, site.layer, head, args.statistic, args.top)
        print(frame.to_string(index=False))
    else:
        torch.set_num_threads(args.threads)
        distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1  # under torchrun: the ranks share the corpus
        if distributed:
            dist.init_process_group("gloo")
        if args.command == "cache":
            cache = DiskCache(args.cache)
            problem = _unwritable(cache, args.checkpoint, args.data)
            if problem:  # said before anything is computed
                raise SystemExit(f"error: {problem}")
        checkpoint = Checkpoint(args.checkpoint)
        start = time.perf_counter()
        if args.command == "cache":
            pairs = corpus_pairs_list(checkpoint, args.count) if args.data is None else \
                list(corpus_pairs(checkpoint, args.count, args.data))
            summary = corpus_summary(checkpoint, pairs=pairs, cache=cache, distributed=distributed)
            if process_share()[0] == 0:
                print(f"{checkpoint.name}: {len(summary.pairs)} sentences summarised in "
                      f"{time.perf_counter() - start:.1f} s into {cache.path(summary.key)} "
                      f"({cache.path(summary.key).stat().st_size / 2**20:.1f} MiB; the folder holds "
                      f"{cache.size() / 2**20:.1f} of its {cache.max_bytes / 2**20:g} MiB)", flush=True)
        else:
            sentences = run(checkpoint, args.out, corpus_pairs(checkpoint, args.count, args.data), args.batch_size)
            print(f"rank {process_share()[0]}: {sentences} sentences in {time.perf_counter() - start:.1f} s, "
                  f"peak memory {peak_memory_mib():.0f} MiB", flush=True)
        if distributed:
            dist.destroy_process_group()


def _head(text: str) -> tuple[Site, int]:
    """--head's value: one head in any spelling transformer.model.sites reads."""
    try:
        return parse_head(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _sample(folder: str, count: int) -> str:
    """Write the checkpoint's sample (SAMPLE_FILE) from the card's own corpus; what was written, in a line."""
    checkpoint = Checkpoint(folder)
    if checkpoint.card.task not in CORPUS_TASKS:
        raise SystemExit(f"error: {checkpoint.name} reads no corpus ({checkpoint.card.task}: its inputs are made by "
                         "its task's generator): it needs no sample")
    missing = missing_corpus_files(checkpoint.card.training) if "data" in checkpoint.card.training else ["its card"]
    if missing:  # a sample is the card's corpus itself, never another one
        raise SystemExit(f"error: {checkpoint.name}: its corpus is not on this machine ({', '.join(missing)})")
    pairs = list(corpus_pairs(checkpoint, min(count, MAX_SAMPLE_PAIRS)))
    what = "pairs of this checkpoint's dev split" if checkpoint.card.task == "translate" else \
        "of this language model's held-out sentences (each as ['', sentence])"
    path = write_sample(checkpoint, pairs, what)
    return f"{checkpoint.name}: {len(pairs)} pairs into {path} ({path.stat().st_size / 1024:.0f} KB)"


def _unwritable(cache: DiskCache, checkpoint: str, data: Sequence[str] | None) -> str:
    """Why `cache` cannot take the summary ("" if it can): it is, holds or lies inside what the command reads (the
    checkpoint's folder, a corpus file), or it is not a folder this user may write in."""
    specs = [CorpusSpec.parse(text) for text in data or []]
    try:
        refuse_output_over_inputs(cache.folder, [checkpoint, *(path for spec in specs
                                                               for path in (spec.source, spec.target) if path)])
    except OutputOverInput as error:
        return f"--cache {error}"
    return cache.writable()

if __name__ == "__main__":
    main()
