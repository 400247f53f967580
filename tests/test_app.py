"""The Streamlit app, run headless by AppTest on a tiny trained checkpoint: every view, the main widgets, links
(query parameters) and bad input. A tiny model's attention is noise, but the app must behave the same."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from streamlit.testing.v1 import AppTest

import transformer
import transformer.analysis.attribution
import transformer.analysis.corpus_heads
import transformer.analysis.patching
import transformer.inference.batching
import transformer.io.checkpoint
import transformer.io.tokenizer
import ui.passes
import ui.shared
import viz
from helpers import LOADABLE, ROOT, TRAINING, checkpoints_folder, outputs, plotly_values
from transformer.analysis.head_map import ROLE_THRESHOLD, ROLES
from ui.literal_text import plain
from ui.model_pass import CORPUS_FILE
from ui.state import URL_STATE
from ui.views import VIEWS

CHECKPOINTS = Path(__file__).parents[1] / "checkpoints"
pytestmark = pytest.mark.slow  # every test runs the whole app (AppTest)


def ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest) -> list:
    return at.get("plotly_chart")


def figure(at: AppTest, index: int = 0) -> dict:
    return json.loads(charts(at)[index].proto.spec)


def weights(at: AppTest) -> np.ndarray:
    """The values of the first figure's heatmap."""
    return plotly_values(figure(at)["data"][0]["z"])


def panels(at: AppTest, index: int = 0) -> list[np.ndarray]:
    """The value matrices of a figure's panels, left to right (mask overlays left out: they have no colour axis)."""
    return [plotly_values(trace["z"]) for trace in figure(at, index)["data"] if trace.get("coloraxis")]


def view_picker(at: AppTest):
    """The view picker: a row of buttons, or a compact list in lecture mode."""
    return at.selectbox(key="view") if at.session_state["lecture"] else at.segmented_control(key="view")


def texts(elements) -> list[str]:
    return [element.value for element in elements]


def link_notices(at: AppTest) -> str:
    return " ".join(warning.value for warning in at.warning if warning.icon == "🔗")


def test_opens_on_the_first_loadable_checkpoint_with_its_first_example(app):
    at = ok(app())
    assert at.selectbox(key="checkpoint").value == LOADABLE[0]
    assert at.text_input(key="text").value  # the card's first example
    assert outputs(at)[0]  # the output
    assert charts(at)
    assert at.query_params["checkpoint"] == LOADABLE[0]
    assert at.query_params["view"] == "attention"
    card = at.table[0].value  # the model card's metrics, names readable and values formatted
    assert card.columns.tolist() == ["metric", "value"]
    assert dict(zip(card["metric"], card["value"]))["train pairs"] == plain("4,000")  # st.table reads Markdown


@pytest.mark.parametrize("view", [view.key for view in VIEWS])
def test_every_view_renders(app, view, tmp_path, monkeypatch):
    if view == "corpus":  # as on a fresh server: no summary another test of this process read, in memory or on disk
        monkeypatch.setenv("ATLAS_CACHE", str(tmp_path / "cache"))
        ui.shared.clear()
    at = ok(app(view=view, text="abc123"))
    assert view_picker(at).value == view
    if view == "ablation":  # nothing switched off yet: it asks for heads
        assert "Pick heads" in at.info[0].value
    elif view == "corpus":  # nothing read yet: it asks first (tests/test_corpus_view.py reads)
        assert at.button(key="summary-run").label.startswith("Read ")
    else:
        assert charts(at)


def test_a_new_head_layer_or_kind_redraws_without_running_the_model(app, monkeypatch):
    calls = []
    decode_batch = transformer.Checkpoint.decode_batch  # every translation's decoding, alone or batched
    monkeypatch.setattr(transformer.Checkpoint, "decode_batch",
                        lambda self, *args, **kwargs: calls.append(args) or decode_batch(self, *args, **kwargs))
    ui.shared.clear()  # the shared passes, so that this input runs the model
    at = ok(app(text="cache42"))
    assert len(calls) == 1
    title = figure(at)["layout"]["title"]["text"]
    at.segmented_control(key="head").set_value(2).run()
    at.segmented_control(key="kind").set_value("encoder.self_attn").run()
    at.toggle(key="average").set_value(True).run()
    ok(at)
    assert len(calls) == 1
    assert figure(at)["layout"]["title"]["text"] != title == "cross · layer 0 · head 0"
    assert figure(at)["layout"]["title"]["text"] == "encoder self · layer 0 · mean of heads"


@pytest.mark.parametrize("view", ["attention", "model", "heads", "training"])
def test_a_second_session_on_the_same_link_builds_no_figure(app, view):
    """A lecture hall: forty sessions on one link cost one session's figures (ui.shared)."""
    first = ok(app(text="hall42", view=view))
    built = ui.shared.RESULTS.misses
    second = ok(app(text="hall42", view=view))
    assert ui.shared.RESULTS.misses == built
    assert [chart.proto.spec for chart in charts(second)] == [chart.proto.spec for chart in charts(first)]
    ok(app(text="hall43", view=view))  # another input: its own figures
    assert ui.shared.RESULTS.misses > built


def test_a_link_restores_the_view(app):
    at = ok(app(checkpoint=LOADABLE[1], text="link7", view="compare", kind="encoder.self_attn", head="2",
                compare="layers", lecture="1", image="svg"))
    assert at.selectbox(key="checkpoint").value == LOADABLE[1]
    assert at.text_input(key="text").value == "link7"
    assert view_picker(at).value == "compare"
    assert at.segmented_control(key="compare").value == "layers"
    assert at.segmented_control(key="kind").value == "encoder.self_attn"
    assert at.toggle(key="lecture").value is True
    assert not at.warning  # nothing in the link was refused
    assert at.query_params["head"] == "2" and at.query_params["lecture"] == "1"
    assert json.loads(charts(at)[0].proto.config)["toImageButtonOptions"]["format"] == "svg"


# A link's values where each widget's own default differs (text, targets, switches) and its corrupted input.
LINK_VALUES = dict(text="link7 words", target="7kn", foil="7kx", lecture="1", dark="1", masks="0", stages="1",
                   values="1", own_scale="1", words="1", corrupt="link8 words")


@pytest.mark.parametrize("view", [view.key for view in VIEWS])
def test_a_browser_that_missed_the_first_run_still_shows_the_links_values(app, view):
    """A run stopped by a rerun (the browser reporting its size while the first run loads a model) never sends its
    widgets to the browser; the next run must then send each widget with the session's value. A widget sent with its
    own default instead shows that default, and the browser's next rerun sends it back: a link's sentence became an
    empty input ("The input is empty"), its lecture mode was switched off. The rerun is made with no state from the
    browser for any widget the link sets, as such a browser sends it."""
    from streamlit.proto.WidgetStates_pb2 import WidgetStates

    at = ok(app(view=view, **LINK_VALUES))
    unseen = WidgetStates(widgets=[state for state in at._tree.get_widget_states().widgets
                                   if state.id.rsplit("-", 1)[-1] not in URL_STATE])
    at._run(unseen)  # AppTest.run() would send the state of every widget it holds
    ok(at)
    checked = 0
    for widget in at.get("text_input") + at.get("toggle"):
        if widget.key in URL_STATE:
            checked += 1
            value = at.session_state[widget.key]
            assert widget.proto.set_value or value == widget.proto.default, (widget.key, value)
            assert not widget.proto.set_value or widget.proto.value == value, (widget.key, widget.proto.value, value)
    assert checked >= 4  # at least the input, the target and foil, lecture mode
    assert at.text_input(key="text").proto.value == "link7 words"


def test_links_and_decks_with_short_attention_names_show_the_same_view(app, monkeypatch, tmp_path):
    """A kind or head by any spelling ('decoder.cross', 'cross', 'decoder.0.cross:1', the corpus command line's
    'encoder.self_attn.0.2'), from a link or a deck's slide, opens what the site's own name opens, and the address bar
    then holds the own name."""
    own = ok(app(text="abc12", kind="decoder.cross_attn", layer="1", head="2"))
    short = ok(app(text="abc12", kind="decoder.cross", layer="1", head="2"))
    assert short.segmented_control(key="kind").value == "decoder.cross_attn" and not link_notices(short)
    assert short.query_params["kind"] == "decoder.cross_attn"
    np.testing.assert_array_equal(weights(short), weights(own))
    ablation = ok(app(view="ablation", text="ablate5", ablate="decoder.0.cross:1,encoder.self_attn.0.2"))
    assert ablation.pills(key="ablate").value == ["decoder.layers.0.cross_attn:1", "encoder.layers.0.self_attn:2"]
    assert not link_notices(ablation) and len(outputs(ablation)) == 3  # the output, then intact and ablated
    (tmp_path / "short.toml").write_text('[[slides]]\ntitle = "Short"\n[slides.link]\nview = "attention"\n'
                                         'text = "abc12"\nkind = "cross"\nlayer = 1\nhead = 2\n')
    monkeypatch.setenv("ATLAS_DECKS", str(tmp_path))
    slide = ok(app(deck="short"))
    assert slide.segmented_control(key="kind").value == "decoder.cross_attn" and not link_notices(slide)
    np.testing.assert_array_equal(weights(slide), weights(own))


