"""Heads across a corpus, from the command line.

    python -m transformer.corpus run checkpoints/eng-fra --out heads.parquet        # its dev split
    torchrun --nproc_per_node=2 -m transformer.corpus run checkpoints/eng-fra --out heads.parquet
    python -m transformer.corpus rank heads.parquet --statistic previous_share
    python -m transformer.corpus top heads.parquet --head decoder.self_attn.1.2 --statistic previous_share
    python -m transformer.corpus cache checkpoints/eng-fra --count 1000 --threads 2
    torchrun --nproc_per_node=2 -m transformer.corpus cache checkpoints/eng-fra --count 1000

`run`, `rank` and `top`: per-sentence statistics of every head in a Parquet file, heads ranked by one, and one head's
top sentences (transformer.analysis.corpus_heads). `cache`: what the app's Across inputs view draws (the map of heads,
every head's queries and keys, neurons' top examples: transformer.analysis.corpus_summary), computed ahead of time
into the disk cache the app reads ($ATLAS_CACHE, default ~/.cache/attention-atlas), so that the view opens at once.
Under torchrun, `run` and `cache` share the corpus between the ranks (chunk i to rank i % N; `cache` also shares the
heads' pictures), and rank 0 writes the result.
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
from .analysis.corpus_summary import SENTENCES, corpus_pairs_list, corpus_summary
from .inference.translation import Checkpoint
from .io.disk_cache import DiskCache


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
    top_parser.add_argument("--head", required=True, help="kind.layer.head, e.g. decoder.self_attn.1.2")
    top_parser.add_argument("--statistic", default="previous_share", choices=list(STATISTICS))
    top_parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)

    if args.command == "rank":
        print(rank_heads(args.parquet, args.statistic).head(args.top).to_string(index=False))
    elif args.command == "top":
        kind, layer, head = args.head.rsplit(".", 2)
        frame = top_sentences(args.parquet, kind, int(layer), int(head), args.statistic, args.top)
        print(frame.to_string(index=False))
    else:
        torch.set_num_threads(args.threads)
        distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1  # under torchrun: the ranks share the corpus
        if distributed:
            dist.init_process_group("gloo")
        checkpoint = Checkpoint(args.checkpoint)
        start = time.perf_counter()
        if args.command == "cache":
            cache = DiskCache(args.cache)
            pairs = corpus_pairs_list(checkpoint, args.count) if args.data is None else \
                list(corpus_pairs(checkpoint, args.count, args.data))
            summary = corpus_summary(checkpoint, pairs=pairs, cache=cache, distributed=distributed)
            if process_share()[0] == 0:
                print(f"{checkpoint.name}: {len(summary.pairs)} sentences summarised in "
                      f"{time.perf_counter() - start:.1f} s into {cache.path(summary.key)} "
                      f"({cache.path(summary.key).stat().st_size / 2**20:.1f} MiB; the folder holds "
                      f"{cache.size() / 2**20:.1f} of its {cache.max_bytes / 2**20:.0f} MiB)", flush=True)
        else:
            sentences = run(checkpoint, args.out, corpus_pairs(checkpoint, args.count, args.data), args.batch_size)
            print(f"rank {process_share()[0]}: {sentences} sentences in {time.perf_counter() - start:.1f} s, "
                  f"peak memory {peak_memory_mib():.0f} MiB", flush=True)
        if distributed:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
