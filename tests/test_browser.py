"""The app as a user meets it: `streamlit run app.py` in a real server, driven by headless Chromium.

test_every_view_in_a_browser clicks through every view on the tiny test checkpoint; its screenshots land in pytest's
tmp_path, and also in $ATLAS_SCREENSHOTS when that is set (ATLAS_BROWSER_CHECKPOINTS: another checkpoints folder,
the app opening on its first; ATLAS_BROWSER_INPUT: the input typed, default attention42). The readability tests run
on the shipped checkpoints folder and save one screenshot per view, input and mode in $ATLAS_SCREENSHOTS only:
    ATLAS_SCREENSHOTS=/tmp/shots python -m pytest tests/test_browser.py -k "labelled or shipped"
The README's screenshots are the same server and browser (deploy.server, benchmarks.chromium) opened on links to
eng-fra: at 1400 x 1150 `?checkpoint=eng-fra&view=attention&kind=encoder.self_attn&text=` MEDIUM (below), at 1400 x 1000
`view=decoding&step=2&text=She is reading a book.`, and at 1600 x 1250 `view=model&kind=encoder.self_attn&text=` SHORT.
"""
from __future__ import annotations

import contextlib
import os
import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from figure_browser import MEASURE_JS

from benchmarks.chromium import CHROMIUM, RUN_S, launch_chromium, wait_for_rerun
from deploy.server import ROOT, ServerError, streamlit_server
from helpers import checkpoints_folder
from ui.analysis import KIND_LABELS
from ui.screen import LECTURE_TOP_PX
from ui.views import VIEWS
from ui.warnings import worded

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                               "(apt-get install chromium)")]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    """The URL of `streamlit run app.py` on a folder with the tiny checkpoint (and one still training)."""
    checkpoints = os.environ.get("ATLAS_BROWSER_CHECKPOINTS") or checkpoints_folder(
        tiny_checkpoint, tmp_path_factory.mktemp("browser-checkpoints"))
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    try:
        with streamlit_server(checkpoints, log) as (url, _):
            yield url
    except ServerError as error:
        pytest.fail(str(error))


def link_text(url: str) -> str | None:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("text", [None])[0]


# Lists the figures Plotly.js draws in full more than once in the same chart (plotly_beforeplot starts a full drawing;
# a chart's figure is known by its datarevision, which ui.shared.once sets). A chart is watched from Plotly's first
# call on it, so its figure then counts as drawn; Streamlit may later reuse the chart for another figure. Each chart
# also counts the Plotly.react calls (plotly_react) made with each of its figures: its drawing, then Streamlit's copy.
COUNT_REDRAWS = """window.__redrawn = [];
new MutationObserver(() => document.querySelectorAll('.js-plotly-plot').forEach(chart => {
    if (chart.__drawn || !chart.on) return;
    chart.__drawn = new Set([(chart.layout || {}).datarevision]);
    chart.__reacts = {};
    chart.on('plotly_beforeplot', () => {
        const layout = chart.layout || {};
        if (chart.__drawn.has(layout.datarevision)) {
            window.__redrawn.push(`${(layout.title || {}).text}, datarevision ${layout.datarevision}`);
        }
        chart.__drawn.add(layout.datarevision);
    });
    chart.on('plotly_react', () => {
        const revision = (chart.layout || {}).datarevision;
        chart.__reacts[revision] = (chart.__reacts[revision] || 0) + 1;
    });
})).observe(document, {childList: true, subtree: true});"""
# True once every chart on the page has had Streamlit's copy of the figure it shows (a second Plotly.react with it).
COPIES_ARRIVED = """() => [...document.querySelectorAll('.js-plotly-plot')].every(
    chart => chart.__reacts && chart.__reacts[(chart.layout || {}).datarevision] >= 2)"""


