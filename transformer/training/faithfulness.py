"""How faithful is each attribution method? `python -m transformer.faithfulness --out checkpoints/faithfulness.json`
measures it on the shipped checkpoints, prints the table and writes the measurements as JSON (what the app shows;
`--table FILE` prints a saved file's table without measuring).

Alignment accuracy: on fresh inputs whose true alignment is known, the share of output pieces whose top-attributed
source position (the largest value, EOS included) is a true one:
  reverse  output t <-> input n-1-t.
  dates    (YYYY-MM-DD) each year digit <-> the year digit it copies; with a two-digit year ("D Mon YY") the century
           digits are computed from the two-digit field, so either of its digits counts. Month and day digits
           <-> the digit they copy when the input writes two digits; when it writes one ("3"), the leading "0" and
           the digit both <-> that one digit; a month written as a name: both digits <-> any character of the name.
           The dashes and </s> have no source and are not counted.
Deletion: on every checkpoint, for each output piece, delete its k top-attributed source tokens (never </s>),
re-run the decoder on the same prefix and measure the drop of the piece's probability; "random" deletes k random
tokens. A faithful method's deletions hurt most.
"""
from __future__ import annotations

import argparse
import datetime
import json
import random
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..analysis.attribution import METHODS, attribute
from ..data.tasks import DATE_FORMATS, FRESH_SEED, date_example, reverse_example
from ..inference.translation import Checkpoint
from .evaluate import evaluation_cases

SEED = FRESH_SEED + 19  # inputs no training run and no other evaluation uses
DELETION_KS = (1, 3)
RANDOM = "random"

# One pattern per date format, naming the characters of its day, month and year fields.
_DATE_PATTERNS = {
    "D Month YYYY": r"(?P<d>\d+) (?P<m>\w+) (?P<y>\d{4})",
    "Month D, YYYY": r"(?P<m>\w+) (?P<d>\d+), (?P<y>\d{4})",
    "Month Dth, YYYY": r"(?P<m>\w+) (?P<d>\d+)\w\w, (?P<y>\d{4})",
    "Dth of Month YYYY": r"(?P<d>\d+)\w\w of (?P<m>\w+) (?P<y>\d{4})",
    "MM/DD/YYYY": r"(?P<m>\d+)/(?P<d>\d+)/(?P<y>\d{4})",
    "D.M.YYYY": r"(?P<d>\d+)\.(?P<m>\d+)\.(?P<y>\d{4})",
    "YYYY-M-D": r"(?P<y>\d{4})-(?P<m>\d+)-(?P<d>\d+)",
    "Mon D YYYY": r"(?P<m>\w+) (?P<d>\d+) (?P<y>\d{4})",
    "D Mon YY": r"(?P<d>\d+) (?P<m>\w+) (?P<y>\d{2})",
    "Weekday, Month D, YYYY": r"\w+, (?P<m>\w+) (?P<d>\d+), (?P<y>\d{4})",
    "month D YYYY": r"(?P<m>\w+) (?P<d>\d+) (?P<y>\d{4})",
    "MONTH D, YYYY": r"(?P<m>\w+) (?P<d>\d+), (?P<y>\d{4})",
}
assert set(_DATE_PATTERNS) == set(DATE_FORMATS)


def _two_digits(span: range) -> list[set[int]]:
    """The true sources of a two-digit output field read from the characters `span`: the digit each copies when
    the input writes two; otherwise (one digit, or a month name) the whole field for both."""
    return [{span[0]}, {span[1]}] if len(span) == 2 else [set(span), set(span)]


def date_alignment(source: str, fmt: str) -> list[set[int] | None]:
    """The true source character positions of each of the 10 output characters YYYY-MM-DD (None for the dashes)."""
    match = re.fullmatch(_DATE_PATTERNS[fmt], source)
    if match is None:
        raise ValueError(f"{source!r} is not in format {fmt!r}")
    year, month, day = (range(*match.span(group)) for group in "ymd")
    if len(year) == 4:
        years = [{position} for position in year]
    else:
        years = [set(year), set(year), {year[0]}, {year[1]}]
    return [*years, None, *_two_digits(month), None, *_two_digits(day)]


