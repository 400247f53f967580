"""A deck as one HTML file that needs no server: `python -m ui.pack DECK OUT.html` (ui/pack.py), or the sidebar's
**Decks → Download as one HTML file**.

Every slide is drawn by the app itself: a headless run of app.py (streamlit.testing's AppTest) opens the slide's link
(`?deck=NAME&slide=N`) as a student's first visit does, on the default projector (ui.screen's 1280 x 720), and the
file keeps what that page shows: each figure's JSON as Plotly draws it on screen (the same data, labels and colour
scales), each table, the input, the lines and captions that say what produced them, and the slide's title, line and
speaker notes. As in lecture mode, the figure stands on the left and what the page says beside it; a slide of several
figures or tables shows one at a time, each whole at 1280 x 720 (PageDown moves to the next, then to the next slide).
The page moves with PageDown / PageUp and the arrow keys, keeps the slide in the address's fragment (`#3`, `#3.2` for
its second figure), and shows the speaker's notes beside the figure with the N key. Plotly's JavaScript is inlined
once; nothing is fetched. What a view offers beyond the slide as set (another head, layer or step) is the live app's:
each slide says so, and a sentence of the page that asks for a click, a pick, a scroll or the sidebar is left out.

Bounded as every file read or written: MAX_PACK_BYTES (a deck past it is refused with its size), SLIDE_TIMEOUT_S for
each slide, written atomically and never over an existing file unless asked; every text of a deck or a page is
escaped, so nothing in a slide runs as script.
"""
from __future__ import annotations

import html
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import plotly.offline

from .parse import Deck

APP = Path(__file__).parents[2] / "app.py"
MAX_PACK_BYTES = 15 * 2**20  # a pack's budget; Plotly's JavaScript alone is 4.6 MB of it
SLIDE_TIMEOUT_S = 300.0
PACK_TIMEOUT_S = 900.0  # the presenter's button: a whole deck packed in a process of its own
TEXT_ELEMENTS = ("text", "markdown", "caption", "info", "warning", "error", "success")  # what a page says, in order
# A headed passage (a Markdown heading and the lines after it) longer than this is a panel of its own, beside the
# slide's header, rather than a column the side could not hold at a readable size.
SIDE_PASSAGE_CHARS = 500
# A sentence of the page that only the live app can honour: a click, a pick, a box to scroll (the pack draws each
# figure whole), a control in the sidebar.
LIVE_ONLY = re.compile(r"\b(?:click|pick|scroll)\b|\bin the sidebar\b", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")  # a sentence ends at . ! or ? before a space (not the point of "1.2")
# AppTest's constructor asks for the script's context before it has one, and Streamlit logs a warning each time.
CONTEXT_LOGGER = logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context")


class PackError(Exception):
    """A deck that cannot be packed: a slide that fails, or a file past MAX_PACK_BYTES."""


class Table(NamedTuple):
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]  # each cell as the app shows it (numbers to three places)


class Passage(NamedTuple):
    heading: str
    texts: tuple[str, ...]


class Panel(NamedTuple):
    shown: dict | Table | Passage  # a figure ({"data", "layout", "config"}, as Plotly draws it), a table, a passage
    texts: tuple[str, ...]  # what the page says under it (its captions), up to the next figure or table


class DrawnSlide(NamedTuple):
    number: int
    title: str
    line: str
    note: str
    input: str  # the slide's input as its text box holds it
    texts: tuple[str, ...]  # what the page says above its first figure (the output line, notices)
    panels: tuple[Panel, ...]  # its figures and tables in page order

    @property
    def figures(self) -> list[dict]:
        return [panel.shown for panel in self.panels if isinstance(panel.shown, dict)]


def _walk(node):
    """The page's elements in the order it shows them (its blocks' children depth-first)."""
    children = getattr(node, "children", None)
    if children is None:
        yield node
        return
    for child in children.values():
        yield from _walk(child)


