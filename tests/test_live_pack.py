"""A live pack (ui.deck.live) in real Chromium from file://, every request but the file's own refused: on a live slide
of eng-fra, reverse and induction, 20 sentences of the test's own typed into the box, each giving PyTorch's output ids
(greedy, on the same fp16-rounded weights the page runs), every captured attention pattern within 1e-3 of
`capture`'s on the same ids, and the app's notices; the redrawn figure equal to viz.head_heatmap's for the page's own
numbers. On a Model view slide of dates, a few sentences (years inside, at and outside its range: the task's own
notice) give the same, and the redrawn lines equal viz.model_lines's for the page's numbers, and for PyTorch's but
where a weight is within 1e-3 of an opacity step; on one of eng-fra, a long sentence keeps the layers that fit. No
console error, no request. One browser, one page load."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

import viz
from benchmarks.chromium import launch_chromium
from transformer import load_checkpoint
from transformer.io.onnx_export import fp16_rounded, pattern_sites
from ui.deck import read_deck
from ui.deck.live import ORT_DIST, Live
from ui.deck.packing import draw_slide, pack_html, write_new
from ui.warnings import worded

ROOT = Path(__file__).parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not ORT_DIST.is_dir(), reason="ONNX Runtime Web is not installed: run `npm ci` (package.json pins it)")]
DECK = """title = "Live"
[[slides]]
title = "reverse"
[slides.link]
checkpoint = "reverse"
text = "attention42"
view = "attention"
kind = "decoder.cross_attn"
layer = 1
head = 0
[[slides]]
title = "eng-fra"
[slides.link]
checkpoint = "eng-fra"
text = "She is reading a book."
view = "attention"
kind = "decoder.cross_attn"
layer = 2
head = 0
[[slides]]
title = "induction"
[slides.link]
checkpoint = "induction"
text = "abc def abc"
view = "attention"
kind = "decoder.self_attn"
layer = 1
head = 1
[[slides]]
title = "positions"
[slides.link]
checkpoint = "reverse"
view = "positional"
[[slides]]
title = "dates, every head"
[slides.link]
checkpoint = "dates"
text = "Wednesday, March 3, 2021"
view = "model"
kind = "encoder.self_attn"
[[slides]]
title = "eng-fra, every head"
[slides.link]
checkpoint = "eng-fra"
text = "I am cold."
view = "model"
kind = "decoder.self_attn"
"""
SENTENCES = {
    "reverse": ["hello42world", "abc", "zyxwvutsrqponmlkjihgfedcba", "a1b2c3d4e5", "transformer", "q", "0123456789",
                "aaaaabbbbbccccc", "mirror", "palindrome", "xyz9", "lecture7", "deck", "the42", "kitten", "hello",
                "reverse", "z", "onetwothreefourfivesixseven", "abcdefghijklmnopqrstuvwxyz0123456789"],
    "eng-fra": ["I am cold.", "Where is the station?", "We will go to the beach tomorrow.", "He likes apples.",
                "The weather is nice today.", "Can you help me, please?", "My brother reads a newspaper.",
                "They are playing football in the park.", "I don't know.", "She has two cats and a dog.",
                "This is my house.", "Thank you very much!", "The children are sleeping.", "I lost my keys.",
                "Do you speak French?", "It is raining.", "The zyxwv glorped the frumious teacup.",
                "I would like to eat a big red apple in the garden with my friends tomorrow morning, if it is sunny.",
                "Tom is older than Mary.", "We have to leave now."],
    "induction": ["the cat sat on the mat. the cat", "abc def abc", "hello world hello", "xy zz xy", "one two one",
                  "aa bb cc aa bb", "lorem ipsum lorem", "Kq7 zx w(b tnm. i zx w(b", "12 34 12", "red blue red",
                  "a b c d a b", "quick brown quick", "foo bar baz foo", "attention attention", "mat cat mat",
                  "go go go", "north south north", "alpha beta alpha", "xyz", "tea for two tea for"],
    "dates": ["1 Jan 1899", "31 Dec 2099", "Saturday, 4 July 2150", "12/25/1900"],
    # rows that leave room for fewer layers than the slide's: the first window that fits, named in the title
    "eng-fra, every head": ["The children are sleeping in the big house near the river."],
}
SLIDES = {"reverse": 1, "eng-fra": 2, "induction": 3, "dates": 5, "eng-fra, every head": 6}
ERROR_LIMIT = 1e-3  # float16 weights in both; float32 arithmetic in WebAssembly and in PyTorch


@pytest.fixture(scope="module")
def live_pack(tmp_path_factory):
    folder = tmp_path_factory.mktemp("decks")
    (folder / "live.toml").write_text(DECK, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATLAS_DECKS", str(folder))
        deck = read_deck("live")
        slides = [draw_slide("live", deck, number) for number in range(1, len(deck.slides) + 1)]
        live = Live(deck)
        path = folder / "live.html"
        write_new(path, pack_html(deck, slides, live))
    return live, path


@functools.cache
def rounded(name: str):
    """The checkpoint and its model with the weights the page runs (float16, rounded)."""
    checkpoint = load_checkpoint(ROOT / "checkpoints" / name)
    return checkpoint, fp16_rounded(checkpoint.model)


def in_pytorch(name: str, text: str):
    """The checkpoint, and the app's translation of `text` decoded greedily by the page's weights."""
    checkpoint, model = rounded(name)
    return checkpoint, checkpoint.translate(text, beam_size=1, model=model)


READ_RESULT = """(number) => {
  const result = AtlasLive.results[number];
  if (result.error) return {error: result.error};
  const patterns = {};
  for (const [site, tensor] of Object.entries(result.patterns)) patterns[site] = [tensor.dims, Array.from(tensor.data)];
  return {srcIds: result.srcIds, outputIds: result.outputIds, tgtIds: result.tgtIds, text: result.text, patterns,
          notices: [...document.querySelectorAll(`#slide-${number} .live-out .notice`)].map((p) => p.textContent)};
}"""
FIGURE = """(number) => {
  const box = document.querySelector(`#slide-${number} [data-live-figure]`);
  const edge = box.querySelector(".main-svg").getBoundingClientRect();
  const labels = [...box.querySelectorAll(".xtick text, .ytick text")].map((text) => text.getBoundingClientRect());
  return {data: box.data, layout: {xaxis: box.layout.xaxis, yaxis: box.layout.yaxis, coloraxis: box.layout.coloraxis,
          title: box.layout.title.text}, drawn: [box.calcdata[0][0].z.length, box.calcdata[0][0].z[0].length],
          labels: labels.length,
          cut: labels.filter((r) => r.left < edge.left - 1 || r.bottom > edge.bottom + 1 || r.top < edge.top - 1)
            .length};
}"""


LINES_FIGURE = """(number) => {
  const box = document.querySelector(`#slide-${number} [data-live-figure]`);
  const edge = box.querySelector(".main-svg").getBoundingClientRect();
  const labels = [...box.querySelectorAll("g[class^='y'][class$='tick'] text")]  // .ytick, .y5tick, ...
    .map((text) => text.getBoundingClientRect());
  const axes = Object.fromEntries(Object.entries(box.layout).filter(([name]) => /^yaxis\\d*$/.test(name))
    .map(([name, axis]) => [name, {tickvals: axis.tickvals, ticktext: axis.ticktext, range: axis.range,
                                   showticklabels: axis.showticklabels}]));
  return {data: box.data.map((trace) => ({name: trace.name, mode: trace.mode, meta: trace.meta, xaxis: trace.xaxis,
          yaxis: trace.yaxis, x: trace.x, y: trace.y, colour: trace.line && trace.line.color,
          hovertext: trace.hovertext})), axes, title: box.layout.title.text,
          headings: box.layout.annotations.map((note) => note.text), labels: labels.length,
          cut: labels.filter((r) => r.left < edge.left - 1 || r.right > edge.right + 1 || r.bottom > edge.bottom + 1
                                    || r.top < edge.top - 1).length};
}"""


def type_and_run(page, number: int, text: str) -> dict:
    """Click into the slide's box (the centre of it, as a person does), replace its text, press Enter, wait."""
    form = page.locator(f'form.live[data-slide="{number}"]')
    runs = int(form.get_attribute("data-runs") or 0)
    box = form.locator("input").bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.keyboard.press("Control+A")
    page.keyboard.type(text)
    page.keyboard.press("Enter")
    page.wait_for_function(f"(runs) => Number(document.querySelector('form.live[data-slide=\"{number}\"]')"
                           ".dataset.runs || 0) > runs", arg=runs, timeout=120_000)
    assert form.get_attribute("data-state") == "done"
    return page.evaluate(READ_RESULT, number)


