"""The "Inside a head" view: its pass is the model's own, its steps draw in normal and lecture mode, every token
labelled, no figure wider than the page, the step in the link."""
import json
import math

import numpy as np
import pytest

from helpers import ROOT
from transformer import load_checkpoint
from ui.screen import DEFAULT_PX

REVERSE = ROOT / "checkpoints" / "reverse"
KINDS = ("encoder.self_attn", "decoder.self_attn", "decoder.cross_attn")


@pytest.mark.parametrize("kind", KINDS)
def test_the_inside_pass_is_the_pass_every_view_shows(kind):
    from ui import passes
    from ui.views.inside import INSIDE

    checkpoint = load_checkpoint(REVERSE)
    translation = checkpoint.translate("lecture2026")
    inside = passes.run(INSIDE, str(REVERSE), 0, src_ids=tuple(translation.src_ids),
                        tgt_ids=tuple(translation.tgt_ids), kind=kind, layer=1)
    np.testing.assert_array_equal(inside.weights, translation.attention.stack(kind)[1].numpy())
    np.testing.assert_array_equal(inside.allowed, translation.attention.stack(kind, part="mask")[1, 0].numpy())
    d_head = inside.q.shape[-1]
    # the chain the view draws: q ⊙ k summed and divided by √d_head is the model's score; the weights mix v into z
    dots = np.einsum("hqd,hkd->hqk", inside.q, inside.k)
    np.testing.assert_allclose(dots / math.sqrt(d_head), inside.scores, atol=1e-5)
    np.testing.assert_allclose(np.einsum("hqk,hkd->hqd", inside.weights, inside.v), inside.z, atol=1e-5)
    length = len(translation.src_ids if kind == "encoder.self_attn" else translation.tgt_ids)
    assert inside.neurons.shape == (length, checkpoint.config.d_ff)


def charts(at) -> list[dict]:
    return [json.loads(chart.proto.spec)["layout"] for chart in at.get("plotly_chart")]


@pytest.mark.parametrize("lecture", ["0", "1"])
def test_every_step_draws_every_token_within_the_page(app, lecture):
    for kind in KINDS:
        for step in range(5):
            at = app(view="inside", kind=kind, layer="1", head="2", query="1", inside_step=str(step),
                     lecture=lecture)
            assert not at.exception, (kind, step, at.exception)
            assert not at.warning, [w.value for w in at.warning]  # the link was read as given
            layouts = charts(at)
            assert layouts, (kind, step)
            for layout in layouts:
                assert layout["width"] <= DEFAULT_PX[lecture == "1"][0], (kind, step, layout["title"])
                rows = layout["yaxis"]["ticktext"]
                assert len(rows) == len(layout["yaxis"]["tickvals"]) and all(rows), (kind, step)
            if step in (1, 2) and kind != "decoder.self_attn":  # a row per source piece: a character each, and </s>
                assert len(layouts[0]["yaxis"]["ticktext"]) == len(at.session_state["text"]) + 1, (kind, step)
            if step == 4:
                assert at.dataframe, "the neurons' table"


def test_the_arrows_step_through_and_the_link_keeps_the_step(app):
    at = app(view="inside", lecture="1")
    assert at.session_state["inside_step"] == 0
    at.button(key="inside-next").click().run()
    at.button(key="inside-next").click().run()
    assert at.session_state["inside_step"] == 2
    assert at.query_params["inside_step"] == "2"
    assert "softmax" in charts(at)[0]["title"]["text"]
    at.button(key="inside-back").click().run()
    assert at.query_params["inside_step"] == "1"


def test_a_link_to_a_query_the_input_lacks_falls_back_with_a_notice(app):
    at = app(view="inside", query="99")
    assert not at.exception
    assert at.session_state["query"] == 0
    assert any("query" in warning.value for warning in at.warning)
