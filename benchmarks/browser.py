"""Browser render: headless Chromium against `streamlit run app.py`, from pressing Enter on a new input until the
model view's grid is drawn, the bytes the page transfers, and the first visitor's wait for a figure on a fresh
server."""
from __future__ import annotations

import shutil
import statistics
import time

from deploy.server import ROOT, streamlit_server
from transformer import load_checkpoint

from .chromium import CHROMIUM, RUN_S, launch_chromium
from .common import Setup, peak_rss_mb, result, side_by_side, skipped
from .fixtures import distinct_texts, token_count, wide_checkpoints
from .memory import FIGURE as MEMORY

FIGURE = "browser render"
AT_MOST = 2.0  # seconds, at the longest input: 256 tokens (the smoke run's longest is tiny)
FIRST_FIGURE_AT_MOST = 3.0  # seconds from the server's health check answering to the first figure drawn
FIRST_VISITS = 3  # fresh servers (each starts in tens of seconds): the median of these

# True once the run has ended and the model view shows the new input: an x axis as long as the source (each
# panel is an image, whose axis spans its width in cells) and its panels' image traces (as many as fit the page: the
# model view shows the others a click away).
DRAWN = """(tokens) => {
    if (document.querySelector('[data-testid="stStatusWidget"], [data-testid="stSkeleton"]')) return false;
    const plot = document.querySelector('.stPlotlyChart .js-plotly-plot');
    const axis = plot && plot._fullLayout && plot._fullLayout.xaxis;
    return Boolean(axis) && Math.round(axis.range[1] - axis.range[0]) === tokens
        && plot.data.some(trace => trace.type === 'image');
}"""
# True once the app's run has ended and its first figure is laid out and drawn.
FIRST_DRAWN = """() => {
    if (document.querySelector('[data-testid="stStatusWidget"], [data-testid="stSkeleton"]')) return false;
    const plot = document.querySelector('.stPlotlyChart .js-plotly-plot');
    return Boolean(plot && plot._fullLayout && plot._fullLayout._size && plot.querySelector('.main-svg'));
}"""
# Bytes the page fetched over HTTP (document, scripts, styles, fonts), as the browser's resource timing reports.
HTTP_BYTES = """() => performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))
    .reduce((total, entry) => total + entry.transferSize, 0)"""


def measure(setup: Setup) -> list[dict]:
    if not CHROMIUM.exists():
        return [skipped(FIGURE, f"no Chromium at {CHROMIUM} (apt-get install chromium)")]
    from playwright.sync_api import sync_playwright

    checkpoints = wide_checkpoints(setup)
    folder = setup.workdir / "browser-checkpoints"  # one server for every length: the link picks the checkpoint
    for path in checkpoints.values():  # copies: the app refuses links that leave its folder, hard ones too
        shutil.copytree(path, folder / path.name, dirs_exist_ok=True)  # a second --checkpoint measures them again
    loaded = {tokens: load_checkpoint(path) for tokens, path in checkpoints.items()}
    texts = {tokens: distinct_texts(checkpoint.src_tokenizer, tokens) for tokens, checkpoint in loaded.items()}
    example_tokens = {tokens: token_count(checkpoint.src_tokenizer, checkpoint.card.examples[0])
                      for tokens, checkpoint in loaded.items()}  # what a new session shows first
    received: list[int] = []  # bytes of every websocket frame the page got from the server
    frame_bytes: dict[int, list[int]] = {tokens: [] for tokens in checkpoints}  # per submission

    with streamlit_server(folder, setup.workdir / "streamlit.log") as (url, server), sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(RUN_S * 1000)
            page.on("websocket", lambda socket: socket.on("framereceived", lambda frame: received.append(len(frame))))
            box = page.get_by_label("Input", exact=True).and_(page.get_by_role("textbox"))

            def open_page(tokens: int) -> None:
                """A new session on the model view of the n-token checkpoint, drawn for its short example, with a
                new n-token input typed but not yet submitted."""
                page.goto(f"{url}?checkpoint={checkpoints[tokens].name}&view=model&kind=decoder.cross_attn")
                page.wait_for_function(DRAWN, arg=example_tokens[tokens], polling="raf")
                box.fill(next(texts[tokens]))

            def submit(tokens: int) -> None:
                before = sum(received)
                box.press("Enter")
                page.wait_for_function(DRAWN, arg=tokens, polling="raf")
                frame_bytes[tokens].append(sum(received) - before)

            open_page(min(checkpoints))
            http_bytes = page.evaluate(HTTP_BYTES)  # the first load: nothing in the browser's cache yet
            seconds = side_by_side({tokens: lambda tokens=tokens: submit(tokens) for tokens in checkpoints},
                                   repeats=setup.repeats,
                                   prepare={tokens: lambda tokens=tokens: open_page(tokens) for tokens in checkpoints})
        finally:
            browser.close()
        server_peak_mb = peak_rss_mb(server.pid)

    rows = [result(FIGURE, f"Enter → model view drawn, {tokens} tokens in and out, {checkpoints[tokens].name} "
                   "(random weights)", seconds[tokens], "s", at_most=AT_MOST if tokens == max(checkpoints) else None,
                   tokens=tokens, series="browser render (s)") for tokens in checkpoints]
    rows.append(result(FIGURE, "first page load, HTTP bytes transferred", http_bytes, "B"))
    rows += [result(FIGURE, f"websocket bytes received per new {tokens}-token input",
                    statistics.median(frame_bytes[tokens]), "B", tokens=tokens) for tokens in checkpoints]
    sessions = 1 + (1 + setup.repeats) * len(checkpoints)  # the first load, then one per round and length
    rows.append(result(MEMORY, f"peak RSS of the streamlit server after {sessions} browser sessions at "
                       f"{' and '.join(map(str, checkpoints))} tokens", server_peak_mb, "MB"))
    return rows


