"""Many sessions at once: benchmarks/load.py's load test on the measured checkpoint, summarised."""
from __future__ import annotations

from .common import Setup, result, skipped
from .fixtures import app_folder

FIGURE = "load"


def measure(setup: Setup) -> list[dict]:
    try:
        from .load import run_load  # optional: the load test lives in its own module
    except ImportError as error:
        return [skipped(FIGURE, f"benchmarks/load.py cannot be imported ({error})")]
    sessions, seconds = (2, 3) if setup.smoke else (20, 30)
    name = setup.checkpoint.name
    load = run_load(app_folder(setup, setup.checkpoint), name, sessions, seconds, log=setup.workdir / "load.log")
    case = f"{sessions} sessions for {seconds} s on {name}"
    return [
        result(FIGURE, f"p95 s per interaction, {case}", load["p95_s"], "s", p50_s=load["p50_s"],
               interactions=load["interactions"], server_peak_rss_mb=load["rss_peak_mb"]),
        result(FIGURE, f"errors, {case}", len(load["errors"]), "", first_errors=load["errors"][:5]),
    ]
