"""Rotary positions in the Positional encoding view, on a converted Llama (llama3 scaling, grouped-query attention):
the q·k-by-distance curve turns q and k as the model's own rotate() does and passes through every score the model
captures; the frequencies drawn are the model's, checked against llama3's rule by hand; every plot opens in AppTest
(and the rotary ones only on a rotary model); and in Chromium the rotary plots fit a laptop and a projector."""
from __future__ import annotations

import json
import math
import os
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
import torch

import viz
from helpers import plotly_values
from transformer import capture, load_checkpoint
from transformer.io.convert import main
from transformer.model.positional import rotary_frequencies, rotate

pytest.importorskip("transformers", reason="the converted folders are written with transformers (requirements-dev)")
from families import SHAPES, save_family  # after the skip

TEXT = "Paris is the capital of France."
LLAMA3 = SHAPES["llama"][1]  # d_head 8 (4 pairs), 4 query heads on 2 key/value heads, max_len 512, pretrained at 256
PLOTS = ["heatmap", "curves", "similarity", "frequencies", "distance"]


@pytest.fixture(scope="module")
def app_checkpoints(tmp_path_factory) -> Path:
    """A checkpoints folder with a converted Llama (LLAMA3) and a converted GPT-2 (learned positions), converted by the
    real command; the `app` fixture (conftest) opens the app on it."""
    root = tmp_path_factory.mktemp("rotary")
    save_family("llama", root / "hf" / "llama", **LLAMA3)
    save_family("gpt2", root / "hf" / "gpt2")
    for family in ("llama", "gpt2"):
        main([family, str(root / "hf" / family), str(root / "checkpoints" / family)])
    return root / "checkpoints"


@pytest.fixture(scope="module")
def llama(app_checkpoints):
    return load_checkpoint(app_checkpoints / "llama")


def test_rotary_scores_equal_the_models_rotate_at_any_two_positions(llama):
    """q turned at position m and k at n by transformer.model.positional.rotate (the model's own angles, and its
    float32 cos and sin tables) give the q·k that viz.rotary_scores gives at distance m − n."""
    frequencies = rotary_frequencies(llama.config)  # float32, as the model turns
    angles = torch.arange(llama.config.max_len, dtype=torch.float64)[:, None] * frequencies.double()
    angles = torch.cat([angles, angles], dim=1)  # (max_len, d_head), as RotaryPositional lays them out
    rotary = llama.model.decoder.rotary
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        q, k = torch.randn(2, llama.config.d_head, generator=generator, dtype=torch.float64)
        for m, n in [(0, 0), (5, 2), (40, 7), (300, 11), (511, 0), (511, 500), (256, 255)]:
            turned = [rotate(x[None, None, None], angles.cos()[p:p + 1], angles.sin()[p:p + 1]) for x, p in
                      ((q, m), (k, n))]
            ours = float((turned[0] * turned[1]).sum())
            curve = viz.rotary_scores(q.numpy(), k.numpy(), frequencies.numpy(), [m - n])[0]
            assert abs(curve - ours) <= 1e-5, (m, n)
            q32, k32 = (rotate(x.float()[None, None, None], *rotary.rotation(p, 1)) for x, p in ((q, m), (k, n)))
            assert abs(curve - float((q32 * k32).sum())) <= 1e-5, (m, n)  # the model's own float32 tables


