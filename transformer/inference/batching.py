"""Translations asked for by many threads at once, decoded together: dynamic batching for the app's sessions.

A lecture hall typing its own sentences asks for forty translations within a second, each from its own thread (a
Streamlit session). Decoding reads every weight of the model at every step, whether for one row or for forty
(docs/performance.md), so forty inputs decoded as one batch cost a fraction of forty decoded in turn. The Batcher
lets the threads meet: a request joins a queue, and the thread that gets to run the model next (`turn`: the app's
model turns) takes every compatible request waiting and decodes them as one batch (Checkpoint.decode_batch); each
thread then captures its own input's pass in a turn of its own (Checkpoint.explain), so that the captures of a
batch run side by side and a click of another session can come between them. Each thread gets exactly the
Translation translate() gives alone. A request with nothing else waiting runs at once; when others wait (a burst is
arriving), the runner first gives them `window_s` to gather.

Compatible: the same checkpoint, the same weights (a training snapshot is other weights) and the same beam size.
A request made under a capture or an ablation (per-call state of its own thread, see hooks.py), or for a model
that does not pad (a language model's prompts), runs alone in its own thread. A batch holds at most `max_batch`
requests and only as many as fit the memory one captured pass may take (Checkpoint.batch_fits).

Errors: what is wrong with an input is raised in its own thread before it queues (Checkpoint.prepare), and so is
what goes wrong in its capture. A batch whose decoding fails is decoded again one request at a time, so that each
error reaches its own caller only; every caller gets an answer. A request whose caller has gone (`alive()` false
when its batch is formed) is dropped.
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass

from ..model.hooks import captures_active, edits_active
from ..model.model import Transformer
from .translation import Checkpoint, Request, Translation

WINDOW_S = 0.02  # how long a runner waits for a burst's other requests to gather
MAX_BATCH = 64  # requests per batch: beyond this, a batch's longest input holds up too many others


class Cancelled(Exception):
    """The caller left before its translation's batch ran."""


@dataclass(eq=False)
class _Job:
    checkpoint: Checkpoint
    model: Transformer
    request: Request
    alive: Callable[[], bool]
    arrived: float
    taken: bool = False  # into a batch
    done: bool = False
    result: list[int] | None = None  # the decoded sequence
    error: BaseException | None = None

    @property
    def key(self) -> tuple[int, int, int]:
        """Jobs that may share a batch have the same key (ids are unique while the jobs hold their objects)."""
        return id(self.checkpoint), id(self.model), self.request.beam_size


