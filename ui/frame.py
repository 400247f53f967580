"""The page frame: the view picker, the lecture switch, the sidebar (ui.sidebar) and the chosen view (ui.views),
drawn for every session by app.py."""
from __future__ import annotations

import string

import streamlit as st

from . import passes, screen, shared, state, turns, widgets
from .deck import presenter, warm
from .memory import ServerBusy
from .sidebar import build_page
from .views import BY_KEY, VIEWS
from .widgets import folded

# Streamlit sizes its text in rem: a larger root font enlarges every label, so the back row can read them. The rest
# fits a 1280 x 720 projector, where the figure has the window's height (regions(): all else in a column beside it):
# little padding above the page, the view list and the lecture switch drawn at 80 %, less space between elements, and
# the controls at 72 % (they are the lecturer's, not the room's); the folded warnings and link notices one line.
# Streamlit's header (the sidebar's » and the menu's ⋮) is a strip over the side column only, SIDE_TOP_PX high, and
# the side column starts under it: nothing of ours lies under the header, whose toolbar would take a click meant for
# the view list or the input; the figure's column starts at the top. The output takes two lines at most, ending in
# "…" where there is more (shown while the pointer is on it), the warnings two lines, scrolling beyond (a 64-token
# translation and three warnings about it would push the controls down).
LECTURE_CSS = string.Template("""<style>
html { font-size: 22px; }
[data-testid="stMainBlockContainer"] { padding: 0.1rem 1.5rem 2rem; }
.st-key-view, .st-key-lecture { zoom: 0.8; }
[data-testid="stMainBlockContainer"] [data-testid="stVerticalBlock"] { gap: 0.3rem; }
header[data-testid="stHeader"] { background: transparent; height: ${top}px; min-height: 0;
  width: calc(1.5rem + (100vw - 3rem - 1rem) * $side); right: auto; pointer-events: none; }
header[data-testid="stHeader"] [data-testid="stToolbar"] { height: ${top}px; pointer-events: none; }
header[data-testid="stHeader"] [data-testid="stToolbar"] > div { height: ${top}px; align-items: center; }
header[data-testid="stHeader"] button, header[data-testid="stHeader"] a { pointer-events: auto; }
.st-key-side { padding-top: ${top}px; }
[data-testid="stButtonGroup"] button { padding-left: 0.45rem; padding-right: 0.45rem; min-height: 2rem; }
[class*="st-key-controls-"] { zoom: 0.72; column-gap: 0.5rem; }
[class*="st-key-controls-"] [data-testid="stButtonGroup"],
[class*="st-key-controls-"] [data-testid="stButtonGroup"] > div { flex-wrap: wrap; }
[data-testid="stAlertContainer"] { padding: 0.4rem 0.8rem; }
[data-testid="stAlertContainer"] p { font-size: 0.85rem; max-height: 3.2em; overflow-y: auto; }
.st-key-warnings summary, .st-key-link-notices summary { padding: 0.25rem 0.6rem; font-size: 0.8rem; }
.st-key-warnings summary p, .st-key-link-notices summary p { white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; }
.st-key-warnings summary > span, .st-key-link-notices summary > span { min-width: 0; }
.st-key-warnings summary > span > div, .st-key-link-notices summary > span > div { min-width: 0; }
.st-key-headline [data-testid="stText"] { line-height: 1.3; }
.st-key-headline [data-testid="stText"] > span { display: -webkit-box; -webkit-box-orient: vertical;
  -webkit-line-clamp: 2; overflow: hidden; }
.st-key-headline [data-testid="stText"]:hover > span { display: block; max-height: 6.5em; overflow-y: auto; }
</style>""").substitute(top=screen.SIDE_TOP_PX, side=f"{1 - screen.STAGE:.3f}")


# Fourteen views are wider than one row of buttons on a laptop: the picker wraps onto a second row instead of hiding
# the last ones.
PICKER_CSS = """<style>
.st-key-view [data-testid="stButtonGroup"], .st-key-view [data-testid="stButtonGroup"] > div { flex-wrap: wrap; }
</style>"""


