"""Warmed decks: every slide of a deck drawn once in the background, so that a room following the lecturer finds each
slide's model passes and figures built (ui.shared) and waits for nothing the lecturer did not already see.

Warming a slide is drawing it: a session of the server's own runtime, with no browser, opens the slide's link
(`?deck=NAME&slide=N`) and runs the page as a student's first visit does. So it builds exactly what that visit asks
for, passes and figures, through the same shared caches, model turns and byte bounds, and no view knows about it.
Without a browser the page measures no screen: its figures are those of the default lecture space (ui.screen's 1280 x
720 projector), which every session draws on its first run; a browser of another size draws its own once measured.

A deck is warmed once per content per server process: the first time a page has shown it (ui.frame calls deck() once
the page is drawn, so the page that opened the deck never waits for the warming), from the slide after that page's,
and at the server's start for the decks $ATLAS_WARM_DECKS names (comma-separated; behind a proxy every process has
its own caches, and a lecturer's page reaches only one of them). ATLAS_WARM_DECKS=off warms nothing. The slides are
drawn one at a time, one deck at a time: warming holds at most one model turn. A slide that fails or takes over
SLIDE_TIMEOUT_S is logged and the others are drawn. What they built is kept as any shared result is: as results no
open session has asked for yet (their bound is 48 MB of passes and 16 MB of figures; the shipped deck's 14 slides
build about 0.5 and 0.3 MB), for an hour unless asked for; a deck is not warmed again once its results are gone.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Mapping
from urllib.parse import urlencode

from streamlit import runtime
from streamlit.logger import get_logger
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.runtime.runtime import RuntimeStoppedError

from .. import shared
from .parse import Deck, DeckError, deck_toml
from .presenter import read_deck

SLIDE_TIMEOUT_S = 300.0  # a slide not drawn by then is given up (its session closed) and the next one drawn
OFF = "off"
LOG = get_logger(__name__)


def serve(environ: Mapping[str, str] = os.environ) -> None:
    """Turn warming on for this server (call on its event loop, at its start), and warm the decks $ATLAS_WARM_DECKS
    names; `off` leaves it off."""
    setting = environ.get("ATLAS_WARM_DECKS", "").strip()
    shared.DECK_WARMING.loop = None if setting == OFF else asyncio.get_running_loop()
    if shared.DECK_WARMING.loop is None:
        return
    for name in (name.strip() for name in setting.split(",")):
        if name:
            _start(_warm_named(name))


def deck(name: str, shown: Deck, number: int) -> None:
    """A page has drawn slide `number` of the deck `name`: warm the deck, from the next slide on, unless this
    process has warmed (or is warming) this content. Outside a server (AppTest) or with warming off, nothing."""
    if shared.DECK_WARMING.loop is not None and _claim(name, shown):
        shared.DECK_WARMING.loop.call_soon_threadsafe(_start, _warm(name, len(shown.slides), number))


def _claim(name: str, shown: Deck) -> bool:
    """True the first time this process sees the deck `name` with this content (its file as deck_toml writes it)."""
    key = hashlib.blake2b(f"{name}\n{deck_toml(shown)}".encode(), digest_size=16).hexdigest()
    with shared.DECK_WARMING.claim_lock:
        new = key not in shared.DECK_WARMING.claimed
        shared.DECK_WARMING.claimed.add(key)
    return new


def _start(warming) -> None:
    task = asyncio.get_running_loop().create_task(warming)
    shared.DECK_WARMING.tasks.add(task)
    task.add_done_callback(shared.DECK_WARMING.tasks.discard)


async def _warm_named(name: str) -> None:
    try:
        named = await asyncio.to_thread(read_deck, name)  # a file read: off the event loop
    except DeckError as error:
        LOG.warning("ATLAS_WARM_DECKS: %s", error)
        return
    if _claim(name, named):
        await _warm(name, len(named.slides), 0)


async def _warm(name: str, count: int, shown: int) -> None:
    """Draw every slide of the deck `name`, the one after `shown` first and `shown` (already drawn) last."""
    async with shared.DECK_WARMING.one_deck_at_a_time:
        start, failed = time.monotonic(), 0
        for number in [*range(shown + 1, count + 1), *range(1, shown + 1)]:
            try:
                problems = await _draw(urlencode({"deck": name, "slide": number}))
            except RuntimeStoppedError:  # the server is stopping
                return
            if problems:
                failed += 1
                LOG.warning("Warming the deck `%s`, slide %d: %s", name, number, "; ".join(problems))
        LOG.info("Warmed the deck `%s`: %d slides in %.1f s, %d failed", name, count, time.monotonic() - start, failed)


class _NoBrowser:
    """The client of a session that no browser reads: it notes the exceptions the page shows and when its run ends.
    Called on the event loop (the runtime delivers every message there)."""

    client_context = None

    def __init__(self) -> None:
        self.finished = asyncio.Event()
        self.problems: list[str] = []

    def write_forward_msg(self, message: ForwardMsg) -> None:
        kind = message.WhichOneof("type")
        if kind == "delta" and message.delta.new_element.WhichOneof("type") == "exception":
            exception = message.delta.new_element.exception
            self.problems.append(f"{exception.type}: {exception.message}")
        elif kind == "script_finished":
            status = message.script_finished
            if status != ForwardMsg.FINISHED_SUCCESSFULLY:
                self.problems.append(f"the run ended with {ForwardMsg.ScriptFinishedStatus.Name(status)}")
            self.finished.set()


async def _draw(query: str) -> list[str]:
    """Run the page once for the link `query` in a session of its own; what went wrong (nothing: [])."""
    server, client = runtime.get_instance(), _NoBrowser()
    session = server.connect_session(client, user_info={})
    try:
        request = BackMsg()
        request.rerun_script.query_string = query
        server.handle_backmsg(session, request)
        await asyncio.wait_for(client.finished.wait(), SLIDE_TIMEOUT_S)
    except TimeoutError:
        client.problems.append(f"not drawn within {SLIDE_TIMEOUT_S:g} s")
    finally:
        server.close_session(session)
    return client.problems
