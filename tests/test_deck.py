"""Decks without Streamlit running: the file format, what a slide shows, and the files a deck may be read from."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from ui.deck import (
    MAX_DECK_BYTES,
    MAX_SLIDES,
    Deck,
    DeckError,
    Slide,
    deck_names,
    deck_toml,
    parse_deck,
    presenter,
    read_deck,
    slide_state,
)
from ui.deck import parse as deck_parse
from ui.state import URL_STATE, parse_query, url_params
from ui.views import BY_KEY

DECKS = Path(__file__).parents[1] / "decks"
SHIPPED = "attention-step-by-step"
SHIPPED_CHECKPOINTS = {"reverse", "reverse-1layer", "dates", "eng-fra"}


def defaults() -> dict[str, object]:
    return {name: default for name, (_, default) in URL_STATE.items() if default is not None}


def deck_of(*slides: str, title: str = "") -> bytes:
    return (f'title = "{title}"\n' + "".join(f'[[slides]]\ntitle = "s{number}"\n{slide}\n'
                                              for number, slide in enumerate(slides))).encode()


def test_the_shipped_deck_walks_the_shipped_checkpoints_through_every_view_it_names():
    deck = read_deck(SHIPPED, DECKS)
    assert deck.title == "Attention, step by step"
    assert 10 <= len(deck.slides) <= 15
    assert all(slide.title and slide.note for slide in deck.slides)
    assert sum(bool(slide.line) for slide in deck.slides) >= len(deck.slides) - 1  # optional: it takes a line
    assert {slide.state["checkpoint"] for slide in deck.slides if "checkpoint" in slide.state} <= SHIPPED_CHECKPOINTS
    views = {slide.state.get("view") for slide in deck.slides}
    assert {"positional", "attention", "masks", "model", "decoding", "inside", "compare", "training",
            "attribution"} <= views


def test_a_deck_round_trips_through_the_states_and_the_links_the_app_writes():
    deck = read_deck(SHIPPED, DECKS)
    current = {**defaults(), "checkpoint": "eng-fra", "text": "typed", "deck": SHIPPED, "lecture": True}
    for number, slide in enumerate(deck.slides, 1):
        state = {**slide_state(slide, current), "slide": number}
        shown = {name: value for name, value in state.items() if value is not None}
        link, notices = parse_query(url_params(state))
        assert not notices
        assert {**defaults(), **link} == shown  # a student opening the lecturer's link sees the same view
        assert link["deck"] == SHIPPED and link.get("slide", 1) == number
        assert {name: shown[name] for name in slide.state} == slide.state  # the slide's own values, all of them
        current = state
    assert parse_deck(deck_toml(deck).encode(), BY_KEY, SHIPPED) == deck  # and the file the app offers for download


def test_a_slide_is_read_by_each_link_parameters_own_parser():
    deck = parse_deck(deck_of('[slides.link]\nlayer = 1\nmasks = false\npe_dims = [0, 5]\ntemperature = 0.5\n'
                              'text = "<b>x</b>"\nablate = ["a:1", "b:2"]'), BY_KEY)
    link, _ = parse_query({"layer": "1", "masks": "0", "pe_dims": "0,5", "temperature": "0.5", "text": "<b>x</b>",
                           "ablate": "a:1,b:2"})
    assert deck.slides[0].state == link


def test_a_slide_keeps_the_checkpoint_and_the_typed_input_unless_it_names_them():
    current = {**defaults(), "checkpoint": "reverse", "text": "typed", "layer": 1, "dark": True, "step": 3}
    same = slide_state(Slide("t", "", "", {"view": "masks"}), current)
    assert (same["checkpoint"], same["text"], same["dark"]) == ("reverse", "typed", True)
    assert (same["view"], same["layer"], same["step"]) == ("masks", 0, 0)  # the rest: the defaults
    other = slide_state(Slide("t", "", "", {"checkpoint": "dates"}), current)
    assert other["text"] is None  # another checkpoint: its own first example, not the last model's input


@pytest.mark.parametrize(("slides", "message"), [
    (['[slides.link]\nview = "slideshow"'], "slide 1: there is no view `slideshow`"),
    (['[slides.link]\ncolour = "red"'], "`colour` is not a link parameter"),
    (['[slides.link]\ndeck = "other"'], "`deck` is not a link parameter a slide can set"),
    (['[slides.link]\nlayer = "top"'], "`layer` = `top` cannot be read"),
    (['[slides.link]\nlayer = 1979-05-27'], "`layer` = `1979-05-27` cannot be read"),
    (['[slides.link]\nlayer = {deep = 1}'], "cannot be read"),
    (['script = "x"'], "unknown field `script`"),
    (['note = 5'], "`note` must be text"),
    ([f'line = "{"x" * 500}"'], "`line` is 500 characters long"),
    ([], "has no slides"),
])
def test_a_broken_slide_is_named_with_what_is_wrong(slides, message):
    with pytest.raises(DeckError, match=message):
        parse_deck(deck_of(*slides), BY_KEY)


def test_a_hostile_deck_gets_a_clear_message():
    with pytest.raises(DeckError, match=f"10,000 slides, more than the {MAX_SLIDES} allowed"):
        parse_deck(("slides = [" + "{}," * 10_000 + "]").encode(), BY_KEY)  # 30 KB: within the size cap
    with pytest.raises(DeckError, match="more than the"):
        parse_deck(b"#" * (MAX_DECK_BYTES + 1), BY_KEY)
    with pytest.raises(DeckError, match="not a TOML file"):
        parse_deck(b"[[slides]\n", BY_KEY)
    with pytest.raises(DeckError, match="not a TOML file"):
        parse_deck(b"\xff\xfe", BY_KEY)
    with pytest.raises(DeckError, match="too deep|not a TOML file"):
        parse_deck(b"x = " + b"[" * 30_000 + b"]" * 30_000, BY_KEY)


def test_a_deck_beyond_what_a_deck_needs_is_refused_before_tomllib_reads_it(monkeypatch):
    """A 64 KB deck of one dotted key 32,000 parts deep took tomllib 26 s and 3.9 GB; an integer of 5,000 digits
    raised a bare ValueError. Each is refused by a linear scan, and tomllib is never called."""
    def unread(text):
        raise AssertionError("tomllib read a deck that should have been refused first")

    monkeypatch.setattr(deck_parse.tomllib, "loads", unread)
    link = '[[slides]]\ntitle = "s"\n[slides.link]\n'
    for data, message in [
        (b"a" + b".a" * 32_000 + b" = 1", "a dotted key of 32,001 parts, more than the 8 allowed"),
        ((link + "view" + ".x" * 5_000 + ' = "masks"').encode(), "a dotted key of 5,001 parts"),
        ((link + "layer = 1" + "0" * 5_000).encode(), "a number of 5,001 digits, more than the 40 allowed"),
        ("".join(f"k{number} = 1\n" for number in range(5_000)).encode(), "sets 5,000 values, more than the 4,000"),
    ]:
        assert len(data) <= MAX_DECK_BYTES
        with pytest.raises(DeckError, match=message):
            parse_deck(data, BY_KEY, "hostile")


def test_what_a_note_says_is_not_counted_as_keys_or_numbers():
    note = "a.b.c.d.e.f.g.h.i.j = 1234567890123456789012345678901234567890123456789 # not a comment"
    data = deck_of(f'note = "{note}"\nline = \'{note}\'\n[slides.link]\nview = "masks"',
                   f'note = """\n{note}\n\\""" {note}"""\n# {note}\n[slides.link]\nlayer = 1')
    deck = parse_deck(data, BY_KEY)
    assert deck.slides[0].note == deck.slides[0].line == note
    assert deck.slides[1].note == f'{note}\n""" {note}'