def draw_slide(name: str, deck: Deck, number: int, timeout_s: float = SLIDE_TIMEOUT_S) -> DrawnSlide:
    """Slide `number` of the deck `name` as the app draws it on a first visit to its link."""
    from streamlit.testing.v1 import AppTest  # only packing pays for importing the test harness

    level = CONTEXT_LOGGER.level
    CONTEXT_LOGGER.setLevel(logging.ERROR)
    try:
        app = AppTest.from_file(str(APP), default_timeout=timeout_s)
    finally:
        CONTEXT_LOGGER.setLevel(level)
    app.query_params.update({"deck": name, "slide": str(number)})
    app.run()
    if app.exception:
        raise PackError(f"Slide {number} could not be drawn: {app.exception[0].value}")
    slide = deck.slides[number - 1]
    # The slide bar's number and title, and its line, are the pack's own header.
    own = {f"{number} / {len(deck.slides)} · {slide.title}", slide.line}
    items = []  # ("panel", a figure or table) or ("heading" / "text", what it says), in page order
    for element in _walk(app.main):
        kind = getattr(element, "type", "")
        if kind == "plotly_chart":
            config = json.loads(element.proto.config or "{}")
            items.append(("panel", {**json.loads(element.proto.spec), "config": config}))
        elif kind == "dataframe":
            items.append(("panel", as_table(element.value)))
        elif kind in TEXT_ELEMENTS and str(getattr(element, "value", "")).strip() not in own | {""}:
            said = static_text(str(element.value) if kind == "text" else as_plain_text(str(element.value)))
            if said:
                items.append(("heading" if kind == "markdown" else "text", said))
    above, panels = arrange(items)
    return DrawnSlide(number, slide.title, slide.line, slide.note, str(app.text_input(key="text").value), above,
                      panels)


def arrange(items: list[tuple[str, object]]) -> tuple[tuple[str, ...], tuple[Panel, ...]]:
    """A page's texts, headings and panels (in page order) as the pack shows them: (the texts above the first panel,
    the panels with their captions). A text is the caption of the figure or table above it; a heading and the texts
    under it, of the one it leads to, or (when another heading comes first) of the one above; such a passage longer
    than SIDE_PASSAGE_CHARS is a panel of its own."""
    above, panels, passage = [], [], None  # panels: [what is shown, its captions]

    def captions() -> list[str]:
        return panels[-1][1] if panels else above

    for kind, value in [*items, ("end", None)]:
        if kind == "text":
            (passage if passage is not None else captions()).append(value)
            continue
        leading = []  # a passage ends at a heading, a panel or the page's end
        if passage is not None and sum(map(len, passage)) > SIDE_PASSAGE_CHARS:
            panels.append([Passage(passage[0], tuple(passage[1:])), []])
        elif passage is not None and kind == "panel":
            leading = passage
        elif passage is not None:
            captions().extend(passage)
        passage = [value] if kind == "heading" else None
        if kind == "panel":
            panels.append([value, leading])
    return tuple(above), tuple(Panel(shown, tuple(texts)) for shown, texts in panels)


def as_plain_text(markdown: str) -> str:
    """A caption's or notice's Markdown as the reader sees it: no backslash escapes (ui.literal_text.plain writes
    them before punctuation), no bold markers or code spans' backticks, line breaks kept."""
    unmarked = re.sub(r"(?<!\\)`", "", markdown.replace("**", ""))
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", unmarked).replace("  \n", "\n")


def static_text(text: str) -> str:
    """`text` without its LIVE_ONLY sentences, line by line: what a static file can honour ("" when nothing is
    left)."""
    lines = (" ".join(sentence for sentence in SENTENCE_END.split(line) if not LIVE_ONLY.search(sentence))
             for line in text.splitlines())
    return "\n".join(line for line in lines if line.strip()).strip()


def as_table(frame) -> Table:
    """A dataframe as the page shows it: its own index only where it is not 0, 1, 2, ..."""
    import pandas as pd

    if not isinstance(frame.index, pd.RangeIndex):
        frame = frame.reset_index()
    cell = lambda value: f"{value:.3f}" if isinstance(value, float) else str(value)  # noqa: E731
    return Table(tuple(map(str, frame.columns)), tuple(tuple(map(cell, row)) for row in frame.itertuples(index=False)))


