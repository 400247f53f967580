"""The app as a user meets it: `streamlit run app.py` in a real server, driven by headless Chromium.

Screenshots of every view land in pytest's tmp_path, and also in $ATLAS_SCREENSHOTS when that is set.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app_helpers import checkpoints_folder

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).parents[1]
VIEWS = ("Attention", "Model view", "Compare", "Decoding", "Masks", "Positional encoding", "Heads", "Ablation",
         "Training")
STARTUP_S, RUN_S = 90, 60  # bounds on the server's start and on one rerun of the app

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                              "(apt-get install chromium)")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    """The URL of `streamlit run app.py` on a folder with the tiny checkpoint (and one still training)."""
    checkpoints = checkpoints_folder(tiny_checkpoint, tmp_path_factory.mktemp("browser-checkpoints"))
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
               "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false"]
    env = {**os.environ, "ATLAS_CHECKPOINTS": str(checkpoints), "OMP_NUM_THREADS": "1"}
    with open(log, "w") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"streamlit exited with {process.returncode}:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not answer within {STARTUP_S} s:\n{log.read_text()}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def wait_for_rerun(page) -> None:
    """Wait (bounded) until the app has finished its rerun: no status widget, no placeholders left."""
    deadline = time.monotonic() + RUN_S
    time.sleep(0.5)  # the rerun that an action triggers starts a moment later
    while time.monotonic() < deadline:
        if not page.locator('[data-testid="stStatusWidget"], [data-testid="stSkeleton"]').count():
            break
        time.sleep(0.25)
    else:
        pytest.fail(f"the app was still running after {RUN_S} s")
    time.sleep(1)  # Plotly draws after the element arrives


def test_every_view_in_a_browser(server, tmp_path):
    folders = [tmp_path] + ([Path(os.environ["ATLAS_SCREENSHOTS"])] if os.environ.get("ATLAS_SCREENSHOTS") else [])
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    problems = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), timeout=60_000,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(RUN_S * 1000)
            page.on("console", lambda message: message.type == "error" and problems.append(message.text))
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.goto(server)
            page.wait_for_selector(".js-plotly-plot")
            wait_for_rerun(page)

            box = page.get_by_label("Input", exact=True).and_(page.get_by_role("textbox"))
            box.fill("<img src=x onerror=window.__xss=1>")
            box.press("Enter")
            page.wait_for_url(lambda url: "onerror" in url)
            wait_for_rerun(page)
            assert page.evaluate("window.__xss") is None  # the input was shown as text, never run as HTML
            assert page.locator(".js-plotly-plot").count()

            box.fill("attention42")
            box.press("Enter")
            page.wait_for_url(lambda url: "text=attention42" in url)  # the view state is in the link
            wait_for_rerun(page)
            for view in VIEWS:
                page.get_by_role("radio", name=view, exact=True).click()  # a segmented control's option
                wait_for_rerun(page)
                if view == "Ablation":  # nothing switched off yet: it asks for heads, then shows outputs
                    page.get_by_text("Pick heads", exact=False).first.wait_for()
                else:
                    page.wait_for_selector(".stPlotlyChart .js-plotly-plot")
                assert not page.locator('[data-testid="stException"]').count(), view
                for folder in folders:
                    page.screenshot(path=folder / f"{view.lower().replace(' ', '-')}.png")
        finally:
            browser.close()
    assert not problems, problems
