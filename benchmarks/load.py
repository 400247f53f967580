"""Load test: many sessions at once against `streamlit run app.py`, and the server's memory while they come and go.

    python -m benchmarks.load --sessions=20 --seconds 60 [--checkpoints checkpoints --checkpoint reverse] [--json PATH]
    python -m benchmarks.load --inputs typed --checkpoints checkpoints --checkpoint eng-fra  # dev sentences typed
    python -m benchmarks.load --lecture --sessions=40 --seconds 60 --think 2     # a lecture hall on one link
    python -m benchmarks.load --hall --sessions=40 --checkpoint eng-fra          # the hall types its own sentences
    python -m benchmarks.load --via-proxy 1 2                                  # K processes behind nginx, K = 1, 2
    python -m benchmarks.load --churn 200                                      # sessions opened and closed in turn
    python -m benchmarks.load --deck --sessions=40 --checkpoints checkpoints   # a room following a lecturer's deck

Each client speaks the app's own websocket protocol, as Streamlit's frontend does (a BackMsg asks for a rerun, the
server answers with ForwardMsgs up to script_finished), so 20 sessions fit on a small machine where 20 browsers
would not. A client opens its session with a link of its own (`?checkpoint=…&text=…&view=…`), then types new
inputs and switches views with a short pause between, and closes and reopens its session every few interactions,
until the time is up. An interaction is timed from the rerun request to script_finished.

Errors: an exception shown on the page, a run that does not finish within the timeout, a dropped connection, a link
or an input the page did not take, an output that is not the checkpoint's own translation of the session's input
(checked after the load, so the checks take no CPU from the server), and any session that was sent another
session's input. The server's resident memory is sampled all along: a leak per session would show as growth over
the second half of the load, when the caches have long been warm. (Streamlit keeps a closed session for
server.disconnectedSessionTTL, 2 minutes, at most 128 of them, in case its browser reconnects: a bounded part of
the growth a one-minute load sees.)

--inputs letters (the default): random lowercase letters and digits, what the `reverse` task reads; on a translation
checkpoint the worst case, as the output of such noise runs on to max_len and every pass is as long as it gets.
--inputs typed: what people type, the checkpoint's own evaluation inputs (a translation corpus's dev split, fresh
examples of a synthetic task), shuffled, each typed by one session only.

--lecture: every session opens the same link (LECTURE_TEXT on the attention view) within the first
LECTURE_SPREAD_S, as a room does when the lecturer says "open this link", then switches head, layer and view with
think time between clicks, in one session until the time is up. --via-proxy K: the app runs as K processes behind
nginx (deploy/local.py), each session sticks to one through the cookie its page load got (every client loads the
page before it opens its websocket, as a browser does), and the first page load's HTTP bytes through
the proxy (gzip) are measured with Chromium. --hall: the lecture's sessions, once all have opened its link, each
type a dev sentence of their own at the same moment ("now type your own sentence"), within HALL_TYPE_SPREAD_S, then
click HALL_CLICKS (--clicks) times through heads, layers and views, and again for each of --rounds; one more session
only clicks all along (a student who types nothing); the server's CPU is read from each round's first input to its
last page, for each round apart too; --no-batching serves it with ATLAS_BATCH_SIZE=1 (each translation decoded
alone). --code COMMIT (one process): the app as it was at that commit, served from a temporary git worktree with the
same checkpoints, to measure the code before a change in the same run as after it. --churn N: one client
opens and closes N sessions in sequence (the first nine on every view in turn, then random views); the server's
resident memory is read after each.

--deck [NAME]: a lecture through a deck (the shipped one by default; --slides N: its first N) on two servers at
once, one that warms the deck when it is opened (ui.warm) and one that does not (ATLAS_WARM_DECKS=off). The
lecturer opens the deck on both (and the room waits until the first has logged that the deck is warmed); then for
each slide the lecturer opens its link and every student opens it too, each within DECK_SPREAD_S of the lecturer,
in a new session as a browser opening the link does, on one server and then on the other, and on to the next slide.
A wait is timed from the rerun request to script_finished; the p95 of each slide's waits is compared.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import string
import subprocess
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote, quote_plus, urlencode

import numpy as np
import torch
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.string_util import clean_text
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from benchmarks.chromium import CHROMIUM, RUN_S, launch_chromium, wait_for_rerun
from deploy.server import ROOT, streamlit_server
from transformer import load_checkpoint
from transformer.evaluate import evaluation_cases
from ui.deck import Deck, deck_toml
from ui.presenter import read_deck
from ui.widgets import OUTPUT_HELP

TIMEOUT_S = 60  # bound on one interaction, from the rerun request to script_finished
WARM_UP_TIMEOUT_S = 300  # the server's first run imports torch and loads the checkpoint: slow on a busy machine
RSS_EVERY_S = 0.5
RETRY_AFTER_S = 1.0  # pause after a failed session, so a dead server is not hammered until the deadline
# The `view` values of the app's links (the keys of app.VIEWS): where each session starts.
VIEWS = ("attention", "model", "compare", "decoding", "masks", "positional", "heads", "ablation", "training")
INPUT_KINDS = ("letters", "typed")
INPUT_CHARACTERS = string.ascii_lowercase + string.digits
INPUT_LENGTHS = range(10, 25)
# At 10 characters or more, no page holds a given input by chance, so finding another session's there is a leak.
MIN_INPUT_CHARS = INPUT_LENGTHS.start
TYPED_POOL = 3000  # typed inputs drawn for one load: more than 20 sessions type in a few minutes
# The elements that carry figures and tables: token pieces and numbers, never a typed input (measured), and most of
# the bytes. The leak check reads every other message.
FIGURE_ELEMENTS = ("plotly_chart", "arrow_data_frame")
LECTURE_TEXT = "attention2026"  # the lecture's link: one input, on the attention view
LECTURE_SPREAD_S = 5.0  # the room opens the link within this many seconds
LECTURE_CONTROLS = ("Head", "Layer", "View")  # what students click
HALL_TYPE_SPREAD_S = 0.5  # the hall presses enter on its own sentences within this many seconds
HALL_CLICKS = 3  # clicks through heads, layers and views after each new input


@dataclass
class SessionLog:
    """One websocket session: the inputs it typed, and the messages it was sent, figures and tables left out."""

    number: int
    inputs: set[str] = field(default_factory=set)
    received: list[bytes] = field(default_factory=list)


@dataclass
class Interaction:
    """A run that finished, with no exception on the page."""

    session: int
    action: str  # "open" (the link), "type" (a new input), "view", "head" or "layer" (a click)
    text: str  # the session's input during this run
    view: str  # the view the run ended on, from the link it wrote
    seconds: float
    output: str | None  # the output the page showed; None if it showed none


@dataclass
class Tally:
    """What every client adds to."""

    sessions: list[SessionLog] = field(default_factory=list)
    interactions: list[Interaction] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class Page:
    """What one run of the script sent that the load test reads."""

    output: str | None = None
    exceptions: list[str] = field(default_factory=list)
    widgets: dict[str, object] = field(default_factory=dict)  # label -> the widget's proto ("Input", "View", ...)

    def read(self, element) -> None:
        kind = element.WhichOneof("type")
        if kind == "exception":
            self.exceptions.append(f"{element.exception.type}: {element.exception.message}")
        elif kind in ("text_input", "button_group"):
            widget = getattr(element, kind)
            self.widgets[widget.label] = widget
        elif kind == "text" and element.text.help == OUTPUT_HELP and self.output is None:
            # ui.widgets.model_output: the sidebar's comes first; a view's later ones (the training view's snapshot,
            # the ablated model) are other models' outputs.
            self.output = element.text.body


class BrokenSession(Exception):
    """The session cannot go on (a run failed, or the page lacks a widget to use): the client opens a new one."""


class AppSession:
    """One browser tab's side of the protocol: the address bar's query string, and rerun requests."""

    def __init__(self, websocket: ClientConnection, log: SessionLog, query_string: str, timeout_s: float):
        self.websocket = websocket
        self.log = log
        self.query_string = query_string
        self.timeout_s = timeout_s

    async def rerun(self, widgets: list[WidgetState]) -> Page:
        """Ask for a rerun with these widget values (the others keep theirs) and read its messages up to
        script_finished. Raises TimeoutError after timeout_s."""
        request = BackMsg()
        request.rerun_script.query_string = self.query_string
        request.rerun_script.widget_states.widgets.extend(widgets)
        await self.websocket.send(request.SerializeToString())
        try:
            return await asyncio.wait_for(self._read_run(), self.timeout_s)
        except TimeoutError:
            raise TimeoutError(f"the run did not finish within {self.timeout_s:g} s") from None

    async def _read_run(self) -> Page:
        page = Page()
        while True:  # ends at script_finished, or at rerun()'s timeout
            data = await self.websocket.recv()
            message = ForwardMsg.FromString(data)
            kind = message.WhichOneof("type")
            element = message.delta.new_element if kind == "delta" and message.delta.HasField("new_element") else None
            if element is None or element.WhichOneof("type") not in FIGURE_ELEMENTS:
                self.log.received.append(data)
            if element is not None:
                page.read(element)
            elif kind == "page_info_changed":  # the app rewrote its link: the browser's next request carries it
                self.query_string = message.page_info_changed.query_string
            elif kind == "script_finished":
                status = message.script_finished
                if status != ForwardMsg.FINISHED_SUCCESSFULLY:
                    page.exceptions.append(f"the run ended with {ForwardMsg.ScriptFinishedStatus.Name(status)}")
                return page


def random_input(rng: random.Random) -> str:
    return "".join(rng.choices(INPUT_CHARACTERS, k=rng.choice(INPUT_LENGTHS)))


def typed_inputs(checkpoint_path: Path, seed: int) -> list[str]:
    """TYPED_POOL of the checkpoint's evaluation inputs, shuffled: at least MIN_INPUT_CHARS long, none inside
    another (so that finding one in a page says which session typed it)."""
    sources = sorted({source for _, source, _ in evaluation_cases(load_checkpoint(checkpoint_path), per_case=200)
                      if len(source) >= MIN_INPUT_CHARS})
    random.Random(seed).shuffle(sources)
    return none_inside_another(sources[:TYPED_POOL])


def none_inside_another(texts: list[str]) -> list[str]:
    """`texts` without those found inside another one (in order)."""
    return [text for text in texts if not any(text in other for other in texts if other != text)]


class Inputs:
    """What every client types next: random letters, or the typed pool, each of its inputs handed out once."""

    def __init__(self, kind: str, checkpoint_path: Path | None = None, seed: int = 0):
        if kind not in INPUT_KINDS:
            raise ValueError(f"inputs must be one of {INPUT_KINDS}, got {kind!r}")
        self.kind = kind
        self.pool = typed_inputs(checkpoint_path, seed) if kind == "typed" else []

    def next(self, rng: random.Random) -> str:
        if self.kind == "letters":
            return random_input(rng)
        if not self.pool:
            raise RuntimeError(f"the load typed all {TYPED_POOL} inputs of its pool: run it shorter")
        return self.pool.pop()


def widget_id(page: Page, label: str) -> str:
    if label not in page.widgets:
        raise BrokenSession(f"the page has no widget labelled {label!r}")
    return page.widgets[label].id


def choose_option(page: Page, label: str, rng: random.Random) -> WidgetState:
    """A click on one of the options of the segmented control `label`."""
    widget = WidgetState(id=widget_id(page, label))
    widget.string_array_value.data.append(rng.choice([option.content for option in page.widgets[label].options]))
    return widget


def page_cookie(url: str, timeout_s: float) -> str:
    """The cookies (name=value; ...) the page at `url` sets, as a browser would send them back."""
    with urllib.request.urlopen(urllib.request.Request(url), timeout=timeout_s) as response:
        response.read()
        return "; ".join(header.split(";", 1)[0] for header in response.headers.get_all("Set-Cookie") or [])


class Client:
    """One user: opens a session from a link, types and switches views, and starts over every few interactions."""

    one_session = False  # True: keep the one session until the time is up (a new one only after a failure)

    def __init__(self, number: int, url: str, checkpoint: str, tally: Tally, *, inputs: Inputs, seed: int,
                 timeout_s: float, think_s: float, interactions_per_session: int):
        self.page_url = url
        self.url = url.replace("http://", "ws://", 1) + "_stcore/stream"
        self.checkpoint = checkpoint
        self.tally = tally
        self.inputs = inputs
        self.rng = random.Random(f"{seed}-{number}")
        self.timeout_s = timeout_s
        self.think_s = think_s
        self.interactions_per_session = interactions_per_session

    async def run_until(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            log = SessionLog(len(self.tally.sessions))
            self.tally.sessions.append(log)
            try:
                await self.session(log, deadline)
            except (BrokenSession, TimeoutError, OSError, WebSocketException) as error:
                self.tally.errors.append(f"session #{log.number}: {type(error).__name__}: {error}")
                await asyncio.sleep(min(RETRY_AFTER_S, max(0.0, deadline - time.monotonic())))
            else:
                if self.one_session:
                    return

    def first_page(self) -> tuple[str, str]:
        """The input and view of a new session's link."""
        return self.inputs.next(self.rng), self.rng.choice(VIEWS)

    def next_click(self, page: Page, text: str) -> tuple[str, str, list[WidgetState]]:
        """(action, the input after it, widget states to send): a new input or another view, at even odds."""
        if self.rng.random() < 0.5:
            text = self.inputs.next(self.rng)
            return "type", text, [WidgetState(id=widget_id(page, "Input"), string_value=text)]
        return "view", text, [choose_option(page, "View", self.rng)]

    async def session(self, log: SessionLog, deadline: float) -> None:
        """Open a session from a new link, then click until interactions_per_session or the deadline; closing the
        websocket ends the session, as closing the tab does."""
        text, view = self.first_page()
        link = urlencode({"checkpoint": self.checkpoint, "text": text, "view": view})
        async with self.connected(log, link) as session:
            page = await self.interact(session, "open", text, [])
            if parse_qs(session.query_string).get("view") != [view]:
                raise BrokenSession(f"the link asked for view {view!r}, the page shows {session.query_string!r}")
            for _ in range(self.interactions_per_session - 1):
                pause = self.rng.uniform(0, 2 * self.think_s)
                if time.monotonic() + pause >= deadline:
                    return
                await asyncio.sleep(pause)
                action, text, widgets = self.next_click(page, text)
                page = await self.interact(session, action, text, widgets)

    @contextlib.asynccontextmanager
    async def connected(self, log: SessionLog, link: str) -> AsyncIterator[AppSession]:
        """A new session on `link`'s page; closing the websocket at the end ends it, as closing the tab does."""
        # No Origin header, no XSRF token: a local client without auth cookies needs none of them. Like a browser,
        # it loads the page first: behind the proxy, that answer's cookie names the process the session sticks to
        # (deploy/nginx.conf.template); the app itself ignores it.
        cookie = await asyncio.to_thread(page_cookie, self.page_url, self.timeout_s)
        async with connect(self.url, subprotocols=["streamlit"], proxy=None, max_size=2**26, ping_interval=None,
                           open_timeout=self.timeout_s,
                           additional_headers={"Cookie": cookie} if cookie else {}) as websocket:
            yield AppSession(websocket, log, link, self.timeout_s)

    async def interact(self, session: AppSession, action: str, text: str, widgets: list[WidgetState]) -> Page:
        session.log.inputs.add(text)
        start = time.perf_counter()
        page = await session.rerun(widgets)
        seconds = time.perf_counter() - start
        if page.exceptions:
            raise BrokenSession(f"{action} ({session.query_string}): {'; '.join(page.exceptions)}")
        link = parse_qs(session.query_string)
        view = link.get("view", ["?"])[0]
        self.tally.interactions.append(Interaction(session.log.number, action, text, view, seconds, page.output))
        if link.get("text") != [text]:
            raise BrokenSession(f"{action}: the input is {text!r} but the page's link is {session.query_string!r}")
        return page


