"""A hall typing its own sentences at once (--hall): the lecture's sessions, once all have opened its link, each type
a dev sentence of their own at the same moment ("now type your own sentence"), within HALL_TYPE_SPREAD_S, then click
HALL_CLICKS (--clicks) times through heads, layers and views, and again for each of --rounds; one more session only
clicks all along (a student who types nothing). The server's CPU is read from each round's first input to its last
page, for each round apart too. --no-batching serves it with ATLAS_BATCH_SIZE=1 (each translation decoded alone)."""
from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np

from .checks import verify
from .client import TIMEOUT_S, Tally, typed_into_input, warm_up
from .inputs import Inputs
from .lecture import LECTURE_SPREAD_S, LectureClient
from .protocol import SESSION_ERRORS, AppSession, Page, error_text
from .report import p95, served_by, with_errors
from .server import batching_switch, server_cpu_s, serving

HALL_TYPE_SPREAD_S = 0.5  # the hall presses enter on its own sentences within this many seconds
HALL_CLICKS = 3  # clicks through heads, layers and views after each new input


class HallClient(LectureClient):
    """A student in a hall: the lecture's link, then at the lecturer's word a sentence of their own (an input of the
    pool no one else types), then a few clicks about it; `watch` instead: clicks only, until told to stop."""

    async def open(self, stack: contextlib.AsyncExitStack) -> tuple[AppSession, Page]:
        await asyncio.sleep(self.rng.uniform(0, LECTURE_SPREAD_S))
        log = self.tally.new_session()
        text, view = self.first_page()
        session = await stack.enter_async_context(self.connected(log, self.link(text, view)))
        return session, await self.interact(session, "open", text, [])

    async def type(self, session: AppSession, page: Page) -> Page:
        await asyncio.sleep(self.rng.uniform(0, HALL_TYPE_SPREAD_S))
        text = self.inputs.next(self.rng)
        return await self.interact(session, "type", text, [typed_into_input(page, text)])

    async def click(self, session: AppSession, page: Page, action: str | None = None) -> Page:
        await asyncio.sleep(self.rng.uniform(0, 2 * self.think_s))
        text = parse_qs(session.query_string)["text"][0]
        clicked, text, widgets = self.next_click(page, text)
        return await self.interact(session, action or clicked, text, widgets)

    async def watch(self, session: AppSession, page: Page, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():  # bounded: the hall sets it once its rounds are done
                page = await self.click(session, page, "watch")
        except SESSION_ERRORS as error:
            self.tally.errors.append(f"the session that only clicks: {error_text(error)}")


Student = tuple[HallClient, AppSession, Page]  # a student still in the hall, its session and the page it shows


async def at_once(tally: Tally, steps: list[Awaitable]) -> list:
    """The outcomes of `steps`, run at once; a step that failed gives None, its error tallied (a failure of the
    load itself, not of one session, is raised)."""
    outcomes = await asyncio.gather(*steps, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, SESSION_ERRORS):
                raise outcome
            tally.errors.append(error_text(outcome))
    return [None if isinstance(outcome, BaseException) else outcome for outcome in outcomes]


async def each_student(tally: Tally, live: list[Student],
                       step: Callable[[HallClient, AppSession, Page], Awaitable[Page]]) -> list[Student]:
    """step(client, session, page) for every live student at once: those whose step failed drop out."""
    pages = await at_once(tally, [step(client, session, page) for client, session, page in live])
    return [(client, session, page) for (client, session, _), page in zip(live, pages) if page is not None]


async def hall(url: str, app_urls: list[str], pids: list[int], checkpoint: str, tally: Tally, *, inputs: Inputs,
               sessions: int, rounds: int, clicks: int, seed: int, timeout_s: float, think_s: float) -> list[dict]:
    """The hall scenario against `url`, after a warm-up session on each app process. Returns each round's server CPU
    seconds and wall seconds, from its first input to its last page, and how many inputs it typed."""
    await warm_up(app_urls, checkpoint, inputs, seed)
    students = [HallClient(number, url, checkpoint, tally, inputs=inputs, seed=seed, timeout_s=timeout_s,
                           think_s=think_s, interactions_per_session=0) for number in range(sessions + 1)]
    watcher, students = students[-1], students[:-1]
    measured = []
    async with contextlib.AsyncExitStack() as stack:
        opened = await at_once(tally, [client.open(stack) for client in students])
        live = [(client, *session_and_page) for client, session_and_page in zip(students, opened)
                if session_and_page is not None]
        stop = asyncio.Event()
        watching = asyncio.create_task(watcher.watch(*await watcher.open(stack), stop))
        for _ in range(rounds):
            cpu, start = server_cpu_s(pids), time.perf_counter()
            live = await each_student(tally, live, HallClient.type)
            measured.append({"server_cpu_s": server_cpu_s(pids) - cpu, "seconds": time.perf_counter() - start,
                             "inputs": len(live)})
            for _ in range(clicks):
                live = await each_student(tally, live, HallClient.click)
        stop.set()
        await watching
    return measured


def add_round_figures(rounds: list[dict], typing_seconds: list[float]) -> None:
    """Each round's p95 per new input and server CPU per new input. A round's inputs all finish before the next
    round types, so `typing_seconds` holds the rounds' timings in turn."""
    done = 0
    for measured in rounds:
        measured.update(p95_s=p95(typing_seconds[done:done + measured["inputs"]]),
                        cpu_s_per_input=measured["server_cpu_s"] / max(1, measured["inputs"]))
        done += measured["inputs"]


def run_hall(checkpoints_dir: Path | str, checkpoint_name: str, sessions: int = 40, rounds: int = 2, *,
             clicks: int = HALL_CLICKS, batching: bool = True, processes: int | None = None, seed: int = 0,
             timeout_s: float = TIMEOUT_S, think_s: float = 1.0, log: Path | str | None = None,
             code: str | None = None) -> dict:
    """The hall scenario against `streamlit run app.py` serving `checkpoints_dir` (or `processes` of them behind
    nginx; or the app of the commit `code`), its translations batched across sessions or each decoded alone: each
    new input's seconds (p50, p95), the server's CPU per new input, both for each round too, the seconds of the
    students' clicks and of the clicks of the session that only clicks."""
    checkpoints_dir = Path(checkpoints_dir)
    tally = Tally()
    to_type = Inputs("typed", checkpoints_dir / checkpoint_name, seed)
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(log or Path(scratch) / "streamlit.log")
        with batching_switch(batching), serving(checkpoints_dir, processes, log, code) as (url, app_urls, pids):
            measured = asyncio.run(hall(url, app_urls, pids, checkpoint_name, tally, inputs=to_type,
                                        sessions=sessions, rounds=rounds, clicks=clicks, seed=seed,
                                        timeout_s=timeout_s, think_s=think_s))
    outputs_checked = verify(checkpoints_dir / checkpoint_name, tally)
    seconds = {action: [i.seconds for i in tally.interactions if i.action == action]
               for action in ("type", "head", "layer", "view", "watch")}
    typed = sum(r["inputs"] for r in measured)
    add_round_figures(measured, seconds["type"])
    return {"checkpoint": checkpoint_name, "scenario": "hall", "batching": batching, "processes": processes,
            "code": code, "sessions": sessions,
            "rounds": measured, "inputs_typed": typed, "outputs_checked": outputs_checked,
            "errors": tally.errors, "type_p50_s": float(np.percentile(seconds["type"] or [float("nan")], 50)),
            "type_p95_s": p95(seconds["type"]),
            "click_p95_s": p95(seconds["head"] + seconds["layer"] + seconds["view"]),
            "watch_p95_s": p95(seconds["watch"]), "watch_clicks": len(seconds["watch"]),
            "server_cpu_s_per_input": sum(r["server_cpu_s"] for r in measured) / max(1, typed)}


def hall_table(result: dict) -> str:
    batching = "" if result["code"] else ", batching " + ("on" if result["batching"] else "off")
    rows = [f"{result['sessions']} sessions on `{result['checkpoint']}` type their own sentences at once, "
            f"{len(result['rounds'])} round(s), {served_by(result)}{batching}: "
            f"{result['inputs_typed']} inputs, {result['outputs_checked']} outputs checked, "
            f"{len(result['errors'])} errors",
            f"new input: p50 {result['type_p50_s']:.2f} s, p95 {result['type_p95_s']:.2f} s, server CPU "
            f"{result['server_cpu_s_per_input']:.3f} s per input",
            "each round: " + "; ".join(f"p95 {r['p95_s']:.2f} s, CPU {r['cpu_s_per_input']:.3f} s per input"
                                       for r in result["rounds"]),
            f"clicks after it: p95 {result['click_p95_s']:.2f} s; a session that only clicks: p95 "
            f"{result['watch_p95_s']:.2f} s over {result['watch_clicks']} clicks"]
    return with_errors(rows, result["errors"])