def test_every_view_in_a_browser(server, tmp_path):
    folders = [tmp_path] + ([Path(os.environ["ATLAS_SCREENSHOTS"])] if os.environ.get("ATLAS_SCREENSHOTS") else [])
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    problems = []
    with sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(RUN_S * 1000)
            page.on("console", lambda message: message.type == "error" and problems.append(message.text))
            page.on("pageerror", lambda error: problems.append(str(error)))
            # Streamlit hands each chart it has drawn to Plotly.react once more, as a copy: the figures are built so
            # that this redraws nothing (viz.theme.inline_template, ui.shared.once's datarevision).
            page.add_init_script(COUNT_REDRAWS)
            page.goto(server)
            page.wait_for_selector(".js-plotly-plot")
            wait_for_rerun(page)

            box = page.get_by_label("Input", exact=True).and_(page.get_by_role("textbox"))
            box.fill("<img src=x onerror=window.__xss=1>")
            box.press("Enter")
            page.wait_for_url(lambda url: "onerror" in url)
            wait_for_rerun(page)
            assert page.evaluate("window.__xss") is None  # the input was shown as text, never run as HTML
            assert page.locator(".js-plotly-plot").count()

            demo = os.environ.get("ATLAS_BROWSER_INPUT", "attention42")
            box.fill(demo)
            box.press("Enter")
            page.wait_for_url(lambda url: link_text(url) == demo)  # the view state is in the link
            wait_for_rerun(page)
            for view in VIEWS:
                page.get_by_role("radio", name=view.label, exact=True).click()  # a segmented control's option
                wait_for_rerun(page)
                if view.key == "ablation":  # nothing switched off yet: it asks for heads, then shows outputs
                    page.get_by_text("Pick heads", exact=False).first.wait_for()
                elif view.key == "corpus":  # nothing read yet: it asks, then draws the map of heads
                    page.get_by_role("button", name=re.compile(r"^Read \d+ inputs$")).click()
                    page.wait_for_selector(".st-key-wide-figure-head-map .js-plotly-plot")
                else:
                    page.wait_for_selector(".stPlotlyChart .js-plotly-plot")
                if view.key == "decoding":  # step forward as a lecturer would: the step's candidates follow
                    for _ in range(2):
                        page.get_by_role("button", name="Next").click()
                        wait_for_rerun(page)
                    page.get_by_text("Step 2: the", exact=False).first.wait_for()
                assert not page.locator('[data-testid="stException"]').count(), view.key
                # Streamlit's copy comes after a chart's first drawing: waited for (bounded by the page's timeout,
                # RUN_S), not a fixed time that a busy machine outlasts. Checked on the session's first views: later
                # ones can reuse another view's chart, which Streamlit may redraw at its new size first.
                if view.key in ("attention", "model"):
                    with named_case(page, f"{view.key}: Streamlit's copy of each chart"):
                        page.wait_for_function(COPIES_ARRIVED)
                    redrawn = page.evaluate("window.__redrawn")
                    assert not redrawn, f"{view.key}: drawn again in full: {redrawn}"
                for folder in folders:
                    page.screenshot(path=folder / f"{view.label.lower().replace(' ', '-')}.png")
        finally:
            browser.close()
    assert not problems, problems


