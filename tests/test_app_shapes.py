"""The app on models of the other shapes: every view of the registry opens a GPT-2 (decoder-only), BERT
(encoder-only), BART (encoder-decoder), Llama, Qwen2 and Mistral (decoder-only: rotary, RMSNorm, gated
feed-forward, grouped-query attention; Mistral's sliding window) checkpoint, and the shipped decoder-only `induction`,
and shows what that shape has: a picker for each of its layers and heads, a panel per head, only the attention kinds
the model has, and a note where a view needs a part the model lacks. The converted models are random and small
(tests/families.py), converted by the real command."""
from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable

import numpy as np
import pytest

from helpers import ROOT, outputs, plotly_values
from transformer import load_checkpoint
from transformer.io.convert import main
from ui.views import VIEWS
from viz.conventions import KIND_LABELS as LABELS

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
SHARED_VOCABULARY = {"gpt2", "qwen2"}  # their tokenizers are trained alike (tests/families.py): they can be compared


@pytest.fixture(scope="module")
def app_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    for family in CONVERTED:
        save_family(family, root / "hf" / family, **SHAPES[family][0])  # Mistral's: a window of 4 keys
        main([family, str(root / "hf" / family), str(root / "checkpoints" / family)])
    shutil.copytree(ROOT / "checkpoints" / "induction", root / "checkpoints" / "induction")
    return root / "checkpoints"


ARCHITECTURES = {("decoder.self_attn",): "decoder-only", ("encoder.self_attn",): "encoder-only"}


def offered_kinds(at) -> list[str]:
    """The options of every "Attention" picker on the page (the kind picker's labels)."""
    return [option for control in at.get("segmented_control") if control.label == "Attention"
            for option in control.options]


class Shown:
    """One view of one family's checkpoint as the app drew it, beside that checkpoint's shape."""

    def __init__(self, at, family: str, folder) -> None:
        self.at, self.family = at, family
        self.checkpoint = load_checkpoint(folder / family)
        self.config = self.checkpoint.config
        self.kinds = KINDS[family]
        self.architecture = ARCHITECTURES.get(tuple(self.kinds), "encoder-decoder")
        controls = [*at.get("button_group"), *at.get("segmented_control"), *at.selectbox]
        self.pickers = {control.label: list(control.options) for control in controls}
        self.chosen = {control.label: control.value for control in controls}
        self.charts = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]

    @functools.cached_property
    def translation(self):
        """The model's own output for the view's text, as the library gives it."""
        return self.checkpoint.translate(TEXTS[self.family])

    def kind(self) -> str:
        """The attention kind the view shows: its "Attention" picker's choice."""
        return self.chosen["Attention"]

    def layers(self, kind: str) -> list[int]:
        return list(range(self.config.num_encoder_layers if kind.startswith("encoder")
                          else self.config.num_decoder_layers))

    def heads(self, kind: str) -> list[str]:
        """Every head of `kind`, as panels and buttons name them."""
        return [f"L{layer} H{head}" for layer in self.layers(kind) for head in range(self.config.num_heads)]

    def numbers(self, label: str) -> list[int]:
        """The options of a picker as the numbers they start with ("2 · kv1", a grouped-query head, is head 2;
        "3: de", output piece 3)."""
        return [int(option.split(" ")[0].rstrip(":")) for option in self.pickers[label]]

    def panels(self, index: int = 0) -> list[str]:
        """The panel titles of the index-th figure (a grouped-query head's key/value head left out)."""
        return [unshared(note["text"]) for note in self.charts[index]["layout"].get("annotations", [])]

    def title(self, index: int = 0) -> str:
        return self.charts[index]["layout"]["title"]["text"]

    def says_it_lacks(self, kind: str, what: str) -> None:
        """One note says the view needs a part the model lacks, and nothing is drawn."""
        assert [info.value for info in self.at.info] == [
            f"{what}: this {self.architecture} model has no {kind} attention."]
        assert not self.charts


def unshared(label: str) -> str:
    """A head's label without the key/value head a grouped-query head reads ("L0 H1 · kv0": "L0 H1")."""
    return label.split(" · kv")[0]


