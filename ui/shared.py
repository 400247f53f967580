"""The app's caches, and every object this server process holds once for all its sessions (the section "The
process's objects" at the end, one line each). Each cached result is computed once at a time and shared by every
session and thread. Two kinds, for two kinds of key:

- Content-keyed results (SharedResults): figures and tables through `once(viz.head_heatmap, weights, …)`, model passes
  declared SHARED (ui.model_pass) through `shared_pass` (ui.passes.run). Bounded in bytes: their arguments are
  arrays and token lists, and a result's size grows with its input.
- Time-to-live lookups (Expiring, `@expiring(ttl, max_entries=…)`): the folder scan and checks, loaded checkpoints,
  tables read from a checkpoint, a corpus run, a parsed deck. Bounded in entries and time: a few small arguments (a
  folder's path and version) asked for on every rerun, so a hit costs a dictionary lookup, and what they hold (a
  loaded model, a corpus file) is let go `ttl` after it was computed.

Both wait for an entry another thread is computing with the page turn let go (ui.turns), and so do the computations
that may themselves wait for others (passes, lookups); Streamlit's own caches, which wait on a lock of their own, are
not used. Results are shared, so they are read-only by contract: nothing in the UI changes a figure after it is built
(st.plotly_chart copies it to serialize it), passes hold read-only arrays, and views only read the frames a lookup
returns.

A lecture hall opens one link: forty sessions ask for the same pass and then for the same figures. Building a Plotly
figure costs far more than sending it, so the result of a call is kept under a key made of the function and every
argument's *content* (arrays hashed in full, not sampled: two heads that differ in one weight must never share a
figure). Each content-keyed cache is bounded by an estimate of its results' bytes and by an idle time, not only by a
count: one 256-token pass or heatmap weighs as much as hundreds of short ones. A result no open session has asked for
(its sessions closed) is kept within a much smaller bound: a server that sees hundreds of sessions come and go holds
what its open sessions show, not a history of closed ones. The forty sessions that open a lecture's link together
wait for one pass and one figure, not forty.
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import datetime
import functools
import hashlib
import inspect
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pyarrow as pa
import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from . import turns

FIGURE_BYTES = 256 * 2**20  # what the shared figures and tables may hold in all (estimated)
PASS_BYTES = 768 * 2**20  # what the shared model passes may hold (a 256-token pass of 6 x 8 heads: ~75 MB)
# Of those, what results of closed sessions only may hold: enough for a browser that comes back to a link it had
# open, or a second look at a lecture's link, while 200 sessions opened and closed in turn leave no more behind.
CLOSED_FIGURE_BYTES = 16 * 2**20
CLOSED_PASS_BYTES = 48 * 2**20
KEPT_FOR_S = 3600.0  # a result nobody asked for in an hour is dropped


class _Hasher:
    """A digest of an argument's content; refuses types it cannot read exactly (a silent collision would show one
    input's figure for another)."""

    def __init__(self):
        self.digest = hashlib.blake2b(digest_size=20)

    def add(self, value) -> None:
        update = self.digest.update
        if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
            update(f"{type(value).__name__}:{value!r};".encode())
        elif isinstance(value, np.ndarray):
            update(f"ndarray:{value.dtype.str}:{value.shape};".encode())
            update(np.ascontiguousarray(value).data if value.dtype != object else repr(value.tolist()).encode())
        elif isinstance(value, np.generic):
            self.add(value.item())
        elif isinstance(value, pd.DataFrame):
            update(f"frame:{list(value.columns)!r}:{list(value.dtypes.astype(str))!r};".encode())
            update(pd.util.hash_pandas_object(value, index=True).to_numpy().data)
        elif isinstance(value, (list, tuple)):
            update(f"{type(value).__name__}[{len(value)}](".encode())
            for item in value:
                self.add(item)
            update(b")")
        elif isinstance(value, dict):
            update(f"dict[{len(value)}](".encode())
            for key in sorted(value, key=repr):
                self.add(key)
                self.add(value[key])
            update(b")")
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            update(f"{type(value).__qualname__}(".encode())
            self.add([(field.name, getattr(value, field.name)) for field in dataclasses.fields(value)])
            update(b")")
        else:
            raise TypeError(f"ui.shared cannot key an argument of type {type(value).__name__}")


def fingerprint(function: Callable, args: tuple, kwargs: dict) -> str:
    """The key of function(*args, **kwargs): its name and every parameter's value, defaults filled in, so that
    f(a), f(a, b=default) and f(a, default) share one result."""
    bound = _signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return content_key(f"{function.__module__}.{function.__qualname__}", dict(bound.arguments))


