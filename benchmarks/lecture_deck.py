"""A room following a lecturer through the shipped deck, on a server that warms it and one that does not:
the load test's --deck (benchmarks.load.deck) on the shipped checkpoints, summarised."""
from __future__ import annotations

import shutil
from pathlib import Path

from deploy.server import ROOT

from .common import Setup, result, skipped

FIGURE = "deck"
P95_AT_MOST = 1.5  # s: a lecture hall's target (docs/load-test.md), here on the slowest slide of a warmed deck


def shipped_folder(setup: Setup) -> Path:
    """A copy of the shipped checkpoints, which the deck's slides name (a trainer writing into the originals must not
    change what is measured)."""
    folder = setup.workdir / "app-shipped"
    if not folder.exists():
        shutil.copytree(ROOT / "checkpoints", folder, ignore=shutil.ignore_patterns("resume.pt"))
    return folder


def measure(setup: Setup) -> list[dict]:
    try:
        from .load import run_deck  # optional: the load test is a package of its own
    except ImportError as error:
        return [skipped(FIGURE, f"benchmarks.load cannot be imported ({error})")]
    students, slides = (2, 2) if setup.smoke else (40, None)
    deck = run_deck(shipped_folder(setup), students=students, slides=slides, log_dir=setup.workdir)
    case = f"{students} students following the shipped deck ({deck['slides']} slides)"
    warmed, cold = deck["summary"]["warmed"], deck["summary"]["not_warmed"]
    lecturer = {name: max((s for s in deck[name]["lecturer_s"] if s is not None), default=float("nan"))
                for name in ("warmed", "not_warmed")}
    return [
        result(FIGURE, f"students' p95 s on the slowest slide, {case}, warmed", warmed["worst_p95_s"], "s",
               at_most=P95_AT_MOST, median_slide_s=warmed["median_p95_s"],
               p95_by_slide_s=deck["warmed"]["p95_by_slide_s"], warm_up_s=deck["warmed"]["warm_up_s"]),
        result(FIGURE, f"students' p95 s on the slowest slide, {case}, not warmed", cold["worst_p95_s"], "s",
               median_slide_s=cold["median_p95_s"], p95_by_slide_s=deck["not_warmed"]["p95_by_slide_s"]),
        result(FIGURE, f"students' p95 on the median slide, not warmed / warmed, {case}", deck["median_ratio"], "×"),
        result(FIGURE, f"students' p95 on the slowest slide, not warmed / warmed, {case}", deck["worst_ratio"], "×"),
        result(FIGURE, f"the lecturer's longest wait for a slide, {case}, warmed", lecturer["warmed"], "s",
               by_slide_s=deck["warmed"]["lecturer_s"]),
        result(FIGURE, f"the lecturer's longest wait for a slide, {case}, not warmed", lecturer["not_warmed"], "s",
               by_slide_s=deck["not_warmed"]["lecturer_s"]),
        result(FIGURE, f"errors, {case}", len(deck["errors"]), "", first_errors=deck["errors"][:5]),
    ]
