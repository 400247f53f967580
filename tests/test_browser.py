"""The app as a user meets it: `streamlit run app.py` in a real server, driven by headless Chromium.

Screenshots of every view land in pytest's tmp_path, and also in $ATLAS_SCREENSHOTS when that is set. To look at
them on a shipped checkpoint:
    ATLAS_SCREENSHOTS=/tmp/shots ATLAS_BROWSER_CHECKPOINTS=/tmp/only-reverse python -m pytest tests/test_browser.py
where /tmp/only-reverse holds a copy of checkpoints/reverse (the app opens on the first folder); ATLAS_BROWSER_INPUT
sets the input typed for the screenshots (default: attention42). The README's screenshots are the same server and
browser (benchmarks.server) opened on links: `?checkpoint=reverse&text=attention42&view=attention&layer=1`, and on
eng-fra with `text=She is reading a book.` and `view=decoding&step=2` or `view=model`, at 1280 × 1000.
"""
from __future__ import annotations

import os
import shutil
import urllib.parse
from pathlib import Path

import pytest

from benchmarks.server import CHROMIUM, ROOT, RUN_S, ServerError, launch_chromium, streamlit_server, wait_for_rerun
from figure_browser import MEASURE_JS
from helpers import checkpoints_folder
from ui.views import VIEWS

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                               "(apt-get install chromium)")]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    """The URL of `streamlit run app.py` on a folder with the tiny checkpoint (and one still training)."""
    checkpoints = os.environ.get("ATLAS_BROWSER_CHECKPOINTS") or checkpoints_folder(
        tiny_checkpoint, tmp_path_factory.mktemp("browser-checkpoints"))
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    try:
        with streamlit_server(checkpoints, log) as (url, _):
            yield url
    except ServerError as error:
        pytest.fail(str(error))


def link_text(url: str) -> str | None:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("text", [None])[0]


def test_every_view_in_a_browser(server, tmp_path):
    folders = [tmp_path] + ([Path(os.environ["ATLAS_SCREENSHOTS"])] if os.environ.get("ATLAS_SCREENSHOTS") else [])
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    problems = []
    with sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
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

            demo = os.environ.get("ATLAS_BROWSER_INPUT", "attention42")
            box.fill(demo)
            box.press("Enter")
            page.wait_for_url(lambda url: link_text(url) == demo)  # the view state is in the link
            wait_for_rerun(page)
            for view in VIEWS:
                page.get_by_role("radio", name=view.label, exact=True).click()  # a segmented control's option
                wait_for_rerun(page)
                if view.key == "ablation":  # nothing switched off yet: it asks for heads, then shows outputs
                    page.get_by_text("Pick heads", exact=False).first.wait_for()
                else:
                    page.wait_for_selector(".stPlotlyChart .js-plotly-plot")
                if view.key == "decoding":  # step forward as a lecturer would: the step's candidates follow
                    for _ in range(2):
                        page.get_by_role("button", name="Next").click()
                        wait_for_rerun(page)
                    page.get_by_text("Step 2: the", exact=False).first.wait_for()
                assert not page.locator('[data-testid="stException"]').count(), view.key
                for folder in folders:
                    page.screenshot(path=folder / f"{view.label.lower().replace(' ', '-')}.png")
        finally:
            browser.close()
    assert not problems, problems


# A 24-piece eng-fra sentence (its source pieces and </s> label the source axis).
LONG_INPUT = "When the teacher opened the old wooden door, the students quietly walked into the bright classroom."
SOURCE_TOKENS = 25
SOURCE_WORDS = 17  # 16 words (viz.word_labels: "," and "." join the word before them), and </s>
# view -> (link parameters, which figure of the view to measure: its index on the page, or the name show_figure gave
# it where lecture mode reorders them): each figure's x axes are the source tokens.
READABLE_VIEWS = {"attention": ({"kind": "encoder.self"}, 0), "model": ({"kind": "encoder.self"}, 0),
                  "decoding": ({"step": "5"}, 0), "compare": ({"kind": "encoder.self"}, 0),
                  "training": ({"kind": "encoder.self"}, "training-head"), "heads": ({}, 1)}
