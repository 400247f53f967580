"""A deck packed into one HTML file (ui.deck.packing, ui.pack): the shipped deck walked in real Chromium from file://
with every request but the file's own refused, every screen of it whole at 1280 x 720 with and without the notes,
its figures equal to the app's, its texts escaped and only what a static file can honour, its size bounded, its
writing atomic and never over one of its inputs, every failure one line."""
from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys

import pytest
from streamlit.testing.v1 import AppTest

import ui.pack
from benchmarks.chromium import CHROMIUM, launch_chromium
from ui.deck import read_deck, slide_state
from ui.deck.packing import (
    APP,
    LIVE_ONLY,
    MAX_PACK_BYTES,
    DrawnSlide,
    PackError,
    Panel,
    Passage,
    Table,
    arrange,
    draw_slide,
    pack_html,
    static_text,
    write_new,
)
from ui.deck.parse import Deck, Slide
from ui.state import URL_STATE, url_params

SHIPPED = "attention-step-by-step"
TINY_DECK = '[[slides]]\ntitle = "Where a word is"\n[slides.link]\ncheckpoint = "reverse"\nview = "positional"\n'
SCREEN = {"width": 1280, "height": 720}  # the projector the pack is made for


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_pack_keeps_what_each_slide_says_and_only_what_a_static_file_honours(shipped):
    """Every slide's title, input and output, its tables (the decoding step's next pieces, the minimal pair's
    probabilities); no sentence asks for a click, a pick, a scroll or the sidebar (the beam tree's and the Model
    view's captions did), though the slides' captions are kept around them."""
    deck, slides, path = shipped
    text = path.read_text(encoding="utf-8")
    assert text.count('<section class="slide"') == len(deck.slides)
    for slide, drawn in zip(deck.slides, slides, strict=True):
        assert drawn.title == slide.title and drawn.input
        assert any("→" in said for said in drawn.texts)  # the model's output, as the page words it
        said = [*drawn.texts, *(text for panel in drawn.panels for text in panel.texts)]
        assert not [line for line in said if LIVE_ONLY.search(line)], drawn.number
    views = [slide.state.get("view") for slide in deck.slides]
    tables = {slide.number: [panel.shown for panel in slide.panels if isinstance(panel.shown, Table)]
              for slide in slides}
    assert tables[views.index("decoding") + 1][0].columns == ("piece", "probability")
    assert "p after B" in tables[len(slides)][0].columns
    tree = next(slide for slide, link in zip(slides, deck.slides, strict=True) if link.state.get("step_mode") == "tree")
    assert any(text.startswith("Beam search with 4 beams") for panel in tree.panels for text in panel.texts)
    sections = re.sub(r'<aside class="notes">.*?</aside>', "", text.split("<body>", 1)[1].split('<script type')[0])
    assert not LIVE_ONLY.search(re.sub(r"<[^>]+>", " ", sections))  # the speaker's notes are the deck's own words
    assert len(path.read_bytes()) <= MAX_PACK_BYTES and text.count("<script") == 3  # Plotly, the figures, the keys


def test_sentences_only_the_live_app_honours_are_left_out_and_the_rest_kept():
    beam = ("Beam search with 4 beams (length penalty 1.2, coverage penalty 0.05, as the sidebar's): each step extends "
            "every hypothesis. Red: the path. Click a hypothesis, or pick it here, to see the step that made it.")
    assert static_text(beam) == beam[:beam.index(" Click")]
    assert static_text("The root is <s> alone: no step made it. Pick a hypothesis to see the step.") == \
        "The root is <s> alone: no step made it."
    for live in ("Click a panel to open its head in the Attention view.",
                 "↕ More of this figure than the screen holds: scroll inside it.",
                 "Pick heads to switch off: the output and its probabilities appear next to the intact model's."):
        assert static_text(live) == ""
    kept = "A: one.\nB: two.\nHover a cell for its value."
    assert static_text(kept) == kept
    assert static_text("A single sentence has no padding. Leave lecture mode and use Padding in the sidebar (or add "
                       "pad_src=4 to the link) to append pad tokens.") == "A single sentence has no padding."


