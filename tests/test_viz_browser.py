"""Every token labelled and nothing overlapping, as drawn by Plotly.js in headless Chromium (figure_browser.py).

Each figure is drawn at exactly the size it asks for (layout.width x layout.height), the tightest it will be shown.
Set ATLAS_SCREENSHOTS to a folder to keep a screenshot of each figure's first screen.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from figure_browser import measure, readability_problems

import viz
from benchmarks.chromium import CHROMIUM, RUN_S, launch_chromium
from benchmarks.model_view import random_stack

pytestmark = [pytest.mark.slow,  # a real browser
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")

# Pieces as eng-fra's sentencepiece writes them: long and short, repeated, special tokens, a long date word.
PIECES = ["▁Wednesday", ",", "▁March", "▁3", ",", "▁2021", "▁the", "▁cat", "s", "▁sat", "▁on", "▁a", "▁mat", "▁Elle",
          "▁lit", "▁un", "▁livre", "."]


def tokens(count: int) -> list[str]:
    return ["<s>"] + [PIECES[index % len(PIECES)] for index in range(count - 2)] + ["</s>"]


def figures(count: int, theme: viz.Theme) -> dict:
    """name -> (figure, {axis id: tick labels it must show}) for `count` tokens."""
    labels = tokens(count)
    rng = np.random.default_rng(count)
    weights = rng.dirichlet(np.ones(count), size=count)
    causal = viz.mask_reasons(count, count, causal=True)
    produces = viz.produces_labels(labels, labels[1:])
    every = {"x": count, "y": count}
    return {
        "heatmap": (viz.head_heatmap(weights, produces, labels, blocked=causal, show_values=True, theme=theme,
                                     title="decoder self-attention · layer 1 · head 3"), every),
        "stages": (viz.stages_figure(np.log(weights), causal, weights, labels, labels, theme=theme,
                                     title="encoder self-attention · layer 0 · head 1"),
                   {**every, "x2": count, "x3": count}),
        "compare": (viz.compare_figure(weights, weights.T, labels, labels, "L0 H1", "L1 H2", theme=theme,
                                       title="Compare two heads"), {**every, "x2": count, "x3": count}),
        "decoding": (viz.decoding_step_figure(random_stack(count, 3, 4)[:, :, 2], labels, labels[:3], 2, theme=theme),
                     {"x": count, "y": 12}),
        "snapshots": (viz.snapshots_figure([(f"step {step}", weights) for step in (0, 100, 1000, 5000)], labels,
                                           labels, theme=theme, title="One head during training"), {"y": count}),
        "rollout": (viz.rollout_figure(weights, labels, labels, theme=theme), every),
        "model view": (viz.model_view(random_stack(count, 3, 4), labels, labels, blocked=causal, theme=theme,
                                      title="Decoder self-attention: every layer and head"),
                       {"y": count, "y5": count, "y9": count, "x9": count, "x12": count}),
    }


@pytest.fixture(scope="module")
def page():
    with sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


def screenshot(name: str) -> Path | None:
    folder = os.environ.get("ATLAS_SCREENSHOTS")
    return Path(folder) / f"{name}.png" if folder else None


@pytest.mark.parametrize("large", [False, True], ids=["normal", "lecture"])
@pytest.mark.parametrize("count", [8, 24, 64])
def test_every_token_is_labelled_and_no_text_collides(page, count, large):
    theme = viz.Theme(large=large)
    problems = {}
    for name, (fig, expected) in figures(count, theme).items():
        result = measure(page, fig, screenshot(f"{name}-{count}-{'lecture' if large else 'normal'}"))
        assert (result["width"], result["height"]) == (fig.layout.width, fig.layout.height)
        fonts = {ticks["font"] for ticks in result["ticks"].values()}
        assert min(fonts) >= theme.min_font_size, name
        problems[name] = readability_problems(result, expected)
    assert problems == {name: [] for name in problems}


def test_the_model_view_labels_every_token_of_256_on_its_outer_axes(page):
    labels = tokens(256)
    fig = viz.model_view(random_stack(256, 2, 3), labels, labels, title="256 tokens")
    result = measure(page, fig, screenshot("model view-256-normal"))
    assert readability_problems(result, {"y": 256, "y4": 256, "x4": 256, "x6": 256}) == []


def test_a_colour_bar_title_on_top_of_its_ticks_is_caught(page):
    """The check itself can fail: the old colour bar (title on top, at Plotly's default place) touches the 1."""
    labels = tokens(8)
    fig = viz.head_heatmap(np.eye(8), labels, labels, theme=viz.Theme(large=True))
    fig.update_layout(coloraxis_colorbar=dict(title_side="top", lenmode="fraction", len=1, y=0.5, yanchor="middle"))
    fig.update_layout(height=260)
    assert any("colour bar" in problem for problem in measure(page, fig)["problems"])


def test_piled_labels_are_caught(page):
    """The check itself can fail: 64 tokens squeezed into a small figure lose or pile their labels."""
    labels = tokens(64)
    fig = viz.head_heatmap(np.eye(64), labels, labels)
    fig.update_layout(width=500, height=500)
    assert readability_problems(measure(page, fig), {"x": 64, "y": 64})


def test_head_view_lists_every_token_without_collisions(page):
    labels = tokens(64)
    weights = np.random.default_rng(0).dirichlet(np.ones(64), size=(3, 64))
    fig = viz.head_view(weights, labels, labels, blocked=viz.mask_reasons(64, 64, causal=True),
                        head_names=["L0 H0", "L0 H1", "L0 H2"], title="Head view")
    result = measure(page, fig, screenshot("head view-64-normal"))
    assert result["problems"] == []
    columns = page.evaluate("""() => [...document.querySelectorAll('.scatterlayer .trace')]
        .map(trace => [...trace.querySelectorAll('.textpoint text')].map(text => {
            const box = text.getBoundingClientRect(); return [box.top, box.bottom]; }))
        .filter(boxes => boxes.length)""")
    assert [len(column) for column in columns] == [64, 64]  # queries, keys
    for column in columns:
        column.sort()
        assert all(below[0] >= above[1] - 0.5 for above, below in zip(column, column[1:]))


def test_a_figure_saved_as_html_hovers_with_no_request_leaving_the_file(page, tmp_path):
    """viz.to_html_bytes: the file alone draws the figure and answers hover, every request but its own refused."""
    labels = tokens(8)
    fig = viz.head_heatmap(np.eye(8), labels, labels, title="saved head")
    saved = tmp_path / "head.html"
    saved.write_bytes(viz.to_html_bytes(fig, "head"))
    requests = []

    def only_the_file(route):
        requests.append(route.request.url)
        route.continue_() if route.request.url.startswith("file:") else route.abort()

    page.route("**/*", only_the_file)
    try:
        page.goto(saved.as_uri())
        page.wait_for_selector(".heatmaplayer", timeout=RUN_S * 1000)
        assert page.locator(".xtick text").count() == 8
        box = page.locator(".nsewdrag").first.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 16, box["y"] + box["height"] / 16)  # the first cell
        page.wait_for_selector(".hovertext", timeout=RUN_S * 1000)
        assert "weight: 1" in page.locator(".hovertext").first.text_content()
    finally:
        page.unroute("**/*")
    assert [url for url in requests if not url.startswith("file:")] == []