class LectureClient(Client):
    """A student: opens the link everyone was given within the first LECTURE_SPREAD_S, then clicks through heads,
    layers and views with think time between clicks, in one session until the time is up."""

    one_session = True

    async def run_until(self, deadline: float) -> None:
        await asyncio.sleep(self.rng.uniform(0, LECTURE_SPREAD_S))
        await super().run_until(deadline)

    def first_page(self) -> tuple[str, str]:
        return LECTURE_TEXT, "attention"

    def next_click(self, page: Page, text: str) -> tuple[str, str, list[WidgetState]]:
        label = self.rng.choice([label for label in LECTURE_CONTROLS if label in page.widgets])
        return label.lower(), text, [choose_option(page, label, self.rng)]


class HallClient(LectureClient):
    """A student in a hall: the lecture's link, then at the lecturer's word a sentence of their own (an input of the
    pool no one else types), then a few clicks about it; `watch` instead: clicks only, until told to stop."""

    async def open(self, stack: contextlib.AsyncExitStack) -> tuple[AppSession, Page]:
        await asyncio.sleep(self.rng.uniform(0, LECTURE_SPREAD_S))
        log = SessionLog(len(self.tally.sessions))
        self.tally.sessions.append(log)
        text, view = self.first_page()
        session = await stack.enter_async_context(
            self.connected(log, urlencode({"checkpoint": self.checkpoint, "text": text, "view": view})))
        return session, await self.interact(session, "open", text, [])

    async def type(self, session: AppSession, page: Page) -> Page:
        await asyncio.sleep(self.rng.uniform(0, HALL_TYPE_SPREAD_S))
        text = self.inputs.next(self.rng)
        return await self.interact(session, "type", text, [WidgetState(id=widget_id(page, "Input"), string_value=text)])

    async def click(self, session: AppSession, page: Page, action: str | None = None) -> Page:
        await asyncio.sleep(self.rng.uniform(0, 2 * self.think_s))
        text = parse_qs(session.query_string)["text"][0]
        clicked, text, widgets = self.next_click(page, text)
        return await self.interact(session, action or clicked, text, widgets)

    async def watch(self, session: AppSession, page: Page, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():  # bounded: the hall sets it once its rounds are done
                page = await self.click(session, page, "watch")
        except (BrokenSession, TimeoutError, OSError, WebSocketException) as error:
            self.tally.errors.append(f"the session that only clicks: {type(error).__name__}: {error}")


async def hall(url: str, app_urls: list[str], pids: list[int], checkpoint: str, tally: Tally, *, inputs: Inputs,
               sessions: int, rounds: int, clicks: int, seed: int, timeout_s: float, think_s: float) -> dict:
    """The hall scenario (see --hall) against `url`, after a warm-up session on each app process. Returns each
    round's server CPU seconds and wall seconds, from its first input to its last page, and how many inputs it
    typed."""
    for app_url in app_urls:  # behind a proxy, each process directly: the proxy would pick one by the cookie
        warm_up = Client(-1, app_url, checkpoint, Tally(), inputs=inputs, seed=seed, timeout_s=WARM_UP_TIMEOUT_S,
                         think_s=0, interactions_per_session=1)
        await warm_up.session(SessionLog(-1), deadline=time.monotonic())
    students = [HallClient(number, url, checkpoint, tally, inputs=inputs, seed=seed, timeout_s=timeout_s,
                           think_s=think_s, interactions_per_session=0) for number in range(sessions + 1)]
    watcher, students = students[-1], students[:-1]

    async def each(step, pairs):
        """step(client, session, page) for every live student at once; those that fail drop out, their errors
        tallied."""
        done = await asyncio.gather(*(step(client, session, page) for client, session, page in pairs),
                                    return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, (BrokenSession, TimeoutError, OSError, WebSocketException)):
                    raise outcome
                tally.errors.append(f"{type(outcome).__name__}: {outcome}")
        return [(client, session, page) for (client, session, _), page in zip(pairs, done)
                if not isinstance(page, BaseException)]

    measured = []
    async with contextlib.AsyncExitStack() as stack:
        live = await each(lambda client, *_: client.open(stack), [(client, None, None) for client in students])
        live = [(client, *opened) for client, _, opened in live]
        stop = asyncio.Event()
        watching = asyncio.create_task(watcher.watch(*await watcher.open(stack), stop))
        for _ in range(rounds):
            cpu, start = server_cpu_s(pids), time.perf_counter()
            live = await each(HallClient.type, live)
            measured.append({"server_cpu_s": server_cpu_s(pids) - cpu, "seconds": time.perf_counter() - start,
                             "inputs": len(live)})
            for _ in range(clicks):
                live = await each(HallClient.click, live)
        stop.set()
        await watching
    return {"rounds": measured}


@contextlib.contextmanager
def server_environment(**variables: str) -> Iterator[None]:
    """Variables the app servers started in the block get (deploy.server.streamlit_server passes on os.environ)."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def batching_switch(batching: bool):
    """The server's environment for translations batched across sessions (its default) or each decoded alone."""
    return server_environment(**({} if batching else {"ATLAS_BATCH_SIZE": "1"}))


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
    clicks = seconds["head"] + seconds["layer"] + seconds["view"]
    typed = sum(r["inputs"] for r in measured["rounds"])

    typed_in_round, done = [], 0  # a round's inputs all finish before the next round types
    for measured_round in measured["rounds"]:
        typed_in_round.append(seconds["type"][done:done + measured_round["inputs"]])
        done += measured_round["inputs"]
    for measured_round, round_seconds in zip(measured["rounds"], typed_in_round):
        measured_round.update(p95_s=p95(round_seconds), cpu_s_per_input=measured_round["server_cpu_s"]
                              / max(1, measured_round["inputs"]))
    return {"checkpoint": checkpoint_name, "scenario": "hall", "batching": batching, "processes": processes,
            "code": code, "sessions": sessions,
            "rounds": measured["rounds"], "inputs_typed": typed, "outputs_checked": outputs_checked,
            "errors": tally.errors, "type_p50_s": float(np.percentile(seconds["type"] or [float("nan")], 50)),
            "type_p95_s": p95(seconds["type"]), "click_p95_s": p95(clicks), "watch_p95_s": p95(seconds["watch"]),
            "watch_clicks": len(seconds["watch"]),
            "server_cpu_s_per_input": sum(r["server_cpu_s"] for r in measured["rounds"]) / max(1, typed)}


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95)) if values else float("nan")


