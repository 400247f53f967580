"""One user of the app under load: opens a session with a link of its own (`?checkpoint=…&text=…&view=…`), then types
new inputs and switches views with a short pause between, and closes and reopens its session every few
interactions, until the time is up. An interaction is timed from the rerun request to script_finished. The other
scenarios' users (lecture, hall, churn) are this one with other links and clicks."""
from __future__ import annotations

import asyncio
import contextlib
import random
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode

from streamlit.proto.WidgetStates_pb2 import WidgetState

from .inputs import Inputs
from .protocol import SESSION_ERRORS, AppSession, BrokenSession, Page, SessionLog, error_text, open_websocket

TIMEOUT_S = 60  # bound on one interaction, from the rerun request to script_finished
WARM_UP_TIMEOUT_S = 300  # the server's first run imports torch and loads the checkpoint: slow on a busy machine
RETRY_AFTER_S = 1.0  # pause after a failed session, so a dead server is not hammered until the deadline
# The `view` values of the app's links (the keys of app.VIEWS): where each session starts.
VIEWS = ("attention", "model", "compare", "decoding", "masks", "positional", "heads", "ablation", "training")


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

    def new_session(self) -> SessionLog:
        log = SessionLog(len(self.sessions))
        self.sessions.append(log)
        return log


def widget_id(page: Page, label: str) -> str:
    if label not in page.widgets:
        raise BrokenSession(f"the page has no widget labelled {label!r}")
    return page.widgets[label].id


def typed_into_input(page: Page, text: str) -> WidgetState:
    """`text` typed into the sidebar's input box, and enter pressed."""
    return WidgetState(id=widget_id(page, "Input"), string_value=text)


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
        self.url = url
        self.checkpoint = checkpoint
        self.tally = tally
        self.inputs = inputs
        self.rng = random.Random(f"{seed}-{number}")
        self.timeout_s = timeout_s
        self.think_s = think_s
        self.interactions_per_session = interactions_per_session

    async def run_until(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            log = self.tally.new_session()
            try:
                await self.session(log, deadline)
            except SESSION_ERRORS as error:
                self.tally.errors.append(f"session #{log.number}: {error_text(error)}")
                await asyncio.sleep(min(RETRY_AFTER_S, max(0.0, deadline - time.monotonic())))
            else:
                if self.one_session:
                    return

    def first_page(self) -> tuple[str, str]:
        """The input and view of a new session's link."""
        return self.inputs.next(self.rng), self.rng.choice(VIEWS)

    def link(self, text: str, view: str) -> str:
        return urlencode({"checkpoint": self.checkpoint, "text": text, "view": view})

    def next_click(self, page: Page, text: str) -> tuple[str, str, list[WidgetState]]:
        """(action, the input after it, widget states to send): a new input or another view, at even odds."""
        if self.rng.random() < 0.5:
            text = self.inputs.next(self.rng)
            return "type", text, [typed_into_input(page, text)]
        return "view", text, [choose_option(page, "View", self.rng)]

    async def session(self, log: SessionLog, deadline: float) -> None:
        """Open a session from a new link, then click until interactions_per_session or the deadline; closing the
        websocket ends the session, as closing the tab does."""
        text, view = self.first_page()
        async with self.connected(log, self.link(text, view)) as session:
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
        # Like a browser, it loads the page first: behind the proxy, that answer's cookie names the process the
        # session sticks to (deploy/nginx.conf.template); the app itself ignores it.
        cookie = await asyncio.to_thread(page_cookie, self.url, self.timeout_s)
        async with open_websocket(self.url, self.timeout_s, cookie) as websocket:
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


async def warm_up(app_urls: list[str], checkpoint: str, inputs: Inputs, seed: int) -> None:
    """One session on each app process, each opened directly (behind a proxy, the cookie would pick the process):
    a server's first run imports torch and loads the checkpoint, which no load should time. Raises if a server
    cannot serve it."""
    for app_url in app_urls:
        client = Client(-1, app_url, checkpoint, Tally(), inputs=inputs, seed=seed, timeout_s=WARM_UP_TIMEOUT_S,
                        think_s=0, interactions_per_session=1)
        await client.session(SessionLog(-1), deadline=time.monotonic())
