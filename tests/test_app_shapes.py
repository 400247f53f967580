"""The app on models of the other shapes: every view of the registry opens a GPT-2 (decoder-only), BERT
(encoder-only), BART (encoder-decoder), Llama, Qwen2 and Mistral (decoder-only: rotary, RMSNorm, gated
feed-forward, grouped-query attention; Mistral's sliding window) checkpoint, and the shipped decoder-only `induction`,
without an error, and
offers only the attention kinds the model has. The converted models are random and small (tests/families.py),
converted by the real command."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from helpers import ROOT, outputs, plotly_values
from transformer import load_checkpoint
from transformer.io.convert import main
from ui.views import VIEWS

pytest.importorskip("transformers", reason="the converted folders are written with transformers (requirements-dev)")
from families import SHAPES, save_family  # after the skip

pytestmark = pytest.mark.slow  # every test runs the whole app (AppTest)
KINDS = {"gpt2": ["decoder.self_attn"], "bert": ["encoder.self_attn"],
         "bart": ["encoder.self_attn", "decoder.self_attn", "decoder.cross_attn"], "induction": ["decoder.self_attn"],
         "llama": ["decoder.self_attn"], "qwen2": ["decoder.self_attn"], "mistral": ["decoder.self_attn"]}
TEXTS = {"gpt2": "Paris is the capital", "bert": "Paris is the [MASK] of France.", "bart": "Paris is the capital",
         "induction": "attention is all you need. attention is", "llama": "Paris is the capital",
         "qwen2": "Paris is the capital", "mistral": "Paris is the capital of France"}
CONVERTED = ("gpt2", "bert", "bart", "llama", "qwen2", "mistral")


@pytest.fixture(scope="module")
def app_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    for family in CONVERTED:
        save_family(family, root / "hf" / family, **SHAPES[family][0])  # Mistral's: a window of 4 keys
        main([family, str(root / "hf" / family), str(root / "checkpoints" / family)])
    shutil.copytree(ROOT / "checkpoints" / "induction", root / "checkpoints" / "induction")
    return root / "checkpoints"


LABELS = {"encoder.self_attn": "encoder self", "decoder.self_attn": "decoder self", "decoder.cross_attn": "cross"}


def offered_kinds(at) -> list[str]:
    """The options of every "Attention" picker on the page (the kind picker's labels)."""
    return [option for control in at.get("segmented_control") if control.label == "Attention"
            for option in control.options]


@pytest.mark.parametrize("family", sorted(KINDS))
@pytest.mark.parametrize("view", [view.key for view in VIEWS])
def test_every_view_opens_every_shape(app, family, view):
    at = app(checkpoint=family, view=view, text=TEXTS[family])
    assert not at.exception, [error.value for error in at.exception]
    assert at.query_params["checkpoint"] == family
    expected = [LABELS[kind] for kind in KINDS[family]]
    offered = offered_kinds(at)
    assert set(offered) <= set(expected), offered
    if view == "attention":
        assert offered == expected


def test_views_without_their_part_say_so(app):
    at = app(checkpoint="gpt2", view="attribution", text=TEXTS["gpt2"])
    assert "decoder-only model has no decoder.cross_attn attention" in at.info[0].value
    at = app(checkpoint="bert", view="decoding", text=TEXTS["bert"])
    assert "encoder-only model has no decoder.self_attn attention" in at.info[0].value
    at = app(checkpoint="gpt2", view="corpus", text=TEXTS["gpt2"])
    assert at.info[0].value == "Not on this server: its task (generate) has no corpus this project can read."


def test_decoder_only_decoding_steps_continue_the_prompt(app):
    at = app(checkpoint="gpt2", view="decoding", text=TEXTS["gpt2"])
    assert at.get("segmented_control")[1].options == ["Greedy", "Sampling"]  # no beam tree without an encoder
    steps = at.slider(key="step")
    assert steps.max == 19  # CONTINUATION_TOKENS pieces, each one step
    assert any(text.value.startswith("Step 0") and "Paris" in text.value for text in at.text)  # the prompt first


def test_encoder_only_output_fills_the_mask(app, app_checkpoints):
    at = app(checkpoint="bert", view="attention", text=TEXTS["bert"])
    filled = load_checkpoint(app_checkpoints / "bert").translate(TEXTS["bert"]).text
    assert "[MASK]" not in filled and filled.startswith("paris is the ") and filled.endswith(" of france.")
    assert outputs(at) == [filled]
    assert "masked-token prediction" in at.caption[0].value


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_a_target_is_not_used_without_an_encoder_decoder_pair(app, family):
    at = app(checkpoint=family, view="attention", text=TEXTS[family], target="Paris is")
    assert not at.exception, [error.value for error in at.exception]
    assert any("The target is not used" in info.value for info in at.sidebar.info)


def test_the_masks_view_shows_mistrals_sliding_window(app):
    """The window's blocked cells, keys more than 3 before their query, are a panel of their own, named and explained,
    not called causal; a model without a window names none."""
    at = app(checkpoint="mistral", view="masks", text=TEXTS["mistral"])
    assert not at.exception, [error.value for error in at.exception]
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    titles = [note["text"] for note in spec["layout"]["annotations"]]
    assert titles[:3] == ["causal", "sliding window", "all reasons"], titles
    window = next(trace for trace in spec["data"] if trace.get("name") == "sliding window")
    blocked = np.isfinite(plotly_values(window["z"]).astype(float))  # the overlay draws blocked cells, others are gaps
    rows, cols = np.nonzero(blocked)
    assert len(rows) and (rows - cols >= 4).all()
    length = blocked.shape[0]
    assert len(rows) == sum(max(query - 3, 0) for query in range(length))
    assert any("Sliding window" in text.value for text in at.markdown)
    at = app(checkpoint="llama", view="masks", text=TEXTS["llama"])
    assert not any("Sliding window" in text.value for text in at.markdown)


def test_the_induction_models_views_show_its_induction_heads(app):
    """The Heads view names a layer-1 head "induction" on a typed repeat; the Training view offers its four snapshots
    and the final model."""
    at = app(checkpoint="induction", view="heads", text=TEXTS["induction"])
    table = at.dataframe[0].value
    best = table.loc[table["induction_share"].idxmax()]
    assert (best["layer"], best["role"]) == (1, "induction") and best["induction_share"] > 0.5
    at = app(checkpoint="induction", view="training", text=TEXTS["induction"])
    assert not at.exception, [error.value for error in at.exception]
    assert len(at.select_slider(key="snapshot").options) == 5
    # the output, and the output at the chosen snapshot (the final): the repeat, and on into a third
    assert set(outputs(at)) == {"all you need. atten"}


def test_the_induction_models_map_marks_its_previous_token_and_induction_heads(app):
    """Across inputs: the map rings layer 0's previous-token head and layer 1's induction head, the two steps of an
    induction circuit, and names no previous-token or induction role as one no head reaches."""
    at = app(checkpoint="induction", view="corpus", summary_count="24")
    at.button(key="summary-run").click().run()
    assert not at.exception, [error.value for error in at.exception]
    rings = {trace["name"]: trace for trace in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]
             if trace.get("legendgroup") == "roles"}
    assert {"previous-token", "induction"} <= set(rings)
    assert {data[1] for data in rings["previous-token"]["customdata"]} == {0}  # (kind, layer, head, …): layer 0
    assert {data[1] for data in rings["induction"]["customdata"]} == {1}
    said = " ".join(text.value for text in [*at.caption, *at.markdown])
    assert "marked previous-token" not in said and "marked induction" not in said
