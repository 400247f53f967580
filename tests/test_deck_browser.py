"""The shipped deck presented as a lecturer does: `streamlit run app.py` on the shipped checkpoints, headless Chromium
at 1280 x 720, PageDown (a presentation clicker's key) from the first slide to the last, ↑ back one. Screenshots in
$ATLAS_SCREENSHOTS when it is set:
    ATLAS_SCREENSHOTS=/tmp/shots python -m pytest tests/test_deck_browser.py
"""
from __future__ import annotations

import urllib.parse

import pytest
from test_browser import FIGURE_FIRST, FIT_JS, browser, fit_problems, screenshot, screenshots  # noqa: F401 - the fixture: one Chromium for the module

from benchmarks.chromium import RUN_S, wait_for_rerun
from ui.deck import read_deck

pytestmark = pytest.mark.slow
SHIPPED = "attention-step-by-step"
PROJECTOR = {"width": 1280, "height": 720}


def slide_of(url: str) -> int:
    return int(urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("slide", ["1"])[0])


def test_the_shipped_deck_in_lecture_mode_with_a_clicker(shipped_server, browser):  # noqa: F811 - the fixtures
    deck = read_deck(SHIPPED)
    page = browser.new_page(viewport=PROJECTOR)
    page.set_default_timeout(RUN_S * 1000)
    folder, problems = screenshots(), []
    try:
        page.goto(f"{shipped_server}?deck={SHIPPED}")
        for number, slide in enumerate(deck.slides, 1):
            page.wait_for_selector('[data-testid="stMainBlockContainer"][data-measured-width]')
            page.wait_for_selector(".stPlotlyChart .js-plotly-plot")
            wait_for_rerun(page, settle_s=0.3, start_s=0.3)
            name = f"deck-{number:02d}"
            assert not page.locator('[data-testid="stException"]').count(), name
            page.get_by_text(f"{number} / {len(deck.slides)} · {slide.title}", exact=True).wait_for()
            problems += fit_problems(name, page.evaluate(FIT_JS), PROJECTOR, True,
                                     slide.state.get("view") in FIGURE_FIRST)
            screenshot(page, folder, name)
            if number < len(deck.slides):
                page.keyboard.press("PageDown")
                page.wait_for_url(lambda url, number=number: slide_of(url) == number + 1)
        page.keyboard.press("ArrowUp")
        page.wait_for_url(lambda url: slide_of(url) == len(deck.slides) - 1)
    finally:
        page.close()
    assert not problems, problems
