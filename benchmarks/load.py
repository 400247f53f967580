"""Load test: many sessions at once against `streamlit run app.py`, and the server's memory while they come and go.

    python -m benchmarks.load --sessions 20 --seconds 60 [--checkpoints checkpoints --checkpoint reverse] [--json PATH]

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

The inputs are random lowercase letters and digits: what the `reverse` task reads.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import string
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import numpy as np
import torch
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from benchmarks.server import ROOT, streamlit_server
from transformer import load_checkpoint

TIMEOUT_S = 60  # bound on one interaction, from the rerun request to script_finished
WARM_UP_TIMEOUT_S = 300  # the server's first run imports torch and loads the checkpoint: slow on a busy machine
RSS_EVERY_S = 0.5
RETRY_AFTER_S = 1.0  # pause after a failed session, so a dead server is not hammered until the deadline
# The `view` values of the app's links (the keys of app.VIEWS): where each session starts.
VIEWS = ("attention", "model", "compare", "decoding", "masks", "positional", "heads", "ablation", "training")
INPUT_CHARACTERS = string.ascii_lowercase + string.digits
# At 10 characters or more, no figure's bytes hold a given input by chance, so finding one there is a leak.
INPUT_LENGTHS = range(10, 25)
CHARACTER_RUN = re.compile(rb"[a-z0-9]{%d,}" % INPUT_LENGTHS.start)
OUTPUT_CAPTION = "Output of"  # the caption right above the st.code that shows the output (app.show_output)


@dataclass
class SessionLog:
    """One websocket session: the inputs it typed, and every run of input characters it was sent."""

    number: int
    inputs: set[str] = field(default_factory=set)
    seen: set[bytes] = field(default_factory=set)


@dataclass
class Interaction:
    """A run that finished, with no exception on the page."""

    session: int
    action: str  # "open" (the link), "type" (a new input) or "view" (another view)
    text: str  # the session's input during this run
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
    output_next: bool = False  # the output's caption has come: the next st.code is the output

    def read(self, element) -> None:
        kind = element.WhichOneof("type")
        if kind == "exception":
            self.exceptions.append(f"{element.exception.type}: {element.exception.message}")
        elif kind in ("text_input", "button_group"):
            widget = getattr(element, kind)
            self.widgets[widget.label] = widget
        elif kind == "markdown" and element.markdown.body.startswith(OUTPUT_CAPTION):
            self.output_next = True
        elif kind == "code" and self.output_next:
            self.output, self.output_next = element.code.code_text, False


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
        except asyncio.TimeoutError:
            raise TimeoutError(f"the run did not finish within {self.timeout_s:g} s") from None

    async def _read_run(self) -> Page:
        page = Page()
        while True:  # ends at script_finished, or at rerun()'s timeout
            data = await self.websocket.recv()
            self.log.seen.update(CHARACTER_RUN.findall(data))
            message = ForwardMsg.FromString(data)
            kind = message.WhichOneof("type")
            if kind == "delta" and message.delta.WhichOneof("type") == "new_element":
                page.read(message.delta.new_element)
            elif kind == "page_info_changed":  # the app rewrote its link: the browser's next request carries it
                self.query_string = message.page_info_changed.query_string
            elif kind == "script_finished":
                status = message.script_finished
                if status != ForwardMsg.FINISHED_SUCCESSFULLY:
                    page.exceptions.append(f"the run ended with {ForwardMsg.ScriptFinishedStatus.Name(status)}")
                return page


def random_input(rng: random.Random) -> str:
    return "".join(rng.choices(INPUT_CHARACTERS, k=rng.choice(INPUT_LENGTHS)))


def widget_id(page: Page, label: str) -> str:
    if label not in page.widgets:
        raise BrokenSession(f"the page has no widget labelled {label!r}")
    return page.widgets[label].id


class Client:
    """One user: opens a session from a link, types and switches views, and starts over every few interactions."""

    def __init__(self, number: int, url: str, checkpoint: str, tally: Tally, *, seed: int, timeout_s: float,
                 think_s: float, interactions_per_session: int):
        self.url = url.replace("http://", "ws://", 1) + "_stcore/stream"
        self.checkpoint = checkpoint
        self.tally = tally
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
                self.tally.errors.append(f"session {log.number}: {type(error).__name__}: {error}")
                await asyncio.sleep(min(RETRY_AFTER_S, max(0.0, deadline - time.monotonic())))

    async def session(self, log: SessionLog, deadline: float) -> None:
        """Open a session from a new link, then type or switch views until interactions_per_session or the
        deadline; closing the websocket ends the session, as closing the tab does."""
        text, view = random_input(self.rng), self.rng.choice(VIEWS)
        link = urlencode({"checkpoint": self.checkpoint, "text": text, "view": view})
        # No Origin header, no XSRF token, no proxy: a local client without auth cookies needs none of them.
        async with connect(self.url, subprotocols=["streamlit"], proxy=None, max_size=2**26, ping_interval=None,
                           open_timeout=self.timeout_s) as websocket:
            session = AppSession(websocket, log, link, self.timeout_s)
            page = await self.interact(session, "open", text, [])
            if parse_qs(session.query_string).get("view") != [view]:
                raise BrokenSession(f"the link asked for view {view!r}, the page shows {session.query_string!r}")
            for _ in range(self.interactions_per_session - 1):
                pause = self.rng.uniform(0, 2 * self.think_s)
                if time.monotonic() + pause >= deadline:
                    return
                await asyncio.sleep(pause)
                if self.rng.random() < 0.5:
                    text = random_input(self.rng)
                    widget = WidgetState(id=widget_id(page, "Input"), string_value=text)
                    page = await self.interact(session, "type", text, [widget])
                else:
                    widget = WidgetState(id=widget_id(page, "View"))
                    views = [option.content for option in page.widgets["View"].options]
                    widget.string_array_value.data.append(self.rng.choice(views))
                    page = await self.interact(session, "view", text, [widget])

    async def interact(self, session: AppSession, action: str, text: str, widgets: list[WidgetState]) -> Page:
        session.log.inputs.add(text)
        start = time.perf_counter()
        page = await session.rerun(widgets)
        seconds = time.perf_counter() - start
        if page.exceptions:
            raise BrokenSession(f"{action} ({session.query_string}): {'; '.join(page.exceptions)}")
        self.tally.interactions.append(Interaction(session.log.number, action, text, seconds, page.output))
        if parse_qs(session.query_string).get("text") != [text]:
            raise BrokenSession(f"{action}: the input is {text!r} but the page's link is {session.query_string!r}")
        return page


class MemorySampler:
    """The server's resident memory (VmRSS), sampled every RSS_EVERY_S until stop()."""

    def __init__(self, pid: int):
        self.pid = pid
        self.samples: list[tuple[float, float]] = []  # (seconds since start, MB)
        self.start = time.monotonic()
        self.stopped = asyncio.Event()

    def now(self) -> float:
        text = Path(f"/proc/{self.pid}/status").read_text()
        kilobytes = int(re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE).group(1))
        megabytes = kilobytes / 1024
        self.samples.append((time.monotonic() - self.start, megabytes))
        return megabytes

    async def run(self) -> None:
        while not self.stopped.is_set():  # stop() ends it once the clients, each bounded, are done
            self.now()
            try:
                await asyncio.wait_for(self.stopped.wait(), RSS_EVERY_S)
            except asyncio.TimeoutError:
                pass

    def stop(self) -> None:
        self.stopped.set()


