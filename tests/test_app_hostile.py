"""The app beside hostile checkpoint folders (tests/test_hostile.py's cases): the good checkpoint is served, each bad
folder is listed with its reason, nothing blocks, only the shown checkpoint is loaded, and card text is shown as
typed (no Markdown: no remote image, no link). Headless (AppTest) and in a real browser."""
from __future__ import annotations

import json
import re
import shutil
import time
import urllib.parse
from pathlib import Path

import pytest
from test_budget import plant_memory_bomb
from test_hostile import CASES

from benchmarks.chromium import CHROMIUM, RUN_S, launch_chromium, wait_for_rerun
from deploy.server import ServerError, streamlit_server
from helpers import APP, outputs
from transformer.io.checkpoint import CARD_FILE
from ui.literal_text import plain

pytestmark = pytest.mark.slow  # every test runs the whole app

IMAGE, LINK = "![x](http://example.invalid/p.png)", "[a link](http://example.invalid/page)"
CARD_TEXT = {"description": f"Looks harmless {IMAGE} and {LINK} **bold** `code",
             "task": f"reverse {IMAGE}", "data": f"credit {LINK}"}
IN_THE_BROWSER = ("card-1-mb-of-quoted-quotes", "torch-zip-tuple-key-of-2-to-the-80-hash-steps",
                  "card-is-a-fifo", "weights-fifo", "card-symlink-out", "card-empty-object", "card-200000-deep",
                  "config-d-model-1e9", "config-eps-tiny")
NOT_LISTED = ("weights-nan", "snapshot-fifo")  # pass the checks; fail once their tensors are read
DISCONNECTED_TTL_S = 1  # how long the server keeps a closed page's session (Streamlit's default: 120 s, to reconnect)


def hostile_folder(tiny_checkpoint: Path, root: Path, cases) -> Path:
    """`root` with "good" (the tiny checkpoint, its card text full of Markdown) and one damaged copy per case."""
    shutil.copytree(tiny_checkpoint, root / "good", ignore=shutil.ignore_patterns("resume.pt"))
    card = json.loads((root / "good" / CARD_FILE).read_text())
    (root / "good" / CARD_FILE).write_text(json.dumps({**card, **CARD_TEXT}))
    for name in cases:
        shutil.copytree(tiny_checkpoint, root / name, ignore=shutil.ignore_patterns("resume.pt"))
        CASES[name].plant(root / name)
    return root


@pytest.fixture(scope="module")
def listed_cases() -> list[str]:
    return [name for name, case in CASES.items() if case.listed]


@pytest.fixture(scope="module")
def hostile_root(tiny_checkpoint, tmp_path_factory, listed_cases) -> Path:
    return hostile_folder(tiny_checkpoint, tmp_path_factory.mktemp("hostile-app"), [*listed_cases, *NOT_LISTED])