def content_key(*values) -> str:
    """A digest of the content of `values`, in order (see _Hasher)."""
    hasher = _Hasher()
    for value in values:
        hasher.add(value)
    return hasher.digest.hexdigest()


@functools.cache
def _signature(function: Callable) -> inspect.Signature:
    return inspect.signature(function)


def size_of(value, _depth: int = 0) -> int:
    """Estimated bytes of a result: its arrays, strings and numbers (a Plotly figure through its data and layout)."""
    if _depth > 64:
        return 0
    if hasattr(value, "_data") and hasattr(value, "_layout"):  # a Plotly figure: its plain dicts, without a copy
        return size_of(value._data, _depth + 1) + size_of(value._layout, _depth + 1)
    if isinstance(value, np.ndarray):
        return value.nbytes if value.dtype != object else sum(size_of(v, _depth + 1) for v in value.flat)
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, dict):
        return sum(size_of(k, _depth + 1) + size_of(v, _depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(size_of(item, _depth + 1) for item in value) + 8 * len(value)
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(index=True, deep=True).sum())
    if isinstance(value, pa.Table):
        return value.nbytes
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(size_of(getattr(value, field.name), _depth + 1) for field in dataclasses.fields(value))
    return 8


@contextlib.contextmanager
def _held(lock: threading.Lock) -> Iterator[None]:
    """Release `lock`, already acquired, on leaving the block."""
    try:
        yield
    finally:
        lock.release()


def current_session() -> str | None:
    """The id of the session whose rerun runs in this thread (None outside one)."""
    context = get_script_run_ctx(suppress_warning=True)
    return context.session_id if context is not None else None


def session_is_open(session_id: str) -> bool:
    """Whether a browser is still connected to the session. Without a server (AppTest) every session counts as open."""
    return not runtime.exists() or runtime.get_instance().is_active_session(session_id)


@dataclasses.dataclass
class _Entry:
    value: object
    size: int
    used: float
    sessions: set[str]  # the open sessions that asked for it (closed ones are dropped as they are found)


class SharedResults:
    """A least-recently-used map from fingerprints to results, bounded in estimated bytes and idle time, and in the
    bytes of results that no open session asked for (closed_bytes). A miss builds under that key's own lock: other
    keys' hits and builds go on meanwhile, and a session that asks for the key being built waits for it and takes it.

    session() names the session asking, and is_open(id) tells whether it is still open (Streamlit's by default)."""

    def __init__(self, max_bytes: int, closed_bytes: int | None = None, kept_for_s: float = KEPT_FOR_S,
                 clock=time.monotonic, session: Callable[[], str | None] = current_session,
                 is_open: Callable[[str], bool] = session_is_open):
        self.max_bytes, self.kept_for_s, self.clock = max_bytes, kept_for_s, clock
        self.closed_bytes = max_bytes if closed_bytes is None else closed_bytes
        self.session, self.is_open = session, is_open
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._building: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = self.misses = 0

    def _cached(self, key: str, session: str | None) -> _Entry | None:
        """The entry under `key`, marked as just used by `session`; call with self._lock held."""
        entry = self._entries.get(key)
        if entry is not None:
            entry.used = self.clock()
            if session is not None:
                entry.sessions.add(session)
            self._entries.move_to_end(key)
            self.hits += 1
        return entry

    def get(self, key: str, build: Callable[[], object]):
        session = self.session()
        with self._lock:
            entry = self._cached(key, session)
            if entry is not None:
                return entry.value
            building = self._building.setdefault(key, threading.Lock())
        with waiting():  # maybe for another session's build
            building.acquire()
        with _held(building):
            with self._lock:
                entry = self._cached(key, session)  # built while this session waited for it
                if entry is not None:
                    return entry.value
                self.misses += 1
            freed = 0
            try:
                value = build()
                size = size_of(value)
                with self._lock:
                    if size <= self.max_bytes:
                        self._entries[key] = _Entry(value, size, self.clock(), {session} - {None})
                        self.bytes += size
                        freed = self._evict()
            finally:  # only once the result is stored (or the build failed): a later session finds one or the other
                with self._lock:
                    self._building.pop(key, None)
        if freed >= TRIM_BYTES:
            return_freed_memory()
        return value

    def _closed_only_bytes(self) -> int:
        """Bytes of the results that no open session asked for; forgets the closed sessions it finds. Call with
        self._lock held."""
        closed, open_now = 0, {}  # each session asked about once: thousands of entries share forty sessions

        def still_open(session: str) -> bool:
            if session not in open_now:
                open_now[session] = self.is_open(session)
            return open_now[session]

        for entry in self._entries.values():
            entry.sessions = {session for session in entry.sessions if still_open(session)}
            closed += 0 if entry.sessions else entry.size
        return closed

    def _evict(self) -> int:
        """Drop the least recently used results while over a bound, and every result idle for kept_for_s; the bytes
        dropped."""
        # The closed sessions' results cannot pass their bound while all results are within it: no walk of every
        # entry (and no question to Streamlit about each session) on every miss.
        closed = self._closed_only_bytes() if self.bytes > self.closed_bytes else 0
        now, dropped = self.clock(), 0
        for key, entry in list(self._entries.items()):  # least recently used first
            over = self.bytes > self.max_bytes or (closed > self.closed_bytes and not entry.sessions)
            if over or now - entry.used > self.kept_for_s:
                del self._entries[key]
                self.bytes -= entry.size
                dropped += entry.size
                closed -= 0 if entry.sessions else entry.size
            elif self.bytes <= self.max_bytes and closed <= self.closed_bytes:
                break
        return dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)


