"""Headless Chromium against the app, for the browser tests, the load test and the benchmarks (the app's server is
deploy/server.py's)."""
from __future__ import annotations

import time
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package: never `playwright install`
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
RUN_S = 180  # bound on one rerun of the app as the browser sees it: generous, for a machine whose cores are busy


def launch_chromium(playwright):
    """Headless Chromium from Debian's package, through python playwright's sync API."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), timeout=60_000, args=CHROMIUM_ARGS)


# The app is running while Streamlit's root says so (its script state, set from the run's first moment; the status
# widget shows only after half a second of it) or a placeholder waits for its element.
RUNNING = ", ".join([*(f'[data-testid="stApp"][data-test-script-state="{state}"]'
                       for state in ("initial", "running", "rerunRequested")), '[data-testid="stSkeleton"]'])


def wait_for_rerun(page, settle_s: float = 1.0, start_s: float = 0.5) -> None:
    """Wait (bounded by RUN_S) until the app has finished its rerun: Streamlit's script state not running, no
    placeholders left, then `settle_s` for Plotly to draw. Raises TimeoutError if it is still running. `start_s`: how
    long the rerun that an action triggers may take to start (the wait goes on as soon as it has); 0 where the caller
    has already seen it start (a new page's first figure, or the link the rerun rewrites)."""
    deadline = time.monotonic() + RUN_S
    start_by = time.monotonic() + start_s
    while not page.locator(RUNNING).count() and time.monotonic() < start_by:
        time.sleep(0.05)
    while page.locator(RUNNING).count():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the app was still running after {RUN_S} s")
        time.sleep(0.1)
    time.sleep(settle_s)
