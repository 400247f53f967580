"""Minimal pairs in the Compare view (compare=inputs, text_b=): the same head on two inputs, A − B where they line up
piece for piece, side by side where they do not, and per output position how B changes the probability of A's next
piece, each checked against the model run here directly."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import transformer
import viz
from helpers import LOADABLE, plotly_values
from ui.deck import parse_deck
from ui.state import parse_query
from ui.views import BY_KEY

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def figures(at) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def panels(spec: dict) -> list[np.ndarray]:
    return [plotly_values(trace["z"]) for trace in spec["data"] if trace.get("coloraxis")]


def changes_table(at):
    return next(frame.value for frame in at.dataframe if "p after B" in frame.value.columns)


def captions(at) -> str:
    return " ".join(caption.value for caption in at.caption)


@pytest.fixture(scope="module")
def checkpoint(app_checkpoints):
    return transformer.load_checkpoint(app_checkpoints / LOADABLE[0])


@pytest.mark.parametrize("kind", ["encoder.self_attn", "decoder.cross_attn"])
def test_a_pair_that_lines_up_draws_the_head_on_both_inputs_and_a_minus_b(app, checkpoint, kind):
    at = ok(app(view="compare", compare="inputs", text="abc12", text_b="abd12", kind=kind, layer="1", head="0"))
    (spec,) = figures(at)
    a, b, difference = panels(spec)
    for text, drawn in (("abc12", a), ("abd12", b)):
        np.testing.assert_allclose(drawn, checkpoint.translate(text).attention.stack(kind).numpy()[1, 0], atol=1e-6)
    np.testing.assert_allclose(difference, a - b, atol=1e-6)
    assert np.abs(difference).max() > 1e-3  # not A against A
    assert "c / d" in spec["layout"]["xaxis"]["ticktext"] + spec["layout"]["yaxis"]["ticktext"]
    assert "A: abc12 → " in captions(at) and "B: abd12 → " in captions(at)


def test_the_change_in_the_next_pieces_probability_is_a_s_output_read_after_b(app, checkpoint):
    at = ok(app(view="compare", compare="inputs", text="abc12", text_b="abd12", kind="encoder.self_attn"))
    table = changes_table(at)
    a, b = checkpoint.translate("abc12"), checkpoint.translate("abd12")
    with torch.no_grad():  # B's source, A's decoder input: the same pieces after the other source
        probs = checkpoint.model(torch.tensor([b.src_ids]), torch.tensor([a.tgt_ids])).softmax(dim=-1)[0]
    after_b = probs[torch.arange(len(a.output_ids)), torch.tensor(a.output_ids)].numpy()
    assert list(table["A's next piece"]) == [viz.piece_text(piece) for piece in a.output_tokens]
    np.testing.assert_allclose(table["p after A"], a.probs, atol=1e-5)
    np.testing.assert_allclose(table["p after B"], after_b, atol=1e-5)
    np.testing.assert_allclose(table["change"], after_b - np.asarray(a.probs), atol=1e-5)
    assert np.abs(table["change"]).max() > 1e-3


def test_a_pair_that_does_not_line_up_is_drawn_side_by_side_naming_the_pieces_that_differ(app, checkpoint):
    at = ok(app(view="compare", compare="inputs", text="abc12", text_b="abcd12", kind="encoder.self_attn",
                layer="0", head="1"))
    first, second = figures(at)
    assert [len(panels(first)), len(panels(second))] == [1, 1]
    assert first["layout"]["title"]["text"].startswith("A: ") and second["layout"]["title"]["text"].startswith("B: ")
    np.testing.assert_allclose(panels(second)[0], checkpoint.translate("abcd12").attention.stack(
        "encoder.self_attn").numpy()[0, 1], atol=1e-6)
    assert "the source has 6 pieces in A and 7 in B (nothing in A, “d” in B)" in captions(at)
    assert len(changes_table(at)) == len(checkpoint.translate("abc12").output_ids)


def test_input_b_starts_as_the_input_and_asks_for_a_change(app):
    at = ok(app(view="compare", compare="inputs", text="abc12"))
    assert at.text_input(key="text_b").value == "abc12"
    assert not figures(at) and "Change a word of input B" in at.info[0].value
    at.text_input(key="text_b").input("abd12").run()
    assert len(panels(figures(ok(at))[0])) == 3
    assert at.query_params["text_b"] == "abd12"  # the pair is in the shared link


def test_a_new_input_starts_input_b_again(app):
    at = ok(app(view="compare", compare="inputs", text="abc12", text_b="abd12"))
    at.text_input(key="text").input("xyz98").run()
    ok(at)
    assert at.text_input(key="text_b").value == "xyz98"  # an edit of the old sentence belongs to the old sentence


def test_lecture_mode_puts_input_b_beside_the_figure(app):
    at = ok(app(view="compare", compare="inputs", text="abc12", text_b="abd12", lecture="1"))
    assert len(figures(at)) == 1 and at.text_input(key="text_b").value == "abd12"


def test_a_slide_holds_a_minimal_pair():
    deck = parse_deck(b'title = "pairs"\n[[slides]]\ntitle = "tired or wide"\n[slides.link]\nview = "compare"\n'
                      b'compare = "inputs"\ntext = "abc12"\ntext_b = "abd12"\n', BY_KEY)
    link, notices = parse_query({"view": "compare", "compare": "inputs", "text": "abc12", "text_b": "abd12"})
    assert not notices and deck.slides[0].state == link
