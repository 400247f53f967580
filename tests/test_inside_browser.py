"""The "Inside a head" view in a real browser on the shipped checkpoints: at 1400 x 1000, and 1280 x 720 in lecture
mode, on eng-fra at 24 tokens and on dates, every step's figures label each token once, fit the page, and in lecture
mode the first starts at the top (LECTURE_TOP_PX: the controls stand beside it); a target and a foil through the
link. Screenshots land in $ATLAS_SCREENSHOTS when it is set."""
from __future__ import annotations

import pytest
from test_browser import (  # noqa: F401
    LECTURE_TOP_PX,
    MEDIUM,
    MODES,
    RUN_S,
    browser,
    figure_measures,
    label_problems,
    open_link,
    screenshot,
    screenshots,
    shipped_checkpoints,
)

from helpers import ROOT

pytestmark = pytest.mark.slow

INPUTS = {"eng-fra-24": ("eng-fra", MEDIUM), "dates": ("dates", "Wednesday, March 3, 2021")}
# step -> (show_figure's name, {axis letter: the side whose tokens label it}) per kind; the heads' figure and the
# input's row label heads and the query, not tokens.
STEP_FIGURES = {0: [("inside-qk", None)], 1: [("inside-products", "keys")], 2: [("inside-softmax", "keys")],
                3: [("inside-values", None)], 4: [("inside-neuron", "stack")]}
KEY_SIDE = {"encoder.self_attn": "src", "decoder.self_attn": "tgt", "decoder.cross_attn": "src"}
STACK_SIDE = {"encoder.self_attn": "src", "decoder.self_attn": "tgt", "decoder.cross_attn": "tgt"}


@pytest.mark.parametrize("mode", MODES)
def test_every_step_labels_every_token_and_fits(shipped_server, browser, shipped_checkpoints, mode):  # noqa: F811
    from transformer import load_checkpoint

    folder = screenshots()
    viewport, mode_params = MODES[mode]
    problems = []
    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(RUN_S * 1000)
    try:
        for input_name, (name, text) in INPUTS.items():
            checkpoint = shipped_checkpoints.get(name) or load_checkpoint(ROOT / "checkpoints" / name)
            translation = checkpoint.translate(text, beam_size=1)
            counts = {"src": len(translation.src_ids), "tgt": len(translation.tgt_ids)}
            for kind in ("decoder.cross_attn", "encoder.self_attn", "decoder.self_attn"):
                for step, figures in STEP_FIGURES.items():
                    if kind != "decoder.cross_attn" and step in (0, 3):  # the same figures as cross draws
                        continue
                    label = f"{mode}-{input_name}-{kind}-{step}"
                    open_link(page, shipped_server, checkpoint=name, text=text, view="inside", kind=kind, layer="1",
                              head="1", query="2", inside_step=str(step), decoding="greedy", **mode_params)
                    for index, (figure, side) in enumerate(figures):
                        result = figure_measures(page, figure)
                        tokens = {"keys": KEY_SIDE, "stack": STACK_SIDE}[side][kind] if side else None
                        problems += label_problems(label, result, "y" if side else "", counts[tokens] if side else 0)
                        if result["shown"]["figure"] > result["shown"]["page"] + 1:
                            problems.append(f"{label}: {result['shown']['figure']:.0f} px wide on a "
                                            f"{result['shown']['page']:.0f} px page")
                        if mode == "lecture" and not index and result["top"] > LECTURE_TOP_PX:
                            problems.append(f"{label}: the figure starts {result['top']:.0f} px down")
                    screenshot(page, folder, f"inside-{label}")
        # a target and a foil through the link: the view reads the target, the output compares the foil
        target = "24noitnexta"
        open_link(page, shipped_server, checkpoint="reverse", text="attention42", view="inside",
                  kind="decoder.self_attn", inside_step="2", query="9", target=target, foil="24noitnetta",
                  **mode_params)
        page.get_by_text("Target pieces: probability and rank · foil", exact=False).first.wait_for()
        assert target in page.url and "foil=" in page.url
        screenshot(page, folder, f"inside-{mode}-target-foil")
        assert not page.locator('[data-testid="stException"]').count()
    finally:
        page.close()
    assert not problems, problems