def test_a_bad_link_falls_back_to_defaults_with_a_notice(app):
    at = ok(app(checkpoint="../" + LOADABLE[1], layer="abc", head="99", view="nope", kind="decoder.self_attn",
                step="-4"))
    notices = " ".join(texts(at.warning))
    for name in ("checkpoint", "layer", "head", "view"):
        assert f"`{name}`" in notices
    assert at.selectbox(key="checkpoint").value == LOADABLE[0]  # never a path outside the checkpoints folder
    assert view_picker(at).value == "attention"
    assert at.segmented_control(key="kind").value == "decoder.self_attn"  # the valid parts of the link are kept
    assert (at.segmented_control(key="layer").value, at.segmented_control(key="head").value) == (0, 0)
    assert at.query_params["head"] == "0"
    assert charts(at)
    view_picker(at).set_value("decoding").run()
    assert "`step`" in " ".join(texts(ok(at).warning))  # checked when its view first needs it


@pytest.mark.parametrize("text", ["", "   \t "])
def test_empty_input_asks_for_a_sentence(app, text):
    at = ok(app(text=text))
    assert "input is empty" in at.info[0].value
    assert not charts(at)


def test_too_long_input_is_cut_with_a_warning(app):
    at = ok(app(text="a" * 300))
    assert any("cut off" in warning for warning in texts(at.warning))
    assert charts(at)


def test_lecture_mode_folds_every_warning_into_one_line(app):
    text = "a" * 290 + "€"  # cut off, and a character the model does not know
    laptop = [w.value for w in ok(app(text=text)).warning if w.icon == "⚠️"]
    at = ok(app(text=text, lecture="1"))
    folded = next(expander for expander in at.expander if expander.label.endswith("…"))
    assert len(laptop) >= 2 and folded.label.startswith(f"{len(laptop)} warnings: {laptop[0][:40]}")
    assert len(folded.label) <= 110 and not folded.proto.expanded  # one line, closed
    assert [w.value for w in folded.warning] == [" ".join(laptop)]  # inside, on demand
    assert not [w for w in at.warning if w.icon == "⚠️"]  # nothing else above the figure


def test_html_and_markdown_in_the_input_stay_text(app):
    text = "<script>window.__xss=1</script> **bold** <img src=x onerror=alert(1)>"
    at = ok(app(text=text))
    assert any("unknown" in warning for warning in texts(at.warning))  # characters the model does not know
    user_text = ("script", "bold", "onerror")
    for element in list(at.markdown) + list(at.caption) + list(at.warning) + list(at.info):
        assert not any(word in element.value for word in user_text), element.value
    assert outputs(at)[0]  # the output is shown as text
    # The figures escape the pieces they label: "<" never reaches Plotly's HTML-like labels unescaped.
    assert "<unk>" not in charts(at)[0].proto.spec and "&lt;unk&gt;" in charts(at)[0].proto.spec


def reasons(at: AppTest, name: str) -> list[str]:
    """Why the folder `name` cannot be loaded, as the page lists it (plain text)."""
    return [text.value for text in at.text if text.value.startswith(f"{name}: cannot be loaded: ")]


def test_a_checkpoint_that_cannot_load_is_reported_and_the_others_stay_usable(app):
    at = ok(app())
    assert TRAINING not in at.selectbox(key="checkpoint").options  # only loadable ones are offered
    assert "card.json" in reasons(at, TRAINING)[0]
    at.selectbox(key="checkpoint").set_value(LOADABLE[1]).run()
    assert outputs(ok(at))[0] and charts(at)


def test_lecture_mode_enlarges_figures_and_hides_extra_controls(app):
    at = ok(app())
    assert figure(at)["layout"]["font"]["size"] == 12
    assert at.download_button  # CSV, Parquet, JSON
    at.toggle(key="lecture").set_value(True).run()
    assert figure(ok(at))["layout"]["font"]["size"] == 24
    assert [button.key for button in at.download_button] == ["deck-pack"]  # only the sidebar's decks (» opens it)
    assert "values" not in [toggle.key for toggle in at.toggle]  # numbers in cells: not for the back row
    # A compact list on a projector, with the names the views have everywhere: students hear the name they see.
    assert at.selectbox(key="view").options == [view.label for view in VIEWS]
    at.toggle(key="lecture").set_value(False).run()
    assert view_picker(ok(at)).options == [view.label for view in VIEWS]


def test_lecture_mode_edits_the_input_in_place(app):
    """On a projector the sidebar is folded away: the input box stands beside the view picker, and a student's
    sentence typed there runs (the output under it follows)."""
    at = ok(app(text="abc12"))
    assert [box.key for box in at.sidebar.text_input] == ["text", "target", "foil"]
    at.toggle(key="lecture").set_value(True).run()
    assert "text" not in [box.key for box in ok(at).sidebar.text_input]
    assert [box.key for box in at.main.text_input] == ["text"]
    before = [text.value for text in at.main.text]
    at.main.text_input(key="text").input("abc345").run()
    assert at.query_params["text"] == "abc345"
    assert [text.value for text in ok(at).main.text] != before  # the output under it is the new sentence's


def test_dark_figures_when_the_browser_reports_no_theme(app):
    at = ok(app())
    at.toggle(key="dark").set_value(True).run()
    assert figure(ok(at))["layout"]["paper_bgcolor"] == "rgb(17,17,17)"


@pytest.mark.parametrize("reported", ["light", "dark"])
def test_a_links_dark_wins_over_a_light_browser(app, monkeypatch, reported):
    """dark=1 in a link gives dark figures when the browser reports a light theme; a dark page has them anyway."""
    from streamlit.runtime.context import ContextProxy, StreamlitTheme

    monkeypatch.setattr(ContextProxy, "theme", property(lambda self: StreamlitTheme({"type": reported})))
    dark = "rgb(17,17,17)"
    assert figure(ok(app(dark="1")))["layout"]["paper_bgcolor"] == dark
    plain = figure(ok(app()))["layout"]["paper_bgcolor"]
    assert (plain == dark) is (reported == "dark")


def test_export_offers_attention_tables_and_the_translation(app):
    labels = [button.proto.label for button in ok(app()).download_button]
    assert labels == ["Attention as CSV", "Attention as Parquet", "Input and output as JSON",
                      "Download as one HTML file"]  # the last: the sidebar's deck, packed


def test_the_html_format_puts_an_interactive_file_under_each_figure(app):
    at = ok(app(view="compare", compare="heads", image="html"))
    labels = [button.proto.label for button in at.download_button]
    assert labels.count("Download interactive (HTML)") == len(charts(at)) == 1
    assert at.segmented_control(key="image").options == ["png", "svg", "html"]


def test_stages_and_mask_overlays(app):
    at = ok(app(kind="decoder.self_attn"))
    assert any(trace["name"] == "causal" for trace in figure(at)["data"])
    at.toggle(key="masks").set_value(False).run()
    assert not any(trace.get("name") == "causal" for trace in figure(ok(at))["data"])
    at.toggle(key="stages").set_value(True).run()
    titles = [annotation["text"] for annotation in figure(ok(at))["layout"]["annotations"]]
    assert titles[:3] == ["raw scores", "masked scores (blank = −∞)", "softmax weights"]


def test_padding_shows_the_padding_masks_and_keeps_the_output(app):
    at = ok(app(text="pad12", view="masks"))
    output = outputs(at)[0]
    assert "no padding" in at.info[0].value
    at.slider(key="pad_src").set_value(4).run()
    ok(at)
    assert outputs(at)[0] == output
    assert not at.error  # the masks drawn match the mask the model used
    assert "padding" in [trace.get("name") for trace in figure(at)["data"]]
    assert at.query_params["pad_src"] == "4"


def test_padding_leaves_the_real_positions_attention_unchanged(app):
    at = ok(app(text="same7", kind="encoder.self_attn"))
    plain = weights(at)
    at.slider(key="pad_src").set_value(3).run()
    padded = weights(ok(at))
    assert padded.shape == (plain.shape[0] + 3, plain.shape[1] + 3)
    np.testing.assert_allclose(padded[: len(plain), : len(plain)], plain, atol=1e-5)
    assert not padded[:, len(plain):].any()  # no query attends to a pad key


def test_model_view_opens_a_head_in_the_attention_view(app):
    at = ok(app(view="model"))
    at.selectbox(key="model-pick").set_value((0, 3)).run()
    at.button(key="model-open").click().run()
    assert view_picker(ok(at)).value == "attention"
    assert at.segmented_control(key="head").value == 3
    assert figure(at)["layout"]["title"]["text"].endswith("head 3")


