"""What every benchmark shares: its settings, the one timing helper, and the shape of a result row."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setup:
    checkpoint: Path  # the checkpoint folder measured (eng-fra unless --checkpoint says otherwise)
    workdir: Path  # a temporary folder for throwaway checkpoints, logs and app folders
    smoke: bool  # tiny sizes and a single repeat: checks that the benchmark runs, measures nothing

    @property
    def repeats(self) -> int:
        return 1 if self.smoke else 5


def side_by_side(candidates: Mapping[str, Callable[[], object]], repeats: int, warmup: int = 1,
                 prepare: Mapping[str, Callable[[], object]] | None = None) -> dict[str, float]:
    """Median wall seconds of each candidate over `repeats` rounds, after `warmup` untimed rounds.

    Every round runs each candidate once, in order, so a burst of load from another process hits all of them
    alike and their ratio stays meaningful on a noisy machine. `prepare[name]()` runs untimed right before that
    candidate (for example: open a fresh page before timing what happens in it)."""
    prepare = prepare or {}
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    for round_index in range(warmup + repeats):
        for name, candidate in candidates.items():
            if name in prepare:
                prepare[name]()
            start = time.perf_counter()
            candidate()
            if round_index >= warmup:
                seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in seconds.items()}


def result(figure: str, case: str, value: float, unit: str, *, at_most: float | None = None,
           at_least: float | None = None, **details) -> dict:
    """One row of the results: a measured value, its target if it has one, and whether it meets it."""
    if at_most is not None:
        target, met = f"≤ {at_most:g}", value <= at_most
    elif at_least is not None:
        target, met = f"≥ {at_least:g}", value >= at_least
    else:
        target, met = "", None
    return {"figure": figure, "case": case, "value": value, "unit": unit, "target": target, "met": met, **details}


def peak_rss_mb(pid: int | str = "self") -> float:
    """Peak resident memory of a process so far (Linux's VmHWM; unlike ru_maxrss, a child started with fork and
    exec does not inherit its parent's peak)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def skipped(figure: str, why: str) -> dict:
    """The row of a figure this run could not measure, saying why."""
    return {"figure": figure, "case": f"skipped: {why}", "value": None, "unit": "", "target": "", "met": None}