def setting(environ: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = environ.get(name, "")
    if not value:
        return default
    if not value.isdigit() or int(value) < minimum:
        raise ValueError(f"{name} must be a whole number of at least {minimum}, got {value!r:.40}")
    return int(value)


class Batcher:
    """Batches translate() calls of different threads. `turn()`: the context every batch runs in (the app's model
    turns, which bound how many run at once and in which order); one batch at a time by default.

    Of the threads waiting with compatible requests, one at a time is their runner: it waits for a turn, takes the
    batch and runs it. Taking frees the role, and a thread whose request was left out (the batch was full) becomes
    the next runner: while one batch runs, the next one gathers and waits for the next free turn."""

    def __init__(self, window_s: float = WINDOW_S, max_batch: int = MAX_BATCH,
                 turn: Callable[[], AbstractContextManager] | None = None):
        if max_batch < 1 or window_s < 0:
            raise ValueError(f"max_batch must be at least 1 and window_s at least 0, got {max_batch}, {window_s}")
        self.window_s, self.max_batch = window_s, max_batch
        one_at_a_time = threading.Lock()
        self.turn = turn or (lambda: one_at_a_time)
        self._pending: list[_Job] = []  # in order of arrival
        self._runners: dict[tuple, _Job] = {}  # key -> the job whose thread will take the next batch of that key
        self._changed = threading.Condition()  # a job arrived, was taken or finished
        self.batches: deque[int] = deque(maxlen=1000)  # the size of the latest batches run (tests, benchmarks)

    @property
    def waiting(self) -> int:
        """How many requests wait for their batch now."""
        with self._changed:
            return len(self._pending)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ, **options) -> Batcher:
        """$ATLAS_BATCH_SIZE: requests per batch at most (1 runs each alone); $ATLAS_BATCH_WINDOW_MS: the window."""
        return cls(window_s=setting(environ, "ATLAS_BATCH_WINDOW_MS", round(WINDOW_S * 1000), 0) / 1000,
                   max_batch=setting(environ, "ATLAS_BATCH_SIZE", MAX_BATCH, 1), **options)

    def translate(self, checkpoint: Checkpoint, request: Request, model: Transformer | None = None,
                  alive: Callable[[], bool] = lambda: True) -> Translation:
        """The translation of `request` (checkpoint.prepare(text, beam_size)) as checkpoint.translate would give it,
        decoded in a batch with other threads' requests. `alive()`: whether the caller still wants the result (asked
        when its batch is formed)."""
        model = model or checkpoint.model
        if self.max_batch == 1 or captures_active() or edits_active() or not checkpoint.config.cross_attention:
            with self.turn():
                return checkpoint.translate_batch([request], model)[0]
        job = _Job(checkpoint, model, request, alive, time.monotonic())
        with self._changed:
            self._pending.append(job)
            self._changed.notify_all()  # a runner in its window counts it
            while not job.taken and job.key in self._runners:
                self._changed.wait()
            runner = not job.taken
            if runner:
                self._runners[job.key] = job
        if runner:
            try:
                with self.turn():
                    self._run(self._take(job))
            except BaseException:  # no turn came (an interrupt): hand the role on rather than leave others waiting
                self._give_up(job)
                raise
        with self._changed:
            while not job.done:  # finished by whichever thread ran its batch: every batch finishes all its jobs
                self._changed.wait()
        if job.error is not None:
            raise job.error
        with self.turn():
            return checkpoint.explain(request, job.result, model)

    def _take(self, job: _Job) -> list[_Job]:
        """The runner's batch: its own job and the compatible ones waiting, oldest first, within max_batch and
        the memory bound; the jobs whose callers left are finished as Cancelled instead."""
        with self._changed:
            def gathered() -> list[_Job]:
                return [other for other in self._pending if other.key == job.key]
            if len(gathered()) > 1:  # a burst is arriving: the window since its first request lets it gather
                deadline = gathered()[0].arrived + self.window_s
                while time.monotonic() < deadline and len(gathered()) < self.max_batch:
                    self._changed.wait(deadline - time.monotonic())
            batch = [job]
            for other in gathered():
                if len(batch) == self.max_batch:
                    break
                if other is not job and job.checkpoint.batch_fits([member.request for member in batch + [other]]):
                    batch.append(other)
            for member in batch:
                member.taken = True
            self._pending = [other for other in self._pending if not other.taken]
            del self._runners[job.key]
            self._changed.notify_all()  # the next runner, if jobs of this key are left
        left = [member for member in batch if not member.alive()]
        self._finish([(member, None, Cancelled("the caller left before its translation ran")) for member in left])
        return [member for member in batch if member not in left]

    def _give_up(self, job: _Job) -> None:
        """A runner that could not run: its job leaves the queue and its role goes to another thread."""
        with self._changed:
            if self._runners.get(job.key) is job:
                del self._runners[job.key]
            self._pending = [other for other in self._pending if other is not job]
            self._changed.notify_all()

    def _run(self, batch: list[_Job]) -> None:
        """Decode the batch and finish each job with its own sequence or error."""
        if not batch:
            return
        self.batches.append(len(batch))
        try:
            results = batch[0].checkpoint.decode_batch([job.request for job in batch], batch[0].model)
        except Exception as error:
            if len(batch) == 1:
                self._finish([(batch[0], None, error)])
            else:  # whose input failed it? Alone, each gets its own result or error
                for job in batch:
                    self._run([job])
        else:
            self._finish([(job, result, None) for job, result in zip(batch, results)])
        finally:  # anything else (an interrupt) must not leave a caller waiting for ever
            self._finish([(job, None, RuntimeError("the batch this translation was in was interrupted"))
                          for job in batch if not job.done])

    def _finish(self, outcomes: list[tuple[_Job, list[int] | None, BaseException | None]]) -> None:
        """Hand each job its result or error, and wake the threads waiting for them."""
        with self._changed:
            for job, result, error in outcomes:
                job.result, job.error, job.done = result, error, True
            self._changed.notify_all()
