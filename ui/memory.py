"""The process's memory budget for model passes: what every session's passes may hold at once, in bytes estimated
before each pass runs.

One pass is bounded already (transformer.io.safety.PASS_BUDGET_BYTES: a long input is cut to what fits). Many are not:
a long-context model under many long links makes every session hold its own pass's attention (hundreds of MB each)
from the pass until its page is drawn, and the sessions waiting for a page turn keep theirs meanwhile, so memory
grows with the number of sessions, not with the cores. Here each pass first takes its estimate from the budget
(`held()`), and keeps it until the rerun that ran it ends (the page it draws holds the result until then); a pass
whose estimate does not fit waits, oldest click first (a short input's pass that fits overtakes), and after WAIT_S
is refused with a message (ServerBusy) rather than take the server's memory. A page that waited for memory then
queues for turns (ui.turns) as if its click arrived when it got it: the pages that came meanwhile and needed little
are not kept behind every long input of a crowd. Passes outside a rerun (a deck warmed in the background) give
theirs back when they end.

Two rules keep a crowd from blocking itself: one pass always runs when nothing is held (a pass over the budget runs
alone), and when every byte held belongs to reruns that are themselves waiting here, the oldest waiter runs (none
of them could ever give memory back otherwise).

The budget: $ATLAS_MEMORY_BUDGET_MB, or else a quarter of what this process may use (the least of the machine's
memory, its cgroup's limit and the address-space limit), never less than one pass's bound. ui.passes holds the
process's budget (MEMORY) and estimates each pass, as it alone knows the model. A quarter leaves the
rest to the model's weights, the shared results (ui.shared's bounds) and Python's own.
"""
from __future__ import annotations

import heapq
import itertools
import os
import resource
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from . import shared, turns

WAIT_S = 60.0  # how long a pass waits for memory before the page says the server is busy
# A pass that takes at most this share of the budget does not queue behind longer ones while it fits: a normal page
# is served at once beside a crowd of long inputs, and cannot starve them (it is small, and gives its memory back).
SMALL_SHARE = 32
SETTLE_S = 0.05  # a wait shorter than this is no wait
MB = 2**20
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


class ServerBusy(ValueError):
    """Other sessions' passes hold this server's memory for longer than a page should wait; the message is for the
    user."""

    def __init__(self, needed: int, waited_s: float) -> None:
        super().__init__(f"This server is busy with other long inputs: this page's model pass (about "
                         f"{needed / MB:,.0f} MB) waited {waited_s:.0f} s for memory. Try again in a moment, or with "
                         "a shorter input.")


class _Rerun:
    """What one run of the page holds of the budget."""

    def __init__(self) -> None:
        self.held = 0


_rerun: ContextVar[_Rerun | None] = ContextVar("attention_atlas_memory_rerun", default=None)


class MemoryBudget:
    """At most `total` estimated bytes held by passes at once (see the module's docstring for the two exceptions)."""

    def __init__(self, total: int, wait_s: float = WAIT_S) -> None:
        self.total, self.wait_s = total, wait_s
        self.in_use = 0  # bytes held now, by every rerun and running pass (tests, the load benchmark read it)
        self.peak = 0  # the most ever held at once
        self._blocked = 0  # of `in_use`, the bytes of reruns that wait here for more
        self._waiting: list[tuple[float, int]] = []  # a heap: (click arrived, order asked)
        self._order = itertools.count()
        self._changed = threading.Condition()

    @contextmanager
    def rerun(self) -> Iterator[None]:
        """One run of the page: the passes it runs keep their memory until it ends."""
        rerun = _Rerun()
        token = _rerun.set(rerun)
        try:
            yield
        finally:
            _rerun.reset(token)
            self._give_back(rerun.held)

    @contextmanager
    def held(self, needed: int, kept: bool = True) -> Iterator[None]:
        """Take `needed` bytes for a pass (waiting for them, ServerBusy after wait_s); inside a rerun they stay taken
        until it ends (the rerun holds the pass's arrays), otherwise, or where the pass keeps nothing (`kept` False:
        one chunk of a corpus, summed and let go), until the pass does."""
        rerun = _rerun.get() if kept else None
        self._take(needed, rerun)
        try:
            yield
        finally:
            if rerun is None:
                self._give_back(needed)

    def _take(self, needed: int, rerun: _Rerun | None) -> None:
        ticket = (turns.click_arrival(), next(self._order))
        started = time.monotonic()
        blocked = 0 if rerun is None else rerun.held  # held by a rerun that cannot go on while it waits
        with shared.waiting(), self._changed:  # never wait for memory in a page turn
            heapq.heappush(self._waiting, ticket)
            self._blocked += blocked
            try:
                while not self._may_take(needed, ticket):
                    left = started + self.wait_s - time.monotonic()
                    if left <= 0:
                        raise ServerBusy(needed, time.monotonic() - started)
                    self._changed.wait(left)
                self.in_use += needed
                self.peak = max(self.peak, self.in_use)
                if time.monotonic() - started > SETTLE_S:
                    turns.arrived()  # it waited: it queues for turns from now, behind the pages that did not
                if rerun is not None:
                    rerun.held += needed
            finally:
                self._waiting.remove(ticket)
                heapq.heapify(self._waiting)
                self._blocked -= blocked
                self._changed.notify_all()

    def _may_take(self, needed: int, ticket: tuple[float, int]) -> bool:
        fits = self.in_use + needed <= self.total
        if self._waiting[0] != ticket:  # the oldest click first, but a short input's pass that fits goes at once
            return fits and needed <= self.total // SMALL_SHARE
        return fits or self.in_use == 0 or self.in_use == self._blocked

    def _give_back(self, amount: int) -> None:
        if not amount:
            return
        with self._changed:
            self.in_use -= amount
            self._changed.notify_all()


def process_memory() -> int:
    """The bytes this process may use at most: the machine's memory, its cgroup's limit, the address-space limit."""
    limits = [os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
    for path in CGROUP_LIMITS:
        text = path.read_text().strip() if path.is_file() else "max"
        if text.isdigit():
            limits.append(int(text))
    address_space = resource.getrlimit(resource.RLIMIT_AS)[0]
    if address_space != resource.RLIM_INFINITY:
        limits.append(address_space)
    return min(limits)


def budget_bytes(one_pass: int, environ: Mapping[str, str] = os.environ) -> int:
    """$ATLAS_MEMORY_BUDGET_MB, or a quarter of process_memory() and at least `one_pass` (one pass's bound)."""
    setting = environ.get("ATLAS_MEMORY_BUDGET_MB", "")
    if not setting:
        return max(one_pass, process_memory() // 4)
    if not setting.isdigit() or int(setting) < 1:
        raise ValueError(f"ATLAS_MEMORY_BUDGET_MB must be a whole number of at least 1, got {setting!r:.40}")
    return int(setting) * MB