def test_model_view_draws_lines_in_lecture_mode_and_heatmaps_on_a_laptop(app):
    """On a projector the heads are lines (labels that stay readable at any length), each panel's markers naming its
    head; on a laptop heatmap images; either a click away from the other."""
    at = ok(app(view="model", lecture="1"))
    assert at.segmented_control(key="model_as").value == "lines"
    traces = figure(at)["data"]
    assert {trace["type"] for trace in traces} == {"scatter"}
    assert any(trace.get("mode") == "lines" for trace in traces)
    assert [trace["meta"] for trace in traces if trace.get("mode") == "markers"][:2] == [[0, 0], [0, 1]]
    assert not any(toggle.key == "masks" for toggle in at.toggle)  # a masked pair has no line: nothing to overlay
    at.segmented_control(key="model_as").set_value("heatmaps").run()
    assert {trace["type"] for trace in figure(ok(at))["data"]} >= {"image"}
    at = ok(app(view="model"))
    assert at.segmented_control(key="model_as").value == "heatmaps"
    assert {trace["type"] for trace in figure(at)["data"]} >= {"image"}


@pytest.mark.parametrize("mode", ["heads", "layers", "checkpoints", "snapshots"])
def test_compare(app, mode):
    at = ok(app(view="compare", compare=mode))
    assert figure(at)["layout"]["annotations"][2]["text"].count("−") == 1  # the A − B panel


def test_decoding_steps_forward_and_back(app):
    at = ok(app(view="decoding", text="step99"))
    at.button(key="step-next").click().run()
    at.button(key="step-next").click().run()
    at.button(key="step-back").click().run()
    assert ok(at).slider(key="step").value == 1
    # plain text above the figure (never cut like a title, never read as Markdown), after the model's output
    caption = next(text.value for text in at.text if text.value not in outputs(at))
    assert caption.startswith("Step 1")
    assert caption.split(": ", 1)[1].split(" ")[0] == "<s>"  # the query of step 1 reads <s> and step 0's piece
    assert len(caption.split(": ", 1)[1].split(" ")) == 2
    assert at.dataframe  # the candidates


def test_the_decoding_view_stops_where_the_sidebars_output_does(app, tiny_checkpoint, tmp_path, monkeypatch):
    """A model that never ends its output: greedy decoding stops at decoding.output_limit, step by step as in the
    sidebar (not at max_len), and the sidebar says that the model did not end it."""
    checkpoint = transformer.load_checkpoint(tiny_checkpoint)
    with torch.no_grad():
        checkpoint.model.generator.bias[checkpoint.config.eos_id] = -1e4  # EOS is never chosen
    root = tmp_path / "checkpoints"
    transformer.io.checkpoint.save_checkpoint(root / "endless", checkpoint.model, checkpoint.card,
                                           checkpoint.src_tokenizer, checkpoint.tgt_tokenizer)
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(root))
    at = ok(app(checkpoint="endless", view="decoding", text="abc"))
    pieces = 2 * len(checkpoint.encode("abc")) + 9  # a decoder sequence of 2 x 4 + 10 tokens: <s> and the pieces
    assert at.slider(key="step").max == pieces - 1  # one step per piece
    assert len(outputs(at)[0].replace(" ", "")) == pieces  # one character a piece
    assert any(f"stopped it after {pieces} pieces" in warning.value for warning in at.warning)



def chart_titled(at: AppTest, start: str) -> dict:
    return next(spec for spec in (json.loads(chart.proto.spec) for chart in charts(at))
                if spec["layout"]["title"]["text"].startswith(start))


def step_caption(at: AppTest) -> str:
    return next(text.value for text in at.text if text.value.startswith("Step "))


def test_sampling_through_a_link_draws_the_same_pieces_again(app):
    link = dict(view="decoding", text="step99", step_mode="sampling", temperature="1.5", top_k="8", top_p="0.9",
                seed="7", step="2")
    at = ok(app(**link))
    assert at.slider(key="temperature").value == 1.5 and at.number_input(key="top_k").value == 8
    assert at.slider(key="top_p").value == 0.9 and at.number_input(key="seed").value == 7
    shaped = chart_titled(at, "Step 2: the next piece")
    bars = [trace for trace in shaped["data"] if trace["type"] == "bar"]
    assert [trace["name"] for trace in bars] == ["model", "after temperature", "after top-k / top-p (drawn from)"]
    assert sum(bars[2]["x"]) == pytest.approx(1.0, abs=1e-6)  # what is drawn from, the other pieces' bin included
    assert sum(1 for label in shaped["layout"]["yaxis"]["ticktext"] if label.endswith("← drawn")) == 1
    assert {name: at.query_params[name] for name in ("step_mode", "temperature", "top_k", "top_p", "seed")} == {
        "step_mode": "sampling", "temperature": "1.5", "top_k": "8", "top_p": "0.9", "seed": "7"}
    again = ok(app(**link))  # a student opening the same link sees the same sample
    assert step_caption(again) == step_caption(at)
    at.number_input(key="seed").set_value(8).run()
    assert ok(at).query_params["seed"] == "8"
    greedy = step_caption(ok(app(view="decoding", text="step99", step="2")))
    assert step_caption(ok(app(**{**link, "temperature": "0"}))) == greedy  # temperature 0: greedy
    assert step_caption(ok(app(**{**link, "top_k": "1"}))) == greedy


def test_the_beam_tree_opens_each_hypothesis_in_its_steps_cross_attention(app):
    at = ok(app(view="decoding", text="abc12", step_mode="tree", tree_beam="3"))
    tree = chart_titled(at, "Beam tree")
    nodes = {point for trace in tree["data"] if trace["mode"] == "markers+text" for point in trace["customdata"]}
    chosen = next(trace for trace in tree["data"] if trace.get("name") == "chosen path")
    best = at.selectbox(key="node").value
    assert best == max(chosen["customdata"]) and best in nodes  # the hypothesis beam search returns opens first
    expected = transformer.load_checkpoint(ui.passes.checkpoints_dir() / LOADABLE[0]).translate("abc12", beam_size=3)
    assert [label.split(" ")[0] for label in chosen["text"]][1:] == [viz.safe_label(piece)
                                                                    for piece in expected.output_tokens]
    assert "pruned" in {trace.get("name") for trace in tree["data"]}
    assert chart_titled(at, "Step ")  # the step that made it: its cross-attention
    pruned = next(index for index in range(len(at.selectbox(key="node").options))
                  if at.selectbox(key="node").options[index].endswith("pruned"))
    at.selectbox(key="node").set_value(pruned).run()
    assert ok(at).query_params["node"] == str(pruned)
    reopened = ok(app(view="decoding", text="abc12", step_mode="tree", tree_beam="3", node=str(pruned)))
    assert step_caption(reopened) == step_caption(at) and "pruned" in at.selectbox(key="node").options[pruned]
    at.selectbox(key="node").set_value(0).run()
    assert "root" in ok(at).info[0].value


def test_the_beam_trees_step_slider_opens_the_best_hypothesis_at_any_step(app):
    at = ok(app(view="decoding", text="abc12", step_mode="tree", tree_beam="3"))
    chosen = next(trace for trace in chart_titled(at, "Beam tree")["data"] if trace.get("name") == "chosen path")
    path = list(chosen["customdata"])  # the returned hypothesis's nodes, root first: node i is at step i
    assert at.slider(key="tree_step").value == len(path) - 1  # the slider follows the open hypothesis
    for step in (1, 0, 3):
        at = ok(at.slider(key="tree_step").set_value(step).run())
        assert at.selectbox(key="node").value == path[step]
        assert at.slider(key="tree_step").value == step

@pytest.mark.parametrize("view", ["attention", "model", "compare", "decoding", "training", "headview"])
def test_the_word_switch_merges_pieces_into_words(app, view):
    """On the tiny checkpoint every piece is a word of its own or not; the axes at word level are viz.word_labels
    of the pieces, so the figure's labels must change to exactly those (or stay when every piece is a word)."""
    pieces = ok(app(view=view, text="step99"))
    words = ok(app(view=view, text="step99", words="1"))
    assert words.toggle(key="words").value
    assert len(charts(words)) == len(charts(pieces))
    assert dict(words.query_params)["words"] == "1"


def test_word_level_weights_are_the_merged_pieces(app):
    """The attention view at word level draws viz.merge_words of the head the analysis holds: rows still sum to 1."""
    at = ok(app(view="attention", kind="encoder.self_attn", text="step99", words="1", masks="0"))
    z = plotly_values(figure(at)["data"][0]["z"])
    assert np.allclose(np.nansum(z, axis=1), 1.0, atol=1e-4)


def test_head_view_draws_lines_for_each_chosen_head(app):
    at = ok(app(view="headview", kind="decoder.self_attn", text="step99", lines_heads="0,1"))
    legend = [trace.get("name") for trace in figure(at)["data"] if trace.get("showlegend") is not False
              and trace.get("mode") == "lines"]
    assert legend == ["L0 H0", "L0 H1"]


def corpus_tables(at: AppTest) -> list:
    """The Heads view's corpus ranking and top sentences (AppTest does not report a dataframe's key)."""
    return [frame.value for frame in at.dataframe
            if frame.value.columns[-1] == "sentences" or frame.value.columns[0] == "sentence"]


