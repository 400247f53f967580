"""Presenting a deck (ui.deck.parse): `?deck=NAME&slide=N` opens it in lecture mode on slide N, PageDown / PageUp
(what presentation clickers send) and the ↓ / ↑ keys move between slides (← and → stay the Decoding view's steps), and
the address bar keeps the slide, so a student who opens the link lands where the lecturer is. In the normal page, the
sidebar presents a deck and collects views into a deck file to download (nothing is written on the server)."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from .. import passes
from ..literal_text import plain
from ..shared import KEPT_FOR_S, expiring
from ..state import notice, parse_query, set_by_callback, settle, shown, url_params
from ..views import BY_KEY
from .live import ORT_DIST
from .packing import pack_in_process
from .parse import MAX_DECK_BYTES, Deck, DeckError, Slide, deck_names, deck_toml, decks_dir, parse_deck, slide_state

# The slide's buttons and title at 80 % in the top row, as the view list (their keys in their tooltips, so that the
# input keeps its room), its line large under the top row.
SLIDE_CSS = """<style>
.st-key-slide-bar { zoom: 0.8; }
.st-key-slide-title [data-testid="stText"] { font-weight: 700; }
.st-key-slide-line [data-testid="stText"] { font-size: 1.25rem; font-weight: 600; line-height: 1.25; }
.st-key-slide-keys { display: none; }
</style>"""
# The slide keys, counted in the browser: each press moves the slide the browser aims at by one and sends that number
# with the press's sequence number. A press made while the page still draws the last slide is never lost: the server
# may run only the last of several quick presses, but its target counts them all (five PageDowns are five slides).
# Until the server has answered every press (its `seq`), the browser keeps counting from its own target; then it
# follows the server's slide (a button, a link). Keys typed into a field (an input, a list) are the field's.
SLIDE_KEYS_JS = """
const STEPS = { PageDown: 1, ArrowDown: 1, PageUp: -1, ArrowUp: -1 };
// One listener for the page, however often the slide is drawn again: it reads the latest drawing's data.
const keys = window.__atlasSlideKeys || (window.__atlasSlideKeys = { target: null, seq: 0, latest: null });
if (!keys.listening) {
  keys.listening = true;
  document.addEventListener('keydown', (event) => {
    const step = STEPS[event.key];
    if (!step || !keys.latest || event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    const field = event.target.closest && event.target.closest(
      'input, textarea, select, [contenteditable="true"], [role="listbox"], [role="combobox"], [role="slider"]');
    if (field) return;
    event.preventDefault();
    const { setStateValue, data } = keys.latest;
    const target = Math.min(Math.max(keys.target + step, 1), data.count);
    if (target === keys.target) return;
    keys.target = target;
    keys.seq += 1;
    setStateValue('press', { target, seq: keys.seq });
  }, true);
}
export default function(component) {
  const { data } = component;
  if (keys.target === null || data.seq >= keys.seq) { keys.target = data.slide; keys.seq = data.seq; }
  keys.latest = component;
  return () => { if (keys.latest === component) keys.latest = null; };
}
"""
_slide_keys = st.components.v2.component("atlas_slide_keys", js=SLIDE_KEYS_JS)
COLLECTED_TITLE = "My lecture"  # the downloaded deck's title, for the lecturer to change


def read_deck(name: str, root: Path | None = None) -> Deck:
    """The deck `name`, which must be one of deck_names(): the name is looked up, never joined into a path."""
    root = root or decks_dir()
    listed = {found: found for found in deck_names(root)}
    if name not in listed:
        raise DeckError(f"There is no deck `{shown(name)}` (decks: {', '.join(listed) or 'none'}).")
    path = root / f"{listed[name]}.toml"
    try:
        data = passes.read_under_policy(path, root, MAX_DECK_BYTES)
    except passes.CheckpointError as error:  # named by its file name: the server's folders are not the room's business
        raise DeckError(f"The deck `{name}` cannot be read: {str(error).replace(str(path), path.name)}") from None
    deck = parsed_deck(data, name)
    if isinstance(deck, str):
        raise DeckError(deck)
    return deck


@expiring(KEPT_FOR_S, max_entries=64)
def parsed_deck(data: bytes, name: str) -> Deck | str:
    """parse_deck for this app's views, once per file content: every session that shows the deck, on every rerun,
    shares one parse (a Deck is read-only by contract), and two that ask at once wait for the same one. A refused
    file is kept as its message, refused again at no cost."""
    try:
        return parse_deck(data, BY_KEY, name)
    except DeckError as error:
        return str(error)


def follow_deck() -> Deck | None:
    """The deck the address bar names, opened on its slide the first time a session sees it, or None (with a notice
    when the deck cannot be read). A link the app wrote holds the whole view (its checkpoint and view among it), so
    it opens as it was left; a link that names only the deck and slide opens the slide as the deck has it."""
    name = st.session_state.get("deck")
    if name is None:
        st.session_state.pop("deck_open", None)
        return None
    try:
        deck = read_deck(name)
    except DeckError as error:
        notice(str(error))
        st.session_state.deck = None
        return None
    number = settle("slide", range(1, len(deck.slides) + 1))
    if st.session_state.get("deck_open") != name:  # opened by a link
        st.session_state.deck_open = name
        from_link = st.session_state.url_pending
        if not {"checkpoint", "view"} <= from_link:
            for key, value in deck.slides[number - 1].state.items():
                if key not in from_link:
                    st.session_state[key] = value
                    from_link.add(key)
        if "lecture" not in from_link:
            st.session_state.lecture = True
    return deck


def show_slide(deck: Deck, name: str, number: int) -> None:
    """Move to slide `number` (a button's or a key's callback, before the widgets are drawn)."""
    state = slide_state(deck.slides[number - 1], st.session_state)
    set_by_callback({**state, "deck": name, "slide": number, "lecture": True})
    st.session_state.deck_open = name
    st.session_state.url_pending |= set(deck.slides[number - 1].state)  # a value the checkpoint lacks gets a notice


def on_slide_key(deck: Deck, name: str) -> None:
    """A slide key pressed in the browser (SLIDE_KEYS_JS): move to the slide it counted to."""
    press = (st.session_state.get("slide-keys") or {}).get("press") or {}
    target, seq = press.get("target"), press.get("seq")
    if isinstance(target, int) and isinstance(seq, int) and seq > st.session_state.get("slide_key_seq", 0):
        st.session_state.slide_key_seq = seq
        show_slide(deck, name, min(max(target, 1), len(deck.slides)))


def step_slide(deck: Deck, name: str, step: int) -> None:
    """◀ or ▶: one slide back or on from the one the session is on now (not the one drawn when the button was)."""
    show_slide(deck, name, min(max(st.session_state.slide + step, 1), len(deck.slides)))


def draw_slide(deck: Deck, top, under) -> None:
    """The slide's buttons, number and title in the page's top row (`top`), its line large under it (`under`), its
    note in the sidebar: on a projector the figure still starts high."""
    name, number, count = st.session_state.deck, st.session_state.slide, len(deck.slides)
    slide = deck.slides[number - 1]
    st.html(SLIDE_CSS)
    row = top.container(horizontal=True, vertical_alignment="center", gap="small", key="slide-bar", width="content")
    for key, label, step, keys in (("slide-back", "◀", -1, "PageUp or ↑"), ("slide-next", "▶", 1, "PageDown or ↓")):
        row.button(label, key=key, on_click=step_slide, args=(deck, name, step), type="tertiary",
                   disabled=not 1 <= number + step <= count,
                   help=f"{'Previous' if step < 0 else 'Next'} slide (keys {keys})")
    answered = st.session_state.get("slide_key_seq", 0)  # the last key press this session has moved for
    _slide_keys(key="slide-keys", data={"slide": number, "count": count, "seq": answered},
                on_press_change=lambda: on_slide_key(deck, name), height=0)
    row.container(key="slide-title").text(f"{number} / {count} · {slide.title}")
    if slide.line:
        under.container(key="slide-line").text(slide.line)
    st.sidebar.subheader(plain(deck.title))  # a deck's text is shown as typed: no link, no remote image
    if slide.note:
        st.sidebar.info("  \n".join(map(plain, slide.note.splitlines())), icon="🗒️")
    st.sidebar.button("Close the deck", on_click=close_deck)


def close_deck() -> None:
    for key in ("deck", "deck_open"):
        st.session_state.pop(key, None)
    st.session_state.slide = 1


def present(name: str) -> None:
    try:
        deck = read_deck(name)
    except DeckError as error:
        notice(str(error))
        return
    show_slide(deck, name, 1)


@expiring(KEPT_FOR_S, max_entries=2)
def packed(name: str, content: str, live: bool = False) -> bytes:
    """The deck `name` as one HTML file (ui.deck.packing; `live`: ui.deck.live's), once per file content (`content`,
    as deck_toml writes it)."""
    return pack_in_process(name, live)


def collect_view(title: str) -> None:
    """Add the current view, as a link would hold it, to the session's deck."""
    state, _ = parse_query(url_params(st.session_state))
    st.session_state.setdefault("collected_slides", []).append(Slide(title, "", "", state))


def deck_tools(view_label: str) -> None:
    """The sidebar's decks: present one of the decks folder's, or collect views into a deck file to download."""
    with st.sidebar.expander("Decks"):
        names = deck_names()
        if names:
            chosen = st.selectbox("Deck", names, key="deck_choice")
            st.button("Present", key="deck-present", on_click=present, args=(chosen,),
                      help="Open the deck in lecture mode; PageDown and PageUp (or ↓ and ↑) move between its slides.")
            runtime = ORT_DIST.is_dir()  # ONNX Runtime Web, which a live pack inlines (npm ci)
            live = st.checkbox("Live: students type their own sentence", key="deck-pack-live", disabled=not runtime,
                               help="Each Attention slide gets an input box: its checkpoint runs in the browser "
                                    "(offline, greedy decoding) and redraws the figure. The file is larger (up to "
                                    "40 MB)." if runtime else "This server lacks ONNX Runtime Web, which a live "
                                    "pack inlines: `npm ci` in the app's folder installs it.") and runtime
            st.download_button("Download as one HTML file",
                               lambda: packed(chosen, deck_toml(read_deck(chosen)), live),
                               file_name=f"{chosen}{'-live' if live else ''}.html", mime="text/html",
                               on_click="ignore", key="deck-pack",
                               help="Every slide as the app draws it, in one file that works offline (no server, no "
                                    "network): PageDown and PageUp move, N shows the notes. The first download of a "
                                    "deck takes a few minutes: each slide is drawn.")
        title = f"{view_label} · {st.session_state.get('checkpoint', '')}"
        st.button("Add this view to the deck", key="deck-add", on_click=collect_view, args=(title,))
        collected = st.session_state.get("collected_slides", [])
        if collected:
            st.download_button(f"Download the deck ({len(collected)} slides)",
                               deck_toml(Deck(COLLECTED_TITLE, collected)), file_name="my-lecture.toml",
                               mime="application/toml", on_click="ignore",
                               help="Put it in the decks folder and open it with ?deck=my-lecture.")