def test_a_caption_goes_with_its_figure_a_heading_with_what_it_leads_to_and_a_long_passage_stands_alone():
    figure, table = {"data": []}, Table(("a",), (("1",),))
    methods = [f"method {index}: " + "words " * 20 for index in range(6)]
    above, panels = arrange([("text", "→ output"), ("panel", figure), ("text", "its caption"), ("heading", "Methods"),
                             *[("text", method) for method in methods], ("heading", "Next pieces"), ("panel", table),
                             ("text", "the table's caption"), ("heading", "Short"), ("text", "under the table")])
    assert above == ("→ output",)
    assert panels == (Panel(figure, ("its caption",)), Panel(Passage("Methods", tuple(methods)), ()),
                      Panel(table, ("Next pieces", "the table's caption", "Short", "under the table")))


def test_text_from_a_deck_or_a_page_never_runs_as_script():
    hostile = "</script><script>window.ran = 1</script><img src=x onerror=alert(1)>"
    deck = Deck(hostile, [Slide(hostile, hostile, hostile, {})])
    figure = {"data": [{"type": "heatmap", "z": [[1]], "x": [hostile]}], "layout": {"title": {"text": hostile}},
              "config": {}}
    panels = (Panel(figure, (hostile,)), Panel(Table((hostile,), ((hostile,),)), (hostile,)),
              Panel(Passage(hostile, (hostile,)), ()))
    page = pack_html(deck, [DrawnSlide(1, hostile, hostile, hostile, hostile, (hostile,), panels)]).decode()
    data = re.search(r'id="figures">(.*?)</script>', page, re.S)[1]  # its "<" written \\u003c
    assert "<img" not in page and page.count("<script") == 3 and "<" not in data
    assert json.loads(data) == [figure]


def test_a_pack_past_its_budget_is_refused_with_its_size():
    figure = {"data": [{"type": "heatmap", "z": [[0.5] * 1000] * 3000}], "layout": {}, "config": {}}
    with pytest.raises(PackError, match=r"packs to \d+\.\d MB, more than the 15 MB"):
        pack_html(Deck("big", [Slide("s", "", "", {})]), [DrawnSlide(1, "s", "", "", "x", (), (Panel(figure, ()),))])


