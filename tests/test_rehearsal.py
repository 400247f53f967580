"""A lecture rehearsed as a person gives it: `streamlit run app.py` on the shipped checkpoints in headless Chromium,
driven by the mouse (a click at the centre of what a person clicks) and the keyboard (a key every 150 ms, a
lecturer's pace), never by editing the link. After each action the page is left to go idle, and then what it shows
must belong together: the slide's number and title, the input, the output and the figures' titles are those of one
state (the same slide opened fresh from its own link shows the same).

$ATLAS_REHEARSAL_ROOT serves another checkout's app (to watch these checks fail on an older one); $ATLAS_SCREENSHOTS
keeps a screenshot of every step.
"""
from __future__ import annotations

import os
import time
import urllib.parse
from pathlib import Path

import pytest
import test_browser
from test_browser import screenshot, screenshots

from benchmarks.chromium import CHROMIUM, RUN_S, wait_for_rerun
from deploy.server import ROOT, ServerError, streamlit_server
from ui.deck import read_deck
from ui.views import BY_KEY

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                               "(apt-get install chromium)")]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")

PROJECTOR = {"width": 1280, "height": 720}
LAPTOP = {"width": 1400, "height": 900}
KEY_GAP_S = 0.15  # a lecturer's pace on a clicker
QUIET_S = 2.0  # idle: no status widget for this long (a key press's rerun may start late on a busy machine)
DECK = "attention-step-by-step"
browser = test_browser.browser  # the fixture: one Chromium for the module

# Everything a person reads to know which state the page is in; one reading, used by every check.
SHOWN_JS = """() => {
  const text = (selector) => Array.from(document.querySelectorAll(selector), el => el.textContent.trim());
  const input = document.querySelector('.st-key-text input');
  const view = document.querySelector('.st-key-view input');
  return {
    slide: text('.st-key-slide-title [data-testid="stText"]').join(' '),
    view: view ? view.value : text('.st-key-view [aria-checked="true"], .st-key-view [aria-pressed="true"]').join(' '),
    input: input ? input.value : null,
    output: text('.st-key-headline [data-testid="stText"]').join(' '),
    figures: text('[data-testid="stMain"] .js-plotly-plot .gtitle'),
    errors: text('[data-testid="stException"]'),
    stale: document.querySelectorAll('[data-stale="true"]').length,
  };
}"""
# Whether the centre of an element's box is the element itself (or inside it), and not something lying over it.
CENTRE_JS = """(el) => {
  const box = el.getBoundingClientRect();
  const x = box.left + box.width / 2, y = box.top + box.height / 2;
  const hit = document.elementFromPoint(x, y);
  return {x, y, reached: el.contains(hit),
          hit: hit ? `${hit.tagName} ${hit.getAttribute('data-testid') || ''} ${hit.className}`.slice(0, 100) : null};
}"""

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = Path(os.environ.get("ATLAS_REHEARSAL_ROOT") or ROOT)
    log = tmp_path_factory.mktemp("rehearsal") / "streamlit.log"
    try:
        with streamlit_server(ROOT / "checkpoints", log, root=root) as (url, _):
            yield url
    except ServerError as error:
        pytest.fail(str(error))


def open_page(browser, url: str, viewport: dict):
    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(RUN_S * 1000)
    page.goto(url)
    page.wait_for_selector('[data-testid="stMainBlockContainer"][data-measured-width]')
    idle(page)
    return page


def idle(page) -> None:
    """Wait (bounded) until the app has shown no status widget for QUIET_S: every rerun a key or click started,
    and the ones the page's own measuring starts after it, have ended."""
    deadline = time.monotonic() + RUN_S
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < QUIET_S:
        if page.locator('[data-testid="stStatusWidget"], [data-testid="stSkeleton"]').count():
            quiet_since = time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the app was still running after {RUN_S} s")
        time.sleep(0.1)
    wait_for_rerun(page, settle_s=0.5, start_s=0)


def shown(page) -> dict:
    return page.evaluate(SHOWN_JS)


def query(page) -> dict[str, str]:
    return {name: values[0] for name, values in urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query).items()}


def centre(page, selector: str) -> dict:
    """Where the centre of `selector` (a playwright selector) is, and whether a click there reaches it."""
    control = page.locator(selector).first
    control.wait_for()
    control.scroll_into_view_if_needed()
    return control.evaluate(CENTRE_JS)


def click_centre(page, selector: str) -> None:
    """Click the centre of `selector`'s box with the mouse, as a person does; fails if something else lies there
    (Streamlit's header, an icon), since a person's click would land on that instead."""
    point = centre(page, selector)
    assert point["reached"], f"the centre of {selector} is covered by {point['hit']}"
    page.mouse.click(point["x"], point["y"])


def pick(page, selectbox: str, option: str) -> None:
    """Open a selectbox with the mouse and click the centre of one of its options."""
    click_centre(page, f'{selectbox} [role="combobox"]')
    choice = page.locator('[role="option"]', has_text=option).first
    choice.wait_for()
    box = choice.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)


def type_input(page, text: str) -> None:
    """Click into the input box (which must then have the focus), replace what is there with `text` and press Enter,
    as a lecturer does."""
    click_centre(page, ".st-key-text input")
    assert page.evaluate("document.activeElement === document.querySelector('.st-key-text input')")
    page.keyboard.press("Control+A")
    page.keyboard.type(text)
    page.keyboard.press("Enter")
    idle(page)


def press(page, key: str, times: int) -> None:
    for _ in range(times):
        page.keyboard.press(key)
        time.sleep(KEY_GAP_S)


