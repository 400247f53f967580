"""Tidy export: one row per weight, correct masked flags, and CSV/Parquet that read back unchanged."""
import io

import numpy as np
import pandas as pd
import pytest

import viz

ENCODER_TOKENS = ["<s>", "NA", "a,\"b\"", "<pad>"]
TARGET_TOKENS = ["<s>", "▁le", "<pad>"]


def _frame():
    rng = np.random.default_rng(0)
    stacks = {"encoder self": rng.random((2, 3, 4, 4)), "cross": rng.random((2, 3, 3, 4))}
    key_is_pad = np.array([False, False, False, True])
    blocked = {
        "encoder self": viz.mask_reasons(4, 4, key_is_pad=key_is_pad),
        "cross": viz.mask_reasons(3, 4, key_is_pad=key_is_pad, query_is_pad=np.array([False, False, True])),
    }
    frame = viz.tidy_frame(stacks, {"encoder self": ENCODER_TOKENS, "cross": TARGET_TOKENS},
                           {"encoder self": ENCODER_TOKENS, "cross": ENCODER_TOKENS}, blocked)
    return stacks, frame


def test_tidy_frame_has_one_row_per_cell_of_every_head():
    stacks, frame = _frame()
    assert list(frame.columns) == ["kind", "layer", "head", "q_pos", "q_token", "k_pos", "k_token", "weight",
                                   "masked"]
    assert len(frame) == 2 * 3 * 4 * 4 + 2 * 3 * 3 * 4
    sizes = frame.groupby(["kind", "layer", "head"]).size()
    assert len(sizes) == 12 and sizes.xs("encoder self").eq(16).all() and sizes.xs("cross").eq(12).all()
    row = frame[(frame.kind == "cross") & (frame.layer == 1) & (frame["head"] == 2) & (frame.q_pos == 1)
                & (frame.k_pos == 2)].iloc[0]
    assert (row.q_token, row.k_token, row.weight) == ("▁le", "a,\"b\"", stacks["cross"][1, 2, 1, 2])


def test_tidy_frame_flags_exactly_the_cells_the_model_masks():
    _, frame = _frame()
    assert (frame.masked == (frame.k_pos == 3)).all()  # the padded query row of cross is informational only


def test_csv_round_trip():
    _, frame = _frame()
    read = pd.read_csv(io.BytesIO(viz.to_csv_bytes(frame)), keep_default_na=False)
    pd.testing.assert_frame_equal(read, frame, check_exact=False, rtol=1e-15)


def test_parquet_round_trip_is_exact():
    _, frame = _frame()
    pd.testing.assert_frame_equal(pd.read_parquet(io.BytesIO(viz.to_parquet_bytes(frame))), frame,
                                  check_exact=True)


def test_tidy_frame_refuses_stacks_that_do_not_match_their_tokens():
    with pytest.raises(ValueError, match="encoder self"):
        viz.tidy_frame({"encoder self": np.ones((1, 1, 3, 3))}, {"encoder self": ["a"]}, {"encoder self": ["a"]})


def test_a_figure_as_html_carries_plotly_and_asks_for_no_other_file():
    fig = viz.head_heatmap(np.eye(3), ["<s>", "▁chat", "</s>"], ["<s>", "▁chat", "</s>"], title="one head")
    page = viz.to_html_bytes(fig, "one-head").decode("utf-8")
    assert page.lower().startswith("<!doctype html>") and "one head" in page
    assert "·chat" in page or "\\u00b7chat" in page  # the word-marked piece, as Plotly writes it (raw or escaped)
    assert "<script src=" not in page and "<link" not in page  # Plotly's JavaScript inlined, no CDN, no font
    assert page.count("Plotly.newPlot") == 1 and "one-head" in page  # the camera's file name
