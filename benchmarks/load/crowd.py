"""The timed load, the default scenario and --lecture's: after a warm-up session on each app process, `sessions`
clients at once for `seconds`, each on links of its own (client.Client) or all on the lecture's (lecture.LectureClient),
served by one process or K behind nginx (--via-proxy). It reports the seconds per interaction (p50, p95, max, and
the p95 by the view each ended on), the server's CPU per interaction, its resident memory before, after the warm-up,
at half-time, at the end and at its peak, and the errors."""
from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from .checks import verify
from .client import TIMEOUT_S, Client, Tally, warm_up
from .inputs import Inputs
from .lecture import LECTURE_TEXT, LectureClient
from .proxy import first_page_bytes
from .report import served_by, with_errors
from .server import MemorySampler, server_cpu_s, serving


async def load(url: str, app_urls: list[str], pids: list[int], checkpoint: str, tally: Tally, *, inputs: Inputs,
               sessions: int, seconds: float, seed: int, timeout_s: float, think_s: float,
               interactions_per_session: int, lecture: bool) -> dict:
    """Warm each app process up with one session of its own, then run `sessions` clients against `url` for
    `seconds`. Returns the timings, the processes' CPU time and their memory samples; the clients add their
    sessions, interactions and errors to `tally`."""
    memory = MemorySampler(pids)
    rss_before = memory.now()
    start = time.perf_counter()
    await warm_up(app_urls, checkpoint, inputs, seed)
    warm_up_s = time.perf_counter() - start
    rss_warm = memory.now()
    cpu_start = server_cpu_s(pids)
    sampler = asyncio.create_task(memory.run())
    load_start = time.monotonic()
    kind = LectureClient if lecture else Client
    clients = [kind(number, url, checkpoint, tally, inputs=inputs, seed=seed, timeout_s=timeout_s, think_s=think_s,
                    interactions_per_session=interactions_per_session) for number in range(sessions)]
    await asyncio.gather(*(client.run_until(load_start + seconds) for client in clients))
    memory.stop()
    await sampler
    cpu_s = server_cpu_s(pids) - cpu_start
    half = load_start - memory.start + seconds / 2
    return {
        "warm_up_s": warm_up_s,
        "load_s": time.monotonic() - load_start,
        "server_cpu_s": cpu_s,
        "rss_before_mb": rss_before,
        "rss_warm_mb": rss_warm,
        "rss_half_mb": min(memory.samples, key=lambda sample: abs(sample[0] - half))[1],
        "rss_after_mb": memory.samples[-1][1],
        "rss_peak_mb": max(mb for _, mb in memory.samples),
        "rss_samples_mb": [(round(t, 1), round(mb, 1)) for t, mb in memory.samples],
    }