def hall_table(result: dict) -> str:
    where = "one process" if result["processes"] is None else f"{result['processes']} process(es) behind nginx"
    if result.get("code"):
        where += f", the app as of commit {result['code']}"
    rows = [f"{result['sessions']} sessions on `{result['checkpoint']}` type their own sentences at once, "
            f"{len(result['rounds'])} round(s), {where}"
            f"{'' if result.get('code') else ', batching ' + ('on' if result['batching'] else 'off')}: "
            f"{result['inputs_typed']} inputs, {result['outputs_checked']} outputs checked, "
            f"{len(result['errors'])} errors",
            f"new input: p50 {result['type_p50_s']:.2f} s, p95 {result['type_p95_s']:.2f} s, server CPU "
            f"{result['server_cpu_s_per_input']:.3f} s per input",
            "each round: " + "; ".join(f"p95 {r['p95_s']:.2f} s, CPU {r['cpu_s_per_input']:.3f} s per input"
                                       for r in result["rounds"]),
            f"clicks after it: p95 {result['click_p95_s']:.2f} s; a session that only clicks: p95 "
            f"{result['watch_p95_s']:.2f} s over {result['watch_clicks']} clicks"]
    return with_errors(rows, result["errors"])


class ChurnClient(Client):
    """Sessions opened and closed in turn: the first len(VIEWS) open every view once, so that what a view loads once
    for all (the training snapshots, the checkpoints it compares with) is loaded when the memory after 10 sessions is
    read; later ones open a random view."""

    opened = 0

    def first_page(self) -> tuple[str, str]:
        text, view = super().first_page()
        self.opened += 1
        return text, VIEWS[self.opened - 1] if self.opened <= len(VIEWS) else view