def test_heads_across_a_corpus_match_the_library(app, app_checkpoints, tmp_path):
    """Nothing runs until the button is pressed; then the ranking and the chosen head's sentences are exactly
    transformer.analysis.corpus_heads's on the same corpus (every row, as plain text)."""
    at = ok(app(view="heads", corpus_stat="eos_share"))
    assert not corpus_tables(at)
    at.number_input(key="corpus_count").set_value(9).run()
    at.button(key="corpus-run").click().run()
    checkpoint = transformer.load_checkpoint(app_checkpoints / LOADABLE[0])
    out = tmp_path / "heads.parquet"
    heads = transformer.analysis.corpus_heads
    heads.run(checkpoint, out, heads.corpus_pairs(checkpoint, 9), progress=False)
    ranking, _ = corpus_tables(ok(at))
    expected = transformer.analysis.corpus_heads.rank_heads(out, "eos_share")
    assert ranking.iloc[0].tolist() == expected.iloc[0].tolist()
    pd.testing.assert_frame_equal(ranking, expected)  # every head, in the library's order
    kind, layer, head = expected.iloc[-1][["kind", "layer", "head"]]
    at.selectbox(key="corpus_head").set_value((kind, layer, head)).run()
    _, top = corpus_tables(ok(at))
    pd.testing.assert_frame_equal(top, transformer.analysis.corpus_heads.top_sentences(out, kind, int(layer), int(head),
                                                                        "eos_share", 10))
    at.selectbox(key="corpus_stat").set_value("entropy").run()  # another statistic: no new run, a new ranking
    ranking, _ = corpus_tables(ok(at))
    pd.testing.assert_frame_equal(ranking, transformer.analysis.corpus_heads.rank_heads(out, "entropy"))
    assert at.query_params["corpus_stat"] == "entropy"
    made = ui.passes.run(CORPUS_FILE, ui.passes.checkpoint_path(LOADABLE[0]), ui.passes.version_of(LOADABLE[0]),
                         count=9)
    assert made.sentences == 9 and Path(made.parquet).exists()  # the app's own run, cached
    ui.shared.clear()
    assert not Path(made.parquet).parent.exists()  # a released entry takes its temporary folder with it


def test_a_corpus_this_server_lacks_is_named_before_anything_runs(app, tmp_path, monkeypatch):
    root = tmp_path / "checkpoints"
    shutil.copytree(CHECKPOINTS / "eng-fra", root / "eng-fra",
                    ignore=shutil.ignore_patterns("snapshots", "corpus_sample.json"))  # nor a sample of its own
    card = json.loads((root / "eng-fra" / "card.json").read_text())
    card["training"].update(data=["tatoeba=/nowhere/eng-fra.tsv"], dev_data=[])
    card["snapshots"] = []
    (root / "eng-fra" / "card.json").write_text(json.dumps(card))
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(root))
    at = ok(app(view="heads", text="She is reading a book."))
    assert at.button(key="corpus-run").disabled
    assert any(caption.value.startswith("Not on this server: its dev split is read from /nowhere/eng-fra.tsv, which "
                                        "this machine does not have") for caption in at.caption)


def test_the_head_table_shows_a_role_column_only_where_a_head_has_a_role(app):
    """Its roles and the rule its caption states are the one role table's (head_map.ROLES), as the map of heads'."""
    at = ok(app(view="heads"))
    table = next(frame for frame in at.dataframe if "role" in frame.value.columns)
    order, roles = list(table.proto.column_order), table.value["role"].astype(bool)
    assert ("role" in order) == roles.any()
    assert set(order) == set(table.value.columns) - (set() if roles.any() else {"role"})
    assert set(table.value["role"]) - {""} <= set(ROLES.values())
    rule = next(caption.value for caption in at.caption if "Role:" in caption.value)
    assert f"over {ROLE_THRESHOLD:g} of" in rule and all(f"{role} ({statistic})" in rule
                                                          for statistic, role in ROLES.items())


def test_every_head_is_one_click_away_and_none_switches_off_all(app, app_checkpoints):
    """A dropdown showed 11 of a 36-head model's heads until a filter was typed, and its first option, "Select all",
    switched off every head: each head is a button of its own."""
    config = transformer.load_checkpoint(app_checkpoints / LOADABLE[0]).config
    at = ok(app(view="ablation"))
    picker = at.pills(key="ablate")
    heads = sum(config.layers_of(kind) for kind in config.kinds) * config.num_heads
    assert len(picker.options) == heads and picker.value == []


def test_the_app_opens_on_the_translator(app, monkeypatch):
    """The README's first paragraph describes the translator: the app opens on eng-fra, not on the alphabetically
    first folder (dates)."""
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(CHECKPOINTS))
    at = ok(app())
    assert at.selectbox(key="checkpoint").value == "eng-fra" and at.query_params["checkpoint"] == "eng-fra"


def test_the_masks_note_in_lecture_mode_points_at_a_control_it_can_reach(app):
    """Lecture mode folds the sidebar away: the note says how to get padding there, not only "use the sidebar"."""
    laptop, lecture = ok(app(view="masks")).info[0].value, ok(app(view="masks", lecture="1")).info[0].value
    assert "sidebar" in laptop and "Leave lecture mode" not in laptop
    assert "Leave lecture mode" in lecture and "pad_src=" in lecture


def test_ablation_shows_both_outputs(app):
    at = ok(app(view="ablation", text="ablate5"))
    heads = ["decoder.layers.0.cross_attn:0", "decoder.layers.0.cross_attn:1", "encoder.layers.0.self_attn:2"]
    at.pills(key="ablate").set_value(heads).run()
    ok(at)
    assert len(outputs(at)) == 3  # the output above, then intact and ablated side by side
    assert any("with heads off" in table.value.columns for table in at.dataframe)
    assert at.query_params["ablate"] == ",".join(heads)


def test_training_shows_the_loss_curve_and_each_snapshot(app):
    at = ok(app(view="training", text="train3"))
    assert len(charts(at)) == 3  # loss curve, the head at the snapshot, the head across snapshots
    at.select_slider(key="snapshot").set_value("step_000000").run()
    assert "step 0" in figure(ok(at), 1)["layout"]["title"]["text"]


@pytest.mark.parametrize("padding", [{}, {"pad_src": "2", "pad_tgt": "3"}])
def test_the_training_views_last_panel_is_the_final_models_pass(app, app_checkpoints, padding):
    """Every snapshot reads the same ids (the sidebar's, padding included): the final model's panel holds exactly
    the weights of a teacher-forced pass of the final model over them, and the first snapshot's differ."""
    at = ok(app(view="training", text="train3", kind="decoder.cross_attn", layer="1", head="1", **padding))
    checkpoint = transformer.load_checkpoint(app_checkpoints / LOADABLE[0])
    src, tgt = checkpoint.encode("train3"), checkpoint.translate("train3").tgt_ids
    src += [checkpoint.config.pad_id] * int(padding.get("pad_src", 0))
    tgt += [checkpoint.config.pad_id] * int(padding.get("pad_tgt", 0))
    with torch.no_grad(), transformer.capture(checkpoint.model) as record:
        checkpoint.model(torch.tensor([src]), torch.tensor([tgt]))
    expected = record["decoder.layers.1.cross_attn"][0, 1].numpy()
    across = panels(at, 2)
    assert across[-1].shape == expected.shape and np.allclose(across[-1], expected, atol=1e-6)
    assert not np.allclose(across[0], expected, atol=1e-3)


def test_positional_encoding_plots(app):
    at = ok(app(view="positional"))
    for plot in ("curves", "similarity", "heatmap"):
        at.segmented_control(key="pe_plot").set_value(plot).run()
        assert charts(ok(at))
    at.segmented_control(key="pe_plot").set_value("curves").run()
    at.multiselect(key="pe_dims").set_value([0, 5]).run()
    assert [trace["name"] for trace in figure(ok(at))["data"]] == ["dim 0", "dim 5"]


def test_beam_search_from_a_link(app):
    at = ok(app(text="beam4", decoding="beam", beam="3"))
    assert at.slider(key="beam").value == 3
    named = plain("beam search with 3 beams, length penalty 0.6")  # the caption's Markdown source
    assert any(named in caption for caption in texts(at.caption))
    assert outputs(at)[0]


def test_a_folder_without_checkpoints_says_what_to_do(app, tmp_path, monkeypatch):
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(tmp_path))
    at = ok(app())
    assert "No loadable checkpoint" in at.error[0].value