def test_the_curve_passes_through_every_score_the_model_captures(llama):
    """For every layer, head and (query, key) pair the causal mask allows: the captured q and k before the rotation,
    drawn at their distance, give the captured score × √d_head."""
    ids = torch.tensor([llama.encode(TEXT)])
    frequencies = rotary_frequencies(llama.config).numpy()
    config = llama.config
    with torch.no_grad(), capture(llama.model, ["*.hook_q_unrotated", "*.hook_k_unrotated", "*.hook_scores"]) as record:
        llama.model(None, ids)
    length, checked = ids.shape[1], 0
    for layer in range(config.num_decoder_layers):
        site = f"decoder.layers.{layer}.self_attn"
        q, k = record.hooks[f"{site}.hook_q_unrotated"][0].numpy(), record.hooks[f"{site}.hook_k_unrotated"][0].numpy()
        scores = record.hooks[f"{site}.hook_scores"][0].numpy() * math.sqrt(config.d_head)
        assert k.shape[0] == config.kv_heads < config.num_heads  # grouped: query head h reads key/value head h // 2
        for head in range(config.num_heads):
            for query in range(length):
                for key in range(query + 1):
                    curve = viz.rotary_scores(q[head, query], k[head // 2, key], frequencies, [query - key])[0]
                    assert curve == pytest.approx(scores[head, query, key], rel=1e-5, abs=1e-5)
                    checked += 1
    assert checked == config.num_decoder_layers * config.num_heads * length * (length + 1) // 2 > 100


def llama3_by_hand(theta: float, d_head: int, factor: float, low: float, high: float, original: int) -> np.ndarray:
    """Llama 3.1's rule, written from its description: wavelengths above original / low stretched by `factor`, below
    original / high kept, in between blended by how many times the wavelength fits in `original`."""
    frequencies = theta ** (-np.arange(0, d_head, 2) / d_head)
    wavelengths = 2 * np.pi / frequencies
    smooth = (original / wavelengths - low) / (high - low)
    blended = (1 - smooth) * frequencies / factor + smooth * frequencies
    return np.where(wavelengths < original / high, frequencies,
                    np.where(wavelengths > original / low, frequencies / factor, blended))


# ---------------------------------------------------------------------------------------------- the app (AppTest)


def figure(at, index: int = 0) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def opened(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


@pytest.mark.slow  # the app in AppTest
def test_every_positional_plot_of_a_rotary_model(app, llama):
    config = llama.config
    at = opened(app(checkpoint="llama", view="positional", text=TEXT))
    assert at.segmented_control(key="pe_plot").options == ["positions × dimensions", "curves by dimension",
                                                          "similarity", "frequencies", "q·k by distance"]
    # The table is the rotation, d_head wide: the heatmap's columns and the curves' dimensions are its own.
    heatmap = figure(at)
    assert plotly_values(heatmap["data"][0]["z"]).shape == (50, config.d_head)
    assert "rope_theta 500000 · llama3 ×8" in heatmap["layout"]["title"]["text"]
    at = opened(at.segmented_control(key="pe_plot").set_value("curves").run())
    assert at.multiselect(key="pe_dims").options == [f"{dim}: {name}" for dim, name in
                                                     enumerate(viz.rotary_dim_names(config.d_head))]
    assert at.multiselect(key="pe_dims").value == [0, 1, 2, 3]
    assert [trace["name"] for trace in figure(at)["data"]] == [f"sin · pair {pair}" for pair in range(4)]
    at = opened(at.multiselect(key="pe_dims").set_value([1, 7]).run())
    np.testing.assert_allclose(plotly_values(figure(at)["data"][1]["y"]),
                               llama.model.positional_table("tgt")[:50, 7].numpy(), rtol=1e-6)
    at = opened(at.segmented_control(key="pe_plot").set_value("similarity").run())
    assert "depends only on m − n" in " ".join(caption.value for caption in at.caption)

    # The frequencies: the model's, scaled by llama3's rule, and as they were before, each pair's wavelength.
    at = opened(at.segmented_control(key="pe_plot").set_value("frequencies").run())
    traces = {trace.get("name"): plotly_values(trace["y"]) for trace in figure(at)["data"]}
    scaled = llama3_by_hand(500000.0, config.d_head, 8.0, 1.0, 4.0, 256)
    unscaled = 500000.0 ** (-np.arange(0, config.d_head, 2) / config.d_head)
    np.testing.assert_allclose(traces["scaled, as the model turns"], 2 * np.pi / scaled, rtol=1e-5)
    np.testing.assert_allclose(traces["before scaling"], 2 * np.pi / unscaled, rtol=1e-5)
    assert scaled[0] == unscaled[0] and scaled[2] == pytest.approx(unscaled[2] / 8)  # kept, stretched
    assert unscaled[1] / 8 < scaled[1] < unscaled[1]  # blended
    notes = [note["text"] for note in figure(at)["layout"]["annotations"]]
    assert notes == ["max_len 512", "pretrained at 256"]
    assert "rope_theta 500000 · llama3 ×8" in figure(at)["layout"]["title"]["text"]

    # q·k by distance: layer 1, head 3 (key/value head 1), query token 6, key token 2 of this input.
    at = opened(at.segmented_control(key="pe_plot").set_value("distance").run())
    at.segmented_control(key="layer").set_value(1)
    at.segmented_control(key="head").set_value(3)
    at = opened(at.selectbox(key="query").set_value(6).run())
    assert at.selectbox(key="pe_key").options == [f"k {t}: {viz.piece_text(piece)}" for t, piece in
                                                  enumerate(llama.src_tokenizer.pieces(llama.encode(TEXT))[:7])]
    at = opened(at.selectbox(key="pe_key").set_value(2).run())
    site = "decoder.layers.1.self_attn"
    with torch.no_grad(), capture(llama.model, [f"{site}.hook_q_unrotated", f"{site}.hook_k_unrotated",
                                                f"{site}.hook_scores"]) as record:
        llama.model(None, torch.tensor([llama.encode(TEXT)]))
    q = record.hooks[f"{site}.hook_q_unrotated"][0, 3, 6].numpy()
    k = record.hooks[f"{site}.hook_k_unrotated"][0, 1, 2].numpy()
    own = float(record.hooks[f"{site}.hook_scores"][0, 3, 6, 2]) * math.sqrt(config.d_head)
    curve, mark = figure(at)["data"]
    np.testing.assert_allclose(plotly_values(curve["y"]), viz.rotary_scores(q, k, rotary_frequencies(config).numpy(),
                                                                     np.arange(50)), rtol=1e-5, atol=1e-5)
    assert plotly_values(mark["x"]).tolist() == [4] and plotly_values(mark["y"])[0] == pytest.approx(own, rel=1e-5)
    assert plotly_values(curve["y"])[4] == pytest.approx(own, rel=1e-5, abs=1e-5)  # the mark sits on the curve
    captions = " ".join(caption.value for caption in at.caption)
    assert "layer 1 head 3 (key/value head 1, shared by 2 heads)" in captions and "hook_q_unrotated" in captions

    # No input: all-ones q and k, whose q·k after the rotation is Σ_i 2 cos(Δ θ_i).
    at = opened(at.text_input(key="text").set_value("").run())
    (curve,) = figure(at)["data"]
    distances = np.arange(50)
    expected = 2 * np.cos(distances[:, None] * rotary_frequencies(config).numpy()[None, :]).sum(axis=1)
    np.testing.assert_allclose(plotly_values(curve["y"]), expected, rtol=1e-6)
    assert "all ones" in " ".join(caption.value for caption in at.caption)


@pytest.mark.slow  # the app in AppTest
def test_a_model_without_rotary_positions_offers_no_rotary_plot(app):
    at = opened(app(checkpoint="gpt2", view="positional", text=TEXT, pe_plot="frequencies"))
    assert at.segmented_control(key="pe_plot").options == ["positions × dimensions", "curves by dimension",
                                                          "similarity"]
    assert at.segmented_control(key="pe_plot").value == "heatmap"  # the link's rotary plot fell back, with a notice
    assert "`pe_plot`" in " ".join(warning.value for warning in at.warning)
    at = opened(at.segmented_control(key="pe_plot").set_value("curves").run())
    assert len(at.multiselect(key="pe_dims").options) == 32  # d_model: a learned table is the model's width


# ---------------------------------------------------------------------------------------------- Chromium


@pytest.mark.slow  # a server and a browser
def test_the_rotary_plots_fit_a_laptop_and_a_projector(app_checkpoints, tmp_path):
    """At 1400 x 1000, and 1280 x 720 in lecture mode: each rotary plot and the rotation's heatmap draw without an
    error, no figure passes the window's edge or is cut, and in lecture mode the figure starts within LECTURE_TOP_PX.
    Screenshots in tmp_path, and in $ATLAS_SCREENSHOTS when it is set."""
    from test_browser import CHROMIUM, FIT_JS, MODES, fit_problems

    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")
    from benchmarks.chromium import RUN_S, launch_chromium, wait_for_rerun
    from deploy.server import streamlit_server

    folders = [tmp_path] + ([Path(os.environ["ATLAS_SCREENSHOTS"])] if os.environ.get("ATLAS_SCREENSHOTS") else [])
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    problems = []
    with streamlit_server(app_checkpoints, tmp_path / "streamlit.log") as (url, _), \
            sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            for mode, (viewport, params) in MODES.items():
                page = browser.new_page(viewport=viewport)
                page.set_default_timeout(RUN_S * 1000)
                for plot in ("frequencies", "distance", "heatmap"):
                    link = dict(checkpoint="llama", view="positional", text=TEXT, pe_plot=plot, layer="1", head="2",
                                query="6", **params)
                    page.goto(url + "?" + urllib.parse.urlencode(link))
                    page.wait_for_selector('[data-testid="stMainBlockContainer"][data-measured-width]')
                    wait_for_rerun(page, settle_s=0.3, start_s=0.3)  # drawn again for the measured width
                    page.wait_for_selector(".stPlotlyChart .js-plotly-plot")
                    case = f"rotary-{mode}-{plot}"
                    assert not page.locator('[data-testid="stException"]').count(), case
                    problems += fit_problems(case, page.evaluate(FIT_JS), viewport, mode == "lecture", True)
                    for folder in folders:
                        page.screenshot(path=folder / f"{case}.png")
                page.close()
        finally:
            browser.close()
    assert not problems, problems