def rss_mb(pids: list[int]) -> float:
    """Resident memory (VmRSS) of the app's processes together, MB."""
    kilobytes = 0
    for pid in pids:
        text = Path(f"/proc/{pid}/status").read_text()
        kilobytes += int(re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE).group(1))
    return kilobytes / 1024


class MemorySampler:
    """The app processes' resident memory together, sampled every RSS_EVERY_S until stop()."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.samples: list[tuple[float, float]] = []  # (seconds since start, MB)
        self.start = time.monotonic()
        self.stopped = asyncio.Event()

    def now(self) -> float:
        megabytes = rss_mb(self.pids)
        self.samples.append((time.monotonic() - self.start, megabytes))
        return megabytes

    async def run(self) -> None:
        while not self.stopped.is_set():  # stop() ends it once the clients, each bounded, are done
            self.now()
            try:
                await asyncio.wait_for(self.stopped.wait(), RSS_EVERY_S)
            except TimeoutError:
                pass

    def stop(self) -> None:
        self.stopped.set()


def server_cpu_s(pids: list[int]) -> float:
    """User and system CPU seconds the app's processes have used: unlike wall time, the same on a busy machine."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # the fields after the command name
        ticks += int(fields[11]) + int(fields[12])  # utime and stime, fields 14 and 15
    return ticks / os.sysconf("SC_CLK_TCK")


