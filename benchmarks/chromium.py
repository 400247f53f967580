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
