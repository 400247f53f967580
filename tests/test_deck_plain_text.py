"""A deck's own text in the live app (ui.deck.presenter): its title and notes shown as typed, never read as Markdown,
so a deck cannot make the page fetch an image or draw a link."""
from __future__ import annotations

import html
import re

import pytest
from streamlit.testing.v1 import AppTest

from helpers import APP, ROOT

pytestmark = pytest.mark.slow  # runs the app (AppTest)
TITLE = "Deck ![tracker](http://tracker.invalid/deck-title.png) and [a link](http://tracker.invalid/) *x*"
NOTE = "Note ![n](http://tracker.invalid/note.png)\n<img src=http://tracker.invalid/raw.png> `code` **bold**"


def as_browser_renders(markdown: str) -> str:
    """What Streamlit's Markdown makes of `markdown` (CommonMark, raw HTML as text), as HTML."""
    markdown_it = pytest.importorskip("markdown_it", reason="needs markdown-it-py (a dependency of rich)")
    return markdown_it.MarkdownIt("commonmark", {"html": False}).render(markdown)


def shown_text(rendered: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", rendered)).split())


def test_a_decks_title_and_note_are_shown_as_typed(tmp_path, monkeypatch):
    (tmp_path / "hostile.toml").write_text(
        f'title = """{TITLE}"""\n[[slides]]\ntitle = "One"\nnote = """{NOTE}"""\n'
        '[slides.link]\ncheckpoint = "reverse"\nview = "positional"\n')
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(ROOT / "checkpoints"))
    monkeypatch.setenv("ATLAS_DECKS", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(deck="hostile")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    title = next(element.proto.body for element in at.sidebar.subheader)
    note = next(element.proto.body for element in at.sidebar.info)
    for body, typed in ((title, TITLE), (note, NOTE)):
        rendered = as_browser_renders(body)
        assert not re.search(r"<(img|a|em|strong|code)\b", rendered), rendered
        assert shown_text(rendered) == " ".join(typed.split())
