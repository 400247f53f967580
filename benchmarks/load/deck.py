"""A room following a lecturer's deck (--deck [NAME]): a lecture through a deck (the shipped one by default;
--slides N: its first N) on two servers at once, one that warms the deck when it is opened (ui.deck.warm) and one that
does not (ATLAS_WARM_DECKS=off). The lecturer opens the deck on both (and the room waits until the first has logged
that the deck is warmed); then for each slide the lecturer opens its link and every student opens it too, each
within DECK_SPREAD_S of the lecturer, in a new session as a browser opening the link does, on one server and then
on the other, and on to the next slide. A wait is timed from the rerun request to script_finished; the p95 of each
slide's waits is compared."""
from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import numpy as np

from deploy.server import streamlit_server
from ui.deck import Deck, deck_toml, read_deck

from .client import TIMEOUT_S, WARM_UP_TIMEOUT_S
from .protocol import SESSION_ERRORS, AppSession, BrokenSession, SessionLog, error_text, open_websocket
from .report import with_errors

DECK = "attention-step-by-step"  # the shipped deck
DECK_SPREAD_S = 3.0  # each student opens a slide within this many seconds of the lecturer
WARMED = "Warmed the deck `{}`"  # what ui.deck.warm logs once it has drawn every slide of a deck


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
    async with open_websocket(url, timeout_s) as websocket:
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
        except SESSION_ERRORS as error:
            errors.append(f"slide {number}, {f'student #{who}' if who >= 0 else 'the lecturer'}: {error_text(error)}")
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