def expected_figure(checkpoint, translation, kind: str, layer: int, head: int, weights: np.ndarray):
    """viz's figure of the page's numbers, labelled as the Attention view labels them."""
    q_tokens, k_tokens, blocked = labels_of(translation, kind)
    return json.loads(viz.head_heatmap(weights, q_tokens, k_tokens, blocked=blocked).to_json())


def test_typed_sentences_run_in_the_page_as_in_pytorch(live_pack):
    from playwright.sync_api import sync_playwright

    live, path = live_pack
    assert {number for number, slide in live.plan.items() if not isinstance(slide, str)} == {1, 2, 3, 5, 6}
    assert "Attention view" in live.plan[4]  # the positional slide stays as drawn, and says so
    requests, errors = [], []
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.on("request", lambda request: requests.append(request.url))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://")
                   else route.abort())
        page.goto(path.as_uri())
        page.wait_for_function("document.body.dataset.liveReady === '1'", timeout=180_000)
        titles = []
        for name, number in SLIDES.items():
            slide = live.plan[number]
            page.evaluate(f"location.hash = '#{number}'")
            for text in SENTENCES[name]:
                found = type_and_run(page, number, text)
                checkpoint, translation = in_pytorch(slide.checkpoint, text)
                assert found["srcIds"] == translation.src_ids, (name, text)
                assert found["outputIds"] == translation.output_ids, (name, text)
                assert found["tgtIds"] == translation.tgt_ids, (name, text)
                assert found["text"] == translation.text, (name, text)
                assert found["notices"] == [worded(caveat) for caveat in translation.warnings], (name, text)
                assert set(found["patterns"]) == set(pattern_sites(checkpoint.model))
                for site, (dims, data) in found["patterns"].items():
                    expected = translation.attention[site].numpy()
                    assert list(expected.shape) == dims, (name, text, site)
                    assert np.abs(np.asarray(data).reshape(dims) - expected).max() <= ERROR_LIMIT, (name, text, site)
                if slide.view == "model":  # every sentence's: a few only
                    titles.append(check_lines(page, number, slide, text, translation, found))
            if slide.view == "attention":
                check_heatmap(page, number, slide, text, checkpoint, translation, found)
        browser.close()
    assert titles[-1].startswith("decoder self: every layer and head (L0–1 H0–3)"), titles  # 2 of eng-fra's 3
    assert not errors, errors
    assert all(url.startswith("file://") for url in requests) and len(requests) == 1, requests