# (query, widget type, key, the default it falls back to). Names the widget reads from session state: every query
# parameter is also its widget's key.
BAD_LINKS = {
    "layer-out-of-range": ({"layer": "5"}, "segmented_control", "layer", 0),
    "layer-negative": ({"layer": "-1"}, "segmented_control", "layer", 0),
    "layer-not-a-number": ({"layer": "abc"}, "segmented_control", "layer", 0),
    "layer-not-an-integer": ({"layer": "0.5"}, "segmented_control", "layer", 0),
    "head-out-of-range": ({"head": "4"}, "segmented_control", "head", 0),
    "head-huge": ({"head": "9" * 5000}, "segmented_control", "head", 0),
    "head-empty": ({"head": ""}, "segmented_control", "head", 0),
    "unknown-checkpoint": ({"checkpoint": "nope"}, "selectbox", "checkpoint", LOADABLE[0]),
    "checkpoint-up-and-over": ({"checkpoint": "../" + LOADABLE[1]}, "selectbox", "checkpoint", LOADABLE[0]),
    "checkpoint-absolute": ({"checkpoint": "/etc"}, "selectbox", "checkpoint", LOADABLE[0]),
    "unknown-view": ({"view": "nope"}, "segmented_control", "view", "attention"),
    "unknown-kind": ({"kind": "encoder.cross_attn"}, "segmented_control", "kind", "decoder.cross_attn"),
    "markup-as-kind": ({"kind": "<b>x</b>"}, "segmented_control", "kind", "decoder.cross_attn"),
    "bad-flag": ({"masks": "maybe"}, "toggle", "masks", True),
    "bad-lecture-flag": ({"lecture": "2"}, "toggle", "lecture", False),
    "unknown-decoding": ({"decoding": "sampling"}, "segmented_control", "decoding", "greedy"),
    "beam-too-wide": ({"decoding": "beam", "beam": "99"}, "slider", "beam", 4),
    "beam-of-one": ({"decoding": "beam", "beam": "1"}, "slider", "beam", 4),
    "unknown-image-format": ({"image": "gif"}, "segmented_control", "image", "png"),
    "unknown-step-mode": ({"view": "decoding", "step_mode": "beam"}, "segmented_control", "step_mode", "greedy"),
    "temperature-not-a-number": ({"view": "decoding", "step_mode": "sampling", "temperature": "nan"}, "slider",
                                 "temperature", 1.0),
    "top-k-past-the-vocabulary": ({"view": "decoding", "step_mode": "sampling", "top_k": "99999"}, "number_input",
                                  "top_k", 0),
    "tree-too-wide": ({"view": "decoding", "step_mode": "tree", "tree_beam": "64"}, "segmented_control",
                      "tree_beam", 4),
    "padding-past-max-len": ({"pad_src": "999"}, "slider", "pad_src", 0),
    "negative-padding": ({"pad_tgt": "-1"}, "slider", "pad_tgt", 0),
    "unknown-comparison": ({"view": "compare", "compare": "everything"}, "segmented_control", "compare", "heads"),
    "head-b-out-of-range": ({"view": "compare", "head_b": "7"}, "segmented_control", "head_b", 1),
    "checkpoint-b-outside": ({"view": "compare", "compare": "checkpoints", "checkpoint_b": "../x"}, "selectbox",
                             "checkpoint_b", LOADABLE[1]),
    "unknown-snapshot": ({"view": "training", "snapshot": "../model"}, "select_slider", "snapshot", "final"),
    "unknown-heads-to-ablate": ({"view": "ablation",
                                 "ablate": "decoder.layers.9.cross_attn:0,encoder.layers.0.self_attn:99"},
                                "pills", "ablate", []),
    "unknown-ablation-mode": ({"view": "ablation", "ablation_mode": "noise"}, "segmented_control", "ablation_mode",
                              "zero"),
    "too-few-positions": ({"view": "positional", "pe_positions": "1"}, "slider", "pe_positions", 34),
    "dimensions-not-numbers": ({"view": "positional", "pe_plot": "curves", "pe_dims": "a,b"}, "multiselect",
                               "pe_dims", viz.default_pe_dims(32)),  # the tiny model: d_model 32
    "unknown-statistic": ({"view": "heads", "stat_x": "nope"}, "selectbox", "stat_x", "entropy"),
}


@pytest.mark.parametrize("case", BAD_LINKS)
def test_each_bad_link_value_falls_back_with_a_notice(app, case):
    query, widget, key, default = BAD_LINKS[case]
    at = ok(app(text="abc12", **query))
    assert f"`{key}`" in link_notices(at)
    assert getattr(at, widget)(key=key).value == default
    assert not at.error


def test_unknown_link_parameters_are_ignored_with_a_notice(app):
    at = ok(app(text="abc12", colour="red", **{"<script>": "1"}))
    assert link_notices(at) == "2 unknown link parameter(s) were ignored."  # named by count, never by their text
    assert charts(at)


@pytest.fixture(scope="module")
def escape_hatches(tiny_checkpoint, tmp_path_factory) -> Path:
    """A checkpoints folder whose extra entries all lead elsewhere: a symlink to a loadable checkpoint outside it,
    a hidden folder, a link to the folder itself."""
    base = tmp_path_factory.mktemp("escape")
    root = checkpoints_folder(tiny_checkpoint, base / "checkpoints")
    outside = shutil.copytree(tiny_checkpoint, base / "outside", ignore=shutil.ignore_patterns("resume.pt"))
    (root / "escape").symlink_to(outside)
    shutil.copytree(outside, root / ".hidden")
    (root / "self").symlink_to(root)
    return root


@pytest.mark.parametrize("name", ["escape", ".hidden", "self", "../outside", str(Path("..") / "outside"), "/etc",
                                  "escape/snapshots", "tiny-reverse/../../outside"])
def test_a_link_cannot_open_a_folder_outside_the_checkpoints(app, escape_hatches, monkeypatch, name):
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(escape_hatches))
    at = ok(app(checkpoint=name))
    assert "`checkpoint`" in link_notices(at)
    picker = at.selectbox(key="checkpoint")
    assert picker.value == LOADABLE[0] and at.query_params["checkpoint"] == LOADABLE[0]
    assert picker.options == [*LOADABLE]  # none of the ways out is listed
    assert outputs(at)[0] and charts(at)


def plant_pickle(folder: Path, marker: Path) -> None:
    class Exploit:
        def __reduce__(self):
            return open, (str(marker), "w")

    (folder / "model.safetensors").unlink()  # a torch zip's place: the pickle is what would be read
    (folder / "model.pt").write_bytes(pickle.dumps({"weights": Exploit()}))


def change_json(folder: Path, file: str, **changes) -> None:
    values = json.loads((folder / file).read_text())
    values.update(changes)
    (folder / file).write_text(json.dumps(values))


# How a checkpoint folder breaks -> the file its error must name.
BREAKAGES = {
    "pickle-that-runs-code": (lambda folder, marker: plant_pickle(folder, marker), "model.pt"),
    "truncated-weights": (lambda folder, _: (folder / "model.safetensors").write_bytes(
        (folder / "model.safetensors").read_bytes()[:999]), "model.safetensors"),
    "missing-tokenizer": (lambda folder, _: (folder / "src.model").unlink(), "src.model"),
    "corrupt-tokenizer": (lambda folder, _: (folder / "tgt.model").write_bytes(b"not a sentencepiece model"),
                          "tgt.model"),
    "config-not-matching-weights": (lambda folder, _: change_json(folder, "config.json", d_ff=128), "config.json"),
    "config-not-json": (lambda folder, _: (folder / "config.json").write_text("{not json"), "config.json"),
    "card-with-wrong-types": (lambda folder, _: change_json(folder, "card.json", examples="not a list"), "card.json"),
    "missing-card": (lambda folder, _: (folder / "card.json").unlink(), "card.json"),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_a_broken_checkpoint_is_listed_as_broken_and_the_others_keep_working(app, tiny_checkpoint, tmp_path,
                                                                          monkeypatch, breakage):
    damage, file = BREAKAGES[breakage]
    root = checkpoints_folder(tiny_checkpoint, tmp_path / "checkpoints")
    broken = shutil.copytree(root / LOADABLE[0], root / "broken")
    marker = tmp_path / "the-pickle-ran"
    damage(broken, marker)
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(root))
    at = ok(app(checkpoint="broken"))  # a link straight to it
    reason = reasons(at, "broken")
    assert reason and str(broken) in reason[0] and file in reason[0]
    if "broken" in at.selectbox(key="checkpoint").options:  # passed the checks, failed on reading its tensors
        assert "cannot be loaded" in at.error[0].value and not charts(at)
    else:  # refused by the checks: the link's choice is not offered, the first loadable one is shown
        assert "`checkpoint`" in link_notices(at) and charts(at)
    at.selectbox(key="checkpoint").set_value(LOADABLE[1]).run()
    assert outputs(ok(at))[0] and charts(at) and not at.error
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------- links and passes