def one_head(shown: Shown) -> None:
    """Every kind the model has is offered; one head of the chosen kind, with pickers for each of its layers and
    heads; self-attention's rows and columns are the same pieces, cross-attention's columns the source's."""
    assert offered_kinds(shown.at) == [LABELS[kind] for kind in shown.kinds]
    kind = shown.kind()
    assert shown.numbers("Layer") == shown.layers(kind)
    assert shown.numbers("Head") == list(range(shown.config.num_heads))
    assert shown.title() == f"{LABELS[kind]} · layer 0 · head 0"
    weights = plotly_values(next(trace for trace in shown.charts[0]["data"] if trace.get("name") == "weight")["z"])
    source = len(shown.translation.src_ids)
    assert weights.shape[1] == (source if kind == "decoder.cross_attn" else weights.shape[0])


def every_head(shown: Shown) -> None:
    """A panel per layer and head, page by page (every layer on each page), and each head can be opened."""
    every = shown.heads(shown.kind())
    assert [unshared(option) for option in shown.pickers["Head to open"]] == every
    panels = shown.panels()
    assert set(panels) <= set(every) and len(panels) * len(shown.pickers.get("Shown", [""])) == len(every)
    assert {panel.split()[0] for panel in panels} == {f"L{layer}" for layer in shown.layers(shown.kind())}


def lines_of_a_layer(shown: Shown) -> None:
    kind = shown.kind()
    assert shown.numbers("Layer") == shown.layers(kind)
    assert shown.numbers("Heads") == list(range(shown.config.num_heads))
    assert shown.title() == f"{LABELS[kind]} · layer 0"


def inside_a_head(shown: Shown) -> None:
    """The head's own sizes: d_model / heads numbers a query or key, d_model the residual stream; a rotary model's
    steps include the rotation."""
    kind, config = shown.kind(), shown.config
    assert shown.numbers("Layer") == shown.layers(kind)
    assert shown.numbers("Head") == list(range(config.num_heads))
    assert shown.panels(0) == [f"{config.d_model // config.num_heads} numbers each"]
    assert shown.panels(1) == [f"{config.d_model} numbers (the residual stream)"]
    assert ("2 rotation" in shown.pickers["Step"]) == (config.positional == "rotary")


def two_heads(shown: Shown) -> None:
    """Two heads and their difference; two checkpoints only where another one shares the vocabulary."""
    assert shown.numbers("Layer B") == shown.layers(shown.kind())
    assert shown.numbers("Head B") == list(range(shown.config.num_heads))
    assert shown.panels() == ["L0 H0", "L1 H1", "L0 H0 − L1 H1"]
    assert ("two checkpoints" in shown.pickers["Compare"]) == (shown.family in SHARED_VOCABULARY)


def decoding_steps(shown: Shown) -> None:
    """Decoding needs a decoder; a beam tree an encoder as well."""
    if shown.architecture == "encoder-only":
        return shown.says_it_lacks("decoder.self_attn", "Decoding generates an output one piece at a time with a "
                                   "decoder (an encoder-only model's prediction of its masked tokens is the output "
                                   "above)")
    assert shown.pickers["Decoding steps"] == ["Greedy", "Sampling"] + ["Beam tree"] * (
        shown.architecture == "encoder-decoder")
    assert shown.numbers("Decoder layer") == shown.layers("decoder.self_attn")
    assert shown.title(-1) == "decoder self-attention up to step 0 · layer 0 · head 0"


def masks(shown: Shown) -> None:
    """Decoder self-attention's masks drawn (causal; Mistral's window as well); every other kind said to mask
    nothing on one unpadded sentence."""
    masked = {"encoder.self_attn": "encoder self-attention", "decoder.cross_attn": "cross-attention"}
    captions = [caption.value for caption in shown.at.caption]
    for kind in shown.kinds:
        if kind in masked:
            assert f"**{masked[kind]}**: nothing is masked for this input." in captions
    if "decoder.self_attn" not in shown.kinds:
        return
    assert shown.title() == "decoder self-attention masks"
    window = ["sliding window", "all reasons"] if shown.config.sliding_window else []
    assert shown.panels() == ["causal", *window]