def assert_drawn_here(page, number: int) -> None:
    """The slide's last line says where its figure now comes from (never "as the slide is set")."""
    last = page.locator(f"#slide-{number} .side > p.more").last.inner_text()
    assert last.startswith("Drawn in this browser from the sentence typed here"), last


def check_heatmap(page, number: int, slide, text: str, checkpoint, translation, found: dict) -> None:
    """The redrawn heatmap: viz.head_heatmap's of the page's own numbers, every label whole."""
    dims, data = found["patterns"][slide.site]
    weights = np.asarray(data, dtype=np.float32).reshape(dims)[0, slide.head]
    drawn = page.evaluate(FIGURE, number)
    want = expected_figure(checkpoint, translation, slide.kind, slide.layer, slide.head, weights)
    assert drawn["layout"]["title"].endswith("· this browser's run")
    shown_input = page.locator(f"#slide-{number} p.input").inner_text()
    assert shown_input == f"Input, typed here: {text}", shown_input  # never the author's sentence over it
    assert_drawn_here(page, number)
    heatmap, expected = drawn["data"][0], want["data"][0]
    assert np.allclose(np.asarray(heatmap["z"], dtype=float), weights, atol=1e-7)
    assert drawn["drawn"] == list(weights.shape)  # what Plotly drew, not only what it was handed
    assert drawn["labels"] == sum(weights.shape) and not drawn["cut"], drawn  # every label whole
    assert [[cell[:3] for cell in row] for row in heatmap["customdata"]] == \
        [[cell[:3] for cell in row] for row in np.asarray(expected_customdata(expected)).tolist()]
    for axis in ("xaxis", "yaxis"):
        for key in ("tickvals", "ticktext", "range"):
            assert drawn["layout"][axis][key] == want["layout"][axis][key], (number, axis, key)
    assert drawn["layout"]["coloraxis"]["colorscale"] == want["layout"]["coloraxis"]["colorscale"]
    assert (drawn["layout"]["coloraxis"]["cmin"], drawn["layout"]["coloraxis"]["cmax"]) == (0, 1)
    overlays = [(trace["name"], trace["colorscale"], [[cell is not None for cell in row] for row in trace["z"]])
                for trace in drawn["data"][1:]]
    assert overlays == [(trace["name"], trace["colorscale"], decoded_z(trace)) for trace in want["data"][1:]]