# The least a Streamlit page with one Plotly figure costs this machine's browser: the floor under the first visitor's
# wait (Streamlit's and Plotly's scripts: about 11 MB to load, compile and run before any figure is drawn).
REFERENCE_PAGE = """import numpy as np
import plotly.graph_objects as go
import streamlit as st

st.plotly_chart(go.Figure(go.Heatmap(z=np.random.default_rng(0).random((12, 12)))), theme=None)
"""


def first_figure(setup: Setup) -> list[dict]:
    """Seconds from a fresh server's health check answering to its first visitor's first figure drawn, on the
    shipped checkpoints folder (the smoke run: a folder with its tiny checkpoint), Chromium already running: what a
    visitor waits for when the server has just started. The median over FIRST_VISITS fresh servers; beside it the
    server's start (process to health check: app.py warms the first page then) and, in the same browser, the same
    wait for a bare Streamlit page with one heatmap."""
    if not CHROMIUM.exists():
        return [skipped(FIGURE, f"no Chromium at {CHROMIUM} (apt-get install chromium)")]
    from playwright.sync_api import sync_playwright

    if setup.smoke:
        folder = setup.workdir / "first-visit-checkpoints"
        shutil.copytree(setup.checkpoint, folder / setup.checkpoint.name)
    else:
        folder = ROOT / "checkpoints"
    reference = setup.workdir / "reference_page.py"
    reference.write_text(REFERENCE_PAGE, encoding="utf-8")
    starts, seconds, floor = [], [], []
    pages = [("app.py", seconds)] + ([] if setup.smoke else [(reference, floor)])  # the smoke run: the app only
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            for visit in range(1 if setup.smoke else FIRST_VISITS):
                for script, waits in pages:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.set_default_timeout(RUN_S * 1000)
                    started, log = time.perf_counter(), setup.workdir / f"first-visit-{visit}.log"
                    with streamlit_server(folder, log, script=script) as (url, _):
                        healthy = time.perf_counter()
                        page.goto(url)
                        page.wait_for_function(FIRST_DRAWN, polling="raf")
                        waits.append(time.perf_counter() - healthy)
                        if script == "app.py":
                            starts.append(healthy - started)
                    page.close()
        finally:
            browser.close()
    where = "a tiny checkpoint" if setup.smoke else "the shipped checkpoints folder"
    wait = statistics.median(seconds)
    rows = [result(FIGURE, f"first visitor: server healthy → first figure drawn, {where}", wait, "s",
                   at_most=FIRST_FIGURE_AT_MOST, runs=seconds),
            result(FIGURE, "server start: process → health check answering (the first page warmed)",
                   statistics.median(starts), "s", runs=starts)]
    if floor:
        rows.append(result(FIGURE, "that wait ÷ the same for a bare Streamlit page with one heatmap (the floor)",
                           wait / statistics.median(floor), "×", floor_s=floor))
    return rows