def test_a_links_notice_stays_through_the_pages_own_reruns_until_the_user_acts(server, browser):
    """A page reruns by itself once the browser has measured its column (ui.screen): a notice about the link must
    still be there after it, and go once the user changes the view."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})  # not DEFAULT_PX: the probe reports a size
    try:
        page.set_default_timeout(RUN_S * 1000)
        notice = page.locator('[data-testid="stAlertContainer"]', has_text="is not available here")
        open_link(page, server, view="attention", layer="99")
        page.wait_for_function("() => document.querySelector('[data-testid=\"stMainBlockContainer\"]')"
                               ".dataset.measuredWidth")
        for _ in range(3):  # the measured size's rerun, and any after it
            wait_for_rerun(page, settle_s=1.0)
            assert notice.count() == 1 and notice.is_visible(), "the link's notice went before the user acted"
        page.get_by_text("Lecture mode", exact=True).click()
        wait_for_rerun(page)
        assert notice.count() == 0
    finally:
        page.close()


MODEL_LABELS = ("Output of ", "→")  # what names the model's own output: the output box's caption, lecture's headline


@pytest.mark.parametrize("mode", ["laptop", "lecture"])
def test_a_typed_target_never_appears_under_a_label_naming_the_models_output(server, browser, mode):
    viewport, params = MODES[mode]
    target = "qqqqqq"
    page = browser.new_page(viewport=viewport)
    try:
        page.set_default_timeout(RUN_S * 1000)
        open_link(page, server, view="attention", text="attention42", target=target, **params)
        label, shown = "", []
        for line in page.inner_text('[data-testid="stMain"]').splitlines():
            if line.startswith((*MODEL_LABELS, "Typed target")):
                label = line
            if target in line:
                shown.append((label, line))
        assert shown, "the target is not shown"
        assert not [(label, line) for label, line in shown if label.startswith(MODEL_LABELS)], shown
    finally:
        page.close()


# Inputs of the acceptance (source tokens = pieces + </s>): eng-fra at 8, 24 and 64 tokens (64 = its max_len, so the
# longest it reads whole), and reverse at 30 characters (31 tokens). Their counts are checked against the tokenizers.
SHORT = "She is reading a good book."
THIRTY = ("When the teacher opened the old wooden door, the young students quietly walked into the bright classroom "
          "and then sat down.")
MEDIUM = "When the teacher opened the wooden door, the students quietly walked into the bright classroom."
LONGEST = ("When the teacher opened the old wooden door, the students quietly walked into the bright classroom, and "
           "the children who had waited in the cold garden since the early morning sat down at their small desks to "
           "read their new books with the teacher and all of their old friends.")
# A projector's (1920 x 1080) longer sentences: 40 and 60 pieces; the second's beam output has 56 pieces, as long as a
# 26-word sentence's.
FORTY = ("When the old teacher opened the heavy wooden door, the young students quietly walked into the bright "
         "classroom and then sat down at their small desks to read books.")
SIXTY = ("When the teacher opened the old wooden door, the students quietly walked into the bright classroom, and the "
         "children who had waited in the cold garden since the early morning sat down at their small desks to read "
         "their new books with all of their friends.")
INPUTS = {"8": ("eng-fra", SHORT, 8), "24": ("eng-fra", MEDIUM, 24), "64": ("eng-fra", LONGEST, 64),
          "reverse-30": ("reverse", "attention42transformer2026abcd", 31)}
WORD_LEVEL = ("64",)  # words: whitespace-separated words (",", "." join the word before them), and </s>
# view -> (link parameters, the figures measured: (show_figure's name, or an index on the page; the axes that carry
# every source token: "xy" where queries are source tokens too; or {axis letter: "src" or "tgt"} where an axis
# carries the decoder's rows, one per decoder input piece; "lines" for the head view's two columns of text)).
# Links decode greedily, so that the decoder's rows are those of translate(text, beam_size=1).
VIEWS_MEASURED = {
    "attention": ({"kind": "encoder.self_attn"}, [(0, "xy")]),
    "model": ({"kind": "encoder.self_attn"}, [("model-view", "model")]),
    "decoding": ({"step": "5"}, [("decoding-step", "x"), ("decoding-causal", {"x": "tgt", "y": "tgt"})]),
    "compare": ({"kind": "encoder.self_attn"}, [("compare-heads", "xy")]),
    "training": ({"kind": "encoder.self_attn"}, [("training-head", "xy"), ("training-snapshots", "x")]),
    "heads": ({}, [("rollout-encoder", "xy"), ("rollout-decoder", "x")]),
    "headview": ({"kind": "encoder.self_attn"}, [("head-view", "lines")]),
}
# view -> the kinds clicked after its link, each measured again on the same page (a rerun, no new page): the
# decoder's rows, labelled "<s> → ·Elle", counted on the y axis (the left column of the head view).
THEN_KINDS = {"attention": ("decoder.cross_attn", "decoder.self_attn"), "headview": ("decoder.cross_attn",)}
SIDES = {"encoder.self_attn": {"x": "src", "y": "src"},  # key side, query side
         "decoder.cross_attn": {"x": "src", "y": "tgt"}, "decoder.self_attn": {"x": "tgt", "y": "tgt"}}
LECTURE_FONT_PX = 12  # a projector's smallest token label
# The views whose main figure lecture mode shows whole (no scroll box, every label in the window, at least
# LECTURE_FONT_PX) at up to 30 input pieces, and on a 1920 x 1080 projector up to 60: Stages, Compare and Patching
# show their panels one at a time there (panel_picker; Patching's logit lens is one of them, a column per layer where
# one per sublayer does not fit), the head view sets its list closer, Inside a head closes its rows up and shrinks
# their font to the screen's height. The Model view draws its heads as lines there, whose panels stay narrow at any
# length; the Masks with padding (a decoder axis of 39 output pieces and 3 pads) put their legend beside the panel.
# Still scrolling inside their box: the figures under the main one.
LECTURE_WHOLE_VIEWS = ("attention", "attention-stages", "compare-heads", "compare-layers", "compare-snapshots",
                       "compare-inputs", "decoding", "attribution", "positional", "headview", "patching",
                       "patching-lens", "training", "heads", "corpus", "corpus-queries-keys", "masks", "masks-padding",
                       "inside", "model")
# The views that open on a figure (heads opens on its table of every head, which lecture mode shows in full).
FIGURE_FIRST = ("attention", "model", "decoding", "compare", "training")
MODES = {"laptop": ({"width": 1400, "height": 1000}, {}), "lecture": ({"width": 1280, "height": 720}, {"lecture": "1"})}


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def shipped_checkpoints():
    from transformer import load_checkpoint

    return {name: load_checkpoint(ROOT / "checkpoints" / name) for name in ("eng-fra", "reverse")}


def screenshots() -> Path | None:
    """$ATLAS_SCREENSHOTS, made if need be; None when it is not set (a screenshot costs a few tenths of a second)."""
    if not os.environ.get("ATLAS_SCREENSHOTS"):
        return None
    folder = Path(os.environ["ATLAS_SCREENSHOTS"])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshot(page, folder: Path | None, name: str) -> None:
    if folder is not None:
        page.screenshot(path=folder / f"{name}.png")


@contextlib.contextmanager
def named_case(page, name: str) -> Iterator[None]:
    """A wait that fails inside says which case it was in and what the page showed then (the view's notices, an
    error, a spinner still turning)."""
    try:
        yield
    except Exception as error:  # playwright's TimeoutError, the app's rerun still running, a figure missing
        main = page.locator('[data-testid="stMain"]')  # the view's own notices and spinners, not the sidebar's card
        shown = " ".join((main.inner_text() if main.count() else page.inner_text("body")).split())[:1200]
        raise AssertionError(f"{name}: {type(error).__name__}: {error}; the page showed: {shown}") from error


def chosen_figure(index: int | str) -> str:
    """JavaScript for the index-th figure on the page, or the one show_figure drew under that name."""
    return (f"document.querySelectorAll('.stPlotlyChart .js-plotly-plot')[{index}]" if isinstance(index, int) else
            f"document.querySelector('.st-key-wide-figure-{index} .js-plotly-plot')")


def figure_measures(page, index: int | str) -> dict:
    """figure_browser's measurements of a figure (see chosen_figure) once Plotly has drawn it (two measurements
    alike, a moment apart), and its top on the screen."""
    chosen = chosen_figure(index)
    page.wait_for_function(f"() => {{ const gd = {chosen}; return gd && gd._fullLayout && gd._fullLayout._size; }}")
    script = MEASURE_JS.replace("document.querySelector('.js-plotly-plot')", chosen)
    result = page.evaluate(script)
    for _ in range(20):  # bounded: Plotly redraws once when Streamlit sizes its box
        time.sleep(0.2)
        again = page.evaluate(script)
        if again == result:
            break
        result = again
    result["top"] = page.evaluate(f"() => {chosen}.getBoundingClientRect().top")
    # The figure's width, the part of it its column shows (the rest scrolls sideways) and the page's content width
    # (lecture mode: the figures' column, .st-key-stage, ui.frame.regions).
    # column: the part shown, in the figure's own pixels (as MEASURE_JS's boxes).
    result["shown"] = page.evaluate(f"""() => {{ const gd = {chosen};
        const column = gd.closest('[class*="st-key-scroll-"], [class*="st-key-overflow-"]').getBoundingClientRect();
        const svg = gd.querySelector('svg.main-svg').getBoundingClientRect();
        return {{figure: gd.getBoundingClientRect().width, visible: column.width,
                 column: {{l: column.left - svg.left, r: column.right - svg.left}},
                 page: (main => main.clientWidth - parseFloat(getComputedStyle(main).paddingLeft)
                                - parseFloat(getComputedStyle(main).paddingRight))(
                           gd.closest('.st-key-stage')
                           || document.querySelector('[data-testid="stMainBlockContainer"]'))}}; }}""")
    return result


def open_link(page, url: str, **params) -> None:
    with named_case(page, urllib.parse.urlencode(params)):
        page.goto(url + "?" + urllib.parse.urlencode(params))
        page.wait_for_selector(".stPlotlyChart .js-plotly-plot")
        wait_for_rerun(page, settle_s=0.2, start_s=0)


def label_problems(name: str, result: dict, axes: str | dict, tokens: int | dict[str, int]) -> list[str]:
    """What is wrong with one figure's labels: an axis that should carry every source token carrying another count,
    colliding neighbours, text on text. axes: "x" or "xy" (see VIEWS_MEASURED), or "model" for the model view,
    which labels each shown column's bottom x axis and each shown row's first y axis; or {letter: side} with tokens
    {side: count} (see VIEWS_MEASURED)."""
    if isinstance(axes, dict):
        tokens = {letter: tokens[side] for letter, side in axes.items()}
    labelled = {letter: {axis: ticks for axis, ticks in result["ticks"].items() if axis.startswith(letter)}
                for letter in "xy"}
    problems = [f"{name}: {problem}" for problem in result["problems"]]
    shown = result["shown"]  # a figure that fits the page is not cut by a narrower column (wider ones scroll)
    if shown["visible"] + 1 < shown["figure"] <= shown["page"]:
        problems.append(f"{name}: {shown['figure']:.0f} px wide in a {shown['visible']:.0f} px column "
                        f"of a {shown['page']:.0f} px page")
    problems += [f"{name}: {axis}: {problem}" for axis, ticks in result["ticks"].items()
                 for problem in ticks["problems"]]
    # The model view labels each shown column's bottom x axis and each shown row's first y axis (every panel's, with
    # four panels or fewer): of the whole grid where it fits the page, else of the window of it that does.
    expected_axes = {"x": None, "y": None} if axes == "model" else {letter: None for letter in axes}
    for letter, count in expected_axes.items():
        if not labelled[letter] or (count is not None and len(labelled[letter]) != count):
            problems.append(f"{name}: {len(labelled[letter])} labelled {letter} axes, expected {count or 'some'}")
        expected = tokens[letter] if isinstance(tokens, dict) else tokens
        problems += [f"{name}: {axis} has {ticks['count']} labels for {expected} tokens"
                     for axis, ticks in labelled[letter].items() if ticks["count"] != expected]
    return problems


def lines_problems(name: str, result: dict, kind: str, tokens: dict[str, int]) -> list[str]:
    """The head view's of `kind`: its query column (left) lists one label per query token and its key column one
    per key token (tokens: {side: count}), none touching its neighbour, the figure's edge, a title or the legend
    (MEASURE_JS's columns and problems), and none out of the column the page shows it in."""
    problems = [f"{name}: {problem}" for problem in result["problems"]]
    column = result["shown"]["column"]
    for side, letter in (("query", "y"), ("key", "x")):
        labels = result["columns"].get(side, {"count": 0, "problems": []})
        expected = tokens[SIDES[kind][letter]]
        if labels["count"] != expected:
            problems.append(f"{name}: the {side} column lists {labels['count']} tokens of {expected}")
        problems += [f"{name}: {side} column: {problem}" for problem in labels["problems"]]
        if labels["count"] and (labels["l"] < column["l"] - 0.5 or labels["r"] > column["r"] + 0.5):
            problems.append(f"{name}: the {side} column's labels ({labels['l']:.0f} to {labels['r']:.0f} px) leave "
                            f"the page's column ({column['l']:.0f} to {column['r']:.0f} px)")
    return problems


def test_the_inputs_have_the_lengths_measured(shipped_checkpoints):
    for name, (checkpoint, text, tokens) in INPUTS.items():
        loaded = shipped_checkpoints[checkpoint]
        assert len(loaded.encode(text)) == tokens, name
        assert not [w for w in loaded.translate(text, beam_size=1).warnings if w.code.startswith("cut_off")]
    eng_fra = shipped_checkpoints["eng-fra"]
    assert len(eng_fra.encode(LONGEST)) == eng_fra.config.max_len  # the longest input read whole
    over = eng_fra.translate(LONGEST + " Yes.", beam_size=1)  # three pieces more: cut, and the app says so in its terms
    assert len(over.src_tokens) == eng_fra.config.max_len
    assert worded(over.warnings[0]) == ("The input is 66 pieces long but this model reads at most 63 pieces (max_len "
                                        "64 tokens with </s>): the last 3 were cut off.")


@pytest.mark.parametrize("mode", MODES)
def test_every_token_is_labelled_at_every_length(shipped_server, browser, shipped_checkpoints, mode):
    """At 1400 x 1000, and 1280 x 720 in lecture mode, on eng-fra at 8, 24 and 64 tokens and on reverse at 30
    characters: every measured figure of every view labels each source token once on each axis that shows source
    tokens (each word, with words=1) and each decoder row ("<s> → ·Elle") once on each axis that shows them (cross
    and decoder self, decoding's growing grid), without colliding labels or text on text; the model view's outer
    axes carry every token and the head it opens does too; the head view's two columns list every token apart,
    inside the figure and the page's column; in lecture mode each view's figure starts within LECTURE_TOP_PX."""
    folder = screenshots()
    viewport, mode_params = MODES[mode]
    problems = []
    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(RUN_S * 1000)

    def measured(name: str, index: int | str, axes: str | dict, kind: str, tokens: dict[str, int]) -> dict:
        """One figure's measurements; what is wrong with them goes to `problems`. tokens: {side: count}."""
        name, result = f"{name} {index}", figure_measures(page, index)
        if axes == "model" and mode == "lecture":  # drawn as lines: queries left, keys right, rows only
            axes = "y"
        if axes == "lines":
            problems.extend(lines_problems(name, result, kind, tokens))
        else:
            problems.extend(label_problems(name, result, axes, tokens if isinstance(axes, dict) else tokens["src"]))
        return result

    try:
        for input_name, (checkpoint, text, tokens) in INPUTS.items():
            rows = len(shipped_checkpoints[checkpoint].translate(text, beam_size=1).tgt_tokens)  # decoder input
            cases = [(view, params, figures, {"src": tokens, "tgt": rows}, THEN_KINDS.get(view, ()))
                     for view, (params, figures) in VIEWS_MEASURED.items()]
            if input_name in WORD_LEVEL:
                cases.append(("attention", {"kind": "encoder.self_attn", "words": "1"}, [(0, "xy")],
                              {"src": len(text.split()) + 1}, ()))
            for view, params, figures, counts, then_kinds in cases:
                name = f"{mode}-{input_name}-{view}" + ("-words" if "words" in params else "")
                with named_case(page, name):
                    open_link(page, shipped_server, checkpoint=checkpoint, text=text, view=view, decoding="greedy",
                              **params, **mode_params)
                    for index, axes in figures:
                        result = measured(name, index, axes, params.get("kind"), counts)
                        if mode == "lecture" and view in FIGURE_FIRST and index == figures[0][0] \
                                and result["top"] > LECTURE_TOP_PX:
                            problems.append(f"{name}: the figure starts {result['top']:.0f} px down")
                    screenshot(page, folder, name)
                for kind in then_kinds:
                    with named_case(page, f"{name}-{kind}"):
                        page.get_by_role("radio", name=KIND_LABELS[kind], exact=True).click()
                        page.wait_for_url(lambda url, kind=kind: f"kind={kind}" in url)
                        wait_for_rerun(page, settle_s=0.2, start_s=0)
                        index, axes = figures[0]
                        measured(f"{name}-{kind}", index, SIDES[kind] if axes == "xy" else axes, kind, counts)
                        screenshot(page, folder, f"{name}-{kind}")
                if view == "model":  # the head it opens: the Attention view of that head, every token labelled
                    with named_case(page, f"{name}-opened"):
                        page.get_by_role("button", name="Open in the Attention view").click()
                        page.wait_for_url(lambda url: "view=attention" in url)
                        wait_for_rerun(page, settle_s=0.2, start_s=0)
                        measured(f"{name}-opened", 0, "xy", "encoder.self_attn", counts)
                        screenshot(page, folder, f"{name}-opened")
        assert not page.locator('[data-testid="stException"]').count()
    finally:
        page.close()
    assert not problems, problems


def test_compare_two_shipped_checkpoints_draws_a_minus_b(shipped_server, browser):
    """Compare -> two checkpoints on reverse and reverse-1layer (one vocabulary): A, B and A − B are drawn."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(RUN_S * 1000)
    try:
        open_link(page, shipped_server, checkpoint="reverse", text="attention42", view="compare",
                  compare="checkpoints", kind="decoder.cross_attn", checkpoint_b="reverse-1layer")
        result = figure_measures(page, "compare-checkpoints")
        texts = page.evaluate(f"() => [...{chosen_figure('compare-checkpoints')}.querySelectorAll('text')]"
                              ".map(t => t.textContent)")
        screenshot(page, screenshots(), "compare-checkpoints")
    finally:
        page.close()
    assert any("reverse-1layer" in text for text in texts), texts
    assert any("A − B" in text for text in texts), texts
    assert not label_problems("compare-checkpoints", result, "x", len("attention42") + 1)


# A point of a scatter (the first point of the first trace with customdata) in the window's pixels, and its customdata.
POINT_JS = """(name) => { const gd = document.querySelector(`.st-key-wide-${name} .js-plotly-plot`);
  const box = gd.getBoundingClientRect(), full = gd._fullLayout;
  const trace = gd._fullData.find(t => t.customdata && t.customdata.length);
  return {x: box.left + full.xaxis._offset + full.xaxis.l2p(trace.x[0]),
          y: box.top + full.yaxis._offset + full.yaxis.l2p(trace.y[0]), data: trace.customdata[0]}; }"""


def test_across_inputs_reads_once_and_a_click_opens_the_head_or_the_sentence(shipped_server, browser):
    """On reverse: nothing runs until asked; then a click on a head of the map opens that head in the Attention view,
    and a click on a query of the queries-and-keys picture opens its sentence there, teacher-forced on the reference
    the picture was computed on; every part draws, on a laptop and in lecture mode (screenshots in
    $ATLAS_SCREENSHOTS)."""
    from transformer import load_checkpoint
    from transformer.analysis.corpus_summary import corpus_pairs_list

    pairs = corpus_pairs_list(load_checkpoint(ROOT / "checkpoints" / "reverse"), 60)
    folder = screenshots()
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(RUN_S * 1000)
    try:
        link = {"checkpoint": "reverse", "view": "corpus", "summary_count": "60"}
        page.goto(shipped_server + "?" + urllib.parse.urlencode(link))
        page.get_by_role("button", name="Read 60 inputs").click()
        with named_case(page, "the map of heads"):
            page.wait_for_selector(".st-key-wide-figure-head-map .js-plotly-plot")
            wait_for_rerun(page, settle_s=0.5)
        screenshot(page, folder, "corpus-map")
        page.locator(".st-key-wide-figure-head-map").scroll_into_view_if_needed()  # as a person scrolls to it
        point = page.evaluate(POINT_JS, "figure-head-map")
        page.mouse.click(point["x"], point["y"])
        kind, layer, head = point["data"]
        page.wait_for_url(lambda url: "view=attention" in url)
        opened = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)
        assert (opened["kind"], opened["layer"], opened["head"]) == ([kind], [str(layer)], [str(head)])

        page.goto(shipped_server + "?" + urllib.parse.urlencode(
            {**link, "corpus_part": "qk", "kind": "decoder.cross_attn", "layer": "1", "head": "0"}))
        with named_case(page, "queries and keys"):
            page.wait_for_selector(".st-key-wide-figure-queries-keys .js-plotly-plot")
            wait_for_rerun(page, settle_s=0.5, start_s=0)
        assert "of the queries have the key they attend to most as their nearest key" in page.inner_text("body")
        screenshot(page, folder, "corpus-queries-keys")
        point = page.evaluate(POINT_JS, "figure-queries-keys")
        page.mouse.click(point["x"], point["y"])
        page.wait_for_url(lambda url: "view=attention" in url)
        opened = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)
        source, reference = pairs[point["data"][0]]
        assert opened["text"] == [source] and opened["target"] == [reference]
        assert (opened["kind"], opened["layer"], opened["head"]) == (["decoder.cross_attn"], ["1"], ["0"])
        wait_for_rerun(page, start_s=0)
        assert "teacher-forced" in page.inner_text("body")

        for screen, window in (("laptop", {"width": 1400, "height": 900}), ("lecture", {"width": 1280, "height": 720})):
            page.set_viewport_size(window)
            for part in ("map", "qk", "match", "neurons"):
                params = {**link, "corpus_part": part, **({"lecture": "1"} if screen == "lecture" else {})}
                page.goto(shipped_server + "?" + urllib.parse.urlencode(params))
                with named_case(page, f"{screen} {part}"):
                    page.wait_for_selector(".js-plotly-plot" if part != "neurons" else '[data-testid="stDataFrame"]')
                    wait_for_rerun(page, settle_s=0.5, start_s=0)
                assert not page.locator('[data-testid="stException"]').count(), (screen, part)
                screenshot(page, folder, f"corpus-{screen}-{part}")
    finally:
        page.close()


# ------------------------------------------------------------------------------------------ every view fits its screen

# The acceptance of "every view fits the screen it is shown on": (case name, link parameters, inputs it is opened
# on, a click after the link). Every view of the registry, and every sub-mode that adds panels; each at 64 pieces
# (eng-fra's longest input, the widest figures) and at one of 8 and 24 (the short ones, where the smallest-panel and
# lecture-height rules decide). Compare's two checkpoints: test_compare_two_shipped_checkpoints_draws_a_minus_b
# (eng-fra shares its vocabulary with no shipped checkpoint).
FIT_CASES = [
    ("attention", {"kind": "decoder.cross_attn"}, ("24", "64"), None),
    ("attention-stages", {"view": "attention", "kind": "encoder.self_attn", "stages": "1"}, ("8", "64"), None),
    ("model", {"kind": "encoder.self_attn"}, ("24", "64"), None),
    ("headview", {"kind": "decoder.cross_attn"}, ("8", "64"), None),
    ("inside", {"kind": "decoder.cross_attn"}, ("8", "64"), None),
    ("compare-heads", {"view": "compare", "compare": "heads"}, ("24", "64"), None),
    ("compare-layers", {"view": "compare", "compare": "layers"}, ("8", "64"), None),
    ("compare-snapshots", {"view": "compare", "compare": "snapshots"}, ("24", "64"), None),
    ("compare-inputs", {"view": "compare", "compare": "inputs", "text_b": "EDITED"}, ("24", "64"), None),
    ("decoding", {"step": "3"}, ("8", "64"), None),
    ("masks", {}, ("24", "64"), None),
    ("masks-padding", {"view": "masks", "pad_src": "4", "pad_tgt": "3"}, ("8", "64"), None),
    ("positional", {}, ("24",), None),
    ("heads", {}, ("8", "64"), None),
    ("corpus", {}, ("8",), None),  # one input's length changes nothing: the pictures are of the corpus
    ("corpus-queries-keys", {"view": "corpus", "corpus_part": "qk", "kind": "decoder.cross_attn"}, ("8",), None),
    ("ablation", {"ablate": "encoder.layers.0.self_attn:1,decoder.layers.1.cross_attn:2"}, ("24", "64"), None),
    ("training", {"kind": "decoder.cross_attn"}, ("8", "64"), None),
    ("attribution", {}, ("24", "64"), None),
    ("attribution-every-piece", {"view": "attribution"}, ("8", "64"), "Every output piece by every method"),
    # Edited: lecture mode shows one row at a time, the decoder's positions the widest; unedited: the logit lens.
    ("patching", {"corrupt": "EDITED", "panel": "2"}, ("24", "64"), None),
    ("patching-lens", {"view": "patching"}, ("24", "64"), None),
]
# Views whose first element under the controls is not a figure (Ablation opens on its outputs).
NOT_FIGURE_FIRST = ("ablation",)
# Lecture mode's output (the headline beside the figure): the lines its box shows.
HEADLINE_LINES_JS = """() => {
  const text = document.querySelector('.st-key-headline [data-testid="stText"]');
  return text.getBoundingClientRect().height / parseFloat(getComputedStyle(text).lineHeight);
}"""
# Each Plotly figure's box, whether it stands in a box that says it scrolls (show_figure's overflow- boxes), and any
# clipping ancestor it passes (overflow other than visible), in the window's pixels.
FIT_JS = """() => [...document.querySelectorAll('.stPlotlyChart .main-svg:first-of-type')].map(svg => {
  const box = svg.getBoundingClientRect();
  const scroller = svg.closest('[class*="st-key-overflow-"]');
  const cut = [];
  for (let node = svg.parentElement; node && node !== document.body; node = node.parentElement) {
    const style = getComputedStyle(node);
    if (node === scroller || (style.overflowX === 'visible' && style.overflowY === 'visible')) continue;
    const clip = node.getBoundingClientRect();
    if (box.right > clip.right + 0.5 && !(scroller && node.contains(scroller)))
      cut.push(`${node.className || node.tagName} ends at ${clip.right.toFixed(0)}`);
  }
  const shown = scroller ? scroller.getBoundingClientRect() : box;
  // Its token labels: the smallest as drawn (the SVG may be scaled), and those outside the window.
  const scale = box.width / svg.width.baseVal.value;
  const ticks = [...svg.querySelectorAll('g[class*="tick"] text')]
    .filter(text => text.textContent.length && text.getBoundingClientRect().width > 0);
  const font = Math.min(...ticks.map(text => parseFloat(getComputedStyle(text).fontSize) * scale));
  const outside = ticks.map(text => text.getBoundingClientRect()).filter(r => r.top < -0.5 || r.left < -0.5
    || r.bottom > innerHeight + 0.5 || r.right > innerWidth + 0.5).length;
  return {top: box.top, right: shown.right, bottom: Math.min(box.bottom, shown.bottom), cut, font, outside,
          scrolls: Boolean(scroller), said: Boolean(scroller) && (scroller.parentElement.parentElement.innerText
                                                                   .includes('scroll'))};
})"""


def fit_problems(name: str, figures: list[dict], window: dict, lecture: bool, figure_first: bool,
                 whole: bool = False) -> list[str]:
    """What does not fit: a figure past the window's right edge or cut by a clipping ancestor, a scroll box that does
    not say so; in lecture mode the first figure starting below LECTURE_TOP_PX or ending below the window. whole (a
    projector, one of LECTURE_WHOLE_VIEWS): the main figure (the first) in no scroll box, every tick label in the
    window and at least LECTURE_FONT_PX."""
    problems = []
    for index, figure in enumerate(figures):
        if figure["right"] > window["width"] + 0.5:
            problems.append(f"{name}: figure {index} ends at {figure['right']:.0f} px, past the window's "
                            f"{window['width']} px")
        problems += [f"{name}: figure {index} is cut: {cut}" for cut in figure["cut"]]
        if figure["scrolls"] and not figure["said"]:
            problems.append(f"{name}: figure {index} scrolls without saying so")
    if lecture and figure_first:
        if not figures:
            problems.append(f"{name}: no figure")
        elif figures[0]["top"] > LECTURE_TOP_PX:
            problems.append(f"{name}: the first figure starts {figures[0]['top']:.0f} px down")
        elif figures[0]["bottom"] > window["height"] + 0.5:
            problems.append(f"{name}: the first figure ends {figures[0]['bottom']:.0f} px down")
    if whole and figures:
        main = figures[0]
        if main["scrolls"]:
            problems.append(f"{name}: the main figure scrolls inside a box")
        if main["outside"]:
            problems.append(f"{name}: {main['outside']} tick labels of the main figure are outside the window")
        if main["font"] < LECTURE_FONT_PX - 0.05:
            problems.append(f"{name}: the main figure's tick labels are {main['font']:.1f} px")
    return problems


@pytest.fixture(scope="module")
def fit_pages(browser):
    """One page per window size, reused by every case (each case opens its link in it)."""
    pages = {}
    yield pages
    for page in pages.values():
        page.close()


# screen -> (window, lecture mode, the inputs every case but the corpus's is opened on; None: the case's own). A
# projector of 1920 x 1080 takes a class's longer sentences, decoded as the shipped card says (beam search: the longer
# outputs); 1280 x 720 a class's sentences up to 30 pieces (longer ones scroll, as on the laptop).
FIT_SCREENS = {"laptop": ({"width": 1400, "height": 900}, False, None),
               "lecture": ({"width": 1280, "height": 720}, True, None),
               "projector-40": ({"width": 1920, "height": 1080}, True, ("40",)),
               "projector-60": ({"width": 1920, "height": 1080}, True, ("60",))}


def fit_lengths(screen: str, name: str, lengths: tuple[str, ...]) -> tuple[str, ...]:
    """The inputs case `name` is opened on at `screen`: the corpus pictures do not change with the input (measured
    once a window)."""
    own = FIT_SCREENS[screen][2]
    if name.startswith("corpus"):
        return () if screen == "projector-60" else lengths
    if own:
        return own
    if screen == "lecture":
        return ("24", "30") if "24" in lengths else ("8", "24", "30")
    return lengths


@pytest.mark.timeout(900)  # 20 to 60 links a screen, one server and browser: 4 minutes each on 2 busy cores
@pytest.mark.parametrize("screen", list(FIT_SCREENS))
def test_every_view_fits_the_screen(shipped_server, browser, fit_pages, screen):
    """At 1400 x 900, in lecture mode at 1280 x 720 and on a 1920 x 1080 projector: in every view and sub-mode, on
    eng-fra at 8, 24 and 64 pieces (lecture: 8, 24 and 30; the projector: 40 and 60), no figure passes the window's
    right edge or is cut by a box around it (a figure that cannot be narrower scrolls in a box that says so); in
    lecture mode the first figure starts within LECTURE_TOP_PX and ends within the window, and in
    LECTURE_WHOLE_VIEWS it is whole: no scroll box, every tick label inside the window and at least 12 px."""
    window, lecture, _ = FIT_SCREENS[screen]
    size = f"{window['width']}x{window['height']}"
    if size not in fit_pages:
        fit_pages[size] = browser.new_page(viewport=window)
    page = fit_pages[size]
    page.set_default_timeout(RUN_S * 1000)
    folder, problems = screenshots(), []
    texts = {"8": SHORT, "24": MEDIUM, "30": THIRTY, "40": FORTY, "60": SIXTY, "64": LONGEST}
    for name, params, lengths, click in FIT_CASES:
        view = params.get("view", name)
        for length in fit_lengths(screen, name, lengths):
            link = {"checkpoint": "eng-fra", "text": texts[length], "view": view,
                    "decoding": "beam" if screen.startswith("projector") else "greedy",
                    **{key: value for key, value in params.items() if key != "view"}}
            for edited in ("corrupt", "text_b"):  # one word changed: as many pieces as the input
                if link.get(edited) == "EDITED":
                    link[edited] = texts[length].replace("the", "a", 1).replace("She", "He", 1)
            if lecture:
                link["lecture"] = "1"
            page.goto(shipped_server + "?" + urllib.parse.urlencode(link))
            page.wait_for_selector('[data-testid="stMainBlockContainer"][data-measured-width]')
            wait_for_rerun(page, settle_s=0.3, start_s=0.3)  # the page drawn again for the measured width
            if click:  # the attribution of every piece: drawn once the expander is open and every method has run
                page.get_by_text(click, exact=True).click()
                page.wait_for_selector(".st-key-wide-figure-attribution-methods .js-plotly-plot")
                wait_for_rerun(page, settle_s=0.3, start_s=0)
            if view != "ablation":
                page.wait_for_selector(".stPlotlyChart .js-plotly-plot")
            case = f"{screen}-{name}-{length}"
            assert not page.locator('[data-testid="stException"]').count(), case
            problems += fit_problems(case, page.evaluate(FIT_JS), window, lecture,
                                     view not in NOT_FIGURE_FIRST and not click,
                                     whole=lecture and name in LECTURE_WHOLE_VIEWS)
            if lecture:  # the output beside the figure: two lines at most, the rest under the pointer
                lines = page.evaluate(HEADLINE_LINES_JS)
                if lines > 2.05:
                    problems.append(f"{case}: the output takes {lines:.1f} lines")
            screenshot(page, folder, f"fit-{case}")
    assert not problems, problems
