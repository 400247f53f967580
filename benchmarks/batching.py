"""Batching across sessions (transformer.inference.batching): translations decoded as one batch ÷ one at a time, in this
process, at 1, 8, 32 and 64 inputs at once; and the load test's hall (benchmarks.load.hall: forty sessions typing
their own sentences at once) served by the BASELINE commit's app (from a git worktree) and by this checkout's, with
batching on and off, with the lecture scenario beside it, each figure also as a ratio to one translate-and-capture
alone measured in the same run; and the hall again with K = 1, 2 app processes behind deploy/'s proxy, to show how
the levers combine."""
from __future__ import annotations

import statistics
import time

import torch

from transformer import Checkpoint, load_checkpoint
from transformer.training.evaluate import evaluation_cases

from .common import Setup, result, side_by_side, skipped
from .fixtures import app_folder, distinct_texts

FIGURE = "batching"
CONCURRENT = (1, 8, 32, 64)
HALL_SESSIONS, HALL_ROUNDS = 40, 2
PROCESSES = (1, 2)  # app processes behind deploy/'s nginx, each batching its own sessions' translations
LECTURE_SESSIONS, LECTURE_SECONDS, LECTURE_THINK_S = 40, 30, 2
# The app the hall and lecture figures are measured against, in the same run on the same checkpoint folder: that
# commit's app decodes each session's translation alone, has no page turns and calls Streamlit's own caches on every
# rerun.
BASELINE = "5a1ddeb"


def inputs(setup: Setup, checkpoint: Checkpoint, count: int) -> list[str]:
    """`count` different inputs: the checkpoint's dev sentences (random ones for the smoke run's random model)."""
    if setup.smoke:
        texts = distinct_texts(checkpoint.src_tokenizer, 6)
        return [next(texts) for _ in range(count)]
    return sorted({source for _, source, _ in evaluation_cases(checkpoint, per_case=200)})[:count]


def measure(setup: Setup) -> list[dict]:
    """Inputs per second decoded (the card's decoding) and captured as one batch, ÷ the same inputs one at a time."""
    checkpoint = load_checkpoint(setup.checkpoint)
    rows = []
    for count in CONCURRENT[:2] if setup.smoke else CONCURRENT:
        texts = inputs(setup, checkpoint, count)
        seconds = side_by_side({"one at a time": lambda texts=texts: [checkpoint.translate(text) for text in texts],
                                "batched": lambda texts=texts: checkpoint.translate_batch(
                                    [checkpoint.prepare(text) for text in texts])},
                               repeats=1 if setup.smoke else 3)
        rows.append(result(FIGURE, f"{count} input(s) at once, translations/s batched ÷ one at a time",
                           seconds["one at a time"] / seconds["batched"], "×",
                           at_least=None if count == 1 else 1.5,
                           batched_per_s=count / seconds["batched"], alone_per_s=count / seconds["one at a time"],
                           decoding=checkpoint.card.decoding or "greedy"))
    return rows


def solo_cpu_s(checkpoint: Checkpoint, texts: list[str]) -> float:
    """Median CPU seconds of one translate-and-capture (the card's decoding), each input alone in this process."""
    times = []
    for text in texts:
        start = time.process_time()
        checkpoint.translate(text)
        times.append(time.process_time() - start)
    return statistics.median(times)


