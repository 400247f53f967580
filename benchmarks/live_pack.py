"""The live pack (`python -m ui.pack DECK OUT.html --live`) of the shipped deck, in this machine's Chromium from
file:// with every other request refused: its size, the first figure after opening, a 20-word eng-fra sentence typed
to output and figure (the first run after the page is ready, and the median of the next), a date typed on the Model
view slide (every head of dates redrawn), and the tab's peak memory."""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from deploy.server import ROOT

from .chromium import launch_chromium
from .common import Setup, result, skipped

FIGURE = "live_pack"
DECK = "attention-step-by-step"
MAX_MB = 40.0
FIRST_FIGURE_S = 3.0
TYPED_S = 1.5
TAB_MB = 1024.0
DATE = "Saturday, 4 July 1998"
SENTENCE = ("My grandmother told us a long story about the old house near the river where she grew up as a child.")
SMOKE_DECK = ('title = "Smoke"\n[[slides]]\ntitle = "eng-fra"\n[slides.link]\ncheckpoint = "eng-fra"\n'
              'text = "I am cold."\nview = "attention"\n')


def renderer_peak_mb() -> float:
    """The largest peak resident memory (VmHWM) of a Chromium renderer started under this process: the tab's."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [os.getpid()]
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                status = Path(f"/proc/{pid}/status").read_text()
                found.append(int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))))
        except (OSError, StopIteration):
            continue
    return max(found, default=0) / 1024


def packed(setup: Setup) -> tuple[Path, int, int | None]:
    """The live pack written into the workdir, the number of its eng-fra Attention slide and of its Model view slide
    (None in the smoke deck)."""
    from ui.deck import read_deck
    from ui.deck.packing import pack_in_process

    name = DECK
    if setup.smoke:  # one slide: the measurement runs, at a fraction of the drawing
        decks = setup.workdir / "live-decks"
        decks.mkdir(exist_ok=True)
        (decks / "smoke.toml").write_text(SMOKE_DECK, encoding="utf-8")
        os.environ["ATLAS_DECKS"], name = str(decks), "smoke"
    try:
        deck = read_deck(name)
        path = setup.workdir / "live.html"
        path.write_bytes(pack_in_process(name, live=True))
    finally:
        if setup.smoke:
            del os.environ["ATLAS_DECKS"]
    number = next(number for number, slide in enumerate(deck.slides, 1)
                  if slide.state.get("checkpoint") == "eng-fra" and slide.state.get("view") == "attention")
    model = next((number for number, slide in enumerate(deck.slides, 1) if slide.state.get("view") == "model"), None)
    return path, number, model


def opened(page, path: Path) -> tuple[float, float]:
    """(seconds from opening the file to its first figure, to the runtime and every live model ready)."""
    start = time.perf_counter()
    page.goto(path.as_uri(), wait_until="commit")
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)
    first_figure_s = time.perf_counter() - start
    page.wait_for_function("document.body.dataset.liveReady === '1'", timeout=180_000)
    return first_figure_s, time.perf_counter() - start


def run_typed(page, number: int, text: str) -> tuple[float, float, float]:
    """(wall seconds from Enter to the redrawn figure, the page's own milliseconds for the run, of which the model's:
    reading, decoding and the captured pass)."""
    form = page.locator(f'form.live[data-slide="{number}"]')
    runs = int(form.get_attribute("data-runs") or 0)
    form.locator("input").fill(text)
    start = time.perf_counter()
    form.locator("input").press("Enter")
    page.wait_for_function(f"(runs) => Number(document.querySelector('form.live[data-slide=\"{number}\"]')"
                           ".dataset.runs || 0) > runs", arg=runs, timeout=120_000)
    return (time.perf_counter() - start, float(form.get_attribute("data-ms")),
            float(form.get_attribute("data-model-ms")))


def measure(setup: Setup) -> list[dict]:
    if not (ROOT / "node_modules" / "onnxruntime-web").is_dir():
        return [skipped(FIGURE, "ONNX Runtime Web is not installed: run `npm ci`")]
    from playwright.sync_api import sync_playwright

    path, number, model_number = packed(setup)
    size_mb = path.stat().st_size / 2**20
    requests, errors = [], []

    def offline_page(browser):
        """A projector-sized tab that refuses every request but the file's own, and notes each request and error."""
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.on("request", lambda request: requests.append(request.url))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://")
                   else route.abort())
        return page

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = offline_page(browser)
        first_figure_s, ready_s = opened(page, path)  # a browser that has never opened the file
        reopened = []
        for _ in range(1 if setup.smoke else 3):
            page.close()
            page = offline_page(browser)
            reopened.append(opened(page, path))
        page.evaluate(f"location.hash = '#{number}'")
        first = run_typed(page, number, SENTENCE)
        again = [run_typed(page, number, SENTENCE) for _ in range(1 if setup.smoke else 3)]
        if model_number is not None:
            page.evaluate(f"location.hash = '#{model_number}'")
            model_view = run_typed(page, model_number, DATE)
        tab_mb = renderer_peak_mb()
        browser.close()
    words = len(SENTENCE.split())
    case = f"{DECK if not setup.smoke else 'a one-slide deck'} --live, Chromium from file://"
    outside = [url for url in requests if not url.startswith("file://")]
    return [
        result(FIGURE, f"size of {case}", size_mb, "MB", at_most=MAX_MB),
        result(FIGURE, f"first figure after opening, a fresh browser, {case}", first_figure_s, "s",
               at_most=FIRST_FIGURE_S),
        result(FIGURE, f"first figure after opening again, median, {case}",
               statistics.median(s for s, _ in reopened), "s", at_most=FIRST_FIGURE_S),
        result(FIGURE, f"the runtime and every live model ready (warmed) after opening, fresh browser, {case}",
               ready_s, "s"),
        result(FIGURE, f"a {words}-word eng-fra sentence typed → output and figure, first run, {case}", first[0], "s",
               at_most=TYPED_S, page_ms=first[1], model_ms=first[2]),
        result(FIGURE, f"the same, median of the next runs, {case}", statistics.median(run[0] for run in again), "s",
               at_most=TYPED_S, page_ms=[run[1] for run in again], model_ms=[run[2] for run in again]),
        *([result(FIGURE, f"a date typed on the Model view slide → output and every head's lines, {case}",
                  model_view[0], "s", at_most=TYPED_S, page_ms=model_view[1], model_ms=model_view[2])]
          if model_number is not None else []),
        result(FIGURE, f"the tab's peak memory (renderer VmHWM), {case}", tab_mb, "MB", at_most=TAB_MB),
        result(FIGURE, f"requests outside the file and page errors, {case}", len(outside) + len(errors), "",
               at_most=0, requests=outside[:5], errors=errors[:5]),
    ]
