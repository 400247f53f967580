"""A deck as one HTML file that needs no server: `python -m ui.pack DECK OUT.html` (ui/pack.py), or the sidebar's
**Decks → Download as one HTML file**.

Every slide is drawn by the app itself: a headless run of app.py (streamlit.testing's AppTest) opens the slide's link
(`?deck=NAME&slide=N`) as a student's first visit does, on the default projector (ui.screen's 1280 x 720), and the
file keeps what that page shows: each figure's JSON as Plotly draws it on screen (the same data, labels and colour
scales), the input, the lines and captions that say what produced them, and the slide's title, line and speaker
notes. The page moves with PageDown / PageUp and the arrow keys, keeps the slide number in the address's fragment
(`#3`), and shows the notes with the N key. Plotly's JavaScript is inlined once; nothing is fetched. What a view
offers beyond the slide as set (another head, layer or step) is the live app's: each slide says so.

Bounded as every file read or written: MAX_PACK_BYTES (a deck past it is refused with its size), SLIDE_TIMEOUT_S for
each slide, written atomically and never over an existing file unless asked; every text of a deck or a page is
escaped, so nothing in a slide runs as script.
"""
from __future__ import annotations

import html
import json
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
TEXT_ELEMENTS = ("text", "caption", "info", "warning", "error", "success")  # what a page says, in page order


class PackError(Exception):
    """A deck that cannot be packed: a slide that fails, or a file past MAX_PACK_BYTES."""


class DrawnSlide(NamedTuple):
    number: int
    title: str
    line: str
    note: str
    input: str  # the slide's input as its text box holds it
    texts: tuple[str, ...]  # what the page says beside and under its figures (the output line, captions, notices)
    figures: tuple[dict, ...]  # {"data", "layout", "config"}: each figure as Plotly draws it on the page


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

    app = AppTest.from_file(str(APP), default_timeout=timeout_s)
    app.query_params.update({"deck": name, "slide": str(number)})
    app.run()
    if app.exception:
        raise PackError(f"Slide {number} could not be drawn: {app.exception[0].value}")
    slide = deck.slides[number - 1]
    # The slide bar's number and title, and its line, are the pack's own header.
    own = {f"{number} / {len(deck.slides)} · {slide.title}", slide.line}
    texts, figures = [], []
    for element in _walk(app.main):
        kind = getattr(element, "type", "")
        if kind == "plotly_chart":
            figures.append({**json.loads(element.proto.spec), "config": json.loads(element.proto.config or "{}")})
        elif kind in TEXT_ELEMENTS and str(getattr(element, "value", "")).strip() not in own | {""}:
            texts.append(str(element.value) if kind == "text" else as_plain_text(str(element.value)))
    return DrawnSlide(number, slide.title, slide.line, slide.note, str(app.text_input(key="text").value),
                      tuple(texts), tuple(figures))


