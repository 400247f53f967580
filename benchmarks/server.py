"""`streamlit run app.py` on 127.0.0.1 for the browser tests, the load test and the benchmarks."""
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
                     script: Path | str = "app.py") -> Iterator[tuple[str, subprocess.Popen]]:
    """(URL, process) of the app serving the checkpoint folders under `checkpoints`; stopped on exit.

    threads: torch's intra-op threads in the server (OMP_NUM_THREADS), so tests leave cores to the browser.
    env: more environment variables for the server.
    script: another Streamlit script to serve instead of the app (the benchmarks' reference page)."""
    port = free_port()
    command = [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true",
               "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false"]
    env = {**os.environ, **(env or {}), "ATLAS_CHECKPOINTS": str(checkpoints), "OMP_NUM_THREADS": str(threads)}
    with open(log, "w") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
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


CHROMIUM = Path("/usr/bin/chromium")  # Debian's package: never `playwright install`
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
RUN_S = 60  # bound on one rerun of the app as the browser sees it


def launch_chromium(playwright):
    """Headless Chromium from Debian's package, through python playwright's sync API."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), timeout=60_000, args=CHROMIUM_ARGS)


def wait_for_rerun(page, settle_s: float = 1.0, start_s: float = 0.5) -> None:
    """Wait (bounded by RUN_S) until the app has finished its rerun: no status widget, no placeholders left,
    then `settle_s` for Plotly to draw. Raises TimeoutError if it is still running. `start_s`: how long the rerun
    that an action triggers takes to start; 0 where the caller has already seen it start (a new page's first figure,
    or the link the rerun rewrites), since Streamlit shows its status widget from the rerun's first moment."""
    deadline = time.monotonic() + RUN_S
    time.sleep(start_s)
    while page.locator('[data-testid="stStatusWidget"], [data-testid="stSkeleton"]').count():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the app was still running after {RUN_S} s")
        time.sleep(0.25)
    time.sleep(settle_s)