def check_lines(page, number: int, slide, text: str, translation, found: dict) -> str:
    """The redrawn Model view: viz.model_lines's for the page's own numbers (the app's window of layers x heads, its
    traces in order: the panels' markers with their hover, the lines per opacity, the keys' axes), and for PyTorch's
    but where a weight lies within ERROR_LIMIT of an opacity step; every label whole. Returns its title."""
    drawn = page.evaluate(LINES_FIGURE, number)
    assert drawn["title"].endswith("· this browser's run")
    assert page.locator(f"#slide-{number} p.input").inner_text() == f"Input, typed here: {text}"
    assert_drawn_here(page, number)
    panels = [trace["meta"] for trace in drawn["data"] if trace["mode"] == "markers"]
    first = (min(layer for layer, _ in panels), min(head for _, head in panels))
    shape = (len({layer for layer, _ in panels}), len({head for _, head in panels}))
    window = (slice(first[0], first[0] + shape[0]), slice(first[1], first[1] + shape[1]))
    page_stack = np.stack([np.asarray(data, dtype=np.float32).reshape(dims)[0]
                           for dims, data in (found["patterns"][site] for site in slide.sites)])
    torch_stack = np.stack([translation.attention[site].numpy()[0] for site in slide.sites])
    q_tokens, k_tokens, blocked = labels_of(translation, slide.kind)
    title = drawn["title"]

    def expected(stack):
        figure = viz.model_lines(stack[window], q_tokens, k_tokens, blocked=blocked, title=title, first=first)
        return json.loads(figure.to_json())

    want = expected(page_stack)
    assert [trace_fields(trace) for trace in drawn["data"]] == [trace_fields(trace) for trace in want["data"]]
    for name, axis in drawn["axes"].items():
        wanted = want["layout"][name]
        assert (axis["tickvals"], axis["ticktext"], axis["range"]) == \
            (wanted["tickvals"], wanted["ticktext"], wanted["range"]), (number, name)
        assert axis.get("showticklabels", True) == wanted.get("showticklabels", True), (number, name)
    assert drawn["headings"] == [note["text"] for note in want["layout"]["annotations"]]
    assert drawn["labels"] == shape[0] * (len(q_tokens) + len(k_tokens)) and not drawn["cut"], drawn["cut"]
    # PyTorch's weights draw the same lines, but where a weight is within ERROR_LIMIT of an opacity step.
    steps = torch_stack[window] * 20
    near = np.abs(steps - np.floor(steps) - 0.5) < 20 * ERROR_LIMIT
    assert line_levels(drawn["data"], near) == line_levels(expected(torch_stack)["data"], near)
    return title


def labels_of(translation, kind: str):
    """The query and key labels and the masks of `kind`, as the Attention and Model views give them."""
    pieces = {"src": translation.src_tokens, "tgt": translation.tgt_tokens}
    q_side = "src" if kind == "encoder.self_attn" else "tgt"
    k_side = "tgt" if kind == "decoder.self_attn" else "src"
    q_tokens = pieces[q_side] if q_side == "src" else viz.produces_labels(pieces["tgt"], translation.output_tokens)
    blocked = viz.mask_reasons(len(q_tokens), len(pieces[k_side]), causal=kind == "decoder.self_attn")
    return q_tokens, pieces[k_side], blocked


def trace_fields(trace: dict) -> tuple:
    """What a model_lines trace shows: its panel, its points, its colour and opacity, its hover."""
    as_list = lambda value: None if value is None else [None if v is None else float(v) for v in plain(value)]  # noqa: E731
    return (trace.get("name"), trace.get("mode"), trace.get("meta"), trace.get("xaxis"), trace.get("yaxis"),
            as_list(trace.get("x")), as_list(trace.get("y")),
            trace.get("colour", (trace.get("line") or {}).get("color")),
            None if trace.get("hovertext") is None else list(plain(trace["hovertext"])))


def line_levels(traces: list[dict], near: np.ndarray) -> dict:
    """(layer index, head index, query, key) -> opacity of every line, but those of the cells `near` marks."""
    levels = {}
    metas = sorted({tuple(trace["meta"][:2]) for trace in traces if trace.get("mode") == "markers"})
    layers, heads = sorted({m[0] for m in metas}), sorted({m[1] for m in metas})
    for trace in traces:
        if trace.get("mode") != "lines":
            continue
        layer, head, opacity = trace["meta"]
        ys = [int(v) for v in plain(trace["y"]) if v is not None]
        for query, key in zip(ys[0::2], ys[1::2]):
            cell = (layers.index(layer), heads.index(head), -query, -key)
            if not near[cell]:
                levels[cell] = opacity
    return levels


def plain(value):
    """A plotly.py JSON array (a list, or a base64 typed array) as a list."""
    import base64

    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    return value


def expected_customdata(trace: dict):
    """The customdata of a plotly.py figure's JSON (a typed array where it can be one, objects as lists)."""
    data = trace["customdata"]
    return data if isinstance(data, list) else np.asarray(data)


def decoded_z(trace: dict) -> list[list[bool]]:
    """Which cells of an overlay are drawn (not NaN), from plotly.py's JSON (a base64 typed array)."""
    import base64

    z = trace["z"]
    if isinstance(z, dict):
        shape = tuple(int(size) for size in str(z["shape"]).split(","))
        z = np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(shape)
    return (~np.isnan(np.asarray(z, dtype=float))).tolist()