def _top_is_true(matrix: np.ndarray, truth: Sequence[set[int] | None]) -> tuple[int, int]:
    """(hits, counted) over output rows with a true source set."""
    hits = counted = 0
    for row, true in enumerate(truth):
        if true is not None:
            counted += 1
            hits += int(np.argmax(matrix[row])) in true
    return hits, counted


@torch.no_grad()
def deletion_drops(model, src_ids: list[int], tgt_ids: list[int], output_ids: list[int],
                   methods: dict[str, np.ndarray], k: int, rng: random.Random) -> dict[str, list[float]]:
    """Per method (and RANDOM), the drop of p(y_t) when the k top source tokens of row t are deleted, for every
    output row t but the last (</s>), all deletions in one batched pass."""
    eos = len(src_ids) - 1
    candidates = list(range(eos))  # every source position but </s>
    if len(candidates) <= k:
        return {}
    rows, plans = [], []
    for name in [*methods, RANDOM]:
        for t in range(len(output_ids) - 1):
            if name == RANDOM:
                deleted = set(rng.sample(candidates, k))
            else:
                deleted = set(np.argsort(-methods[name][t, :eos], kind="stable")[:k].tolist())
            rows.append([token for j, token in enumerate(src_ids) if j not in deleted])
            plans.append((name, t))
    tgt, targets, positions = torch.tensor([tgt_ids]), torch.tensor(output_ids), torch.arange(len(tgt_ids))
    full = model(torch.tensor([src_ids]), tgt).softmax(-1)[0, positions, targets]  # (tgt_len,)
    shortened = torch.tensor(rows)  # (rows, src_len - k): every row lost k tokens
    after = model(shortened, tgt.expand(len(rows), -1)).softmax(-1)[:, positions, targets]  # (rows, tgt_len)
    drops: dict[str, list[float]] = {}
    for row, (name, t) in enumerate(plans):
        drops.setdefault(name, []).append(float(full[t] - after[row, t]))
    return drops


def _inputs(task: str, count: int) -> list[tuple[str, str | None]]:
    """(source text, date format or None) of fresh inputs."""
    rng = random.Random(SEED)
    if task == "reverse":
        return [(reverse_example(rng, rng.randint(4, 24))[0], None) for _ in range(count)]
    return [(date_example(rng, DATE_FORMATS[i % len(DATE_FORMATS)])[0], DATE_FORMATS[i % len(DATE_FORMATS)])
            for i in range(count)]


def faithfulness(checkpoint: Checkpoint, count: int, ig_steps: int = 16,
                 data: str | Sequence[str] | None = None) -> dict:
    """{"alignment": method -> share (synthetic tasks only), "deletion": k -> method -> mean drop, "inputs": n}."""
    task = checkpoint.card.task
    if task == "translate":
        inputs = [(source, None) for _, source, _ in evaluation_cases(checkpoint, 0, data)[:count]]
    else:
        inputs = _inputs(task, count)
    rng = random.Random(SEED)
    hits = {name: [0, 0] for name in METHODS}
    drops: dict[int, dict[str, list[float]]] = {k: {} for k in DELETION_KS}
    for text, fmt in inputs:
        translation = checkpoint.translate(text)
        methods, _ = attribute(checkpoint.model, translation.src_ids, translation.tgt_ids, translation.output_ids,
                               with_prefix=False, ig_steps=ig_steps)
        if task != "translate" and len(translation.src_ids) == len(text) + 1:  # one piece per character
            n = len(text)
            truth = [{n - 1 - t} if t < n else None for t in range(len(translation.output_ids))] \
                if task == "reverse" else date_alignment(text, fmt) + [None] * (len(translation.output_ids) - 10)
            for name, matrix in methods.items():
                hit, counted = _top_is_true(matrix, truth[:len(matrix)])
                hits[name][0] += hit
                hits[name][1] += counted
        for k in DELETION_KS:
            for name, values in deletion_drops(checkpoint.model, translation.src_ids, translation.tgt_ids,
                                               translation.output_ids, methods, k, rng).items():
                drops[k].setdefault(name, []).extend(values)
    alignment = {name: hit / counted for name, (hit, counted) in hits.items() if counted}
    deletion = {k: {name: float(np.mean(values)) for name, values in by_method.items()}
                for k, by_method in drops.items()}
    return {"alignment": alignment, "deletion": deletion, "inputs": len(inputs)}