def run_load(checkpoints_dir: Path | str, checkpoint_name: str, sessions: int = 20, seconds: float = 60, *,
             seed: int = 0, timeout_s: float = TIMEOUT_S, think_s: float = 0.5, interactions_per_session: int = 4,
             lecture: bool = False, inputs: str = "letters", processes: int | None = None,
             log: Path | str | None = None, code: str | None = None) -> dict:
    """Serve the checkpoints under `checkpoints_dir` with `streamlit run app.py` (or `processes` of them behind
    nginx), and load it with `sessions` concurrent clients on `checkpoint_name` for `seconds` (each interaction
    bounded by `timeout_s`; a pause of think_s on average between two). lecture: every client opens the same link
    and clicks heads, layers and views (LectureClient) in one session. inputs: what the clients type, one of
    inputs.INPUT_KINDS. log: where the server's output goes (a temporary file if None; behind the proxy, every
    process logs into its folder). code: serve the app of this commit instead (see server.serving)."""
    checkpoints_dir = Path(checkpoints_dir)
    tally = Tally()
    to_type = Inputs(inputs, checkpoints_dir / checkpoint_name, seed)
    if lecture:
        interactions_per_session = 10**6  # one session each, until the time is up
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(log or Path(scratch) / "streamlit.log")
        with serving(checkpoints_dir, processes, log, code) as (url, app_urls, pids):
            measured = asyncio.run(load(url, app_urls, pids, checkpoint_name, tally, inputs=to_type,
                                        sessions=sessions, seconds=seconds, seed=seed, timeout_s=timeout_s,
                                        think_s=think_s, interactions_per_session=interactions_per_session,
                                        lecture=lecture))
            page_bytes = first_page_bytes(url) if processes is not None else None
    outputs_checked = verify(checkpoints_dir / checkpoint_name, tally)
    times = [interaction.seconds for interaction in tally.interactions] or [float("nan")]
    p50, p95 = np.percentile(times, [50, 95])
    by_view: dict[str, list[float]] = {}
    for interaction in tally.interactions:
        by_view.setdefault(interaction.view, []).append(interaction.seconds)
    return {
        "checkpoint": checkpoint_name,
        "scenario": "lecture" if lecture else "random",
        "inputs": LECTURE_TEXT if lecture else inputs,
        "processes": processes,
        "code": code,
        "sessions": sessions,
        "seconds": seconds,
        "sessions_opened": len(tally.sessions),
        "interactions": len(tally.interactions),
        "interactions_by_action": dict(Counter(interaction.action for interaction in tally.interactions)),
        "outputs_checked": outputs_checked,
        "errors": tally.errors,
        "p50_s": float(p50),
        "p95_s": float(p95),
        "max_s": float(max(times)),
        "p95_by_view_s": {view: float(np.percentile(seconds, 95)) for view, seconds in sorted(by_view.items())},
        **measured,
        "interactions_per_s": len(tally.interactions) / measured["load_s"],
        "server_cpu_s_per_interaction": measured["server_cpu_s"] / max(1, len(tally.interactions)),
        "rss_growth_mb": measured["rss_after_mb"] - measured["rss_warm_mb"],
        "first_page_bytes": page_bytes,
    }


def table(result: dict) -> str:
    by_action = ", ".join(f"{action} {count}" for action, count in result["interactions_by_action"].items())
    rows = [
        ("load", f"{result['sessions']} {result['scenario']} sessions for {result['seconds']:g} s on "
                 f"`{result['checkpoint']}`, inputs: {result['inputs']}, {served_by(result)} (ran "
                 f"{result['load_s']:.0f} s after a {result['warm_up_s']:.0f} s warm-up)"),
        ("sessions opened", str(result["sessions_opened"])),
        ("interactions", f"{result['interactions']} ({by_action}); {result['outputs_checked']} outputs checked; "
                         f"{result['interactions_per_s']:.2f} per second"),
        ("errors", str(len(result["errors"]))),
        ("s per interaction", f"p50 {result['p50_s']:.2f}   p95 {result['p95_s']:.2f}   max {result['max_s']:.2f}"),
        ("p95 by view", "   ".join(f"{view} {seconds:.2f}" for view, seconds in
                                    sorted(result["p95_by_view_s"].items(), key=lambda item: -item[1]))),
        ("server CPU", f"{result['server_cpu_s']:.1f} s over the load, "
                       f"{result['server_cpu_s_per_interaction']:.2f} s per interaction"),
        ("server RSS (MB)", f"before {result['rss_before_mb']:.0f}   warm {result['rss_warm_mb']:.0f}   "
                            f"half-time {result['rss_half_mb']:.0f}   after {result['rss_after_mb']:.0f}   "
                            f"peak {result['rss_peak_mb']:.0f}   growth after warm-up {result['rss_growth_mb']:+.0f}"),
    ]
    if result["first_page_bytes"] is not None:
        rows.append(("first page load", f"{result['first_page_bytes']:,} B over HTTP through the proxy"))
    return with_errors([f"{name:<18} {value}" for name, value in rows], result["errors"])