def verify(checkpoint_path: Path, tally: Tally) -> int:
    """Check every run's output against the checkpoint's own translation of that run's input, and every session's
    messages for the inputs of all other sessions; add what fails to tally.errors. Returns how many outputs match."""
    checkpoint = load_checkpoint(checkpoint_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the server runs (OMP_NUM_THREADS=1): the same sums in the same order
    try:
        # As st.text shows it (ui.widgets.model_output): dedented and stripped (an output of noise can end in a space).
        expected = {text: clean_text(checkpoint.translate(text).text) for text in {i.text for i in tally.interactions}}
    finally:
        torch.set_num_threads(threads)
    matched = 0
    for interaction in tally.interactions:
        if interaction.output == expected[interaction.text]:
            matched += 1
        else:
            tally.errors.append(f"session #{interaction.session} ({interaction.action}): the input "
                                f"{interaction.text!r} should give {expected[interaction.text]!r}, the page showed "
                                f"{interaction.output!r}")
    owner = {text: log.number for log in tally.sessions for text in log.inputs}  # an owner, when inputs are shared
    shown = {(interaction.session, interaction.text) for interaction in tally.interactions}
    for log in tally.sessions:
        found = sent(log, owner.keys())
        for text in sorted(found - log.inputs):
            tally.errors.append(f"session #{log.number} was sent {text!r}, the input of session #{owner[text]}")
        # The search must find the inputs that were there, or finding no other session's proves nothing.
        for text in sorted({text for session, text in shown if session == log.number} - found):
            tally.errors.append(f"session #{log.number} was never sent its own input {text!r}")
    return matched


def sent(log: SessionLog, texts) -> set[str]:
    """Which of `texts` the session's messages hold, as typed or as a link writes them."""
    received = b"\0".join(log.received)
    return {text for text in texts if any(form.encode() in received for form in (text, quote(text), quote_plus(text)))}


async def load(url: str, app_urls: list[str], pids: list[int], checkpoint: str, tally: Tally, *, inputs: Inputs,
               sessions: int, seconds: float, seed: int, timeout_s: float, think_s: float,
               interactions_per_session: int, lecture: bool) -> dict:
    """Warm each app process up with one session of its own, then run `sessions` clients against `url` for
    `seconds`. Returns the timings, the processes' CPU time and their memory samples; the clients add their
    sessions, interactions and errors to `tally`."""
    memory = MemorySampler(pids)
    rss_before = memory.now()
    start = time.perf_counter()
    for app_url in app_urls:  # behind a proxy, each process directly: the proxy would pick one by the cookie
        warm_up = Client(-1, app_url, checkpoint, Tally(), inputs=inputs, seed=seed, timeout_s=WARM_UP_TIMEOUT_S,
                         think_s=0, interactions_per_session=1)
        await warm_up.session(SessionLog(-1), deadline=time.monotonic())  # raises if the server cannot serve it
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


async def churn(url: str, pids: list[int], checkpoint: str, tally: Tally, *, sessions: int, seed: int,
                timeout_s: float) -> list[float]:
    """One client opens a session (its link, then one click) and closes it, `sessions` times in sequence. Returns
    the app's resident memory after each session, MB."""
    client = ChurnClient(0, url, checkpoint, tally, inputs=Inputs("letters"), seed=seed, timeout_s=timeout_s,
                         think_s=0, interactions_per_session=2)
    after = []
    for number in range(sessions):
        log = SessionLog(number)
        tally.sessions.append(log)
        try:
            await client.session(log, deadline=float("inf"))  # bounded: two runs, each within timeout_s
        except (BrokenSession, TimeoutError, OSError, WebSocketException) as error:
            tally.errors.append(f"session #{number}: {type(error).__name__}: {error}")
        after.append(rss_mb(pids))
    return after


def first_page_bytes(url: str) -> int | None:
    """HTTP bytes a new browser transfers until the first figure is drawn (None without Chromium)."""
    if not CHROMIUM.exists():
        return None
    from playwright.sync_api import sync_playwright

    from benchmarks.browser import HTTP_BYTES

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(RUN_S * 1000)
            page.goto(f"{url}?{urlencode({'text': LECTURE_TEXT, 'view': 'attention'})}")
            page.wait_for_selector(".stPlotlyChart .js-plotly-plot")
            wait_for_rerun(page)
            return page.evaluate(HTTP_BYTES)
        finally:
            browser.close()


@contextlib.contextmanager
def checkout(commit: str) -> Iterator[Path]:
    """This repository as it was at `commit`, in a temporary git worktree removed on exit."""
    with tempfile.TemporaryDirectory(prefix="atlas-code-") as scratch:
        root = Path(scratch) / commit
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(root), commit], check=True,
                       capture_output=True, text=True)
        try:
            yield root
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(root)], check=False,
                           capture_output=True)