def full_link(checkpoints: Path) -> dict[str, str]:
    """A valid value, other than its default, for every URL parameter (on the test checkpoints)."""
    snapshots = transformer.load_checkpoint(checkpoints / LOADABLE[1]).snapshot_names()
    return {"checkpoint": LOADABLE[1], "text": "link7", "view": "attention", "kind": "encoder.self_attn", "layer": "0",
            "head": "2", "average": "1", "masks": "0", "model_as": "heatmaps", "stages": "1", "values": "1",
            "own_scale": "1",
            "decoding": "beam", "beam": "3", "pad_src": "2", "pad_tgt": "1", "lecture": "1", "dark": "1",
            "image": "svg", "step": "1", "step_mode": "sampling", "temperature": "0.7", "top_k": "5", "top_p": "0.9",
            "seed": "3", "tree_beam": "3", "node": "1", "panel": "1", "compare": "snapshots", "layer_b": "0",
            "head_b": "3", "checkpoint_b": LOADABLE[0], "text_b": "link9", "snapshot_a": snapshots[0],
            "snapshot_b": snapshots[-1], "snapshot": snapshots[0],
            "ablate": "decoder.layers.0.cross_attn:1,encoder.layers.0.self_attn:3", "ablation_mode": "mean",
            "pe_side": "tgt", "pe_plot": "curves", "pe_positions": "20", "pe_dims": "0,5", "stat_x": "first_share",
            "stat_y": "entropy", "words": "1", "lines_heads": "1,2", "attr_token": "1", "corrupt": "link8",
            "patch_position": "1", "corpus_stat": "eos_share", "summary_count": "50", "corpus_part": "qk",
            "projection": "tsne", "qk_colour": "side", "match_snapshot": snapshots[0], "query": "1", "inside_step": "2",
            "neuron": "3",
            "target": "7knil", "foil": "7knjl", "deck": "attention-step-by-step", "slide": "2"}


@pytest.mark.parametrize("view", [view.key for view in VIEWS])
def test_a_link_with_every_parameter_restores_each_view(app, app_checkpoints, view):
    link = full_link(app_checkpoints) | {"view": view}
    assert link.keys() == URL_STATE.keys()  # a new parameter needs a value here
    at = ok(app(**link))
    assert not link_notices(at)
    assert view_picker(at).value == view
    for name, text in link.items():
        assert at.session_state[name] == URL_STATE[name][0](text), name
    assert dict(at.query_params) == link  # written back as it came


@pytest.fixture
def reverse_checkpoints(tmp_path) -> Path:
    """The shipped reverse checkpoint (two layers of each kind) alone in a checkpoints folder."""
    root = tmp_path / "checkpoints"
    shutil.copytree(CHECKPOINTS / "reverse", root / "reverse", ignore=shutil.ignore_patterns("resume.pt"))
    return root


def test_a_typed_sentence_stays_where_it_can_be_read_and_an_example_gives_way(app, reverse_checkpoints, monkeypatch):
    shutil.copytree(CHECKPOINTS / "reverse-1layer", reverse_checkpoints / "reverse-1layer")
    shutil.copytree(CHECKPOINTS / "dates", reverse_checkpoints / "dates")
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(reverse_checkpoints))
    at = ok(app(checkpoint="reverse"))  # its first example
    at = ok(at.selectbox(key="checkpoint").select("dates").run())
    dates = transformer.load_checkpoint(reverse_checkpoints / "dates").card.examples
    assert at.text_input(key="text").value == dates[0]  # an example is the card's, never carried over
    at = ok(at.text_input(key="text").input("typed42").run())
    at = ok(at.selectbox(key="checkpoint").select("reverse-1layer").run())
    assert at.text_input(key="text").value == "typed42"  # every piece is one the reverser knows: it stays
    at = ok(at.selectbox(key="checkpoint").select("reverse").run())
    assert at.text_input(key="text").value == "typed42"
    at = ok(at.selectbox(key="checkpoint").select("dates").run())
    assert at.text_input(key="text").value == "typed42"  # typed there: it comes back


def test_a_link_to_layer_1_opens_layer_1(app, reverse_checkpoints, monkeypatch):
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(reverse_checkpoints))
    at = ok(app(text="abc12", kind="encoder.self_attn", layer="1", head="2"))
    assert not link_notices(at)
    assert at.segmented_control(key="layer").value == 1
    assert figure(at)["layout"]["title"]["text"] == "encoder self · layer 1 · head 2"
    expected = transformer.load_checkpoint(reverse_checkpoints / "reverse").translate("abc12").attention
    np.testing.assert_allclose(weights(at), expected.stack("encoder.self_attn")[1, 2].numpy(), atol=1e-6)


def test_padding_runs_one_teacher_forced_pass_and_no_new_decoding(app, monkeypatch):
    translations, forwards = [], []
    prepare, forward = transformer.Checkpoint.prepare, transformer.Transformer.forward  # every translation's input
    monkeypatch.setattr(transformer.Checkpoint, "prepare",
                        lambda self, *args, **kwargs: translations.append(args) or prepare(self, *args, **kwargs))
    monkeypatch.setattr(transformer.Transformer, "forward",
                        lambda self, *args, **kwargs: forwards.append(args) or forward(self, *args, **kwargs))
    ui.shared.clear()
    at = ok(app(text="count9", kind="encoder.self_attn"))
    decoded = len(forwards)
    at.slider(key="pad_src").set_value(2).run()
    assert (len(translations), len(forwards)) == (1, decoded + 1)
    src, tgt = forwards[-1]
    assert src.shape[1] == len(translations[0][0]) + 1 + 2  # the pieces, EOS and the pads: the same ids, padded
    at.slider(key="pad_tgt").set_value(1).run()
    assert (len(translations), len(forwards)) == (1, decoded + 2)
    assert weights(ok(at)).shape == (len(src[0]), len(src[0]))


def test_the_ui_tokenises_the_input_only_inside_translate(app, monkeypatch):
    """The app shows the typed pieces the library returns; it never runs a tokenizer of its own."""
    outside, inside = [], []

    def counted_translate(original):  # a translation's steps: reading the input, decoding, its captured pass
        def translating(self, *args, **kwargs):
            inside.append(True)
            try:
                return original(self, *args, **kwargs)
            finally:
                inside.pop()
        return translating

    def counted(original):
        def tokenise(self, text):
            if not inside:
                outside.append(text)
            return original(self, text)
        return tokenise

    for method in ("encode", "encode_pieces"):
        monkeypatch.setattr(transformer.io.tokenizer.Tokenizer, method,
                            counted(getattr(transformer.io.tokenizer.Tokenizer, method)))
    for method in ("translate", "prepare", "decode_batch", "explain"):
        monkeypatch.setattr(transformer.Checkpoint, method, counted_translate(getattr(transformer.Checkpoint, method)))
    ui.shared.clear()
    at = ok(app(text="tok€n5", pad_src="2"))
    assert not at.dataframe  # the pieces table is drawn only once its expander is opened
    at.session_state["pieces"] = True  # what opening "Pieces and probabilities" sets
    table = ok(at.run()).dataframe[0].value
    assert list(table["typed"][:6]) == ["t", "o", "k", "€", "n", "5"] and table["source piece"][3] == "<unk>"
    view_picker(at).set_value("decoding").run()
    ok(at)
    assert not outside


def test_compare_draws_a_minus_b_of_two_heads(app, app_checkpoints):
    at = ok(app(view="compare", compare="heads", text="cmp42", kind="encoder.self_attn", head="0", layer_b="0",
                head_b="2"))
    a, b, difference = panels(at)
    stack = transformer.load_checkpoint(app_checkpoints / LOADABLE[0]).translate("cmp42").attention.stack(
        "encoder.self_attn").numpy()
    np.testing.assert_allclose(a, stack[0, 0], atol=1e-6)
    np.testing.assert_allclose(b, stack[0, 2], atol=1e-6)
    np.testing.assert_allclose(difference, a - b, atol=1e-6)
    assert np.abs(difference).max() > 1e-3  # not A against A


def test_lecture_mode_shows_the_panels_of_compare_and_stages_one_at_a_time(app, app_checkpoints):
    """On a projector three panels cannot keep readable labels side by side: one at a time, picked beside it."""
    at = ok(app(view="compare", compare="heads", text="cmp42", kind="encoder.self_attn", head="0", layer_b="0",
                head_b="2", lecture="1"))
    record = transformer.load_checkpoint(app_checkpoints / LOADABLE[0]).translate("cmp42").attention
    stack = record.stack("encoder.self_attn").numpy()
    (difference,) = panels(at)  # A − B first: the point of comparing
    np.testing.assert_allclose(difference, stack[0, 0] - stack[0, 2], atol=1e-6)
    at.segmented_control(key="panel").set_value(1).run()
    (b,) = panels(ok(at))
    np.testing.assert_allclose(b, stack[0, 2], atol=1e-6)
    assert at.query_params["panel"] == "1"
    at = ok(app(view="attention", stages="1", text="cmp42", kind="encoder.self_attn", head="0", lecture="1"))
    (raw,) = panels(at)  # the first stage first: the scores before the mask and the softmax
    np.testing.assert_allclose(raw, record.scores("encoder.layers.0.self_attn")[0, 0].numpy(), atol=1e-5)


