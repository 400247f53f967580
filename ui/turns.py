"""Model work takes turns: at most as many passes run at once as the process has cores, oldest click first. So does
the page's own Python (ui.shared.page()), for the same reason. The turns themselves are two of the process's
objects (ui.shared.MODEL and ui.shared.PAGE); here, how turns are handed out.

Streamlit runs each session's script in a thread of its own, and torch lets go of the GIL around every operation:
twenty sessions that run the model at once hand the GIL to each other thousands of times a second, and pay for it in
context switches: twenty threads running the model at once finish fewer passes a second than two at a time, each at
more CPU (docs/load-test.md has the measurements).

The others wait, served in the order their clicks arrived (`arrived()`, called when a run of the page starts), not
the order they asked for a turn: a view that needs several passes (the training view's snapshots) would otherwise
queue again for each, behind every click that came after its own.

The page's Python holds the GIL: forty sessions rerunning at once (a hall typing its own sentences) take turns at
one core whatever their number, and each thread that wants the GIL while another holds it costs the holder a
hand-over. A rerun therefore runs its page in a page turn (ui.shared.page()), as many as there are model turns,
oldest click first, and lets go of it whenever it may wait for another thread (ui.shared.waiting()): for a model
pass (its own, or a batch with other sessions' inputs), or a shared result or cached lookup another session is
computing (ui.shared). A thread never waits for another while it holds a page turn, so the threads that give theirs
back always get one again.
"""
from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_arrived: ContextVar[float | None] = ContextVar("attention_atlas_click_arrived", default=None)


def arrived() -> None:
    """This thread's click arrived now: its passes go before those of clicks that arrive later."""
    _arrived.set(time.monotonic())


def click_arrival() -> float:
    """When this thread's click arrived (now, for a thread that serves no click): the order its waits are served in."""
    arrival = _arrived.get()
    return time.monotonic() if arrival is None else arrival


class Turns:
    """At most `count` holders at once; a freed turn goes to the waiter whose click arrived first."""

    def __init__(self, count: int) -> None:
        self._lock = threading.Lock()
        self._free = count
        self._waiting: list[tuple[float, int, threading.Event]] = []  # a heap: (click arrived, order asked, wake-up)
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        """How many wait for a turn now."""
        return len(self._waiting)

    @contextmanager
    def turn(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()

    def acquire(self) -> None:
        arrival = click_arrival()
        with self._lock:
            if self._free:
                self._free -= 1
                wake_up = None
            else:
                wake_up = threading.Event()
                heapq.heappush(self._waiting, (arrival, next(self._order), wake_up))
        if wake_up is not None:
            wake_up.wait()  # the turn is handed over by the holder that frees it

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                heapq.heappop(self._waiting)[2].set()
            else:
                self._free += 1


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def turn_count(environ=os.environ) -> int:
    """$ATLAS_MODEL_TURNS (deploy.local gives each of K processes its share of the cores), or else the cores."""
    setting = environ.get("ATLAS_MODEL_TURNS", "")
    if not setting:
        return cores()
    if not setting.isdigit() or int(setting) < 1:
        raise ValueError(f"ATLAS_MODEL_TURNS must be a whole number of at least 1, got {setting!r:.40}")
    return int(setting)