LECTURE_TOP_PX = 320  # the figure's top on a 1280 x 720 projector
# The views that open on a figure (heads opens on its table of every head, which lecture mode shows in full).
FIGURE_FIRST = ("attention", "model", "decoding", "compare", "training")


@pytest.fixture(scope="module")
def eng_fra_server(tmp_path_factory):
    """The app on the shipped eng-fra checkpoint alone."""
    root = tmp_path_factory.mktemp("eng-fra-checkpoints")
    shutil.copytree(ROOT / "checkpoints" / "eng-fra", root / "eng-fra", ignore=shutil.ignore_patterns("resume.pt"))
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    try:
        with streamlit_server(root, log) as (url, _):
            yield url
    except ServerError as error:
        pytest.fail(str(error))


def figure_measures(page, index: int | str) -> dict:
    """figure_browser's measurements of the index-th figure on the page (or the one show_figure named so), and its
    top on the screen."""
    chosen = (f"document.querySelectorAll('.stPlotlyChart .js-plotly-plot')[{index}]" if isinstance(index, int) else
              f"document.querySelector('.st-key-wide-figure-{index} .js-plotly-plot')")
    result = page.evaluate(MEASURE_JS.replace("document.querySelector('.js-plotly-plot')", chosen))
    result["top"] = page.evaluate(f"() => {chosen}.getBoundingClientRect().top")
    return result


@pytest.mark.parametrize("mode", ["laptop", "lecture"])
def test_every_source_token_is_labelled_on_a_long_sentence(eng_fra_server, tmp_path, mode):
    """1400 x 1000, and 1280 x 720 in lecture mode: each view's figure labels all 25 source tokens on each x axis
    that has labels, without colliding labels, and in lecture mode the figure starts within the first 320 px."""
    folder = Path(os.environ.get("ATLAS_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    viewport = {"width": 1400, "height": 1000} if mode == "laptop" else {"width": 1280, "height": 720}
    problems, late = [], []
    with sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport=viewport)
            page.set_default_timeout(RUN_S * 1000)
            cases = [(view, params, index, SOURCE_TOKENS) for view, (params, index) in READABLE_VIEWS.items()]
            cases.append(("attention", {"kind": "encoder.self", "words": "1"}, 0, SOURCE_WORDS))
            for view, params, index, tokens in cases:
                link = {"checkpoint": "eng-fra", "text": LONG_INPUT, "view": view, **params}
                if mode == "lecture":
                    link["lecture"] = "1"
                page.goto(eng_fra_server + "?" + urllib.parse.urlencode(link))
                page.wait_for_selector(".stPlotlyChart .js-plotly-plot")
                wait_for_rerun(page, settle_s=2.0)
                name = f"{mode}-{view}" + ("-words" if "words" in params else "")
                page.screenshot(path=folder / f"{name}.png")
                result = figure_measures(page, index)
                x_axes = {axis: ticks for axis, ticks in result["ticks"].items() if axis.startswith("x")}
                if not x_axes:
                    problems.append(f"{name}: no labelled x axis")
                problems += [f"{name}: {axis} has {ticks['count']} labels for {tokens} tokens"
                             for axis, ticks in x_axes.items() if ticks["count"] != tokens]
                problems += [f"{name}: {axis}: {problem}" for axis, ticks in result["ticks"].items()
                             for problem in ticks["problems"]]
                if mode == "lecture" and view in FIGURE_FIRST and result["top"] > LECTURE_TOP_PX:
                    late.append(f"{name}: the figure starts {result['top']:.0f} px down")
        finally:
            browser.close()
    assert not problems + late, problems + late
