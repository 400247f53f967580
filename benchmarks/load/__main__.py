"""`python -m benchmarks.load`: one scenario per run (the default load, --lecture, --hall, --churn or --deck), its
table printed, its result written as JSON with --json; exits 1 on any error."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import benchmarks.load
from deploy.server import ROOT

from .churn import churn_table, run_churn
from .client import TIMEOUT_S
from .crowd import run_load, table
from .deck import DECK, deck_table, run_deck
from .hall import HALL_CLICKS, hall_table, run_hall
from .inputs import INPUT_KINDS
from .proxy import throughput


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load",
                                     description=benchmarks.load.__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20, help="concurrent sessions (default 20)")
    parser.add_argument("--seconds", type=float, default=60, help="how long the load lasts (default 60)")
    parser.add_argument("--checkpoints", type=Path, default=ROOT / "checkpoints", help="the folder the app serves")
    parser.add_argument("--checkpoint", default="reverse", help="the checkpoint every session uses (default reverse)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"bound on one interaction, s ({TIMEOUT_S})")
    parser.add_argument("--think", type=float, default=0.5, help="mean pause between two clicks, s (default 0.5)")
    parser.add_argument("--inputs", choices=INPUT_KINDS, default="letters", help="what the sessions type: random "
                        "letters and digits (default), or the checkpoint's evaluation inputs (dev sentences)")
    parser.add_argument("--lecture", action="store_true", help="every session opens the same link, then clicks "
                        "heads, layers and views")
    parser.add_argument("--hall", action="store_true", help="every session opens the lecture's link, then all type "
                        "a dev sentence of their own at once and click about it, --rounds times")
    parser.add_argument("--rounds", type=int, default=2, help="--hall: how many times the hall types (default 2)")
    parser.add_argument("--clicks", type=int, default=HALL_CLICKS, help="--hall: clicks after each new input "
                        f"(default {HALL_CLICKS}; 0: the hall only types, on the lecture's view)")
    parser.add_argument("--no-batching", action="store_true", help="--hall: decode each translation alone "
                        "(ATLAS_BATCH_SIZE=1)")
    parser.add_argument("--via-proxy", type=int, nargs="*", metavar="K", help="run the app as K processes behind "
                        "nginx, once per K given (default: 1 2), and compare their throughput")
    parser.add_argument("--code", metavar="COMMIT", help="--hall, --lecture and the default load: serve the app as "
                        "it was at this commit (a temporary git worktree), to compare it with this checkout's")
    parser.add_argument("--churn", type=int, metavar="N", help="instead: open and close N sessions in turn and "
                        "read the server's memory")
    parser.add_argument("--deck", nargs="?", const=DECK, metavar="NAME", help="instead: --sessions students follow "
                        f"a lecturer through a deck (default {DECK}), warmed and not warmed")
    parser.add_argument("--slides", type=int, help="with --deck: only its first N slides")
    parser.add_argument("--json", type=Path, help="also write the whole result here")
    return parser


def processes_of(args: argparse.Namespace) -> list[int | None]:
    """One run per number of app processes: one process without the proxy (None), else each K given."""
    return [None] if args.via_proxy is None else (args.via_proxy or [1, 2])


def deck_run(args: argparse.Namespace) -> list[dict]:
    result = run_deck(args.checkpoints, args.deck, args.sessions, args.slides, timeout_s=args.timeout)
    print(deck_table(result))
    return [result]


def hall_runs(args: argparse.Namespace) -> list[dict]:
    results = [run_hall(args.checkpoints, args.checkpoint, args.sessions, args.rounds, clicks=args.clicks,
                        processes=k, batching=not args.no_batching, timeout_s=args.timeout, think_s=args.think,
                        code=args.code)
               for k in processes_of(args)]
    print("\n\n".join(hall_table(result) for result in results))
    return results


def churn_run(args: argparse.Namespace) -> list[dict]:
    result = run_churn(args.checkpoints, args.checkpoint, args.churn, timeout_s=args.timeout)
    print(churn_table(result))
    return [result]


def load_runs(args: argparse.Namespace) -> list[dict]:
    results = [run_load(args.checkpoints, args.checkpoint, args.sessions, args.seconds, timeout_s=args.timeout,
                        think_s=args.think, lecture=args.lecture, inputs=args.inputs, processes=k, code=args.code)
               for k in processes_of(args)]
    print("\n\n".join(table(result) for result in results))
    if len(results) > 1:
        print("\n" + throughput(results))
    return results


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.deck:
        results = deck_run(args)
    elif args.hall:
        results = hall_runs(args)
    elif args.churn:
        results = churn_run(args)
    else:
        results = load_runs(args)
    if args.json:
        args.json.write_text(json.dumps(results[0] if len(results) == 1 else results, indent=1))
    return 1 if any(result["errors"] for result in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