def draw_page() -> None:
    widgets.write_charts_with_the_json_engine()
    turns.arrived()
    with passes.MEMORY.rerun(), shared.page():  # the page holds its passes' results until it is drawn
        draw_frame()


def regions(beside: bool) -> tuple:
    """Where the page draws: (the top row: view picker, input, lecture switch; what goes under it: notices, a slide's
    line; the sidebar's page-wide messages and the output; the view). beside (lecture mode): a projector's height is
    the figure's, all but the view stand in a column beside it (screen.STAGE of the width is the view's)."""
    if beside:
        side, stage = st.columns([1 - screen.STAGE, screen.STAGE], gap="small")
        side = side.container(key="side")  # under Streamlit's header strip (LECTURE_CSS)
        return side, side, side, stage.container(key="stage")
    top = st.container(horizontal=True, horizontal_alignment="distribute", vertical_alignment="center")
    rest = st.container()
    return top, rest, rest, rest


def draw_frame() -> None:
    state.restore()
    state.hold_against_stale()
    deck = presenter.follow_deck()
    state.current_attention_names(passes.attention_name)
    lecture = st.session_state.lecture
    st.set_page_config(page_title="Attention Atlas", page_icon="🔭", layout="wide",
                       initial_sidebar_state="collapsed" if lecture else "auto")
    st.sidebar.title("Attention Atlas")
    labels = {view.key: view.label for view in VIEWS}
    top, under, side, stage = regions(lecture)
    if lecture:  # fourteen views do not fit one row of buttons at 1280 pixels in large text: a compact list instead
        key = state.draw(top.selectbox, "View", "view", list(BY_KEY), format_func=labels.get,
                         label_visibility="collapsed", width=260)
    else:
        st.html(PICKER_CSS)
        key = state.draw(top.segmented_control, "View", "view", list(BY_KEY), format_func=labels.get, required=True,
                         label_visibility="collapsed")
    headline = top.container(key="headline")  # lecture mode: the input box and the output, beside the figure
    if deck is not None:  # its buttons and title in the top row, its line under it
        presenter.draw_slide(deck, top, under)
    top.toggle("Lecture mode", key="lecture", persist_state="session", help="Bigger text and figures, fewer controls.")
    if st.session_state.lecture:
        st.html(LECTURE_CSS)
    notices = under.container()
    space = screen.figure_space(lecture)
    try:
        with side:
            page = build_page(headline, space)
        view = BY_KEY[key]
        if page is not None and view.missing(page):
            stage.info(view.missing(page))
        elif page is not None and (page.analysis is not None or not view.needs_input):
            try:
                with stage, widgets.controls_beside(side if lecture else None):
                    view.render(page)
            except (passes.OutOfMemory, ServerBusy) as error:  # any pass of the view: a message instead
                stage.error(str(error))
            st.sidebar.caption("The address bar holds this exact view: copy it to share what you see.")
            if deck is None:  # in lecture mode too: the sidebar (») holds the decks a lecturer presents from
                presenter.deck_tools(view.label)
    except passes.Cancelled:  # the session closed while its translation waited: no one to draw for, nothing to log
        pass
    except (passes.CheckpointError, passes.OutOfMemory, ServerBusy) as error:  # a file that failed in use (a
        st.error(str(error))  # tokenizer's panic), the sidebar's pass out of memory or refused it: a message, no hang
    finally:
        messages = st.session_state.url_notices  # until the user acts (state.restore)
        if messages and lecture:  # one line, the rest on demand: a projector has no height to spare
            with notices.expander(folded(messages, "notices"), icon="🔗", key="link-notices"):
                for message in messages:
                    st.warning(message, icon="🔗")
        else:
            for message in messages:
                notices.warning(message, icon="🔗")
        state.sync()
    if deck is not None:  # the deck's other slides drawn in the background, once this page is
        warm.deck(st.session_state.deck, deck, st.session_state.slide)