def test_a_pack_is_written_whole_and_never_over_a_file_unless_asked(tmp_path):
    path = tmp_path / "deck.html"
    write_new(path, b"one")
    with pytest.raises(FileExistsError, match="--replace"):
        write_new(path, b"two")
    write_new(path, b"two", replace=True)
    assert path.read_bytes() == b"two" and [p.name for p in tmp_path.iterdir()] == ["deck.html"]


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A one-slide deck in a decks folder of its own; ui.pack's drawing replaced by a plant that fails the test, so
    that every refusal is shown to come before a slide is drawn."""
    decks = tmp_path / "decks"
    decks.mkdir()
    (decks / "tiny.toml").write_text(TINY_DECK)
    monkeypatch.setenv("ATLAS_DECKS", str(decks))

    def never(*args, **kwargs):
        raise AssertionError("a slide was drawn before OUT was checked")

    monkeypatch.setattr(ui.pack, "pack_deck", never)
    return decks


def refusal(argv: list[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        ui.pack.main(argv)
    message = str(stopped.value.code)
    assert message.startswith("error: ") and "\n" not in message
    return message


def test_the_command_never_writes_over_or_into_its_inputs_replace_or_not(tiny, tmp_path):
    """The deck's own file (as `python -m ui.pack tiny decks/tiny.toml --replace` once overwrote with HTML), a file
    in the decks or checkpoints folder, a folder that holds the deck, a symlink to the deck: each refused, the deck's
    bytes unchanged and nothing new beside it."""
    deck = tiny / "tiny.toml"
    link = tmp_path / "link.html"
    link.symlink_to(deck)
    checkpoints = ui.pack.checkpoints_dir()
    for out in (deck, tiny / "tiny.html", tiny, tmp_path, link, checkpoints / "reverse" / "deck.html", checkpoints):
        for replace in ([], ["--replace"]):
            assert "which this command reads" in refusal(["tiny", str(out), *replace]), out
    assert deck.read_text() == TINY_DECK and sorted(p.name for p in tiny.iterdir()) == ["tiny.toml"]
    assert not (checkpoints / "reverse" / "deck.html").exists()


def test_an_output_that_cannot_be_written_is_refused_in_one_line_before_a_slide_is_drawn(tiny, tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    assert "is a folder" in refusal(["tiny", str(tmp_path / "folder"), "--replace"])
    assert "does not exist" in refusal(["tiny", str(tmp_path / "missing" / "deck.html")])
    assert "is not a folder" in refusal(["tiny", str(tmp_path / "file" / "deck.html")])
    assert "already exists" in refusal(["tiny", str(tmp_path / "file")])


def test_a_write_that_fails_after_the_slides_are_drawn_is_one_line_and_leaves_nothing(tiny, tmp_path, monkeypatch):
    """OUT turned into a folder while the slides were drawn, with --replace: one line, no temporary file left."""
    out = tmp_path / "deck.html"
    monkeypatch.setattr(ui.pack, "pack_deck", lambda *args, **kwargs: out.mkdir() or b"<html>")
    assert refusal(["tiny", str(out), "--replace"]).startswith(f"error: {out} could not be written: ")
    assert [p.name for p in tmp_path.iterdir() if p.name != "decks"] == ["deck.html"] and out.is_dir()


def run_pack(*args: str, env: dict | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ui.pack", *args], cwd=APP.parent, capture_output=True, text=True,
                          timeout=300, env=env, preexec_fn=preexec_fn)


@pytest.mark.slow
def test_the_command_refuses_an_unknown_deck_in_one_line(tmp_path):
    done = run_pack("no-such-deck", str(tmp_path / "x.html"))
    assert done.returncode == 1 and done.stderr.startswith("error: There is no deck `no-such-deck`")
    assert not (tmp_path / "x.html").exists()


@pytest.mark.slow
def test_the_command_prints_each_slide_and_a_full_disk_in_one_line(tmp_path):
    """The tiny deck packed by the command under a 1 MB limit on a file's size (a pack is 5 MB: the write fails with
    "File too large"): a line per slide and no warning on the way, one line for the failure, nothing left."""
    for folder in ("decks", "out"):
        (tmp_path / folder).mkdir()
    (tmp_path / "decks" / "tiny.toml").write_text(TINY_DECK)
    out = tmp_path / "out" / "tiny.html"
    env = {**os.environ, "ATLAS_DECKS": str(tmp_path / "decks"), "ATLAS_WARM_DECKS": "off"}
    done = run_pack("tiny", str(out), env=env,
                    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (2**20, resource.RLIM_INFINITY)))
    assert done.stdout.splitlines() == ["slide 1 / 1: Where a word is"]
    assert done.returncode == 1 and done.stderr == f"error: {out} could not be written: File too large\n"
    assert list(out.parent.iterdir()) == []


SCREEN_JS = """() => {
  const section = document.querySelector("section.slide:not([hidden])");
  const side = section.querySelector(".side"), panel = section.querySelector(".panel:not([hidden])");
  const box = (element) => { const r = element.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  return {id: section.id, hash: location.hash, title: section.querySelector("h2").textContent,
          page: [document.scrollingElement.scrollWidth, document.scrollingElement.scrollHeight],
          side: [side.scrollHeight, side.clientHeight, parseFloat(getComputedStyle(side).fontSize)],
          panel: panel ? box(panel) : null,
          figures: [...section.querySelectorAll(".panel:not([hidden]) .js-plotly-plot")].map(box),
          notes: [...section.querySelectorAll("aside.notes")].filter((n) => n.offsetParent).map(box)};
}"""


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_the_packed_deck_walks_offline_in_chromium_every_screen_whole_with_and_without_the_notes(shipped):
    """From file:// with every other request refused, at 1280 x 720: PageDown through every screen (each figure or
    table of each slide in turn: the fragment #N or #N.K, the title, the figures drawn), each screen whole (nothing
    past 1280 x 720, every figure inside it, the side column's text whole at 12 px or more); N shows the slide's
    notes beside it (the figure where it was, all still whole), N again hides them; a tooltip on hover; PageUp back
    to the first; no console error, no request but the file. Slides 8 and 15 once ran past 720 px, and N once hid
    the whole page."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")
    deck, slides, path = shipped
    requests, errors = [], []
    with sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport=SCREEN)
            page.on("console", lambda message: message.type == "error" and errors.append(message.text))
            page.on("pageerror", lambda error: errors.append(str(error)))

            def only_the_file(route):
                requests.append(route.request.url)
                route.continue_() if route.request.url.startswith("file:") else route.abort()

            page.route("**/*", only_the_file)
            page.goto(path.as_uri(), timeout=120_000)
            hovered, screens = False, 0

            def whole(shown: dict, where: str) -> None:
                assert shown["page"] == [SCREEN["width"], SCREEN["height"]], where
                assert shown["side"][0] <= shown["side"][1] and shown["side"][2] >= 12, where
                for left, top, right, bottom in [*shown["figures"], *shown["notes"], shown["panel"]]:
                    assert left >= 0 and top >= 0 and right <= SCREEN["width"] and bottom <= SCREEN["height"], where

            for number, drawn in enumerate(slides, 1):
                for step in range(1, max(len(drawn.panels), 1) + 1):
                    if screens:
                        page.keyboard.press("PageDown")
                    screens += 1
                    where = f"slide {number}, screen {step}"
                    page.locator(f"#slide-{number}").wait_for(state="visible", timeout=10_000)
                    shown = page.evaluate(SCREEN_JS)
                    assert shown["hash"] == f"#{number}" + (f".{step}" if step > 1 else ""), where
                    assert shown["title"] == drawn.title and not shown["notes"], where
                    assert len(shown["figures"]) == isinstance(drawn.panels[step - 1].shown, dict), where
                    whole(shown, where)
                    if step == 1 and drawn.note:
                        page.keyboard.press("n")
                        with_notes = page.evaluate(SCREEN_JS)
                        assert len(with_notes["notes"]) == 1 and with_notes["figures"] == shown["figures"], where
                        assert drawn.note in page.locator(f"#slide-{number} aside.notes").text_content()
                        whole(with_notes, where + " with the notes")
                        page.keyboard.press("n")
                        assert not page.evaluate(SCREEN_JS)["notes"], where
                    heatmap = page.locator(f"#slide-{number} .panel:not([hidden]) .heatmaplayer").first
                    if not hovered and heatmap.count():
                        box = page.locator(f"#slide-{number} .panel:not([hidden]) .nsewdrag").first.bounding_box()
                        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                        page.wait_for_selector(".hovertext", timeout=10_000)
                        hovered = "weight" in page.locator(".hovertext").first.text_content()
            assert screens > len(slides)  # the decoding and minimal-pair slides have tables under their figures
            for _ in range(screens - 1):
                page.keyboard.press("PageUp")
            assert page.locator("#slide-1").is_visible() and page.evaluate("location.hash") == "#1"
        finally:
            browser.close()
    assert hovered
    assert errors == [] and [url for url in requests if not url.startswith("file:")] == []