def test_a_deck_is_parsed_once_per_content_for_every_session(decks, monkeypatch):
    parses = []
    monkeypatch.setattr(presenter, "parse_deck", lambda *args: parses.append(args) or parse_deck(*args))
    presenter.parsed_deck.clear()
    assert read_deck("good", decks) is read_deck("good", decks)  # one Deck, shared
    (decks / "good.toml").write_bytes(b"x = " + b"1" * 100)
    for _ in range(3):  # a refused file too: its message is kept, not parsed again each rerun
        with pytest.raises(DeckError, match="a number of 100 digits"):
            read_deck("good", decks)
    assert len(parses) == 2


@pytest.fixture
def decks(tmp_path) -> Path:
    """A decks folder with one good deck, and entries that must not be read: a symlink to a deck outside, a hard
    link, a FIFO, a huge file, a folder and names no link could carry."""
    root, outside = tmp_path / "decks", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    good = deck_of('[slides.link]\nview = "masks"')
    (root / "good.toml").write_bytes(good)
    (outside / "secret.toml").write_bytes(good)
    (root / "escape.toml").symlink_to(outside / "secret.toml")
    os.link(outside / "secret.toml", root / "twin.toml")
    os.mkfifo(root / "pipe.toml")
    (root / "huge.toml").write_bytes(deck_of() + b"#" * MAX_DECK_BYTES)
    (root / "folder.toml").mkdir()
    (root / "Spaced Name.toml").write_bytes(good)
    return root


def test_only_the_decks_folders_own_files_are_listed(decks):
    assert deck_names(decks) == ["good", "huge", "twin"]  # regular files only, by their names; no symlink, no FIFO
    assert deck_names(decks / "missing") == []


@pytest.mark.parametrize(("name", "message"), [
    ("../outside/secret", "There is no deck"), ("/etc/passwd", "There is no deck"), ("good.toml", "There is no deck"),
    ("escape", "There is no deck"), ("pipe", "There is no deck"), ("folder", "There is no deck"),
    ("Spaced Name", "There is no deck"), ("twin", "a hard link"),
    ("huge", "huge.toml: 65,547 bytes, more than the 65,536 allowed"),
])
def test_a_deck_name_from_a_link_only_picks_a_listed_file(decks, name, message):
    with pytest.raises(DeckError, match=message):
        read_deck(name, decks)
    assert read_deck("good", decks) == Deck("good", [Slide("s0", "", "", {"view": "masks"})])
