"""`streamlit run app.py` on 127.0.0.1: one app process, started and stopped (deploy/local.py runs several behind
nginx; the browser tests, the load test and the benchmarks start one)."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parents[1]
STARTUP_S = 90  # bound on the server's start (a cold import of torch and streamlit on a busy CI machine)


class ServerError(RuntimeError):
    """The server exited or did not answer in time; the message holds its log."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_healthy(url: str, process: subprocess.Popen, log: Path, name: str) -> None:
    """Return once `url`'s Streamlit health check answers (directly or through a proxy); ServerError, with the log,
    if `process` exits first or STARTUP_S pass."""
    deadline = time.monotonic() + STARTUP_S
    while True:
        if process.poll() is not None:
            raise ServerError(f"{name} exited with {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise ServerError(f"{name} did not answer within {STARTUP_S} s:\n{log.read_text()}")
        time.sleep(0.25)


@contextlib.contextmanager
def streamlit_server(checkpoints: Path | str, log: Path, threads: int = 1, env: dict[str, str] | None = None,
                     script: Path | str = "app.py", root: Path | str = ROOT) -> Iterator[tuple[str, subprocess.Popen]]:
    """(URL, process) of the app serving the checkpoint folders under `checkpoints`; stopped on exit.

    threads: torch's intra-op threads in the server (OMP_NUM_THREADS), so tests leave cores to the browser.
    env: more environment variables for the server.
    script: another Streamlit script to serve instead of the app (the benchmarks' reference page).
    root: the checkout whose app is served (the benchmarks compare with an earlier commit's)."""
    port = free_port()
    command = [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true",
               "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false"]
    env = {**os.environ, **(env or {}), "ATLAS_CHECKPOINTS": str(checkpoints), "OMP_NUM_THREADS": str(threads)}
    with open(log, "w") as output:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}/", process, Path(log), "streamlit")
        yield f"http://127.0.0.1:{port}/", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
