"""A deck presented in the app (AppTest on the shipped checkpoints): every slide of the shipped deck opens without an
error, the address bar keeps the slide, a link lands on its slide, and the normal page offers decks."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from helpers import APP, ROOT
from ui.deck import read_deck
from ui.state import parse_query

SHIPPED = "attention-step-by-step"
pytestmark = pytest.mark.slow  # every test runs the whole app (AppTest)


@pytest.fixture
def app(monkeypatch):
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(ROOT / "checkpoints"))
    monkeypatch.setenv("ATLAS_DECKS", str(ROOT / "decks"))

    def start(**query) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=300)
        at.query_params.update(query)
        return at.run()

    return start


def ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def link_notices(at: AppTest) -> str:
    return " ".join(warning.value for warning in at.warning if warning.icon == "🔗")


def slide_title(at: AppTest) -> str:
    return next(text.value for text in at.text if " / " in text.value)


def address_bar(at: AppTest) -> dict[str, str]:
    return {name: value[0] if isinstance(value, list) else value for name, value in at.query_params.items()}


def test_the_shipped_deck_opens_every_slide_in_lecture_mode(app):
    deck = read_deck(SHIPPED)
    at = ok(app(deck=SHIPPED))
    for number, slide in enumerate(deck.slides, 1):
        assert at.session_state["lecture"]
        assert slide_title(at) == f"{number} / {len(deck.slides)} · {slide.title}"
        assert not slide.line or slide.line in [text.value for text in at.text]
        assert not link_notices(at), (number, link_notices(at))  # every value of the slide fits its checkpoint
        assert at.get("plotly_chart") and not at.error, (number, [error.value for error in at.error])
        link, _ = parse_query(address_bar(at))
        assert link["deck"] == SHIPPED and link.get("slide", 1) == number
        assert {name: at.session_state[name] for name in slide.state} == slide.state
        if number < len(deck.slides):
            at = ok(at.button(key="slide-next").click().run())
    assert at.button(key="slide-next").disabled
    at = ok(at.button(key="slide-back").click().run())
    assert slide_title(at).startswith(f"{len(deck.slides) - 1} / ")


def test_a_link_lands_on_its_slide_and_keeps_what_the_lecturer_typed(app):
    deck = read_deck(SHIPPED)
    at = ok(app(deck=SHIPPED, slide="2"))
    assert slide_title(at).startswith(f"2 / {len(deck.slides)} · {deck.slides[1].title}")
    at.text_input(key="text").set_value("lecture7").run()
    at = ok(at.button(key="slide-next").click().run())  # slide 3 names the same checkpoint, and its own input
    assert at.session_state["text"] == deck.slides[2].state["text"]
    at.text_input(key="text").set_value("typed42").run()
    student = ok(app(**address_bar(at)))  # the lecturer's address bar
    assert slide_title(student).startswith("3 / ")
    assert student.session_state["text"] == "typed42"
    assert student.session_state["view"] == deck.slides[2].state["view"]


def test_a_deck_that_is_not_listed_gets_a_notice_and_the_normal_page(app):
    at = ok(app(deck="../checkpoints/reverse/card"))
    assert "There is no deck" in link_notices(at)
    assert not at.session_state["lecture"]
    at = ok(app(deck=SHIPPED, slide="99"))
    assert "`slide`" in link_notices(at)
    assert slide_title(at).startswith("1 / ")


def test_the_normal_page_presents_a_deck_and_offers_this_view_as_a_deck_file(app):
    at = ok(app(checkpoint="reverse", view="masks", pad_src="2"))
    at = ok(at.button(key="deck-add").click().run())
    labels = [button.proto.label for button in at.get("download_button")]
    assert labels == ["Download as one HTML file", "Download the deck (1 slides)"]  # the chosen deck packed, and this
    slide = at.session_state["collected_slides"][0]  # the file offered: deck_toml of these (round trip: test_deck)
    assert slide.title == "Masks · reverse"
    assert {name: slide.state[name] for name in ("checkpoint", "view", "pad_src")} == {
        "checkpoint": "reverse", "view": "masks", "pad_src": 2}
    at = ok(at.button(key="deck-present").click().run())
    assert at.session_state["lecture"] and at.session_state["deck"] == SHIPPED
    assert slide_title(at).startswith("1 / ")


class _Session(dict):
    """Streamlit's session state as ui.state uses it: items and attributes alike."""
    __getattr__ = dict.__getitem__
    __setattr__ = dict.__setitem__


def test_keys_pressed_faster_than_the_browser_draws_never_bring_back_a_slide_passed_on_the_way(monkeypatch):
    """6 → 5 → 4 → 3 pressed quickly: the callback for 3 runs while the browser still shows 6's checkpoint, and the
    browser's next request carries slide 4's, which it drew meanwhile. Slide 3's checkpoint stays (a run on 4's
    checkpoint under 3's title and input mixed two slides)."""
    import streamlit

    from ui.state import hold_against_stale, set_by_callback

    session = _Session(checkpoint="eng-fra", text="She is reading a book.", runs=5)
    monkeypatch.setattr(streamlit, "session_state", session)

    def run(sent_by_browser: dict, callback: dict | None = None) -> None:
        session.update(sent_by_browser)  # the widgets' values as the request carries them, then the callback
        if callback is not None:
            set_by_callback(callback)
        hold_against_stale()

    run({}, {"checkpoint": "dates", "text": "Wednesday, March 3, 2021"})  # slide 4
    run({"checkpoint": "eng-fra", "text": "She is reading a book."}, {"checkpoint": "reverse", "text": "attention42"})
    run({"checkpoint": "dates", "text": "Wednesday, March 3, 2021"})  # slide 4's widgets, drawn in the meantime
    assert (session["checkpoint"], session["text"]) == ("reverse", "attention42")
    run({"checkpoint": "reverse", "text": "attention42"})  # the browser has drawn slide 3: nothing is held any more
    assert not session["held"]
    run({"checkpoint": "dates"})  # now a choice of the user's
    assert session["checkpoint"] == "dates"
