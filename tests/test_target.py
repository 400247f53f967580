"""The Target and Foil fields through a link: every view reads the target, the output shows each target piece's
probability and rank, a foil's log p(target) − log p(foil), and the Attribution view attributes that difference."""
import json

import numpy as np
import pytest

from helpers import LOADABLE, plotly_values
from transformer import forced_target, load_checkpoint
from ui.literal_text import plain

TEXT = "abc12"
CONTRAST = "log p(target) − log p(foil)"


@pytest.fixture(scope="module")
def output(app_checkpoints) -> str:
    """The default checkpoint's own output for TEXT."""
    return load_checkpoint(app_checkpoints / LOADABLE[0]).translate(TEXT).text


def changed(output: str) -> str:
    """`output` with its third character replaced."""
    return output[:2] + ("x" if output[2] != "x" else "y") + output[3:]


def target_table(at):
    tables = [frame.value for frame in at.dataframe if "target piece" in frame.value.columns]
    assert len(tables) == 1
    return tables[0]


def drawn_z(at) -> np.ndarray:
    """The first figure's first heatmap, as Plotly's JSON carries it (a typed array)."""
    return plotly_values(json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]["z"]).astype(float)


def titles(at) -> list[str]:
    return [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in at.get("plotly_chart")]


def test_the_models_own_output_as_target_changes_nothing(app, output):
    plain = app(text=TEXT, view="attention")
    forced = app(text=TEXT, view="attention", target=output)
    assert not forced.exception and not forced.warning
    table = target_table(forced)
    assert table["rank"].tolist() == [1] * len(table)  # the model's own choice at every position
    np.testing.assert_array_equal(drawn_z(plain), drawn_z(forced))


def test_a_changed_piece_of_the_target_is_unlikely_and_every_view_reads_the_target(app, app_checkpoints, output):
    target = changed(output)
    at = app(text=TEXT, view="inside", target=target, kind="decoder.self_attn", query="3", inside_step="0")
    assert not at.exception and not at.warning
    table = target_table(at)
    assert table["target piece"].tolist()[2] == target[2]
    assert table["probability"][2] < 0.1 and table["rank"][2] > 1
    assert at.query_params["target"] == target
    query_row = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["yaxis"]["ticktext"][0]
    assert query_row == f"q · {target[2]} → {target[3]}"  # the inside view's query is the target's piece
    at = app(text=TEXT, view="attention", target=target)  # the attention the target gets, not the output's
    expected = forced_target(load_checkpoint(app_checkpoints / LOADABLE[0]), TEXT, target).attention
    np.testing.assert_allclose(drawn_z(at), expected["decoder.layers.0.cross_attn"][0, 0].numpy(), atol=1e-6)


def test_a_foil_is_compared_position_by_position_and_attributed(app, output):
    foil = changed(output)
    at = app(text=TEXT, view="attribution", target=output, foil=foil, lecture="1")
    assert not at.exception and not at.warning
    table = target_table(at)
    contrast = np.array(table[CONTRAST].tolist())
    assert contrast[2] > 1 and np.all(np.delete(contrast, 2) == 0)
    assert titles(at)[0] == "log p(target) − log p(foil), attributed"
    layout = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]
    assert len(layout["yaxis"]["ticktext"]) == 1  # one row: the one position where they differ
    assert at.query_params["foil"] == foil


def test_a_foil_of_another_length_compares_where_it_aligns_and_as_a_whole(app, output):
    longer = output[:2] + "zz" + output[3:]  # "c" becomes "zz": the pieces around it align, "c" with the first "z"
    at = app(text=TEXT, view="attribution", target=output, foil=longer)
    assert not at.exception and not at.warning
    table = target_table(at)
    assert table["foil piece"].tolist() == [output[0], output[1], "z", output[3], output[4], "</s>"]
    contrast = table[CONTRAST].tolist()
    assert contrast[2] > 1 and contrast[:2] + contrast[3:] == [0] * 5
    caption = next(caption.value for caption in at.caption if caption.value.startswith("Both read after"))
    assert "The foil has 7 pieces and the target 6" in caption
    assert float(caption.rsplit("= ", 1)[1].rstrip(".")) > 1  # the model's own output, far likelier as a whole
    assert titles(at)[0] == "log p(target) − log p(foil), attributed"  # position 2 differs: attributed
    shorter = app(text=TEXT, view="attribution", target=output, foil=output[:2] + output[3:])  # "c" left out
    contrast = target_table(shorter)[CONTRAST].tolist()
    assert np.isnan(contrast[2]) and contrast[:2] + contrast[3:] == [0] * 5
    assert any("agree at every position where they align" in caption.value for caption in shorter.caption)


def test_a_target_of_markdown_and_html_draws_and_stays_in_the_link(app):
    hostile = "**b** <img src=x onerror=1> `c`"
    at = app(text=TEXT, target=hostile, view="inside")
    assert not at.exception
    assert target_table(at)["target piece"].tolist()[-1] == "</s>"
    assert at.query_params["target"] == hostile


@pytest.mark.parametrize("lecture", ["0", "1"])
def test_a_typed_target_is_never_shown_as_the_models_output(app, output, lecture):
    target = changed(output)
    at = app(text=TEXT, view="attention", target=target, lecture=lecture)
    assert not at.exception
    texts = [text.value for text in at.text]
    if lecture == "1":
        headline = [text for text in texts if target in text]
        assert headline and all(text.startswith("Typed target (teacher-forced): ") for text in headline), texts
        named = plain(f"Output of {LOADABLE[0]}, greedy")  # as every view names it
        assert f"{named}: {plain(output)}" in [caption.value for caption in at.caption]
        assert not any(text.startswith("→") for text in texts)
        return
    captions = [caption.value for caption in at.caption]
    typed = next(i for i, caption in enumerate(captions) if caption.startswith("Typed target, teacher-forced"))
    own = next(i for i, caption in enumerate(captions) if caption.startswith("Output of "))
    assert typed < own and "it parts from the typed target at piece 2" in captions[own], captions
    assert texts.index(target) < texts.index(output)  # each box under its own caption


def test_without_a_target_the_output_is_the_models(app, output):
    at = app(text=TEXT, view="attention")
    assert output in [text.value for text in at.text]
    assert not any(caption.value.startswith("Typed target") for caption in at.caption)
    assert any(caption.value.startswith("Output of ") for caption in at.caption)
