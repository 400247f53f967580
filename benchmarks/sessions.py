"""Many sessions at once: the load test (benchmarks.load) on the measured checkpoint, summarised."""
from __future__ import annotations

from .common import Setup, result, skipped
from .fixtures import app_folder

FIGURE = "load"


def measure(setup: Setup) -> list[dict]:
    try:
        from .load import run_load  # optional: the load test is a package of its own
    except ImportError as error:
        return [skipped(FIGURE, f"benchmarks.load cannot be imported ({error})")]
    sessions, seconds = (2, 3) if setup.smoke else (20, 30)
    # letters: the worst case on a translation checkpoint (every output runs to max_len); typed: its dev sentences.
    # The smoke run's random checkpoint has no inputs of its own to type.
    kinds = ("letters",) if setup.smoke else ("letters", "typed")
    name = setup.checkpoint.name
    rows = []
    for inputs in kinds:
        load = run_load(app_folder(setup, setup.checkpoint), name, sessions, seconds, inputs=inputs,
                        log=setup.workdir / f"load-{inputs}.log")
        case = f"{sessions} sessions for {seconds} s on {name}, {inputs} inputs"
        rows += [
            result(FIGURE, f"p95 s per interaction, {case}", load["p95_s"], "s", at_most=6, p50_s=load["p50_s"],
                   interactions=load["interactions"], server_peak_rss_mb=load["rss_peak_mb"]),
            result(FIGURE, f"server CPU s per interaction, {case}", load["server_cpu_s_per_interaction"], "s"),
            result(FIGURE, f"errors, {case}", len(load["errors"]), "", first_errors=load["errors"][:5]),
        ]
    return rows