def server_cpu_s(pid: int) -> float:
    """User and system CPU seconds the process has used: unlike wall time, the same on a busy machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # the fields after the command name
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime, fields 14 and 15


def verify(checkpoint_path: Path, tally: Tally) -> int:
    """Check every run's output against the checkpoint's own translation of that run's input, and every session's
    messages for the inputs of all other sessions; add what fails to tally.errors. Returns how many outputs match."""
    checkpoint = load_checkpoint(checkpoint_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the server runs (OMP_NUM_THREADS=1): the same sums in the same order
    try:
        expected = {text: checkpoint.translate(text).text for text in {i.text for i in tally.interactions}}
    finally:
        torch.set_num_threads(threads)
    matched = 0
    for interaction in tally.interactions:
        if interaction.output == expected[interaction.text]:
            matched += 1
        else:
            tally.errors.append(f"session {interaction.session} ({interaction.action}): the input {interaction.text!r} "
                                f"should give {expected[interaction.text]!r}, the page showed {interaction.output!r}")
    owner = {text: log.number for log in tally.sessions for text in log.inputs}
    shown = {(interaction.session, interaction.text) for interaction in tally.interactions}
    for log in tally.sessions:
        runs = [run.decode() for run in log.seen]
        windows = {run[i:i + n] for run in runs for n in INPUT_LENGTHS for i in range(len(run) - n + 1)}
        for text in windows & owner.keys():
            if owner[text] != log.number:
                tally.errors.append(f"session {log.number} was sent {text!r}, the input of session {owner[text]}")
        # The search must find the inputs that were there, or finding no other session's proves nothing.
        for text in {text for session, text in shown if session == log.number} - windows:
            tally.errors.append(f"session {log.number} was never sent its own input {text!r}")
    return matched


async def load(url: str, pid: int, checkpoint: str, tally: Tally, *, sessions: int, seconds: float, seed: int,
               timeout_s: float, think_s: float, interactions_per_session: int) -> dict:
    """Warm the server up with one session, then run `sessions` clients for `seconds`. Returns the timings, the
    server's CPU time and its memory samples; the clients add their sessions, interactions and errors to `tally`."""
    memory = MemorySampler(pid)
    rss_before = memory.now()
    start = time.perf_counter()
    warm_up = Client(-1, url, checkpoint, Tally(), seed=seed, timeout_s=WARM_UP_TIMEOUT_S, think_s=0,
                     interactions_per_session=1)
    await warm_up.session(SessionLog(-1), deadline=time.monotonic())  # raises if the server cannot serve it
    warm_up_s = time.perf_counter() - start
    rss_warm = memory.now()
    cpu_start = server_cpu_s(pid)
    sampler = asyncio.create_task(memory.run())
    load_start = time.monotonic()
    clients = [Client(number, url, checkpoint, tally, seed=seed, timeout_s=timeout_s, think_s=think_s,
                      interactions_per_session=interactions_per_session) for number in range(sessions)]
    await asyncio.gather(*(client.run_until(load_start + seconds) for client in clients))
    memory.stop()
    await sampler
    cpu_s = server_cpu_s(pid) - cpu_start
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
             log: Path | str | None = None) -> dict:
    """Serve the checkpoints under `checkpoints_dir` with `streamlit run app.py`, and load it with `sessions`
    concurrent clients on `checkpoint_name` for `seconds` (each interaction bounded by `timeout_s`; a pause of
    think_s on average between two). log: where the server's output goes (a temporary file if None)."""
    checkpoints_dir = Path(checkpoints_dir)
    tally = Tally()
    with tempfile.TemporaryDirectory() as scratch:
        with streamlit_server(checkpoints_dir, Path(log or Path(scratch) / "streamlit.log")) as (url, process):
            measured = asyncio.run(load(url, process.pid, checkpoint_name, tally, sessions=sessions, seconds=seconds,
                                        seed=seed, timeout_s=timeout_s, think_s=think_s,
                                        interactions_per_session=interactions_per_session))
    outputs_checked = verify(checkpoints_dir / checkpoint_name, tally)
    times = [interaction.seconds for interaction in tally.interactions] or [float("nan")]
    p50, p95 = np.percentile(times, [50, 95])
    actions = [interaction.action for interaction in tally.interactions]
    return {
        "checkpoint": checkpoint_name,
        "sessions": sessions,
        "seconds": seconds,
        "sessions_opened": len(tally.sessions),
        "interactions": len(tally.interactions),
        "interactions_by_action": {action: actions.count(action) for action in ("open", "type", "view")},
        "outputs_checked": outputs_checked,
        "errors": tally.errors,
        "p50_s": float(p50),
        "p95_s": float(p95),
        "max_s": float(max(times)),
        **measured,
        "server_cpu_s_per_interaction": measured["server_cpu_s"] / max(1, len(tally.interactions)),
        "rss_growth_mb": measured["rss_after_mb"] - measured["rss_warm_mb"],
    }


