"""Activation patching: which heads and positions carry what makes this input's output differ from an edited one's;
and the logit lens: what the decoder would predict after each of its sublayers."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import streamlit as st

import viz
from ui.analysis import Analysis, first_difference
from ui.literal_text import plain
from ui.model_pass import SHARED, TRANSLATE, Pass
from ui.page import Page
from ui.shared import once
from ui.state import MAX_INPUT_CHARS, settle
from ui.view import View
from ui.widgets import aside, controls, panel_picker, show_figure


class Lens(NamedTuple):
    stages: tuple[str, ...]  # "L0 self", "L0 cross", "L0 ffn", ...
    top_pieces: tuple[tuple[tuple[str, ...], ...], ...]  # [stage][position][rank], most likely first
    top_probs: np.ndarray  # (stages, tgt_len, top_k)


class Patched(NamedTuple):
    error: str  # why the two inputs cannot be patched ("" if they can); the arrays are empty then
    heads: tuple[tuple[str, np.ndarray], ...] = ()  # (attention kind, (layers, heads))
    positions: tuple[tuple[str, np.ndarray], ...] = ()  # ("encoder", (layers, src_len)), ("decoder", (layers, tgt_len))
    clean_log_prob: float = 0.0
    corrupted_log_prob: float = 0.0


LENS = Pass("logit lens", "ui.passes:lens", Lens, SHARED, "Reading the decoder's residual stream…")
PATCHED = Pass("patching", "ui.passes:patched", Patched, SHARED, "Patching every head and position…")


def render(page: Page) -> None:
    decoded = page.default_translation()  # the card's decoding: what the lens and the patching explain
    lens = page.run(LENS, src_ids=decoded.src_ids, tgt_ids=decoded.tgt_ids, output_ids=decoded.output_ids)
    outputs = decoded.output_tokens
    # The corrupted input starts as this input, and starts again when the input changes: an edit of the previous
    # sentence has another length and cannot be patched into this one.
    if st.session_state.get("corrupt") is None or st.session_state.get("corrupt_of", page.text) != page.text:
        st.session_state.corrupt = page.text
    st.session_state.corrupt_of = page.text  # a link's corrupted input belongs to the link's input
    row = controls("patching")  # one row: on a projector the figures start high
    compact = dict(label_visibility="collapsed") if page.lecture else {}
    corrupted = row.text_input("Corrupted input (edit one word of the input above)", key="corrupt",
                               max_chars=MAX_INPUT_CHARS, persist_state="session", width=560 if page.lecture else 480,
                               help="It must have as many tokens as the input: position j of one stands for position "
                                    "j of the other.", **compact)
    if corrupted != st.session_state.get("patch_edit"):  # a new edit: measured where it changes the output
        st.session_state.patch_edit = corrupted
        changed = first_changed_piece(page, decoded, corrupted) if corrupted.strip() != page.text.strip() else None
        if changed is not None and "patch_position" not in st.session_state.url_pending:
            st.session_state.patch_position = min(changed, len(outputs) - 1)
    position = settle("patch_position", range(len(outputs)))
    position = row.selectbox("Output piece measured", range(len(outputs)), key="patch_position",
                             persist_state="session", format_func=lambda t: f"{t}: {viz.piece_text(outputs[t])}",
                             width=240, **compact)
    patched = None if corrupted.strip() == page.text.strip() else page.run(
        PATCHED, clean=page.text, corrupted=corrupted, position=position)
    note = controls("patching-note") if page.lecture else st  # lecture mode: beside the figure, which keeps the height
    with_lens = True
    if patched is None:  # every effect is 0 up to rounding: a scale over noise would mislead, so nothing is run
        note.info("Edit one word of the input in the box above: patching a run into itself changes nothing.", icon="✏️")
    elif patched.error:
        note.warning(f"These two inputs cannot be patched: {patched.error}", icon="✂️")
    else:
        aside(f"log p({plain(viz.piece_text(outputs[position]))}) at output {position}: clean "
              f"{patched.clean_log_prob:.3f}, corrupted {patched.corrupted_log_prob:.3f}")
        heads, positions = dict(patched.heads), dict(patched.positions)
        rows = ["heads", *(f"{stack} positions" for stack in positions)]
        # A projector shows one figure at a time: a row of the patching figure, or the logit lens (None: all).
        only = panel_picker(page, [*rows, "logit lens"], 0)
        with_lens = only in (None, len(rows))
        if only != len(rows):
            title = f"Patching the clean run into the corrupted one · output {position}"
            if only is not None:
                title = f"Patching · output {position} · {rows[only]}"
                heads, positions = (heads, {}) if only == 0 else ({}, {stack: table for index, (stack, table)
                                                                       in enumerate(positions.items(), start=1)
                                                                       if index == only})
            fig = once(viz.patching_figure, heads, positions,
                       {"encoder": list(decoded.src_tokens), "decoder": list(decoded.tgt_tokens)}, title=title,
                       theme=page.theme)
            show_figure(page, fig, "patching")
            st.caption("Each cell: log p of the clean output's piece when that one head's output (the heads) or "
                       "that layer's residual stream at that position (the positions) is taken from the clean run, "
                       "minus the corrupted run's. Positive: this part carries what the edit changed.")
    if with_lens:
        show_lens(page, lens, decoded.tgt_tokens)


def first_changed_piece(page: Page, decoded: Analysis, corrupted: str) -> int | None:
    """The first output position where `corrupted`'s own translation (decoded as `decoded`, the card's way)
    differs from this input's; None where the two outputs are the same."""
    edited = page.run(TRANSLATE, text=corrupted, beam_size=page.card.decoding.get("beam_size", 1))
    return first_difference(decoded.output_tokens, edited.output_tokens)


def show_lens(page: Page, lens: Lens, tgt_tokens: tuple[str, ...]) -> None:
    """The logit lens and its caption. On a projector too narrow for a column per sublayer, a column per layer
    (the residual stream after it)."""
    pieces = np.array(lens.top_pieces, dtype=object)
    layer = [stage.split()[0] for stage in lens.stages]  # "L1 cross": each stage names its layer first
    layer_ends = [i for i in range(len(layer)) if i + 1 == len(layer) or layer[i + 1] != layer[i]]
    show_figure(page, once(viz.logit_lens_figure, list(lens.stages), list(tgt_tokens), pieces, lens.top_probs,
                           layer_ends=layer_ends, theme=page.theme), "logit-lens")
    st.caption("Logit lens: each decoder sublayer's residual stream through the final norm and the output projection. "
               f"The last stage, “{lens.stages[-1]}”, is the model's own prediction.")

VIEW = View("patching", "Patching", render, needs=("decoder.cross_attn",),
            needs_why="patches an edited source into a translation, through the decoder's cross-attention")
