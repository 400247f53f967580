"""Measure Attention Atlas' performance on this machine: `python -m benchmarks [--smoke] [--only NAME ...]`.

Prints Markdown tables (docs/performance.md's latest run is this output), writes every row as JSON, and checks
each figure against its target. Every figure is a ratio or a time measured side by side in one run (median of
several repeats after a warm-up), because shared machines are noisy. --smoke runs everything on a tiny random
model at tiny sizes: it proves the benchmark still runs, and its numbers mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from deploy.server import ROOT
from transformer import CheckpointError, load_checkpoint

from . import (
    app_latency,
    batching,
    browser,
    capture,
    corpus,
    decoding,
    gpu,
    lecture_deck,
    live_pack,
    memory,
    model_view,
    sessions,
    smollm,
    training,
)
from .common import Setup
from .fixtures import char_tokenizer, random_checkpoint, tiny_config

FIGURES = {
    "capture": capture.measure,  # 1. capture overhead
    "training": training.measure,  # 2. training speed against torch.nn.Transformer
    "decoding": decoding.measure,  # 3. key/value cache and guessing speed-ups
    "app": app_latency.measure,  # 4. AppTest latency
    "browser": browser.measure,  # 5. Chromium render
    "first_visit": browser.first_figure,  # the first figure for the first visitor of a fresh server
    "memory": memory.measure,  # 6. peak RSS
    "model_view": model_view.measure,  # the model view figure's build time and size
    "load": sessions.measure,  # many sessions at once (benchmarks.load)
    "deck": lecture_deck.measure,  # a room following a lecturer's deck, warmed and not (benchmarks.load --deck)
    "batching": batching.measure,  # translations decoded as one batch ÷ one at a time
    "hall": batching.hall,  # a hall typing its own sentences at once, batching on and off (benchmarks.load --hall)
    "gpu": gpu.measure,  # the 256-token model view's model work on a GPU, where there is one
    "smollm": smollm.measure,  # a random model of SmolLM2-135M's shape: Enter, model view, capture, server memory
    "corpus": corpus.measure,  # the Across inputs view's corpus summary: computed, read back, each picture from it
    "live_pack": live_pack.measure,  # the shipped deck --live in Chromium: size, first figure, a typed sentence, memory
}
UNITS = {"×": "{:.2f}×", "s": "{:.3f} s", "MB": "{:.1f} MB", "B": "{:,.0f} B", "": "{:g}"}


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.exists() else []
    return (f"{names[0] if names else platform.processor()}, {os.cpu_count()} cores, {platform.system()}, "
            f"Python {platform.python_version()}, torch {torch.__version__} ({torch.get_num_threads()} thread(s)), "
            f"load average {os.getloadavg()[0]:.1f} at the start")


def value_text(row: dict) -> str:
    return "—" if row["value"] is None else UNITS[row["unit"]].format(row["value"])


def verdict(row: dict) -> str:
    return {True: "met", False: "**missed**", None: ""}[row["met"]]


def markdown(rows: list[dict]) -> str:
    lines = ["| figure | case | value | target | |", "| --- | --- | ---: | --- | --- |"]
    lines += [f"| {row['figure']} | {row['case']} | {value_text(row)} | {row['target']} | {verdict(row)} |"
              for row in rows]
    return "\n".join(lines)


def scaling(rows: list[dict]) -> str:
    """Each length-dependent series as a row, one column per sequence length."""
    series: dict[str, dict[int, dict]] = {}
    for row in rows:
        if "series" in row and row["value"] is not None:
            series.setdefault(row["series"], {})[row["tokens"]] = row
    lengths = sorted({tokens for by_length in series.values() for tokens in by_length})
    lines = ["| grows with length | " + " | ".join(f"{tokens} tokens" for tokens in lengths) + " |",
             "| --- |" + " ---: |" * len(lengths)]
    lines += [f"| {name} | " + " | ".join(value_text(by_length[t]) if t in by_length else "" for t in lengths) + " |"
              for name, by_length in series.items()]
    return "\n".join(lines)


def smoke_checkpoint(workdir: Path) -> Path:
    """A tiny random model on a character vocabulary: every figure in seconds."""
    tokenizer = char_tokenizer(workdir)
    return random_checkpoint(workdir / "tiny-random", tiny_config(tokenizer.vocab_size, max_len=64), tokenizer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny random model, tiny sizes, one repeat")
    parser.add_argument("--checkpoint", type=Path, nargs="+",
                        help="checkpoint folder(s) to measure (default: checkpoints/eng-fra; with --smoke, a tiny "
                             "random one); several are measured one after another in this run, each row named by its "
                             "folder (new weights beside the old)")
    parser.add_argument("--json", type=Path, help="where to write rows (default: benchmarks/results.json for a run of "
                                                  "every figure on a real checkpoint; --only and --smoke write only "
                                                  "where this says, so the committed file keeps a whole run)")
    parser.add_argument("--only", nargs="+", choices=FIGURES, metavar="NAME", help=f"some of: {', '.join(FIGURES)}")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's intra-op threads here and in the processes started (the app server always runs "
                             "1): one keeps the figures from depending on whether another process holds a core")
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # inherited by the fresh processes of the memory figures
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    started_on = machine()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="atlas-benchmarks-") as scratch:
        workdir = Path(scratch)
        checkpoints = args.checkpoint or [smoke_checkpoint(workdir) if args.smoke else
                                          ROOT / "checkpoints" / "eng-fra"]
        for checkpoint in checkpoints:
            try:
                load_checkpoint(checkpoint)
            except CheckpointError as error:
                parser.error(f"cannot measure {checkpoint}: {error} (still training? pass --checkpoint)")
        for checkpoint in checkpoints:
            setup = Setup(checkpoint.resolve(), workdir, args.smoke)
            for name in args.only or FIGURES:
                print(f"[{time.perf_counter() - start:5.0f} s] {name}", file=sys.stderr, flush=True)
                try:
                    measured = FIGURES[name](setup)
                except Exception as error:  # one broken figure must not hide the others
                    traceback.print_exc()
                    first_line = (str(error).splitlines() or [""])[0]
                    measured = [{"figure": name, "case": f"failed: {type(error).__name__}: {first_line}",
                                 "value": None, "unit": "", "target": "", "met": None, "error": True}]
                if len(checkpoints) > 1:  # the rows of several checkpoints say whose they are
                    measured = [{**row, **{key: f"{checkpoint}: {row[key]}" for key in ("case", "series")
                                           if key in row}} for row in measured]
                rows += measured
    seconds = time.perf_counter() - start
    # Relative to the repository: the file is committed, and the machine's own folders mean nothing elsewhere.
    report = {"machine": started_on,
              "checkpoint": ", ".join(os.path.relpath(folder.resolve(), ROOT.resolve()) for folder in checkpoints),
              "smoke": args.smoke, "seconds": seconds,
              "rows": rows}
    written = args.json or (None if args.only or args.smoke else Path(__file__).parent / "results.json")
    if written is not None:
        written.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    missed = [row for row in rows if row["met"] is False]
    print(f"Measured on {started_on}; {', '.join(f'`{folder}`' for folder in checkpoints)}; {seconds:.0f} s in all.\n")
    print(markdown(rows) + "\n\n" + scaling(rows) + "\n")
    print(f"{sum(row['met'] is True for row in rows)} targets met, {len(missed)} missed"
          + "".join(f"\n- missed: {row['figure']}, {row['case']}: {value_text(row)} (target {row['target']})"
                    for row in missed))
    return 1 if any(row.get("error") for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