def _libc():
    try:
        return ctypes.CDLL("libc.so.6") if sys.platform == "linux" else None
    except OSError:  # not glibc (musl, say): nothing to call
        return None


_LIBC = _libc()
TRIM_BYTES = 16 * 2**20  # dropped results this large are worth a trim (a few milliseconds)


def return_freed_memory() -> None:
    """Hand the pages that dropped results leave free back to the system. glibc keeps freed memory in its arenas
    (every session's thread has one), so without this a server's resident memory stayed up after a long input's
    session closed and its results were dropped."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def once(function: Callable, *args, **kwargs):
    """function(*args, **kwargs), built once for every session while it stays cached (read-only: see above).

    A Plotly figure gets its key as layout.datarevision: the same key is the same data. Streamlit hands every chart
    it has drawn to Plotly.react once more, as a copy, and without a datarevision Plotly.js takes each copied array
    for new data and draws the whole figure again."""
    key = fingerprint(function, args, kwargs)

    def build():
        result = function(*args, **kwargs)
        if isinstance(result, go.Figure):
            result.layout.datarevision = key
        return result
    return RESULTS.get(key, build)


def shared_pass(key: str, spinner: str, build: Callable[[], object]):
    """The model pass under `key` (content_key of its declaration and arguments), built once for every session within
    PASSES's byte bound; `spinner` is shown to the session that builds it, which lets its page turn go meanwhile."""
    def built():
        with st.spinner(spinner), waiting():  # a model turn, or a batch (transformer.inference.batching)
            return build()
    return PASSES.get(key, built)