def positions(shown: Shown) -> None:
    """A side per stack the model has; learned positions drawn as a table, rotary ones as their rotation."""
    sides = ["encoder"] * (shown.config.num_encoder_layers > 0) + ["decoder"] * (shown.config.num_decoder_layers > 0)
    assert shown.pickers["Side"] == sides
    if shown.config.positional == "rotary":
        assert shown.title() == f"Rotary rotation by position · rope_theta {shown.config.rope_theta:.0f}"
    else:
        assert shown.title() == f"{shown.config.positional} positional encoding of the {sides[0]}"


def head_table(shown: Shown) -> None:
    """A row per head of every kind."""
    table = shown.at.dataframe[0].value
    rows = sorted(zip(table["kind"], table["layer"], table["head"]))
    heads = range(shown.config.num_heads)
    expected = sorted((LABELS[kind], layer, head) for kind in shown.kinds for layer in shown.layers(kind)
                      for head in heads)
    assert [(str(kind), int(layer), int(head)) for kind, layer, head in rows] == expected


def across_inputs(shown: Shown) -> None:
    """Where the project reads no corpus for the model, a note says so; induction's inputs are generated."""
    notes = [info.value for info in shown.at.info]
    if shown.family == "induction":
        assert not notes and shown.at.button(key="summary-run")
    else:
        assert len(notes) == 1 and notes[0].startswith("Not on this server: its "), notes


def heads_to_switch_off(shown: Shown) -> None:
    """A button per head of every kind."""
    buttons = [unshared(option) for option in shown.pickers["Heads to switch off"]]
    assert buttons == [f"{LABELS[kind]} · {head}" for kind in shown.kinds for head in shown.heads(kind)]


def training(shown: Shown) -> None:
    """Induction's snapshots (four and the final model); a converted model has none, and says so."""
    if shown.family == "induction":
        assert len(shown.at.select_slider(key="snapshot").options) == 5
    else:
        assert [info.value for info in shown.at.info] == ["This checkpoint's card lists no training snapshots."]
        assert shown.panels(0) == ["no training history"]
    assert shown.title(1).startswith(f"{LABELS[shown.kind()]} · layer 0 · head 0 at final")


def attribution(shown: Shown) -> None:
    if shown.architecture != "encoder-decoder":
        return shown.says_it_lacks("decoder.cross_attn", "Attribution explains an output piece by the source pieces "
                                   "it read through cross-attention")
    assert shown.numbers("Output piece") == list(range(len(shown.translation.output_tokens)))
    assert shown.title().startswith("Where ") and shown.title().endswith(", by method")


def patching(shown: Shown) -> None:
    if shown.architecture != "encoder-decoder":
        return shown.says_it_lacks("decoder.cross_attn", "Patching patches an edited source into a translation, "
                                   "through the decoder's cross-attention")
    assert shown.title() == "Logit lens"
    last = shown.layers("decoder.self_attn")[-1]
    assert any(f"The last stage, “L{last} ffn”" in caption.value for caption in shown.at.caption)


SHOWS: dict[str, Callable[[Shown], None]] = {
    "attention": one_head, "model": every_head, "headview": lines_of_a_layer, "inside": inside_a_head,
    "compare": two_heads, "decoding": decoding_steps, "masks": masks, "positional": positions, "heads": head_table,
    "corpus": across_inputs, "ablation": heads_to_switch_off, "training": training, "attribution": attribution,
    "patching": patching}


def test_every_view_has_a_check_of_what_it_shows():
    assert sorted(SHOWS) == sorted(view.key for view in VIEWS)


@pytest.mark.parametrize("family", sorted(KINDS))
@pytest.mark.parametrize("view", [view.key for view in VIEWS])
def test_every_view_shows_what_every_shape_has(app, app_checkpoints, family, view):
    at = app(checkpoint=family, view=view, text=TEXTS[family])
    assert not at.exception, [error.value for error in at.exception]
    assert at.query_params["checkpoint"] == family
    assert set(offered_kinds(at)) <= {LABELS[kind] for kind in KINDS[family]}, offered_kinds(at)
    SHOWS[view](Shown(at, family, app_checkpoints))


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
    assert "masked-token prediction" in at.caption[0].value.replace("\\", "")  # Markdown, its escapes left out


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