def as_plain_text(markdown: str) -> str:
    """A caption's or notice's Markdown as the reader sees it: no backslash escapes (ui.literal_text.plain writes
    them before punctuation), no bold markers, line breaks kept."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown.replace("**", "")).replace("  \n", "\n")


# The page's look: the app's lecture fonts, one slide at a time, notes hidden until N.
STYLE = """
body { font-family: "Source Sans Pro", "Source Sans 3", sans-serif; margin: 0 1.5rem; color: #262730; }
section[hidden] { display: none; }
header { display: flex; gap: 1rem; align-items: baseline; font-size: 1.25rem; margin: 0.6rem 0 0.2rem; }
header .count { color: #6b6f76; }
.line { font-size: 1.4rem; font-weight: 600; margin: 0.2rem 0 0.4rem; }
.input { font-size: 1.1rem; margin: 0.2rem 0; }
.texts p { margin: 0.15rem 0; color: #4b4f56; font-size: 1rem; white-space: pre-wrap; }
.figure { margin: 0.4rem 0; }
.notes { display: none; border-left: 4px solid #1c83e1; padding: 0.4rem 0.8rem; background: #eef5fc; }
body.notes .notes { display: block; }
.more { color: #6b6f76; font-size: 0.9rem; }
"""

# One slide shown at a time; its figures drawn when it is first shown (at the size the app gave them).
SCRIPT = """
const figures = JSON.parse(document.getElementById("figures").textContent);
const slides = [...document.querySelectorAll("section.slide")];
let current = 1;
function show(number) {
  current = Math.min(Math.max(number || 1, 1), slides.length);
  slides.forEach((slide, index) => { slide.hidden = index !== current - 1; });
  for (const box of slides[current - 1].querySelectorAll("[data-figure]")) {
    if (!box.dataset.drawn) {
      const figure = figures[Number(box.dataset.figure)];
      Plotly.newPlot(box, figure.data, figure.layout, figure.config);
      box.dataset.drawn = "1";
    }
  }
  if (location.hash !== "#" + current) history.replaceState(null, "", "#" + current);
}
document.addEventListener("keydown", (event) => {
  if (["PageDown", "ArrowDown", "ArrowRight", " "].includes(event.key)) { show(current + 1); event.preventDefault(); }
  else if (["PageUp", "ArrowUp", "ArrowLeft"].includes(event.key)) { show(current - 1); event.preventDefault(); }
  else if (event.key === "n" || event.key === "N") { document.body.classList.toggle("notes"); }
});
window.addEventListener("hashchange", () => show(parseInt(location.hash.slice(1), 10)));
show(parseInt(location.hash.slice(1), 10));
"""


def _script_json(value: object) -> str:
    """JSON inside a <script> element: every "<" written \\u003c, so no text (a token, a title) can close it or
    open another."""
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c")


def pack_html(deck: Deck, slides: list[DrawnSlide]) -> bytes:
    """The deck's slides as one HTML page that works offline (see the module's docstring); PackError past
    MAX_PACK_BYTES."""
    escape = html.escape
    figures, sections = [], []
    for slide in slides:
        boxes = []
        for figure in slide.figures:
            boxes.append(f'<div class="figure" data-figure="{len(figures)}"></div>')
            figures.append(figure)
        said = "".join(f"<p>{escape(text)}</p>" for text in slide.texts)
        sections.append(
            f'<section class="slide" id="slide-{slide.number}" hidden>'
            f'<header><span class="count">{slide.number} / {len(slides)}</span><h2>{escape(slide.title)}</h2></header>'
            + (f'<p class="line">{escape(slide.line)}</p>' if slide.line else "")
            + f'<p class="input">Input: {escape(slide.input)}</p><div class="texts">{said}</div>{"".join(boxes)}'
            + (f'<aside class="notes">{escape(slide.note)}</aside>' if slide.note else "")
            + '<p class="more">Drawn by Attention Atlas as the slide is set; the live app has every other head, '
              "layer and step. Keys: PageDown / PageUp, N for the notes.</p></section>")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(deck.title)}</title>'
            f"<style>{STYLE}</style><script>{plotly.offline.get_plotlyjs()}</script></head><body>"
            + "".join(sections)
            + f'<script type="application/json" id="figures">{_script_json(figures)}</script>'
            + f"<script>{SCRIPT}</script></body></html>\n").encode("utf-8")
    if len(page) > MAX_PACK_BYTES:
        raise PackError(f"The deck `{deck.title}` packs to {len(page) / 2**20:.1f} MB, more than the "
                        f"{MAX_PACK_BYTES / 2**20:.0f} MB a pack may take: split it into shorter decks.")
    return page


def pack_in_process(name: str) -> bytes:
    """pack_deck(name) in a process of its own (`python -m ui.pack`), as the running server packs a deck: its headless
    runs keep to themselves (AppTest takes over Streamlit's runtime), and its memory is returned when it ends."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "deck.html"
        done = subprocess.run([sys.executable, "-m", "ui.pack", name, str(out)], cwd=APP.parent, capture_output=True,
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
