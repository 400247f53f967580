"""K app processes behind nginx (--via-proxy K …; served by server.serving): what the proxy adds to the load's
report. Each session sticks to one process through the cookie its page load got (every client loads the page before
it opens its websocket, as a browser does); the first page load's HTTP bytes through the proxy (gzip) are measured
with Chromium, and the throughput of each K against the first."""
from __future__ import annotations

from urllib.parse import urlencode

from benchmarks.chromium import CHROMIUM, RUN_S, launch_chromium, wait_for_rerun

from .lecture import LECTURE_TEXT


def first_page_bytes(url: str) -> int | None:
    """HTTP bytes a new browser transfers until the first figure is drawn (None without Chromium)."""
    if not CHROMIUM.exists():
        return None
    from playwright.sync_api import sync_playwright

    from benchmarks.browser import HTTP_BYTES

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(RUN_S * 1000)
            page.goto(f"{url}?{urlencode({'text': LECTURE_TEXT, 'view': 'attention'})}")
            page.wait_for_selector(".stPlotlyChart .js-plotly-plot")
            wait_for_rerun(page)
            return page.evaluate(HTTP_BYTES)
        finally:
            browser.close()


def throughput(results: list[dict]) -> str:
    """Interactions per second of each run (one per K) against the first's."""
    base = results[0]
    return "throughput: " + ", ".join(
        f"{result['processes']} process(es) {result['interactions_per_s'] / base['interactions_per_s']:.2f}x"
        for result in results) + f" of {base['processes']} process(es)"