# The page's look: lecture mode's, at 1280 x 720 and up. Each slide fills the window: its figure (or table) in the
# stage on the left, one at a time, and beside it what the page says; the notes there too with N. The side column's
# text shrinks (to 12 px at least) until it is whole; a figure taller than the stage is drawn at the stage's height.
STYLE = """
body { font-family: "Source Sans Pro", "Source Sans 3", sans-serif; margin: 0; color: #262730; }
section.slide { display: grid; grid-template-columns: minmax(0, 1fr) 330px; gap: 16px; height: 100vh;
  box-sizing: border-box; padding: 8px 16px; }
section[hidden], .panel[hidden], .captions[hidden] { display: none; }
.stage { min-width: 0; height: 100%; }
.panel { height: 100%; overflow-x: auto; overflow-y: hidden; }
.side { font-size: 16px; overflow-y: auto; min-height: 0; }
.side header { display: flex; flex-wrap: wrap; column-gap: 0.6em; align-items: baseline; }
.side header h2 { font-size: 1.3em; line-height: 1.2; margin: 0.1em 0 0.2em; width: 100%; order: 2; }
.count { color: #6b6f76; }
.line { font-size: 1.2em; font-weight: 600; line-height: 1.25; margin: 0.2em 0 0.4em; }
.input { margin: 0.2em 0; }
.texts p { margin: 0.3em 0; color: #4b4f56; white-space: pre-wrap; line-height: 1.3; }
aside.notes { display: none; border-left: 4px solid #1c83e1; padding: 0.3em 0.6em; background: #eef5fc;
  white-space: pre-wrap; margin: 0.4em 0; }
aside.notes b { display: block; }
body.notes-shown aside.notes { display: block; }
.more { color: #6b6f76; font-size: 0.85em; }
table { border-collapse: collapse; font-size: 16px; margin: 0.4rem 0; }
th, td { padding: 0.2rem 0.8rem; border-bottom: 1px solid #e6e9ef; text-align: left; }
.passage { font-size: 18px; max-width: 52em; line-height: 1.35; }
.passage h3 { margin: 0.3em 0; }
.passage p { margin: 0.35em 0; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
form.live { display: flex; gap: 0.4em; margin: 0.3em 0; }
form.live input { flex: 1; min-width: 0; font: inherit; padding: 0.2em 0.4em; }
form.live button { font: inherit; }
.live-out p { margin: 0.3em 0; white-space: pre-wrap; }
.live-out .live-output { font-weight: 600; }
.live-out .notice { color: #8a5300; }
"""

# One figure or table shown at a time; each figure drawn when it is first shown, at the size the app gave it (no
# taller than the stage).
SCRIPT = """
const figures = JSON.parse(document.getElementById("figures").textContent);
const slides = [...document.querySelectorAll("section.slide")];
let current = 1, panel = 1;
const panels = (number) => slides[number - 1].querySelectorAll(".panel").length || 1;
function fit(side) {
  side.style.fontSize = "";
  for (let size = 15; side.scrollHeight > side.clientHeight && size >= 12; size -= 1) side.style.fontSize = size + "px";
}
function show(number, step) {
  current = Math.min(Math.max(number || 1, 1), slides.length);
  panel = Math.min(Math.max(step || 1, 1), panels(current));
  slides.forEach((slide, index) => { slide.hidden = index !== current - 1; });
  const slide = slides[current - 1];
  for (const kind of [".panel", ".captions"]) {
    slide.querySelectorAll(kind).forEach((box, index) => { box.hidden = index !== panel - 1; });
  }
  const counter = slide.querySelector(".step");
  if (counter) counter.textContent = panel + " of " + panels(current);
  for (const box of slide.querySelectorAll(".panel:not([hidden]) [data-figure]")) {
    if (!box.dataset.drawn) {
      const figure = figures[Number(box.dataset.figure)];
      const room = box.closest(".panel").clientHeight;
      const layout = Object.assign({}, figure.layout, { height: Math.min(figure.layout.height || 450, room) });
      Plotly.newPlot(box, figure.data, layout, figure.config);
      box.dataset.drawn = "1";
    }
  }
  fit(slide.querySelector(".side"));
  const hash = "#" + current + (panel > 1 ? "." + panel : "");
  if (location.hash !== hash) history.replaceState(null, "", hash);
}
function forward() { panel < panels(current) ? show(current, panel + 1) : show(current + 1, 1); }
function back() { panel > 1 ? show(current, panel - 1) : show(current - 1, current > 1 ? panels(current - 1) : 1); }
function fromHash() {
  const [number, step] = location.hash.slice(1).split(".");
  show(parseInt(number, 10), parseInt(step, 10));
}
document.addEventListener("keydown", (event) => {
  if (["PageDown", "ArrowDown", "ArrowRight", " "].includes(event.key)) { forward(); event.preventDefault(); }
  else if (["PageUp", "ArrowUp", "ArrowLeft"].includes(event.key)) { back(); event.preventDefault(); }
  else if (event.key === "n" || event.key === "N") {
    document.body.classList.toggle("notes-shown");
    fit(slides[current - 1].querySelector(".side"));
  }
});
window.addEventListener("hashchange", fromHash);
window.addEventListener("resize", () => fit(slides[current - 1].querySelector(".side")));
fromHash();
"""


def _script_json(value: object) -> str:
    """JSON inside a <script> element: every "<" written \\u003c, so no text (a token, a title) can close it or
    open another."""
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c")