def table(result: dict) -> str:
    by_action = ", ".join(f"{action} {count}" for action, count in result["interactions_by_action"].items())
    rows = [
        ("load", f"{result['sessions']} sessions for {result['seconds']:g} s on `{result['checkpoint']}` "
                 f"(ran {result['load_s']:.0f} s after a {result['warm_up_s']:.0f} s warm-up)"),
        ("sessions opened", str(result["sessions_opened"])),
        ("interactions", f"{result['interactions']} ({by_action}); {result['outputs_checked']} outputs checked"),
        ("errors", str(len(result["errors"]))),
        ("s per interaction", f"p50 {result['p50_s']:.2f}   p95 {result['p95_s']:.2f}   max {result['max_s']:.2f}"),
        ("server CPU", f"{result['server_cpu_s']:.1f} s over the load, "
                       f"{result['server_cpu_s_per_interaction']:.2f} s per interaction"),
        ("server RSS (MB)", f"before {result['rss_before_mb']:.0f}   warm {result['rss_warm_mb']:.0f}   "
                            f"half-time {result['rss_half_mb']:.0f}   after {result['rss_after_mb']:.0f}   "
                            f"peak {result['rss_peak_mb']:.0f}   growth after warm-up {result['rss_growth_mb']:+.0f}"),
    ]
    lines = [f"{name:<18} {value}" for name, value in rows]
    lines += [f"  {error}" for error in result["errors"][:10]]
    if len(result["errors"]) > 10:
        lines.append(f"  … and {len(result['errors']) - 10} more (see --json)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20, help="concurrent sessions (default 20)")
    parser.add_argument("--seconds", type=float, default=60, help="how long the load lasts (default 60)")
    parser.add_argument("--checkpoints", type=Path, default=ROOT / "checkpoints", help="the folder the app serves")
    parser.add_argument("--checkpoint", default="reverse", help="the checkpoint every session uses (a reverse task)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"bound on one interaction, s ({TIMEOUT_S})")
    parser.add_argument("--json", type=Path, help="also write the whole result here")
    args = parser.parse_args(argv)
    result = run_load(args.checkpoints, args.checkpoint, args.sessions, args.seconds, timeout_s=args.timeout)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
