"""Warmed decks (ui.deck.warm): once a page has opened a deck, the server draws every slide of it in the background, so
that a room opening the slides builds no model pass and no figure; while it warms, a session typing its own input
sees only its own. In-process: the order of the slides, a failed slide, and once per deck content."""
from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.string_util import clean_text
from websockets.asyncio.client import connect

from benchmarks.load import WARMED, AppSession, SessionLog, logged, open_slide, sent, widget_id
from deploy.server import streamlit_server
from helpers import ROOT
from transformer import load_checkpoint
from ui import shared
from ui.deck import Deck, Slide, read_deck, warm

SHIPPED = "attention-step-by-step"
PAGE = Path(__file__).with_name("deck_counts_page.py")
TYPED = "isolation42"  # what the lecturer types into slide 1 (reverse) while the deck warms
WARM_S = 300  # bound on the warming of the whole shipped deck (a few seconds on a quiet machine)


async def counts(url: str) -> dict[str, int]:
    """How many passes and figures the server has built."""
    async with connect(url.replace("http://", "ws://") + "_stcore/stream", subprotocols=["streamlit"],
                       proxy=None) as websocket:
        page = await AppSession(websocket, SessionLog(-1), "counts=1", 60).rerun([])
    return json.loads(page.output)


async def lecture(url: str, log: Path, slides: int) -> tuple[SessionLog, dict, dict, list[SessionLog]]:
    """The lecturer opens the deck and types an input on its first slide while it warms; once warmed, every slide
    is opened by a new session. Returns the messages of the lecturer's run after typing, the counts before and
    after the room opened the slides, and the room's sessions."""
    async with connect(url.replace("http://", "ws://") + "_stcore/stream", subprotocols=["streamlit"],
                       proxy=None) as websocket:
        lecturer = AppSession(websocket, SessionLog(-1), urlencode({"deck": SHIPPED}), 120)
        page = await lecturer.rerun([])
        assert page.exceptions == []
        lecturer.log = typed = SessionLog(-1)  # the messages of the run after typing
        page = await lecturer.rerun([WidgetState(id=widget_id(page, "Input"), string_value=TYPED)])
        assert page.exceptions == [] and parse_qs(lecturer.query_string)["text"] == [TYPED]
    await logged(log, WARMED.format(SHIPPED), WARM_S)
    before = await counts(url)
    room = [SessionLog(number) for number in range(1, slides + 1)]
    for number, session in enumerate(room, 1):
        await open_slide(url, SHIPPED, number, session, 120)  # raises on an exception or another slide
    return typed, before, await counts(url), room


@pytest.mark.slow
def test_a_warmed_deck_serves_every_slide_without_building_anything(tmp_path):
    slides = len(read_deck(SHIPPED).slides)
    log = tmp_path / "streamlit.log"
    with streamlit_server(ROOT / "checkpoints", log, script=PAGE) as (url, _):
        shown, before, after, room = asyncio.run(lecture(url, log, slides))
    assert after == before, (before, after)  # no model pass and no figure built for any slide
    assert before["passes"] > slides  # the counts read the server's caches, which the warming filled
    text = log.read_text()
    assert text.count("Warmed the deck") == 1, text  # once, though the lecturer and every slide's session opened it
    assert f"Warmed the deck `{SHIPPED}`: {slides} slides in" in text and ", 0 failed" in text, text
    expected = clean_text(load_checkpoint(ROOT / "checkpoints" / "reverse").translate(TYPED).text)
    # lecture mode shows "input → output" beside the view picker: the lecturer's own, while the slides were drawn
    assert f"→  {expected}".encode() in b"".join(shown.received)
    assert not any(sent(session, [TYPED]) for session in room)  # and no one else's


# ---------------------------------------------------------------------------------------------- in-process


def deck_of(count: int, text: str = "abc") -> Deck:
    return Deck("A deck", [Slide(f"slide {n}", "", "", {"checkpoint": "reverse", "text": text, "layer": n % 2})
                           for n in range(1, count + 1)])


@pytest.fixture
def drawn(monkeypatch):
    """The slides warming draws, as (deck, slide), with slide 3 of every deck failing; warming on, on a loop of
    the test's own, with no deck warmed yet."""
    queries = []

    async def draw(query: str) -> list[str]:
        link = parse_qs(query)
        queries.append((link["deck"][0], int(link["slide"][0])))
        return ["ValueError: broken"] if link["slide"] == ["3"] else []

    monkeypatch.setattr(warm, "_draw", draw)
    monkeypatch.setattr(shared, "DECK_WARMING", shared.DeckWarming())  # nothing warmed, no loop, a lock of its own
    return queries


async def pages_show(*shown: tuple[str, Deck, int], environ: dict | None = None) -> None:
    """Start warming as a server does, then pages (each in a thread of its own) show these decks' slides; returns
    once every warming is done."""
    warm.serve(environ or {})
    for name, deck, number in shown:
        await asyncio.to_thread(warm.deck, name, deck, number)
    for _ in range(500):  # bounded: each warming here takes microseconds
        await asyncio.sleep(0.01)
        if not shared.DECK_WARMING.tasks:
            return
    raise AssertionError("the warming did not end")


def test_a_deck_is_warmed_from_the_next_slide_past_a_failed_one_and_once_per_content(drawn, caplog):
    with caplog.at_level(logging.INFO, logger=warm.LOG.name):
        warm.LOG.addHandler(caplog.handler)  # Streamlit's loggers do not propagate to the root one
        try:
            asyncio.run(pages_show(("lecture", deck_of(4), 2), ("lecture", deck_of(4), 4),  # the same deck again
                                   ("lecture", deck_of(4, "xyz"), 1)))  # edited: its content is new
        finally:
            warm.LOG.removeHandler(caplog.handler)
    assert drawn == [("lecture", n) for n in (3, 4, 1, 2)] + [("lecture", n) for n in (2, 3, 4, 1)]
    assert "Warming the deck `lecture`, slide 3: ValueError: broken" in caplog.text
    assert caplog.text.count("Warmed the deck `lecture`: 4 slides in") == 2 and ", 1 failed" in caplog.text


def test_decks_named_at_the_start_are_warmed_and_off_warms_nothing(drawn, monkeypatch, tmp_path):
    monkeypatch.setenv("ATLAS_DECKS", str(ROOT / "decks"))
    asyncio.run(pages_show(environ={"ATLAS_WARM_DECKS": f"{SHIPPED}, no-such-deck"}))
    assert drawn == [(SHIPPED, n) for n in range(1, len(read_deck(SHIPPED).slides) + 1)]
    drawn.clear()
    monkeypatch.setattr(shared.DECK_WARMING, "claimed", set())
    asyncio.run(pages_show(("lecture", deck_of(2), 1), environ={"ATLAS_WARM_DECKS": "off"}))
    assert drawn == []


def test_outside_a_server_a_deck_is_not_warmed(drawn):
    warm.deck("lecture", deck_of(2), 1)  # AppTest: no server started the warming
    assert drawn == [] and not shared.DECK_WARMING.claimed