def _paragraphs(texts) -> str:
    return "".join(f"<p>{html.escape(text)}</p>" for text in texts)


def _table_html(table: Table) -> str:
    escape = html.escape
    number = re.compile(r"-?\d+(\.\d+)?%?")
    head = "".join(f"<th>{escape(column)}</th>" for column in table.columns)
    body = "".join("<tr>" + "".join(f'<td class="number">{escape(cell)}</td>' if number.fullmatch(cell)
                                    else f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in table.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def pack_html(deck: Deck, slides: list[DrawnSlide], live=None) -> bytes:
    """The deck's slides as one HTML page that works offline (see the module's docstring); PackError past
    MAX_PACK_BYTES. `live` (ui.deck.live.Live): the live pack's input boxes and scripts, within its own budget."""
    escape = html.escape
    figures, sections = [], []
    for slide in slides:
        boxes = []
        captions = []
        live_figure = live is not None and live.live(slide.number) is not None
        for panel in slide.panels:
            if isinstance(panel.shown, Table):
                inside = _table_html(panel.shown)
            elif isinstance(panel.shown, Passage):
                heading, texts = panel.shown
                inside = f'<div class="passage"><h3>{escape(heading)}</h3>{_paragraphs(texts)}</div>'
            else:
                marked = " data-live-figure" if live_figure else ""  # the first figure: the one the page redraws
                live_figure = False
                inside = f'<div class="figure" data-figure="{len(figures)}"{marked}></div>'
                figures.append(panel.shown)
            hidden = " hidden" if boxes else ""
            boxes.append(f'<div class="panel"{hidden}>{inside}</div>')
            captions.append(f'<div class="captions"{hidden}>{_paragraphs(panel.texts)}</div>')
        step = ' · <span class="step"></span> (PageDown: the next)' if len(boxes) > 1 else ""
        sections.append(
            f'<section class="slide" id="slide-{slide.number}" hidden><div class="stage">{"".join(boxes)}</div>'
            f'<div class="side"><header><span class="count">{slide.number} / {len(slides)}{step}</span>'
            f"<h2>{escape(slide.title)}</h2></header>"
            + (f'<p class="line">{escape(slide.line)}</p>' if slide.line else "")
            + f'<p class="input">Input: {escape(slide.input)}</p>'
            + (live.side(slide.number, slide.input) if live is not None else "")
            + f'<div class="texts">{_paragraphs(slide.texts)}{"".join(captions)}</div>'
            + (f'<aside class="notes"><b>Speaker\'s notes (written for the live app)</b>{escape(slide.note)}</aside>'
               if slide.note else "")
            + '<p class="more">Drawn by Attention Atlas as the slide is set; the live app has every other head, '
              "layer and step. Keys: PageDown / PageUp, N for the notes.</p></div></section>")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(deck.title)}</title>'
            f"<style>{STYLE}</style><script>{plotly.offline.get_plotlyjs()}</script></head><body>"
            + "".join(sections)
            + f'<script type="application/json" id="figures">{_script_json(figures)}</script>'
            + f"<script>{SCRIPT}</script>" + (live.scripts() if live is not None else "")
            + "</body></html>\n").encode("utf-8")
    budget = MAX_PACK_BYTES if live is None else live.max_bytes
    if len(page) > budget:
        raise PackError(f"The deck `{deck.title}` packs to {len(page) / 2**20:.1f} MB, more than the "
                        f"{budget / 2**20:.0f} MB a{' live' if live else ''} pack may take: split it into shorter "
                        "decks.")
    return page


def pack_in_process(name: str, live: bool = False) -> bytes:
    """pack_deck(name, live=live) in a process of its own (`python -m ui.pack`), as the running server packs a deck:
    its headless runs keep to themselves (AppTest takes over Streamlit's runtime), and its memory is returned when it
    ends."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "deck.html"
        done = subprocess.run([sys.executable, "-m", "ui.pack", name, str(out), *(["--live"] if live else [])],
                              cwd=APP.parent, capture_output=True,
                              text=True, timeout=PACK_TIMEOUT_S, env={**os.environ, "ATLAS_WARM_DECKS": "off"})
        if done.returncode:
            raise PackError((done.stderr.strip().splitlines() or ["the packing process failed"])[-1])
        return out.read_bytes()  # pack_html bounded it


def write_new(path: Path, data: bytes, replace: bool = False) -> None:
    """`data` to `path` through a temporary file beside it and a rename: no reader sees half a page. An existing
    file is replaced only when asked."""
    if path.exists() and not replace:
        raise FileExistsError(f"{path} already exists: choose another name, or pass --replace")
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
