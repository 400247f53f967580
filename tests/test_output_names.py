"""An output is named in one set of words wherever it is shown or its pieces are drawn (ui.page.Page.output_name): the
headline over every view and the Training view, whose label names the decoding whose pieces its rows spell."""
from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

import viz
from helpers import APP, ROOT, outputs
from transformer import load_checkpoint
from ui.literal_text import plain
from ui.page import decoding_text

pytestmark = pytest.mark.slow  # every test runs the whole app (AppTest)

CHECKPOINT = ROOT / "checkpoints" / "eng-fra"
TEXT = "She is reading a book."  # greedy: "Elle lit un livre."; the card's beam search: "Elle est en train de lire …"


def head_rows(at: AppTest) -> list[str]:
    """The row labels of the Training view's head at the chosen snapshot (the final weights, named by their step)."""
    final = f"at final (step {load_checkpoint(CHECKPOINT).card.history[-1]['step']})"
    (figure,) = [spec for spec in (json.loads(chart.proto.spec) for chart in at.get("plotly_chart"))
                 if spec["layout"]["title"]["text"].endswith(final)]
    return figure["layout"]["yaxis"]["ticktext"]


@pytest.mark.parametrize("lecture", ["0", "1"])
@pytest.mark.parametrize("decoding", ["beam", "greedy"])
def test_the_training_views_label_names_the_decoding_whose_pieces_its_rows_spell(decoding, lecture, monkeypatch):
    monkeypatch.delenv("ATLAS_CHECKPOINTS", raising=False)  # the shipped folder
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(checkpoint="eng-fra", text=TEXT, view="training", decoding=decoding, lecture=lecture)
    at.run()
    assert not at.exception, [error.value for error in at.exception]
    checkpoint = load_checkpoint(CHECKPOINT)
    beams = checkpoint.card.decoding["beam_size"] if decoding == "beam" else 1
    drawn = checkpoint.translate(TEXT, beam_size=beams)
    assert drawn.text != checkpoint.translate(TEXT, beam_size=5 - beams).text  # the two decodings differ here
    assert head_rows(at) == [viz.safe_label(label) for label in viz.produces_labels(drawn.tgt_tokens,
                                                                                   drawn.output_tokens)]
    name = f"Output of eng-fra, {decoding_text(beams, checkpoint.card.decoding)}"
    texts = [text.value for text in at.text]
    assert plain(name) in [caption.value for caption in at.caption]  # the headline's name of its output
    if lecture == "1":  # the headline beside the figure, and the view's line under its figure
        assert f"→  {drawn.text}" in texts and f"{name}: {drawn.text}" in texts
    else:  # the output box, and the view's label over its own output box
        assert f"**{plain(name)}**" in [markdown.value for markdown in at.markdown]
        assert outputs(at) == [drawn.text, drawn.text]
    assert f"The decoder's pieces: {plain(name)}, " in " ".join(caption.value for caption in at.caption)
