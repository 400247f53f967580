"""The app under load and what the load test reads of its processes.

Served as one `streamlit run app.py`, or as K processes behind nginx (--via-proxy, deploy/local.py), or as the app
of another commit (--code COMMIT, one process): served from a temporary git worktree on the same checkpoints, so
that two versions of the app are measured in the same run. The processes' CPU time and resident memory are read
from /proc: CPU seconds, unlike wall time, stay the same on a busy machine, and the memory is sampled all along, as
a leak per session would show as growth over the second half of a load, when the caches have long been warm.
(Streamlit keeps a closed session for server.disconnectedSessionTTL, 2 minutes, at most 128 of them, in case its
browser reconnects: a bounded part of the growth a one-minute load sees.)
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from deploy.server import ROOT, streamlit_server

RSS_EVERY_S = 0.5


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
            raise ValueError("another commit's app is served as one process, not behind the proxy")
        with checkout(code) as root, streamlit_server(checkpoints_dir, log, root=root) as (url, process):
            yield url, [url], [process.pid]
    elif processes is None:
        with streamlit_server(checkpoints_dir, log) as (url, process):
            yield url, [url], [process.pid]
    else:
        from deploy.local import proxied_app

        with proxied_app(processes, checkpoints_dir, log.parent) as deployment:
            yield deployment.url, deployment.app_urls, deployment.app_pids


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


def rss_mb(pids: list[int]) -> float:
    """Resident memory (VmRSS) of the app's processes together, MB."""
    kilobytes = 0
    for pid in pids:
        text = Path(f"/proc/{pid}/status").read_text()
        kilobytes += int(re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE).group(1))
    return kilobytes / 1024


def server_cpu_s(pids: list[int]) -> float:
    """User and system CPU seconds the app's processes have used."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # the fields after the command name
        ticks += int(fields[11]) + int(fields[12])  # utime and stime, fields 14 and 15
    return ticks / os.sysconf("SC_CLK_TCK")


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