@contextlib.contextmanager
def serving(checkpoints_dir: Path, processes: int | None, log: Path, code: str | None = None
            ) -> Iterator[tuple[str, list[str], list[int]]]:
    """(the URL clients open, each app process's own URL, their pids): one `streamlit run` logging to `log` if
    processes is None, else that many behind nginx (deploy/local.py), logging next to `log`. code: a commit whose
    app to serve instead of this checkout's (one process only)."""
    if code is not None:
        if processes is not None:
            raise ValueError("an earlier commit's app is served as one process, not behind the proxy")
        with checkout(code) as root, streamlit_server(checkpoints_dir, log, root=root) as (url, process):
            yield url, [url], [process.pid]
    elif processes is None:
        with streamlit_server(checkpoints_dir, log) as (url, process):
            yield url, [url], [process.pid]
    else:
        from deploy.local import proxied_app

        with proxied_app(processes, checkpoints_dir, log.parent) as deployment:
            yield deployment.url, deployment.app_urls, deployment.app_pids


def run_load(checkpoints_dir: Path | str, checkpoint_name: str, sessions: int = 20, seconds: float = 60, *,
             seed: int = 0, timeout_s: float = TIMEOUT_S, think_s: float = 0.5, interactions_per_session: int = 4,
             lecture: bool = False, inputs: str = "letters", processes: int | None = None,
             log: Path | str | None = None, code: str | None = None) -> dict:
    """Serve the checkpoints under `checkpoints_dir` with `streamlit run app.py` (or `processes` of them behind
    nginx), and load it with `sessions` concurrent clients on `checkpoint_name` for `seconds` (each interaction
    bounded by `timeout_s`; a pause of think_s on average between two). lecture: every client opens the same link
    and clicks heads, layers and views (LectureClient) in one session. inputs: what the clients type, one of
    INPUT_KINDS. log: where the server's output goes (a temporary file if None; behind the proxy, every process
    logs into its folder). code: serve the app of this commit instead (see serving)."""
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


def run_churn(checkpoints_dir: Path | str, checkpoint_name: str, sessions: int = 200, *, seed: int = 0,
              timeout_s: float = TIMEOUT_S) -> dict:
    """Open and close `sessions` sessions one after another against `streamlit run app.py`; the server's RSS after
    each (the target: after all of them at most 1.5x after the first 10)."""
    checkpoints_dir = Path(checkpoints_dir)
    tally = Tally()
    with tempfile.TemporaryDirectory() as scratch, \
            serving(checkpoints_dir, None, Path(scratch) / "streamlit.log") as (url, _, pids):
        before = rss_mb(pids)
        after = asyncio.run(churn(url, pids, checkpoint_name, tally, sessions=sessions, seed=seed,
                                  timeout_s=timeout_s))
    verify(checkpoints_dir / checkpoint_name, tally)
    early = after[min(9, len(after) - 1)]
    return {"checkpoint": checkpoint_name, "sessions": sessions, "errors": tally.errors, "rss_before_mb": before,
            "rss_after_10_mb": early, "rss_after_all_mb": after[-1], "ratio": after[-1] / early,
            "rss_after_each_mb": [round(mb, 1) for mb in after]}


