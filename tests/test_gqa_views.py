"""Rotary positions and grouped-query attention in the views, on converted random Llama models (tests/families.py,
converted by the real command): the "Inside a head" view's rotation step shows the model's own hook points before
and after the turn (hook_q_unrotated, hook_q, hook_k_unrotated, hook_k), a grouped-query head says which key/value
head it reads and which heads share it, and the head pickers and the model view name each head's key/value head;
a shipped model without either keeps its labels and its five steps. A Chromium check looks at the rotation step and
at a 30-layer model view at 1400 x 1000 and in lecture mode at 1280 x 720 (screenshots in $ATLAS_SCREENSHOTS or
/tmp/shots58inside)."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import viz
from helpers import ROOT
from transformer import capture, load_checkpoint
from transformer.io.convert import main
from ui.screen import DEFAULT_PX
from ui.views.inside import ROTARY_STEPS
from viz.grid import panel_title

pytest.importorskip("transformers", reason="the converted folders are written with transformers (requirements-dev)")
from families import SMALL, save_family  # after the skip

TEXT = "Paris is the capital of France."
SHORT = "Paris is"  # a model view page holds three heads or more
# 6 query heads reading 2 key/value heads (3 each), 2 layers; the same with one key/value head per query head; and
# SmolLM2-135M's heads (9 reading 3) on 30 layers, with a tiny d_model so that it is quick.
SHAPES = {"llama-gqa": SMALL | dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2),
          "llama-mha": SMALL | dict(num_key_value_heads=4),
          "llama-30": dict(hidden_size=36, intermediate_size=24, num_hidden_layers=30, num_attention_heads=9,
                           num_key_value_heads=3)}
SHIPPED = "induction"  # decoder-only, rotary positions, multi-head attention


def convert_all(root: Path) -> Path:
    for name, shape in SHAPES.items():
        save_family("llama", root / "hf" / name, **shape)
        main(["llama", str(root / "hf" / name), str(root / "checkpoints" / name)])
    shutil.copytree(ROOT / "checkpoints" / SHIPPED, root / "checkpoints" / SHIPPED)
    return root / "checkpoints"


@pytest.fixture(scope="module")
def app_checkpoints(tmp_path_factory):
    return convert_all(tmp_path_factory.mktemp("gqa"))


def specs(at) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def options(at, label: str) -> list[str]:
    return next(control.options for control in at.get("segmented_control") if control.label == label)


def panel_titles(at) -> list[str]:
    """The model view's panel titles (its annotations but the figure's own notes)."""
    return [note["text"] for note in specs(at)[0]["layout"]["annotations"] if re.match(r"L\d+ H\d+", note["text"])]


def panels(titles: list[str]) -> list[tuple[int, int]]:
    return [tuple(int(n) for n in re.match(r"L(\d+) H(\d+)", title).groups()) for title in titles]


def hooks(folder: Path, text: str, layer: int) -> tuple[dict, tuple]:
    """The self-attention hook points of `layer` (batch item 0) on the pass the app captures for `text`, and the ids
    it read."""
    checkpoint = load_checkpoint(folder)
    translation = checkpoint.translate(text)
    block = f"decoder.layers.{layer}.self_attn"
    names = [f"{block}.hook_{part}" for part in ("q_unrotated", "k_unrotated", "q", "k", "v", "scores")]
    with torch.no_grad(), capture(checkpoint.model, names) as record:
        checkpoint.model(torch.tensor([translation.src_ids]), torch.tensor([translation.tgt_ids]))
    return {name.rpartition("hook_")[2]: record.hooks[name][0].numpy() for name in names}, tuple(translation.tgt_ids)


def test_the_inside_pass_holds_q_and_k_before_the_turn_and_the_key_value_heads(app_checkpoints):
    """ui.passes.inside on a rotary grouped-query model: q and k before the turn (hook_q_unrotated, hook_k_unrotated)
    beside q and k after it, keys and values of the 2 key/value heads, and query head h's scores its q against key/value
    head h // 3's k; on a sinusoidal model the unturned ones are None."""
    from ui import passes
    from ui.views.inside import INSIDE

    folder = app_checkpoints / "llama-gqa"
    translation = load_checkpoint(folder).translate(TEXT)
    inside = passes.run(INSIDE, str(folder), 0, src_ids=tuple(translation.src_ids),
                        tgt_ids=tuple(translation.tgt_ids), kind="decoder.self_attn", layer=1)
    length = len(translation.tgt_ids)
    assert inside.q.shape == inside.q_unrotated.shape == (6, length, 8)
    assert inside.k.shape == inside.k_unrotated.shape == inside.v.shape == (2, length, 8)
    dots = np.einsum("hqd,hkd->hqk", inside.q, np.repeat(inside.k, 3, axis=0))
    np.testing.assert_allclose(dots / np.sqrt(8), inside.scores, atol=1e-4)
    np.testing.assert_array_equal(inside.q_unrotated[:, 0], inside.q[:, 0])  # position 0 turns by nothing
    sinusoidal = ROOT / "checkpoints" / "reverse"
    translation = load_checkpoint(sinusoidal).translate("attention")
    plain = passes.run(INSIDE, str(sinusoidal), 0, src_ids=tuple(translation.src_ids),
                       tgt_ids=tuple(translation.tgt_ids), kind="decoder.self_attn", layer=0)
    assert plain.q_unrotated is None and plain.k_unrotated is None