def table_rows(results: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per method, alignment and deletion columns per checkpoint, as the table shows them."""
    header = ["method"]
    for name, result in results.items():
        if result["alignment"]:
            header.append(f"{name}: top = true")
        header += [f"{name}: drop k={k}" for k in DELETION_KS]
    rows = []
    for method in [*METHODS, RANDOM]:
        cells = [method]
        for result in results.values():
            if result["alignment"]:
                share = result["alignment"].get(method)
                cells.append("" if share is None else f"{share:.1%}")
            cells += [f"{result['deletion'][k].get(method, float('nan')):.3f}" for k in DELETION_KS]
        rows.append(cells)
    return header, rows


def table(results: dict[str, dict]) -> str:
    """A Markdown table: one row per method, alignment and deletion columns per checkpoint."""
    header, rows = table_rows(results)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


def _commit() -> str:
    """The checkout's commit ("" outside a git checkout)."""
    run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).parent, check=False)
    return run.stdout.strip() if run.returncode == 0 else ""


def save(path: str | Path, results: dict[str, dict], command: str) -> None:
    """The measurements as JSON, named by the date, the command and the commit that made them."""
    document = {"date": datetime.date.today().isoformat(), "command": command, "commit": _commit(),
                "results": results}
    Path(path).write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def load(path: str | Path) -> dict:
    """A saved file: {"date", "command", "commit", "results": checkpoint name -> faithfulness()'s dict}."""
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    for result in document["results"].values():  # JSON keys are strings: k back to an int
        result["deletion"] = {int(k): drops for k, drops in result["deletion"].items()}
    return document


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m transformer.faithfulness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="*", default=["checkpoints/reverse", "checkpoints/dates",
                                                            "checkpoints/eng-fra"])
    parser.add_argument("--inputs", type=int, default=30, help="fresh inputs (or dev sentences) per checkpoint")
    parser.add_argument("--ig-steps", type=int, default=16, help="integration points of integrated gradients")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data", nargs="+", metavar="[NAME=]PATH[,TARGET]",
                        help="translation corpora, if not where the card says")
    parser.add_argument("--out", type=Path, help="write the measurements here as JSON (checkpoints/faithfulness.json "
                                                 "is the shipped checkpoints' table, which the app shows)")
    parser.add_argument("--table", type=Path, metavar="FILE", help="print the table of a saved file; measure nothing")
    args = parser.parse_args(argv)
    if args.table:
        print(table(load(args.table)["results"]))
        return
    torch.set_num_threads(args.threads)
    results = {}
    for path in args.checkpoints:
        checkpoint = Checkpoint(path)
        start = time.perf_counter()
        results[checkpoint.name] = faithfulness(checkpoint, args.inputs, args.ig_steps, args.data)
        print(f"{checkpoint.name}: {results[checkpoint.name]['inputs']} inputs, "
              f"{time.perf_counter() - start:.0f} s", flush=True)
    print()
    print(table(results))
    if args.out:
        arguments = list(argv) if argv is not None else sys.argv[1:]
        save(args.out, results, shlex.join(["python", "-m", "transformer.faithfulness", *arguments]))