@pytest.mark.parametrize("viewport", [PROJECTOR, LAPTOP], ids=["lecture", "laptop"])
def test_every_control_of_the_attention_view_takes_the_mouse(server, browser, viewport):
    lecture = viewport is PROJECTOR
    page = open_page(browser, f"{server}?checkpoint=eng-fra" + ("&lecture=1" if lecture else ""), viewport)
    folder = screenshots()
    try:
        assert not shown(page)["errors"]
        if not lecture:
            box = page.locator('.st-key-text input').bounding_box()
            assert box and box["y"] + box["height"] <= viewport["height"], "the input box is below the first screen"
        type_input(page, "The children are playing in the garden.")
        assert query(page)["text"] == "The children are playing in the garden."
        assert shown(page)["input"] == "The children are playing in the garden."
        click_centre(page, f'.st-key-layer button:has(:text-is("{"L1" if lecture else "1"}"))')
        idle(page)
        click_centre(page, f'.st-key-head button:has(:text-is("{"H2" if lecture else "2"}"))')
        idle(page)
        state = shown(page)
        assert (query(page)["layer"], query(page)["head"]) == ("1", "2")
        assert any("layer 1" in title and "head 2" in title for title in state["figures"]), state["figures"]
        screenshot(page, folder, f"rehearsal-attention-{'lecture' if lecture else 'laptop'}")
        if lecture:
            pick(page, ".st-key-view", BY_KEY["masks"].label)
        else:
            click_centre(page, f'.st-key-view button:has-text("{BY_KEY["masks"].label}")')
        idle(page)
        assert query(page)["view"] == "masks"
        assert not shown(page)["errors"]
        screenshot(page, folder, f"rehearsal-masks-{'lecture' if lecture else 'laptop'}")
    finally:
        page.close()


def test_lecture_mode_keeps_our_controls_clear_of_streamlit_s_header(server, browser):
    text = urllib.parse.quote("The xylophonist zigzagged through Qwertyville.")  # two words it never saw: a warning
    page = open_page(browser, f"{server}?checkpoint=eng-fra&lecture=1&text={text}", PROJECTOR)
    try:
        warning = page.locator(".st-key-warnings summary").bounding_box()
        assert warning["height"] <= 70, "the folded warning takes more than one line"  # one: 53 px, four: 135
        header = page.locator('header[data-testid="stHeader"]').bounding_box()
        for selector in (".st-key-view", ".st-key-text input", ".st-key-lecture", ".st-key-kind", ".st-key-layer"):
            box = page.locator(selector).first.bounding_box()
            assert box["y"] >= header["y"] + header["height"] or box["x"] >= header["x"] + header["width"], selector
            assert centre(page, selector)["reached"], selector
        click_centre(page, '[data-testid="stExpandSidebarButton"]')  # the sidebar: decks and the download format
        page.locator('[data-testid="stSidebar"] [aria-expanded="true"]').first.wait_for()
        sidebar = page.locator('[data-testid="stSidebar"]')
        assert sidebar.get_by_text("Decks").count() and sidebar.get_by_text("Figure download format").count()
    finally:
        page.close()


def fresh(browser, server: str, number: int) -> dict:
    """What slide `number` shows opened from its own link (?deck=…&slide=…)."""
    page = open_page(browser, f"{server}?deck={DECK}&slide={number}", PROJECTOR)
    try:
        page.wait_for_selector(".st-key-slide-title")
        return shown(page)
    finally:
        page.close()


def assert_on_slide(page, browser, server: str, number: int) -> None:
    deck = read_deck(DECK)
    state = shown(page)
    assert state["slide"] == f"{number} / {len(deck.slides)} · {deck.slides[number - 1].title}", state
    assert query(page).get("slide", "1") == str(number)
    assert not state["errors"] and not state["stale"], state
    expected = fresh(browser, server, number)
    for part in ("view", "input", "output", "figures"):
        assert state[part] == expected[part], (number, part, state[part], expected[part])


def test_the_deck_walked_at_a_lecturer_s_pace_loses_no_key_and_mixes_no_slides(server, browser):
    page = open_page(browser, f"{server}?deck={DECK}", PROJECTOR)
    folder = screenshots()
    try:
        page.wait_for_selector(".st-key-slide-title")
        press(page, "PageDown", 5)
        idle(page)
        screenshot(page, folder, "rehearsal-deck-6")
        assert_on_slide(page, browser, server, 6)
        press(page, "PageUp", 3)
        idle(page)
        screenshot(page, folder, "rehearsal-deck-3")
        assert_on_slide(page, browser, server, 3)
        for _ in range(4):  # a burst, faster than any rerun: every press lands while the last one is drawing
            page.keyboard.press("PageDown")
        idle(page)
        assert_on_slide(page, browser, server, 7)
    finally:
        page.close()


def test_present_opens_the_first_slide_on_its_own_checkpoint_and_text(server, browser):
    page = open_page(browser, f"{server}?checkpoint=eng-fra", LAPTOP)
    try:
        click_centre(page, '[data-testid="stSidebar"] summary:has-text("Decks")')
        click_centre(page, ".st-key-deck-present button")
        page.wait_for_selector(".st-key-slide-title")
        idle(page)
        assert_on_slide(page, browser, server, 1)
    finally:
        page.close()


def test_a_checkpoint_switch_and_back_keeps_the_typed_sentence(server, browser):
    page = open_page(browser, f"{server}?checkpoint=eng-fra", LAPTOP)
    try:
        type_input(page, "My neighbour painted his fence green.")
        for name in ("reverse", "eng-fra"):
            pick(page, ".st-key-checkpoint", name)
            idle(page)
            assert query(page)["checkpoint"] == name
            box = page.locator('.st-key-text input').bounding_box()
            assert box["y"] + box["height"] <= LAPTOP["height"], f"the input box is below the first screen on {name}"
        assert shown(page)["input"] == "My neighbour painted his fence green."
    finally:
        page.close()