@pytest.mark.slow  # AppTest
@pytest.mark.parametrize("head, query", [(4, 3), (0, 5), (2, 1)])
def test_the_rotation_step_shows_the_models_hooks_before_and_after_the_turn(app, app_checkpoints, head, query):
    at = app(checkpoint="llama-gqa", view="inside", text=TEXT, layer="1", head=str(head), query=str(query),
             inside_step="1")
    assert not at.exception, [error.value for error in at.exception]
    assert not at.warning, [warning.value for warning in at.warning]
    assert options(at, "Step") == [f"{n + 1} {name}" for n, name in enumerate(ROTARY_STEPS)]
    figure, dots = specs(at)
    assert "rotary positions turn q and k" in figure["layout"]["title"]["text"]
    found, ids = hooks(app_checkpoints / "llama-gqa", TEXT, 1)
    kv = head // 3
    before, after = (np.array(trace["z"]) for trace in figure["data"])
    assert before.shape == (1 + len(ids), 8)  # the query, then every key
    np.testing.assert_allclose(before[0], found["q_unrotated"][head, query], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(after[0], found["q"][head, query], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(before[1:], found["k_unrotated"][kv], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(after[1:], found["k"][kv], rtol=1e-5, atol=1e-5)
    assert not np.allclose(before[2:], after[2:])  # positions past 0 really turn
    # the turn keeps each pair's length: dimension i pairs with i + 4
    pairs = lambda x: np.hypot(x[..., :4], x[..., 4:])  # noqa: E731
    np.testing.assert_allclose(pairs(before), pairs(after), rtol=1e-5, atol=1e-5)
    # q·k before and after the turn; after, the model's score × √d_head
    unturned, turned = (np.array(trace["x"]) for trace in dots["data"])
    np.testing.assert_allclose(unturned, found["k_unrotated"][kv] @ found["q_unrotated"][head, query], rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(turned, found["scores"][head, query] * np.sqrt(8), rtol=1e-4, atol=1e-4)
    captions = " ".join(caption.value for caption in at.caption)
    assert "form a pair" in captions and "position" in captions


@pytest.mark.slow  # AppTest
def test_every_step_of_a_grouped_query_head_reads_its_key_value_head(app, app_checkpoints):
    found, ids = hooks(app_checkpoints / "llama-gqa", TEXT, 0)
    for lecture in ("0", "1"):
        for step, name in enumerate(ROTARY_STEPS):
            at = app(checkpoint="llama-gqa", view="inside", text=TEXT, layer="0", head="5", query="4",
                     inside_step=str(step), lecture=lecture)
            assert not at.exception, (step, [error.value for error in at.exception])
            figures = specs(at)
            assert figures, (step, name)
            for figure in figures:
                assert figure["layout"]["width"] <= DEFAULT_PX[lecture == "1"][0], (step, lecture)
            if name == "q and k":  # before the turn: the projections
                np.testing.assert_allclose(np.array(figures[0]["data"][0]["z"])[1:], found["k_unrotated"][1],
                                           atol=1e-6)
            if name == "q ⊙ k":  # after it, of key/value head 5 // 3 = 1
                products = found["q"][5, 4][None] * found["k"][1]
                np.testing.assert_allclose(np.array(figures[0]["data"][0]["z"]), products, atol=1e-5)
            if name == "output":
                weights = np.array(figures[0]["data"][0]["z"])[:-1]
                assert weights.shape == found["v"][1].shape


@pytest.mark.slow  # AppTest
@pytest.mark.parametrize("head, kv, sharers", [(4, 1, "3, 4, 5"), (0, 0, "0, 1, 2"), (2, 0, "0, 1, 2")])
def test_the_inside_view_names_the_key_value_head_and_its_sharers(app, head, kv, sharers):
    at = app(checkpoint="llama-gqa", view="inside", text=TEXT, head=str(head), inside_step="0")
    assert not at.exception
    captions = [caption.value for caption in at.caption]
    sentence = f"query head {head} reads key/value head {kv}, shared with heads {sharers}"
    assert any(sentence in caption for caption in captions), captions
    assert any(f"head {head} · kv {kv}" in caption for caption in captions), captions
    assert specs(at)[0]["layout"]["title"]["text"].endswith(f"(kv head {kv})")
    at = app(checkpoint="llama-gqa", view="inside", text=TEXT, head=str(head), inside_step="1", lecture="1")
    assert any(sentence in caption.value for caption in at.caption)  # lecture mode too, under the figure


@pytest.mark.slow  # AppTest
def test_head_pickers_and_the_model_view_name_each_heads_key_value_head(app):
    at = app(checkpoint="llama-gqa", view="model", text=TEXT)
    assert not at.exception
    titles = panel_titles(at)
    assert titles and titles == [panel_title(layer, head, 3) for layer, head in panels(titles)]
    assert titles[0] == "L0 H0 · kv0"
    assert at.selectbox(key="model-pick").options[:6] == [f"L0 H{head} · kv{head // 3}" for head in range(6)]
    for view in ("attention", "inside"):
        at = app(checkpoint="llama-gqa", view=view, text=TEXT)
        assert options(at, "Head") == [f"{head} · kv{head // 3}" for head in range(6)]
        at = app(checkpoint="llama-gqa", view=view, text=TEXT, lecture="1")
        assert options(at, "Head") == [f"H{head}·kv{head // 3}" for head in range(6)]


@pytest.mark.slow  # AppTest
def test_the_model_view_pages_whole_key_value_groups_and_every_page_draws(app):
    at = app(checkpoint="llama-30", view="model", text=SHORT)
    assert not at.exception
    pager = at.segmented_control(key="model_window")
    windows = [tuple(int(n) for n in re.match(r"L(\d+)(?:–\d+)? H(\d+)", label).groups()) for label in pager.options]
    assert len(windows) > 1
    heads = sorted({head for _, head in windows})
    assert heads == [0, 3, 6], heads  # whole groups of 3 on each page (four would fit)
    for window in windows:  # every page draws its own heads (one past the first once indexed outside its window)
        at.segmented_control(key="model_window").set_value(window).run()
        assert not at.exception, (window, [error.value for error in at.exception])
        figure = specs(at)[0]
        titles = panel_titles(at)
        assert titles[0] == panel_title(*window, 3), (window, titles[:3])
        assert titles == [panel_title(layer, head, 3) for layer, head in panels(titles)]
        hover = [trace for trace in figure["data"] if trace["type"] == "heatmap"]
        assert [trace["meta"] for trace in hover][0] == list(window)


@pytest.mark.slow  # AppTest
@pytest.mark.parametrize("checkpoint", [SHIPPED, "llama-mha"])
def test_a_model_without_grouped_query_attention_keeps_its_labels(app, checkpoint):
    heads = 4 if checkpoint == "llama-mha" else load_checkpoint(ROOT / "checkpoints" / SHIPPED).config.num_heads
    text = "attention is all you need. attention is" if checkpoint == SHIPPED else TEXT
    at = app(checkpoint=checkpoint, view="model", text=text)
    assert not at.exception
    titles = panel_titles(at)
    assert titles and titles == [f"L{layer} H{head}" for layer, head in panels(titles)]
    assert at.selectbox(key="model-pick").options[:heads] == [f"L0 H{head}" for head in range(heads)]
    at = app(checkpoint=checkpoint, view="inside", text=text, head="1")
    assert options(at, "Head") == [str(head) for head in range(heads)]
    assert not any("kv" in caption.value or "key/value" in caption.value for caption in at.caption)
    assert options(at, "Step") == [f"{n + 1} {name}" for n, name in enumerate(ROTARY_STEPS)]  # both rotary
    at = app(checkpoint=checkpoint, view="inside", text=text, lecture="1")
    assert options(at, "Head") == [f"H{head}" for head in range(heads)]


def test_panel_titles_and_the_rotation_figures():
    assert panel_title(2, 5) == "L2 H5" and panel_title(2, 5, 1) == "L2 H5"
    assert panel_title(2, 5, 3) == "L2 H5 · kv1" and panel_title(29, 8, 3) == "L29 H8 · kv2"
    before, after = np.arange(12.0).reshape(3, 4), -np.arange(12.0).reshape(3, 4)
    fig = viz.inside.rotation_figure(before, after, ["q · a", "k · a", "k · b"], title="t", width=600)
    assert fig.layout.width <= 600
    np.testing.assert_array_equal(fig.data[0].z, before)
    np.testing.assert_array_equal(fig.data[1].z, after)
    assert fig.data[0].zmax == fig.data[1].zmax == 11 and fig.data[0].zmin == -11  # one scale for both
    assert [note.text for note in fig.layout.annotations] == ["before", "after"]
    # 64 dimensions on a narrow page: each panel still as wide as its heading, the figure then wider than asked
    wide = viz.inside.rotation_figure(np.ones((3, 64)), np.ones((3, 64)), list("abc"), title="t", width=200,
                                      headings=("before the turn", "after"))
    assert wide.layout.xaxis.domain[1] - wide.layout.xaxis.domain[0] > 0.3
    with pytest.raises(ValueError):
        viz.inside.rotation_figure(before, after[:, :2], ["a", "b", "c"], title="t", width=600)
    dots = viz.inside.turned_dots_figure([1.0, -2.0], [0.5, 3.0], ["a", "b"], title="t")
    assert list(dots.data[0].x) == [1.0, -2.0] and list(dots.data[1].text) == ["0.5", "3"]


SHOTS = Path(os.environ.get("ATLAS_SCREENSHOTS") or "/tmp/shots58inside")


@pytest.mark.slow
def test_the_rotation_step_and_a_30_layer_model_view_read_well_in_chromium(app_checkpoints, tmp_path):
    """At 1400 x 1000, and 1280 x 720 in lecture mode: the rotation step of a grouped-query head labels its query and
    every key once, fits the page and (lecture) starts at the top (LECTURE_TOP_PX), and says which key/value head it
    reads; the model view of 30 layers x 9 heads (3 key/value heads) labels its outer axes with every token, its
    panel titles (each naming its kv head) touch nothing, and it fits the page. Screenshots in SHOTS."""
    pytest.importorskip("playwright.sync_api", reason="needs python playwright")
    from test_browser import LECTURE_TOP_PX, MODES, figure_measures, label_problems, named_case, open_link

    from benchmarks.chromium import CHROMIUM, RUN_S, launch_chromium
    from deploy.server import streamlit_server

    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    rows = len(load_checkpoint(app_checkpoints / "llama-gqa").translate(TEXT, beam_size=1).tgt_ids)
    grid = load_checkpoint(app_checkpoints / "llama-30")
    grid_tokens, short_tokens = (len(grid.translate(text, beam_size=1).tgt_ids) for text in (TEXT, SHORT))
    problems = []
    with streamlit_server(app_checkpoints, tmp_path / "streamlit.log") as (url, _), sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            for mode, (viewport, mode_params) in MODES.items():
                drawn = "y" if mode == "lecture" else "model"  # lecture mode's model view: lines, rows labelled
                cases = [("rotation", [("inside-rotation", "y", 1 + rows), ("inside-turned-dots", "y", rows)],
                          dict(checkpoint="llama-gqa", text=TEXT, view="inside", kind="decoder.self_attn", layer="1",
                               head="4", query="5", inside_step="1")),
                         ("model-30", [(0, drawn, grid_tokens)], dict(checkpoint="llama-30", text=TEXT,
                                                                       view="model")),
                         ("model-30-short", [(0, drawn, short_tokens)], dict(checkpoint="llama-30", text=SHORT,
                                                                             view="model"))]
                for name, figures, params in cases:
                    label = f"{mode}-{name}"
                    page = browser.new_page(viewport=viewport)  # a page each: no state from the case before
                    page.set_default_timeout(RUN_S * 1000)
                    with named_case(page, label):
                        open_link(page, url, decoding="greedy", **params, **mode_params)
                        results = [figure_measures(page, figure) for figure, _, _ in figures]
                    for (figure, axes, tokens), result in zip(figures, results):
                        problems += label_problems(f"{label} {figure}", result, axes, tokens)
                        if result["shown"]["figure"] > result["shown"]["page"] + 1:
                            problems.append(f"{label} {figure}: {result['shown']['figure']:.0f} px wide on a "
                                            f"{result['shown']['page']:.0f} px page")
                    if mode == "lecture" and results[0]["top"] > LECTURE_TOP_PX:
                        problems.append(f"{label}: the figure starts {results[0]['top']:.0f} px down")
                    if name == "rotation" and "reads key/value head 1, shared with heads 3, 4, 5" not in \
                            page.inner_text("body"):
                        problems.append(f"{label}: no sentence names the key/value head")
                    page.screenshot(path=SHOTS / f"{label}.png")
                    last = figures[-1][0]  # and further down the page: the last figure, what follows it
                    page.locator(f".st-key-wide-figure-{last}" if isinstance(last, str) else ".stPlotlyChart").last \
                        .scroll_into_view_if_needed()
                    page.screenshot(path=SHOTS / f"{label}-below.png")
                    assert not page.locator('[data-testid="stException"]').count(), label
                    page.close()
        finally:
            browser.close()
    assert not problems, problems