def hall(setup: Setup) -> list[dict]:
    """The hall scenario served by the BASELINE commit's app and by this checkout's (batching on and off, and 1 or 2
    processes behind the proxy), the lecture scenario beside it, and one translate-and-capture alone in this process
    (its CPU: what a new input costs when nothing else runs)."""
    if setup.smoke:  # the random model has no sentences of its own to type
        return [skipped("hall", "the smoke run's random checkpoint has no dev sentences to type")]
    from .load import batching_switch, run_hall, run_load
    checkpoint = load_checkpoint(setup.checkpoint)
    with torch.inference_mode():
        solo = solo_cpu_s(checkpoint, inputs(setup, checkpoint, 40))
    folder, name = app_folder(setup, setup.checkpoint), setup.checkpoint.name

    def hall_of(label: str, **options) -> dict:
        return run_hall(folder, name, HALL_SESSIONS, HALL_ROUNDS, log=setup.workdir / f"hall-{label}.log", **options)

    def lecture_of(label: str, batching: bool = True, **options) -> dict:
        with batching_switch(batching):
            return run_load(folder, name, LECTURE_SESSIONS, LECTURE_SECONDS, think_s=LECTURE_THINK_S, lecture=True,
                            log=setup.workdir / f"lecture-{label}.log", **options)
    halls = {"baseline": hall_of("baseline", code=BASELINE), "batching off": hall_of("off", batching=False),
             "now": hall_of("now")}
    lectures = {"baseline": lecture_of("baseline", code=BASELINE), "batching off": lecture_of("off", batching=False),
                "now": lecture_of("now")}
    proxied = {k: hall_of(f"{k}-processes", processes=k) for k in PROCESSES}
    baseline, off, now = halls["baseline"], halls["batching off"], halls["now"]
    case = f"{HALL_SESSIONS} sessions type their own dev sentences at once, {HALL_ROUNDS} rounds, on {name}"
    rows = [result("hall", "one translate-and-capture alone in this process, CPU s", solo, "s")]
    for label, figures in halls.items():
        state = f"the app of commit {BASELINE}" if label == "baseline" else label
        rows += [
            result("hall", f"server CPU s per new input, {state}, {case}", figures["server_cpu_s_per_input"], "s",
                   ratio_to_solo=figures["server_cpu_s_per_input"] / solo,
                   each_round=[round(r["cpu_s_per_input"], 4) for r in figures["rounds"]]),
            result("hall", f"p95 s per new input, {state}", figures["type_p95_s"], "s",
                   ratio_to_solo=figures["type_p95_s"] / solo, p50_s=figures["type_p50_s"],
                   each_round=[round(r["p95_s"], 3) for r in figures["rounds"]]),
            result("hall", f"p95 s per click of a session that only clicks, {state}", figures["watch_p95_s"], "s",
                   clicks=figures["watch_clicks"], students_clicks_p95_s=figures["click_p95_s"]),
            result("hall", f"errors, {state}", len(figures["errors"]) + len(lectures[label]["errors"]), "",
                   at_most=0, first_errors=(figures["errors"] + lectures[label]["errors"])[:5]),
        ]
    rows += [
        result("hall", f"server CPU per new input, the app of {BASELINE} ÷ now", baseline["server_cpu_s_per_input"]
               / now["server_cpu_s_per_input"], "×", at_least=3,
               each_round=[round(b["cpu_s_per_input"] / n["cpu_s_per_input"], 2)
                           for b, n in zip(baseline["rounds"], now["rounds"])]),
        result("hall", f"p95 per new input, the app of {BASELINE} ÷ now", baseline["type_p95_s"] / now["type_p95_s"],
               "×", at_least=3, each_round=[round(b["p95_s"] / n["p95_s"], 2) for b, n in zip(baseline["rounds"],
                                                                                          now["rounds"])]),
        result("hall", "server CPU per new input, batching off ÷ on", off["server_cpu_s_per_input"]
               / now["server_cpu_s_per_input"], "×"),
        result("hall", "p95 per new input, batching off ÷ on", off["type_p95_s"] / now["type_p95_s"], "×"),
        *[result("hall", f"{k} process(es) behind nginx, batching on: server CPU s per new input",
                 figures["server_cpu_s_per_input"], "s", p95_s=figures["type_p95_s"],
                 watch_p95_s=figures["watch_p95_s"], errors=figures["errors"][:5]) for k, figures in proxied.items()],
        result("hall", f"p95 per new input, the app of {BASELINE} in one process ÷ now in 2 processes behind nginx",
               baseline["type_p95_s"] / proxied[2]["type_p95_s"], "×"),
        result("hall", f"lecture: p95 s per click, {LECTURE_SESSIONS} sessions on one link, now",
               lectures["now"]["p95_s"], "s", before_p95_s=lectures["baseline"]["p95_s"],
               batching_off_p95_s=lectures["batching off"]["p95_s"]),
        result("hall", f"lecture: p95 per click, now ÷ the app of {BASELINE}",
               lectures["now"]["p95_s"] / lectures["baseline"]["p95_s"], "×", at_most=1.2),
    ]
    return rows