def test_lecture_mode_shows_one_kind_and_one_panel_of_the_masks_and_of_patching(app, app_checkpoints):
    """The masks of three kinds, three panels each, and patching's three rows: on a projector one at a time, each
    as large as the screen allows, the rest a click away beside it."""
    at = ok(app(view="masks", text="pad12", pad_src="3", pad_tgt="2", kind="decoder.self_attn", lecture="1"))
    assert len(charts(at)) == 1  # the decoder's self-attention only: the kind picked
    masks = figure(at)
    blocked = [trace for trace in masks["data"] if trace.get("name") == "blocked"]
    assert len(blocked) == 1 and masks["layout"]["title"]["text"].endswith("· all reasons")
    names = at.segmented_control(key="panel").options
    assert names == ["padding", "causal", "padded query", "all reasons"]
    at = ok(at.segmented_control(key="panel").set_value(1).run())
    (causal,) = [trace for trace in figure(at)["data"] if trace.get("name") == "blocked"]
    causal = plotly_values(causal["z"])
    np.testing.assert_array_equal(causal, np.triu(np.ones(causal.shape), k=1))
    at = ok(at.segmented_control(key="kind").set_value("encoder.self_attn").run())
    assert figure(at)["layout"]["title"]["text"].startswith("encoder self-attention masks")
    at = ok(app(view="patching", text="patch3", corrupt="patch4", patch_position="1", lecture="1"))
    result, _ = transformer.analysis.patching.patch_texts(transformer.load_checkpoint(app_checkpoints / LOADABLE[0]),
                                                          "patch3", "patch4", 1)
    heads = panels(at, 0)  # the heads row first, alone: the logit lens is the picker's last panel
    assert len(heads) == len(result.heads) and len(charts(at)) == 1
    np.testing.assert_allclose(heads[0], result.heads["encoder.self_attn"], atol=1e-6)
    assert at.segmented_control(key="panel").options == ["heads", "encoder positions", "decoder positions",
                                                         "logit lens"]
    at = ok(at.segmented_control(key="panel").set_value(2).run())
    (decoder,) = panels(at, 0)
    np.testing.assert_allclose(decoder, result.positions["decoder"], atol=1e-6)
    at = ok(at.segmented_control(key="panel").set_value(3).run())
    assert len(charts(at)) == 1 and figure(at)["layout"]["title"]["text"].startswith("Logit lens")


def test_compare_draws_a_minus_b_of_two_layers(app, reverse_checkpoints, monkeypatch):
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(reverse_checkpoints))
    at = ok(app(view="compare", compare="layers", text="abc12", kind="decoder.cross_attn", layer="0", layer_b="1"))
    a, b, difference = panels(at)
    stack = transformer.load_checkpoint(reverse_checkpoints / "reverse").translate("abc12").attention.stack(
        "decoder.cross_attn").numpy()
    np.testing.assert_allclose(a, stack[0].mean(axis=0), atol=1e-6)  # a layer is the mean of its heads
    np.testing.assert_allclose(b, stack[1].mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(difference, a - b, atol=1e-6)
    assert np.abs(difference).max() > 1e-3


def test_compare_offers_two_checkpoints_only_with_the_same_vocabulary(app, reverse_checkpoints, tiny_checkpoint,
                                                                      monkeypatch):
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(reverse_checkpoints))
    at = ok(app(view="compare"))
    assert "two checkpoints" not in at.segmented_control(key="compare").options  # the only checkpoint
    shutil.copytree(tiny_checkpoint, reverse_checkpoints / "tiny", ignore=shutil.ignore_patterns("resume.pt"))
    at = ok(app(view="compare", compare="checkpoints"))  # another vocabulary: the link falls back with a notice
    assert "two checkpoints" not in at.segmented_control(key="compare").options
    assert "`compare` value `checkpoints` is not available here, so `heads` is used" in link_notices(at)
    shutil.copytree(reverse_checkpoints / "reverse", reverse_checkpoints / "twin")
    at = ok(app(view="compare", compare="checkpoints"))
    assert "two checkpoints" in at.segmented_control(key="compare").options
    assert at.selectbox(key="checkpoint_b").options == ["twin"] and not link_notices(at)


def test_ablation_shows_what_the_library_computes_with_those_heads_off(app, app_checkpoints):
    text, heads = "ablate5", {"decoder.layers.0.cross_attn": [0, 1, 2, 3]}
    at = ok(app(view="ablation", text=text,
                ablate=",".join(f"decoder.layers.0.cross_attn:{head}" for head in range(4))))
    intact_table, changed_table = [table.value for table in at.dataframe]  # the sidebar's pieces are closed
    checkpoint = transformer.load_checkpoint(app_checkpoints / LOADABLE[0])
    intact = checkpoint.translate(text)
    with transformer.ablate(checkpoint.model, heads, "zero"):
        changed = checkpoint.translate(text)
        with torch.no_grad():
            probs = checkpoint.model(torch.tensor([intact.src_ids]), torch.tensor([intact.tgt_ids])).softmax(-1)[0]
    assert outputs(at)[2] == changed.text
    np.testing.assert_allclose(changed_table["probability"], changed.probs, atol=1e-6)
    with_heads_off = [float(probs[position, label]) for position, label in enumerate(intact.output_ids)]
    # (The app's pass captures, so its attention runs unfused: float32 sums in another order, ~1e-6 apart.)
    np.testing.assert_allclose(intact_table["with heads off"], with_heads_off, atol=1e-5)
    np.testing.assert_allclose(intact_table["probability"], intact.probs, atol=1e-6)
    assert np.abs(np.array(with_heads_off) - intact.probs).max() > 1e-3  # these heads matter


def test_a_refused_link_value_is_named_with_what_is_used_instead(app):
    at = ok(app(checkpoint="nope", head="9"))
    assert "The link's `checkpoint` value `nope` is not available here, so `tiny-reverse` is used instead." \
        in link_notices(at)
    assert "The link's `head` value `9` is not available here, so `0` is used instead." in link_notices(at)


# ---------------------------------------------------------------------------------------------- attribution views


@pytest.mark.parametrize("view, opened, figures", [("attribution", False, 1), ("attribution", True, 2),
                                                   ("patching", False, 2)])
def test_attribution_views_render_on_reverse(app, reverse_checkpoints, monkeypatch, view, opened, figures):
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(reverse_checkpoints))
    at = ok(app(view=view, text="abc12", corrupt="abc13"))  # patching: one character edited
    if opened:
        at.session_state["attr_all"] = True  # what opening "Every output piece by every method" sets
        ok(at.run())
    assert len(charts(at)) == figures
    assert not at.warning


def test_attribution_shows_the_librarys_arrays(app, app_checkpoints, monkeypatch):
    """The chosen piece by every method, computed for that piece alone; every piece once the overview is opened."""
    checkpoint = transformer.load_checkpoint(app_checkpoints / LOADABLE[0])
    expected = transformer.analysis.attribution.explain(checkpoint, "attr9")
    ui.shared.clear()
    asked = []
    attribute = transformer.analysis.attribution.attribute
    monkeypatch.setattr(transformer.analysis.attribution, "attribute",
                        lambda *args, **kwargs: asked.append(kwargs.get("rows")) or attribute(*args, **kwargs))
    at = ok(app(view="attribution", text="attr9", attr_token="2"))
    assert asked == [[2]]  # integrated gradients for one piece, not for all six
    cross = expected.methods["attention_last"]
    row = plotly_values(figure(at, 0)["data"][0]["z"])  # one output piece: method x source
    assert row.shape == (len(expected.methods), cross.shape[1])
    for method, values in zip(row, expected.methods.values()):  # each method's row over its own peak
        np.testing.assert_allclose(method, values[2] / np.abs(values[2]).max(), atol=1e-5)
    assert at.selectbox(key="attr_token").value == 2
    assert "integrated_gradients" in " ".join(texts(at.text))
    assert at.dataframe[-1].value["method"].tolist()[-1] == "random"  # the saved faithfulness table

    at.session_state["attr_all"] = True  # what opening "Every output piece by every method" sets
    ok(at.run())
    assert asked[1:] == [None]
    methods = panels(at, 1)
    assert len(methods) == len(expected.methods)
    np.testing.assert_allclose(methods[0], cross / np.abs(cross).max(), atol=1e-6)  # each panel over its peak
    at.selectbox(key="attr_token").set_value(4)  # another piece while the overview is open: its row, no new pass
    ok(at.run())
    assert asked[1:] == [None]
    row = plotly_values(figure(at, 0)["data"][0]["z"])
    for method, values in zip(row, expected.methods.values()):
        np.testing.assert_allclose(method, values[4] / np.abs(values[4]).max(), atol=1e-5)


def test_a_registered_attribution_method_shows_in_the_view(app, monkeypatch):
    """One declaration plus its function: the view draws the method, on the scale its declaration names (signed,
    though this one's values are all positive), and describes it."""
    def toy(inputs):
        return np.ones((len(inputs.rows), inputs.src.size(1)))

    toy_method = transformer.analysis.attribution.Method("toy", toy, signed=True, note="every source token alike.",
                                                citation="a test")
    monkeypatch.setitem(transformer.analysis.attribution.METHODS, "toy", toy_method)
    ui.shared.clear()
    at = ok(app(view="attribution", text="attr9"))
    assert "toy: every source token alike. (a test)" in texts(at.text)
    chosen = figure(at, 0)  # the chosen piece: method x source
    assert chosen["layout"]["yaxis"]["ticktext"][-1] == "toy"
    np.testing.assert_allclose(plotly_values(chosen["data"][0]["z"])[-1], 1.0)  # its row, last, over its own peak
    at.session_state["attr_all"] = True  # what opening "Every output piece by every method" sets
    ok(at.run())
    toy_panel = [trace for trace in figure(at, 1)["data"] if trace.get("coloraxis")][-1]
    assert toy_panel["coloraxis"] == "coloraxis2"  # the diverging scale, as declared
    np.testing.assert_allclose(plotly_values(toy_panel["z"]), 1.0)