def table(result: dict) -> str:
    by_action = ", ".join(f"{action} {count}" for action, count in result["interactions_by_action"].items())
    where = "one process" if result["processes"] is None else f"{result['processes']} process(es) behind nginx"
    if result.get("code"):
        where += f", the app as of commit {result['code']}"
    rows = [
        ("load", f"{result['sessions']} {result['scenario']} sessions for {result['seconds']:g} s on "
                 f"`{result['checkpoint']}`, inputs: {result['inputs']}, {where} (ran {result['load_s']:.0f} s after a "
                 f"{result['warm_up_s']:.0f} s warm-up)"),
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


def churn_table(result: dict) -> str:
    rows = [f"{result['sessions']} sessions opened and closed in turn on `{result['checkpoint']}`: server RSS "
            f"{result['rss_before_mb']:.0f} MB before, {result['rss_after_10_mb']:.0f} MB after 10, "
            f"{result['rss_after_all_mb']:.0f} MB after {result['sessions']} ({result['ratio']:.2f}x)",
            f"errors: {len(result['errors'])}"]
    return with_errors(rows, result["errors"])


def with_errors(lines: list[str], errors: list[str]) -> str:
    lines = lines + [f"  {error}" for error in errors[:10]]
    if len(errors) > 10:
        lines.append(f"  … and {len(errors) - 10} more (see --json)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- a room following a deck

DECK = "attention-step-by-step"  # the shipped deck
DECK_SPREAD_S = 3.0  # each student opens a slide within this many seconds of the lecturer
WARMED = "Warmed the deck `{}`"  # what ui.warm logs once it has drawn every slide of a deck


async def logged(log: Path, line: str, timeout_s: float) -> float:
    """Seconds until the server's log holds `line`; TimeoutError after timeout_s."""
    start = time.monotonic()
    while line not in log.read_text(errors="replace"):
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"the server did not log {line!r} within {timeout_s:g} s")
        await asyncio.sleep(0.2)
    return time.monotonic() - start


async def open_slide(url: str, deck: str, number: int, log: SessionLog, timeout_s: float) -> float:
    """Open slide `number` of `deck` by its link in a new session, as a browser does: the seconds from the rerun
    request to script_finished. BrokenSession if the page shows an exception or another slide."""
    async with connect(url.replace("http://", "ws://", 1) + "_stcore/stream", subprotocols=["streamlit"], proxy=None,
                       max_size=2**26, ping_interval=None, open_timeout=timeout_s) as websocket:
        session = AppSession(websocket, log, urlencode({"deck": deck, "slide": number}), timeout_s)
        start = time.perf_counter()
        page = await session.rerun([])
        seconds = time.perf_counter() - start
    if page.exceptions:
        raise BrokenSession("; ".join(page.exceptions))
    link = parse_qs(session.query_string)
    if link.get("deck") != [deck] or link.get("slide", ["1"]) != [str(number)]:  # slide 1 is the link's default
        raise BrokenSession(f"the page's link is {session.query_string!r}")
    return seconds


async def follow_deck(servers: dict[str, tuple[str, Path]], deck: str, slides: int, students: int, *,
                      spread_s: float, seed: int, timeout_s: float) -> dict:
    """On each server (its URL and log, by name; "warmed" warms the deck), the lecturer opens the deck, and the room
    waits until a warming server has logged that the deck is warmed. Then slide after slide, on one server and then
    the other (the first in turn), the lecturer and `students` sessions open it, each student within spread_s of
    the lecturer (the same delays on both): a burst of load from elsewhere hits both alike."""
    errors: list[str] = []

    async def opened(url: str, number: int, delay: float, who: int) -> float | None:
        await asyncio.sleep(delay)
        try:
            return await open_slide(url, deck, number, SessionLog(who), timeout_s)
        except (BrokenSession, TimeoutError, OSError, WebSocketException) as error:
            errors.append(f"slide {number}, {f'student #{who}' if who >= 0 else 'the lecturer'}: "
                          f"{type(error).__name__}: {error}")
            return None

    runs = {}
    for name, (url, log) in servers.items():
        await open_slide(url, deck, 1, SessionLog(-1), WARM_UP_TIMEOUT_S)  # raises if the server cannot show it
        warm_up_s = await logged(log, WARMED.format(deck), WARM_UP_TIMEOUT_S) if name == "warmed" else 0.0
        runs[name] = {"warm_up_s": warm_up_s, "p95_by_slide_s": [], "lecturer_s": [], "waits": 0}
    for number in range(1, slides + 1):
        delays = [random.Random(f"{seed}-{number}-{who}").uniform(0, spread_s) for who in range(students)]
        for name in list(servers)[number % 2:] + list(servers)[:number % 2]:
            times = await asyncio.gather(opened(servers[name][0], number, 0.0, -1),
                                         *(opened(servers[name][0], number, delay, who)
                                           for who, delay in enumerate(delays)))
            waits = [seconds for seconds in times[1:] if seconds is not None]
            runs[name]["p95_by_slide_s"].append(float(np.percentile(waits, 95)) if waits else float("nan"))
            runs[name]["lecturer_s"].append(times[0])
            runs[name]["waits"] += len(waits)
    return {**runs, "errors": errors}


def run_deck(checkpoints_dir: Path | str, deck: str = DECK, students: int = 40, slides: int | None = None, *,
             spread_s: float = DECK_SPREAD_S, seed: int = 0, timeout_s: float = TIMEOUT_S,
             log_dir: Path | str | None = None) -> dict:
    """`students` following a lecturer through the first `slides` of the decks folder's `deck` (all of them if
    None), on two servers at once, one that warms the deck when it is opened and one that does not. Returns each
    slide's p95 wait on both."""
    shown = read_deck(deck)
    slides = len(shown.slides) if slides is None else min(slides, len(shown.slides))
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        decks = Path(scratch) / "decks"  # the deck cut to its first `slides`: the server warms no more than is shown
        decks.mkdir()
        (decks / f"{deck}.toml").write_text(deck_toml(Deck(shown.title, shown.slides[:slides])))
        servers = {}
        for name, setting in (("warmed", ""), ("not_warmed", "off")):
            log = Path(log_dir or scratch) / f"streamlit-deck-{name}.log"
            url, _ = stack.enter_context(streamlit_server(checkpoints_dir, log, env={"ATLAS_DECKS": str(decks),
                                                                                     "ATLAS_WARM_DECKS": setting}))
            servers[name] = url, log
        runs = asyncio.run(follow_deck(servers, deck, slides, students, spread_s=spread_s, seed=seed,
                                       timeout_s=timeout_s))
        if WARMED.format(deck) in servers["not_warmed"][1].read_text(errors="replace"):
            runs["errors"].append("the server with warming off warmed the deck")
    summary = {name: {"worst_p95_s": float(np.nanmax(runs[name]["p95_by_slide_s"])),
                      "median_p95_s": float(np.nanmedian(runs[name]["p95_by_slide_s"]))} for name in servers}
    return {"deck": deck, "slides": slides, "students": students, "spread_s": spread_s,
            "views": [slide.state.get("view", "attention") for slide in shown.slides[:slides]], **runs,
            "summary": summary,
            "worst_ratio": summary["not_warmed"]["worst_p95_s"] / summary["warmed"]["worst_p95_s"],
            "median_ratio": summary["not_warmed"]["median_p95_s"] / summary["warmed"]["median_p95_s"]}


def deck_table(result: dict) -> str:
    warmed, cold = result["warmed"], result["not_warmed"]
    lines = [f"{result['students']} students following a lecturer through the first {result['slides']} slides of "
             f"`{result['deck']}` (each opens a slide within {result['spread_s']:g} s of the lecturer); the deck "
             f"warmed in {warmed['warm_up_s']:.1f} s after it was opened. Seconds:",
             f"{'slide':<16} {'students p95 warmed':>19} {'not warmed':>10} {'ratio':>6}   {'lecturer warmed':>15} "
             f"{'not warmed':>10}"]
    rows = zip(result["views"], warmed["p95_by_slide_s"], cold["p95_by_slide_s"], warmed["lecturer_s"],
               cold["lecturer_s"])
    for number, (view, hot, not_hot, lecturer_hot, lecturer_not_hot) in enumerate(rows, 1):
        lines.append(f"{f'{number} {view}':<16} {hot:>19.2f} {not_hot:>10.2f} {not_hot / hot:>5.2f}x   "
                     f"{lecturer_hot or float('nan'):>15.2f} {lecturer_not_hot or float('nan'):>10.2f}")
    for name, key in (("worst slide", "worst_p95_s"), ("median slide", "median_p95_s")):
        hot, not_hot = result["summary"]["warmed"][key], result["summary"]["not_warmed"][key]
        lines.append(f"{name:<16} {hot:>19.2f} {not_hot:>10.2f} {not_hot / hot:>5.2f}x")
    lines.append(f"errors: {len(result['errors'])}")
    return with_errors(lines, result["errors"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__.split("\n\n")[0])
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
                        "it was at this commit (a temporary git worktree), to compare with the code before a change")
    parser.add_argument("--churn", type=int, metavar="N", help="instead: open and close N sessions in turn and "
                        "read the server's memory")
    parser.add_argument("--deck", nargs="?", const=DECK, metavar="NAME", help="instead: --sessions students follow "
                        f"a lecturer through a deck (default {DECK}), warmed and not warmed")
    parser.add_argument("--slides", type=int, help="with --deck: only its first N slides")
    parser.add_argument("--json", type=Path, help="also write the whole result here")
    args = parser.parse_args(argv)
    if args.deck:
        result = run_deck(args.checkpoints, args.deck, args.sessions, args.slides, timeout_s=args.timeout)
        print(deck_table(result))
        results = [result]
    elif args.hall:
        processes = [None] if args.via_proxy is None else (args.via_proxy or [1, 2])
        results = [run_hall(args.checkpoints, args.checkpoint, args.sessions, args.rounds, clicks=args.clicks,
                            processes=k, batching=not args.no_batching, timeout_s=args.timeout, think_s=args.think,
                            code=args.code)
                   for k in processes]
        print("\n\n".join(hall_table(result) for result in results))
    elif args.churn:
        result = run_churn(args.checkpoints, args.checkpoint, args.churn, timeout_s=args.timeout)
        print(churn_table(result))
        results = [result]
    else:
        processes = [None] if args.via_proxy is None else (args.via_proxy or [1, 2])
        results = [run_load(args.checkpoints, args.checkpoint, args.sessions, args.seconds, timeout_s=args.timeout,
                            think_s=args.think, lecture=args.lecture, inputs=args.inputs, processes=k,
                            code=args.code)
                   for k in processes]
        print("\n\n".join(table(result) for result in results))
        if len(results) > 1:
            base = results[0]
            print("\nthroughput: " + ", ".join(
                f"{result['processes']} process(es) {result['interactions_per_s'] / base['interactions_per_s']:.2f}x"
                for result in results) + f" of {base['processes']} process(es)")
    if args.json:
        args.json.write_text(json.dumps(results[0] if len(results) == 1 else results, indent=1))
    return 1 if any(result["errors"] for result in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
