"""A deck packed into one HTML file (ui.deck.packing): the shipped deck walked in real Chromium from file:// with every
request but the file's own refused, its figures equal to the app's, its texts escaped, its size bounded, its writing
atomic."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from streamlit.testing.v1 import AppTest

from benchmarks.chromium import CHROMIUM, launch_chromium
from ui.deck import read_deck, slide_state
from ui.deck.packing import APP, MAX_PACK_BYTES, DrawnSlide, PackError, draw_slide, pack_html, write_new
from ui.deck.parse import Deck, Slide
from ui.state import URL_STATE, url_params

pytestmark = pytest.mark.slow  # every slide of the shipped deck drawn by the app
SHIPPED = "attention-step-by-step"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The shipped deck, each slide as the app drew it, and its pack written to a file."""
    deck = read_deck(SHIPPED)
    slides = [draw_slide(SHIPPED, deck, number) for number in range(1, len(deck.slides) + 1)]
    path = tmp_path_factory.mktemp("pack") / f"{SHIPPED}.html"
    write_new(path, pack_html(deck, slides))
    return deck, slides, path


def packed_figures(path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    return json.loads(re.search(r'<script type="application/json" id="figures">(.*?)</script>', text, re.S)[1])


def test_each_packed_figure_is_the_one_the_app_draws_for_the_slides_own_link(shipped):
    """The same data, trace for trace, as the app draws when the slide's view is opened by its whole link (not by the
    deck), read back out of the file: the first slide of each of three views (a pass each: the suite's time)."""
    deck, slides, path = shipped
    figures = packed_figures(path)
    starts = [sum(len(slide.figures) for slide in slides[:index]) for index in range(len(slides))]
    assert starts[-1] + len(slides[-1].figures) == len(figures)
    defaults = {name: default for name, (_, default) in URL_STATE.items() if default is not None}
    views = [slide.state.get("view") for slide in deck.slides]
    for number in [views.index(view) + 1 for view in ("attention", "decoding", "compare")]:
        drawn = slides[number - 1]
        state = slide_state(deck.slides[number - 1], {**defaults, "checkpoint": "eng-fra", "text": drawn.input})
        app = AppTest.from_file(str(APP), default_timeout=300)
        app.query_params.update({**url_params(state), "lecture": "1"})
        live = [json.loads(chart.proto.spec) for chart in app.run().get("plotly_chart")]
        assert not app.exception and live, number
        packed = figures[starts[number - 1]:starts[number - 1] + len(drawn.figures)]
        assert [figure["data"] for figure in packed] == [figure["data"] for figure in live], number


def test_the_pack_keeps_what_each_slide_says(shipped):
    deck, slides, path = shipped
    text = path.read_text(encoding="utf-8")
    assert text.count('<section class="slide"') == len(deck.slides)
    for slide, drawn in zip(deck.slides, slides, strict=True):
        assert drawn.title == slide.title and drawn.input
        assert any("→" in said for said in drawn.texts)  # the model's output, as the page words it
    assert len(path.read_bytes()) <= MAX_PACK_BYTES and text.count("<script") == 3  # Plotly, the figures, the keys


def test_text_from_a_deck_or_a_page_never_runs_as_script():
    hostile = "</script><script>window.ran = 1</script><img src=x onerror=alert(1)>"
    deck = Deck(hostile, [Slide(hostile, hostile, hostile, {})])
    figure = {"data": [{"type": "heatmap", "z": [[1]], "x": [hostile]}], "layout": {"title": {"text": hostile}},
              "config": {}}
    page = pack_html(deck, [DrawnSlide(1, hostile, hostile, hostile, hostile, (hostile,), (figure,))]).decode()
    data = re.search(r'id="figures">(.*?)</script>', page, re.S)[1]  # its "<" written \\u003c
    assert "<img" not in page and page.count("<script") == 3 and "<" not in data
    assert json.loads(data) == [figure]


def test_a_pack_past_its_budget_is_refused_with_its_size():
    figure = {"data": [{"type": "heatmap", "z": [[0.5] * 1000] * 3000}], "layout": {}, "config": {}}
    with pytest.raises(PackError, match=r"packs to \d+\.\d MB, more than the 15 MB"):
        pack_html(Deck("big", [Slide("s", "", "", {})]), [DrawnSlide(1, "s", "", "", "x", (), (figure,))])


def test_a_pack_is_written_whole_and_never_over_a_file_unless_asked(tmp_path):
    path = tmp_path / "deck.html"
    write_new(path, b"one")
    with pytest.raises(FileExistsError, match="--replace"):
        write_new(path, b"two")
    write_new(path, b"two", replace=True)
    assert path.read_bytes() == b"two" and [p.name for p in tmp_path.iterdir()] == ["deck.html"]


def test_the_command_refuses_an_unknown_deck_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ui.pack", "no-such-deck", str(tmp_path / "x.html")],
                          cwd=APP.parent, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.startswith("error: There is no deck `no-such-deck`")
    assert not (tmp_path / "x.html").exists()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_the_packed_deck_walks_offline_in_chromium(shipped):
    """From file:// with every other request refused: PageDown through every slide (its title, as many figures as
    the app drew for it, the fragment #N), a tooltip on hover, PageUp back to the first; no console error, no
    request but the file."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")
    deck, slides, path = shipped
    requests, errors = [], []
    with sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.on("console", lambda message: message.type == "error" and errors.append(message.text))
            page.on("pageerror", lambda error: errors.append(str(error)))

            def only_the_file(route):
                requests.append(route.request.url)
                route.continue_() if route.request.url.startswith("file:") else route.abort()

            page.route("**/*", only_the_file)
            page.goto(path.as_uri())
            hovered = False
            for number, drawn in enumerate(slides, 1):
                if number > 1:
                    page.keyboard.press("PageDown")
                section = page.locator(f"#slide-{number}")
                section.wait_for(state="visible", timeout=10_000)
                assert section.locator("h2").text_content() == drawn.title
                assert page.evaluate("location.hash") == f"#{number}"
                assert section.locator(".js-plotly-plot").count() == len(drawn.figures), number
                heatmap = section.locator(".heatmaplayer").first
                if not hovered and heatmap.count():
                    box = section.locator(".nsewdrag").first.bounding_box()
                    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                    page.wait_for_selector(".hovertext", timeout=10_000)
                    hovered = "weight" in page.locator(".hovertext").first.text_content()
            for _ in slides[1:]:
                page.keyboard.press("PageUp")
            assert page.locator("#slide-1").is_visible() and page.evaluate("location.hash") == "#1"
        finally:
            browser.close()
    assert hovered
    assert errors == [] and [url for url in requests if not url.startswith("file:")] == []