def test_the_faithfulness_table_is_data_not_documentation(app_checkpoints, tmp_path):
    """The app shows the saved table from a copy of the checkout without README.md (its own process: this one has
    imported the modules of this checkout)."""
    copy = tmp_path / "checkout"

    def left_out(folder: str, names: list[str]) -> set[str]:
        if Path(folder) == ROOT:
            return {".git", "README.md"} & set(names)
        if Path(folder) == CHECKPOINTS:  # the shipped models: the app opens the test checkpoints
            return {name for name in names if (CHECKPOINTS / name).is_dir()}
        return {"__pycache__"} & set(names)

    shutil.copytree(ROOT, copy, ignore=left_out)
    script = ("import json\n"
              "from streamlit.testing.v1 import AppTest\n"
              "at = AppTest.from_file('app.py', default_timeout=120)\n"
              "at.query_params.update(view='attribution', text='attr9')\n"
              "at.run()\n"
              "assert not at.exception, [e.value for e in at.exception]\n"
              "print(json.dumps(at.dataframe[-1].value.to_dict('list')))\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=copy, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "ATLAS_CHECKPOINTS": str(app_checkpoints), "PYTHONPATH": str(copy)})
    assert run.returncode == 0, run.stderr[-2000:]
    shown = json.loads(run.stdout.strip().splitlines()[-1])
    saved = json.loads((CHECKPOINTS / "faithfulness.json").read_text(encoding="utf-8"))["results"]
    assert shown["method"][-1] == "random" and shown["method"][0] == "attention_last"
    assert shown["reverse: top = true"][0] == f"{saved['reverse']['alignment']['attention_last']:.1%}"
    assert shown["eng-fra: drop k=3"][-1] == f"{saved['eng-fra']['deletion']['3']['random']:.3f}"


def test_patching_an_input_with_itself_asks_for_an_edit(app, monkeypatch):
    """Every effect would be 0 up to rounding (the library's tests check it): a colour scale over that noise would
    mislead, so the view asks for an edit, draws the logit lens only and runs no patching at all."""
    monkeypatch.setattr(transformer.analysis.patching, "activation_patching",
                        lambda *args, **kwargs: pytest.fail("ran"))
    at = ok(app(view="patching", text="patch3"))
    assert at.text_input(key="corrupt").value == "patch3"
    assert "Edit one word" in at.info[0].value
    assert len(charts(at)) == 1


def test_patching_an_edited_input_shows_effects(app, app_checkpoints):
    at = ok(app(view="patching", text="patch3", corrupt="patch4", patch_position="1"))
    result, _ = transformer.analysis.patching.patch_texts(transformer.load_checkpoint(app_checkpoints / LOADABLE[0]),
                                                 "patch3", "patch4", 1)
    np.testing.assert_allclose(panels(at, 0)[0], result.heads["encoder.self_attn"], atol=1e-6)
    assert at.query_params["corrupt"] == "patch4"


def test_patching_measures_the_first_output_piece_an_edit_changes(app, app_checkpoints):
    checkpoint = transformer.load_checkpoint(app_checkpoints / LOADABLE[0])
    assert (checkpoint.translate("abc12").text, checkpoint.translate("abd12").text) == ("21cba", "21dba")
    at = ok(app(view="patching", text="abc12"))
    at = ok(at.text_input(key="corrupt").set_value("abd12").run())
    assert at.selectbox(key="patch_position").value == 2  # "c" against "d": where the edit shows in the output
    assert any(text.value.startswith("log p(c) at output 2:") for text in at.caption)
    at = ok(at.selectbox(key="patch_position").select(4).run())
    assert at.selectbox(key="patch_position").value == 4  # the user's own choice stays until the next edit
    lens = [caption.value for caption in at.caption if caption.value.startswith("Logit lens")]
    assert lens and "is the model's own prediction" in lens[0] and "row" not in lens[0]


def test_a_new_input_starts_the_corrupted_input_again(app):
    """The corrupted input was the previous sentence's edit after a new sentence was typed, and the view said
    "cannot be patched: 10 != 20"; it starts again from the new input."""
    at = ok(app(view="patching", text="patch3"))
    at.text_input(key="corrupt").set_value("patch4").run()
    at.text_input(key="text").set_value("a much longer input").run()
    assert at.text_input(key="corrupt").value == "a much longer input"
    assert not [warning for warning in ok(at).warning if "cannot be patched" in warning.value]
    assert "Edit one word" in at.info[0].value


def test_patching_inputs_of_different_lengths_says_so(app):
    at = ok(app(view="patching", text="patch3", corrupt="patch34"))
    assert "cannot be patched" in at.warning[0].value
    assert len(charts(at)) == 1  # the logit lens still shows


def test_compare_two_shipped_checkpoints_draws_a_minus_b(app, tmp_path, monkeypatch):
    """reverse against reverse-1layer (same vocabulary): B is reverse-1layer's layer-0 head on reverse's sequence."""
    root = tmp_path / "checkpoints"
    for name in ("reverse", "reverse-1layer"):
        shutil.copytree(CHECKPOINTS / name, root / name)
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(root))
    at = ok(app(checkpoint="reverse", text="abc12", view="compare", compare="checkpoints", kind="decoder.cross_attn",
                layer="0", head="1"))
    assert at.selectbox(key="checkpoint_b").value == "reverse-1layer"
    a, b, difference = panels(at)
    one_layer = transformer.load_checkpoint(root / "reverse-1layer")
    full = transformer.load_checkpoint(root / "reverse").translate("abc12")
    with torch.no_grad(), transformer.capture(one_layer.model) as record:
        one_layer.model(torch.tensor([full.src_ids]), torch.tensor([full.tgt_ids]))
    np.testing.assert_allclose(a, full.attention.stack("decoder.cross_attn")[0, 1].numpy(), atol=1e-6)
    np.testing.assert_allclose(b, record.stack("decoder.cross_attn")[0, 1].numpy(), atol=1e-6)
    np.testing.assert_allclose(difference, a - b, atol=1e-6)
    assert np.abs(difference).max() > 1e-2


def test_a_session_that_closes_while_its_translation_waits_ends_its_run_quietly(app, monkeypatch):
    """Its queued translation is dropped (transformer.inference.batching.Cancelled): the run ends without an exception,
    which Streamlit would otherwise format into the server's log for a session no one is looking at."""
    def gone(*args, **kwargs):
        raise transformer.inference.batching.Cancelled("the caller left before its translation ran")

    monkeypatch.setattr(ui.passes.BATCHER, "translate", gone)
    at = ok(app(checkpoint="reverse", text="nobody typed this one before"))
    assert not charts(at)


# Views and link values that show pieces in text: tables, lists, captions, titles and figures.
PIECE_VIEWS = {
    "attention": {"target": "Elle lit un livre."},
    "decoding": {"step": "2"},
    "ablation": {"ablate": "decoder.layers.0.cross_attn:0"},
    "inside": {"kind": "decoder.cross_attn"},
    "patching": {"corrupt": "He is reading a book."},
    "attribution": {},
}


@pytest.mark.parametrize("view", PIECE_VIEWS)
def test_a_piece_is_written_with_one_word_marker_everywhere(app, monkeypatch, view):
    """Sentencepiece's "▁" in lists, tables and titles beside "·" on the heatmaps' axes made one piece look like two;
    every text shows the dot."""
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(CHECKPOINTS))
    at = ok(app(checkpoint="eng-fra", text="She is reading a book.", view=view, **PIECE_VIEWS[view]))
    shown = [element.value for kind in ("text", "caption", "markdown", "info", "warning") for element in at.get(kind)]
    shown += [" ".join(map(str, frame.value.astype(str).to_numpy().ravel())) for frame in at.dataframe]
    shown += [option for picker in at.selectbox for option in picker.options]
    shown += [chart.proto.spec for chart in at.get("plotly_chart")]
    joined = "\n".join(shown)
    assert "·" in joined  # pieces are shown
    assert "▁" not in joined and "\\u2581" not in joined


def test_the_readmes_example_view_runs_as_written(app):
    """The README's "Adding a view" code, as a module of its own, in the registry for this test."""
    import types

    import ui.views

    readme = (ROOT / "README.md").read_text()
    code = readme.split("### Adding a view", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    module = types.ModuleType("ui.views.one_head")
    exec(compile(code, "README.md", "exec"), module.__dict__)
    ui.views.VIEWS.append(module.VIEW)
    ui.views.BY_KEY[module.VIEW.key] = module.VIEW
    try:
        at = ok(app(view="one-head", text="abc12", kind="decoder.cross_attn", layer="1", head="2"))
    finally:
        ui.views.VIEWS.remove(module.VIEW)
        del ui.views.BY_KEY[module.VIEW.key]
    assert figure(at)["layout"]["title"]["text"] == "cross · layer 1 · head 2"