def run_app(root: Path, monkeypatch, **query):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(root))
    at = AppTest.from_file(APP, default_timeout=RUN_S)
    at.query_params.update(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown_as_markdown(at) -> str:
    """Everything the page hands to Markdown: labels, captions, notices, tables."""
    parts = [element.value for element in [*at.markdown, *at.caption, *at.error, *at.warning, *at.info]]
    parts += [expander.label for expander in at.expander]
    parts += [str(cell) for table in at.table for cell in table.value.to_numpy().ravel()]
    return "\n".join(parts)


def test_the_good_checkpoint_is_served_and_each_bad_folder_listed(hostile_root, listed_cases, monkeypatch):
    loads = []
    import ui.passes
    real = ui.passes.load_checkpoint
    monkeypatch.setattr(ui.passes, "load_checkpoint", lambda path: loads.append(Path(path).name) or real(path))
    at = run_app(hostile_root, monkeypatch)
    assert at.selectbox(key="checkpoint").options == ["good", *sorted(NOT_LISTED)]
    assert at.selectbox(key="checkpoint").value == "good"
    assert outputs(at)[0]  # the translation
    assert loads == ["good"]  # the others are checked, not loaded
    listed = {text.value.split(": cannot be loaded: ")[0]: text.value.split(": cannot be loaded: ", 1)[1]
              for text in at.text if ": cannot be loaded: " in text.value}
    assert listed.keys() == set(listed_cases)
    for name, reason in listed.items():
        assert re.search(CASES[name].match, reason), (name, reason)


def test_card_text_is_shown_as_typed(hostile_root, monkeypatch):
    at = run_app(hostile_root, monkeypatch)
    texts = [text.value for text in at.text]
    assert CARD_TEXT["description"] in texts and f"Data: {CARD_TEXT['data']}" in texts
    assert f"Model card · {plain(CARD_TEXT['task'])}" in [expander.label for expander in at.expander]
    markdown = shown_as_markdown(at)
    assert "](http" not in markdown, markdown  # every bracket that could open an image or a link is escaped


@pytest.mark.parametrize("name", NOT_LISTED)
def test_a_folder_failing_on_its_tensors_is_reported_not_raised(hostile_root, monkeypatch, name):
    at = run_app(hostile_root, monkeypatch, checkpoint=name, view="training")
    if name == "weights-nan":
        assert any("cannot be loaded" in error.value for error in at.error)
        assert any(re.search(CASES[name].match, text.value) for text in at.text)
    else:  # the checkpoint loads; its damaged snapshot is reported where it is needed
        assert at.selectbox(key="checkpoint").value == name


@pytest.mark.parametrize("query, expected", [
    ({"pe_dims": ",".join(["1"] * 20_000 + [str(n) for n in range(200)])}, [1, *range(0, 200)]),
    ({"ablate": ",".join(["decoder.layers.0.cross_attn:1"] * 5_000)}, ["decoder.layers.0.cross_attn:1"]),
])
def test_link_lists_are_deduplicated_and_capped(query, expected):
    from ui.state import MAX_LINK_ITEMS, parse_query

    values, _ = parse_query(query)
    assert values[next(iter(query))] == list(dict.fromkeys(expected))[:MAX_LINK_ITEMS]


@pytest.mark.parametrize("name, shown", [
    ("reverse", "reverse"),
    ("rev\u0435rse", "rev\u0435rse ⚠ mixes Cyrillic and Latin letters"),  # a Cyrillic "е": looks like "reverse"
    ("eng\u200b-fra", "eng\u200b-fra ⚠ holds invisible characters (U+200B)"),
    ("données-2024", "données-2024"),  # one script, accents and digits: as it is
])
def test_a_folder_name_that_could_pass_for_another_says_why(name, shown):
    from ui.literal_text import visible_name

    assert visible_name(name) == shown


def test_the_picker_shows_a_lookalike_folder_name_for_what_it_is(tiny_checkpoint, tmp_path, monkeypatch):
    for name in ("reverse", "rev\u0435rse"):
        shutil.copytree(tiny_checkpoint, tmp_path / name, ignore=shutil.ignore_patterns("resume.pt"))
    at = run_app(tmp_path, monkeypatch)
    assert at.selectbox(key="checkpoint").options == ["reverse", "rev\u0435rse ⚠ mixes Cyrillic and Latin letters"]


def test_a_links_corrupted_sentence_is_cut_as_its_text_box_cuts():
    from ui.state import MAX_INPUT_CHARS, parse_query

    values, notices = parse_query({"corrupt": "x" * 100_000})
    assert values["corrupt"] == "x" * MAX_INPUT_CHARS and notices == []


def test_the_cards_decoding_is_the_default_unless_the_link_says(tiny_checkpoint, tmp_path, monkeypatch):
    root = hostile_folder(tiny_checkpoint, tmp_path, [])
    card = json.loads((root / "good" / CARD_FILE).read_text())
    (root / "good" / CARD_FILE).write_text(json.dumps({**card, "decoding": {"beam_size": 12}}))
    at = run_app(root, monkeypatch)
    assert at.slider(key="beam").value == 12
    assert any("beam search with 12 beams" in caption.value for caption in at.caption)
    at = run_app(root, monkeypatch, decoding="greedy")
    assert "beam" not in [slider.key for slider in at.slider]
    assert any(", greedy" in caption.value for caption in at.caption)
    at = run_app(root, monkeypatch, beam="65")  # beyond the library's bound: the card's
    assert at.slider(key="beam").value == 12


# ------------------------------------------------------------------------------------------------- in a browser


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_in_a_browser_nothing_is_fetched_elsewhere_and_card_text_is_literal(tiny_checkpoint, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")
    root = hostile_folder(tiny_checkpoint, tmp_path / "checkpoints", IN_THE_BROWSER)
    hosts = set()
    try:
        with streamlit_server(root, tmp_path / "streamlit.log") as (url, _), sync_api.sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.set_default_timeout(RUN_S * 1000)
                page.on("request", lambda request: hosts.add(urllib.parse.urlsplit(request.url).hostname))
                page.goto(url)
                page.wait_for_selector(".js-plotly-plot")
                wait_for_rerun(page)
                page.locator('summary:has-text("Model card")').click()  # folded under the input
                page.locator('[data-testid="stExpanderDetails"]:has-text("**bold**")').first.wait_for()
                page.screenshot(path=str(tmp_path / "hostile.png"), full_page=True)
                body = page.inner_text("body")
            finally:
                browser.close()
    except ServerError as error:
        pytest.fail(str(error))
    assert hosts <= {"127.0.0.1", None}, hosts  # None: data: and blob: addresses
    assert IMAGE in body and LINK in body and "**bold**" in body
    for name in IN_THE_BROWSER:
        assert f"{name}: cannot be loaded: " in body, name


def server_rss(process) -> int:
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_a_server_beside_the_freezing_card_the_hanging_pickle_and_the_memory_bomb_serves_eng_fra(tiny_checkpoint,
                                                                                                  tmp_path):
    """The shipped eng-fra beside a 1 MB card of quoted quotes, a weights pickle whose key takes 2^80 hash steps and
    a valid 64 + 64-layer, 128-head config: the server answers its health check in the usual start time
    (streamlit_server's wait), serves eng-fra's translation, lists the two broken folders, and on the memory bomb a
    long input is cut with a message, no traceback, and once its session is gone the server's memory is back within
    20 %."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")
    root = hostile_folder(tiny_checkpoint, tmp_path / "checkpoints",
                          ("card-1-mb-of-quoted-quotes", "torch-zip-tuple-key-of-2-to-the-80-hash-steps"))
    shutil.copytree(Path(APP).parent / "checkpoints" / "eng-fra", root / "eng-fra",
                    ignore=shutil.ignore_patterns("snapshots", "resume.pt"))
    plant_memory_bomb(tiny_checkpoint, root / "memory-bomb")
    try:
        ttl = {"STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": str(DISCONNECTED_TTL_S)}
        with streamlit_server(root, tmp_path / "streamlit.log", env=ttl) as (url, process), \
                sync_api.sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(RUN_S * 1000)
                page.goto(f"{url}?checkpoint=eng-fra&text=I%20am%20cold.&view=attention")
                page.wait_for_selector(".js-plotly-plot")
                wait_for_rerun(page)
                body = page.inner_text("body")
                assert "J'ai froid" in body
                for name in ("card-1-mb-of-quoted-quotes", "torch-zip-tuple-key-of-2-to-the-80-hash-steps"):
                    assert f"{name}: cannot be loaded: " in body, name
                page.goto(f"{url}?checkpoint=memory-bomb&text=abc&view=attention")
                page.wait_for_selector(".js-plotly-plot")
                wait_for_rerun(page)
                before = server_rss(process)
                bomb = browser.new_page(viewport={"width": 1400, "height": 900})  # a session of its own
                bomb.set_default_timeout(RUN_S * 1000)
                bomb.goto(f"{url}?checkpoint=memory-bomb&text={'ab' * 50}&view=attention")
                bomb.wait_for_selector(".js-plotly-plot")
                wait_for_rerun(bomb)
                body = bomb.inner_text("body")
                assert "Traceback" not in body and not bomb.locator('[data-testid="stException"]').count()
                assert "pass over more would record more attention" in body
                # Its session gone (Streamlit forgets a disconnected session after its TTL, 1 s here), the next pass
                # evicts what only closed sessions asked for, and the memory is back.
                bomb.close()
                deadline = time.monotonic() + DISCONNECTED_TTL_S + RUN_S  # bounded: a busy machine closes it later
                for count in range(1, 100):
                    time.sleep(DISCONNECTED_TTL_S + 1)
                    page.goto(f"{url}?checkpoint=eng-fra&text=I%20have%20{count}%20cats.&view=attention")
                    page.wait_for_selector(".js-plotly-plot")
                    wait_for_rerun(page)
                    if server_rss(process) <= 1.2 * before or time.monotonic() > deadline:
                        break
                assert server_rss(process) <= 1.2 * before, (before, server_rss(process))
            finally:
                browser.close()
    except ServerError as error:
        pytest.fail(str(error))