class Expiring:
    """`function`'s results by argument, shared by every session for `ttl_s` after each is computed, at most
    `max_entries` of them (the least recently used go first; `on_release(value)` is called on each that goes).

    A hit is one dictionary lookup under one lock: every rerun of every page asks for a dozen of these, and a cache
    that hashes its arguments and looks for widgets to replay on each call (Streamlit's: about 0.3 ms a call) costs a
    tenth of a click's page. A key is computed once at a time, under `spinner` if one is given; the callers that
    wait for it, and the computation itself (a checkpoint's load, a corpus run of minutes), run outside the page
    turns (ui.turns). An exception is raised to its caller and not kept. Entries older than ttl_s are dropped (and
    released) by the next call after them, within a minute, whatever its key."""

    def __init__(self, function: Callable, ttl_s: float, max_entries: int, spinner: str | None = None,
                 on_release: Callable[[object], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.function, self.ttl_s, self.max_entries, self.spinner = function, ttl_s, max_entries, spinner
        self.on_release, self.clock = on_release, clock
        self._entries: OrderedDict[tuple, tuple[float, object]] = OrderedDict()  # key -> (computed at, value)
        self._building: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()
        self._next_sweep = clock()
        functools.update_wrapper(self, function)
        EXPIRING.add(self)

    def _fresh(self, key: tuple):
        """The entry under `key` if it is younger than ttl_s, else None; call with self._lock held."""
        entry = self._entries.get(key)
        if entry is None or self.clock() - entry[0] >= self.ttl_s:
            return None
        self._entries.move_to_end(key)
        return entry

    def _sweep(self) -> list[tuple[float, object]]:
        """Take out the entries older than ttl_s (a checkpoint nobody looked at is freed, not only replaced), at most
        once a minute; call with self._lock held and release what it returns."""
        now = self.clock()
        if now < self._next_sweep:
            return []
        self._next_sweep = now + min(self.ttl_s, 60.0)
        stale = [key for key, (computed, _) in self._entries.items() if now - computed >= self.ttl_s]
        return [self._entries.pop(key) for key in stale]

    def __call__(self, *args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        with self._lock:
            swept = self._sweep()
        for _, old in swept:
            self._release(old)
        with self._lock:
            entry = self._fresh(key)
            if entry is not None:
                return entry[1]
            building = self._building.setdefault(key, threading.Lock())
        with waiting():
            with building:
                with self._lock:
                    entry = self._fresh(key)  # computed while this caller waited for it
                if entry is not None:
                    return entry[1]
                try:
                    with st.spinner(self.spinner) if self.spinner else contextlib.nullcontext():
                        value = self.function(*args, **kwargs)
                    with self._lock:
                        released = [self._entries.pop(key)] if key in self._entries else []
                        self._entries[key] = (self.clock(), value)
                        while len(self._entries) > self.max_entries:
                            released.append(self._entries.popitem(last=False)[1])
                finally:
                    with self._lock:
                        self._building.pop(key, None)
        for _, old in released:
            self._release(old)
        return value

    def _release(self, value) -> None:
        if self.on_release is not None:
            self.on_release(value)

    def clear(self) -> None:
        with self._lock:
            released, self._entries = list(self._entries.values()), OrderedDict()
        for _, value in released:
            self._release(value)


def expiring(ttl: datetime.timedelta | float, max_entries: int, spinner: str | None = None,
             on_release: Callable[[object], None] | None = None) -> Callable[[Callable], Expiring]:
    """Decorator: the function's results kept for `ttl` (seconds or a timedelta), at most `max_entries` (Expiring)."""
    ttl_s = ttl.total_seconds() if isinstance(ttl, datetime.timedelta) else float(ttl)
    return lambda function: Expiring(function, ttl_s, max_entries, spinner, on_release)


def clear() -> None:
    """Forget every shared figure and pass, and every loaded checkpoint (for tests and benchmarks of a first
    visit)."""
    RESULTS.clear()
    PASSES.clear()
    for cache in list(EXPIRING):
        cache.clear()


# ---------------------------------------------------------------------------------------------- page turns
# ui.turns: a rerun's page code runs in a page turn, and lets it go whenever it may wait for another thread.

_holds_page: ContextVar[bool] = ContextVar("attention_atlas_holds_page_turn", default=False)


@contextlib.contextmanager
def page() -> Iterator[None]:
    """Run a rerun of the page in a page turn (ui.turns)."""
    with PAGE.turn():
        holding = _holds_page.set(True)
        try:
            yield
        finally:
            _holds_page.reset(holding)


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """Let go of this thread's page turn, if it holds one, while it waits for others (a model pass, a result another
    session builds); take one again after."""
    if not _holds_page.get():
        yield
        return
    PAGE.release()
    holding = _holds_page.set(False)
    try:
        yield
    finally:
        _holds_page.reset(holding)
        PAGE.acquire()


@dataclasses.dataclass
class DeckWarming:
    """What ui.deck.warm keeps between pages: where it warms, the decks it took on, the warmings under way."""

    loop: asyncio.AbstractEventLoop | None = None  # the server's event loop, where sessions open; None: no warming
    claimed: set[str] = dataclasses.field(default_factory=set)  # the decks (name and content) warmed or being warmed
    claim_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)  # pages of every session ask at once
    tasks: set[asyncio.Task] = dataclasses.field(default_factory=set)  # under way (the loop keeps weak references)
    one_deck_at_a_time: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)


# ---------------------------------------------------------------------------------------------- the process's objects
# Everything this server process holds once for all its sessions. Two more are built from the library, which only
# ui.passes may import: ui.passes.MEMORY (the bytes every session's passes may hold at once: ui.memory's budget, sized
# by the library's bound on one pass) and ui.passes.BATCHER (translations of many sessions decoded as one batch).

RESULTS = SharedResults(FIGURE_BYTES, CLOSED_FIGURE_BYTES)  # figures and tables, built once for every session (once)
PASSES = SharedResults(PASS_BYTES, CLOSED_PASS_BYTES)  # the results of the passes declared SHARED (shared_pass)
EXPIRING: weakref.WeakSet[Expiring] = weakref.WeakSet()  # every time-to-live cache, for clear()
PASS_CACHES: dict[str, tuple[object, Callable]] = {}  # a declared pass's name -> (it, its cache): ui.passes.run
PASS_CACHES_LOCK = threading.Lock()  # two sessions asking for a pass's first result at once make one cache
MODEL = turns.Turns(turns.turn_count())  # model turns: every pass runs in one (ui.passes.model_turn)
PAGE = turns.Turns(turns.turn_count())  # page turns: every rerun's page code runs in one (page()), let go in waiting()
DECK_WARMING = DeckWarming()  # which decks this process warms and has warmed (ui.deck.warm)
