"""The sidebar's Target and Foil fields (?target=, ?foil=): a target teacher-forced through the decoder instead of
the model's output, so that every view shows the attention for it; and a foil, compared with it position by
position. Under the output: each target piece's probability and rank, and log p(target) - log p(foil)."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import pandas as pd
import streamlit as st

import viz

from . import passes
from .analysis import Analysis, Attention
from .literal_text import plain
from .model_pass import SHARED, Pass
from .page import Page
from .state import MAX_INPUT_CHARS
from .widgets import PROBABILITY, pieces_shown

TARGET_HELP = ("Any output you like (the reference translation, say), read by the decoder instead of its own output: "
               "every view then shows the attention for it, and the output shows how likely the model finds each of "
               "its pieces. Empty: the model's own output.")
FOIL_HELP = ("An alternative to the target (one word changed, say): each position where the two align shows "
             "log p(target) − log p(foil), the Attribution view attributes that difference, and the two whole "
             "sequences are compared too.")


class Forced(NamedTuple):
    tgt_ids: tuple[int, ...]  # decoder input: <s> and the target's pieces
    output_ids: tuple[int, ...]  # the target's pieces and </s>
    tgt_tokens: tuple[str, ...]
    output_tokens: tuple[str, ...]
    probs: tuple[float, ...]  # of each target piece at its position
    ranks: tuple[int, ...]  # 1 = the model's own choice there
    attention: Attention
    # With a foil, per target position: the foil piece compared there (transformer.analysis.forced.aligned_foil;
    # where none aligns, the target's own piece, "" as text and NaN as score), and log p(target_t) - log p(that piece).
    foil_ids: tuple[int, ...] = ()
    foil_tokens: tuple[str, ...] = ()
    contrast: tuple[float, ...] = ()
    foil_length: int = 0  # the foil's own pieces, </s> included
    sequence_contrast: float | None = None  # log p(target) - log p(foil), each after its own prefix


FORCED = Pass("forced target", "ui.passes:forced", Forced, SHARED, "Teacher-forcing the target…")


def choose(path: str, version: int, analysis: Analysis) -> tuple[Analysis, Forced | None]:
    """The Target and Foil fields; with a target, `analysis` with the target's ids, pieces, probabilities and
    attention in place of the model's output (the model's own output stays in the Forced's absence only)."""
    for name in ("target", "foil"):
        if len(st.session_state.get(name, "")) > MAX_INPUT_CHARS:  # a link's text is not cut by max_chars
            st.session_state[name] = st.session_state[name][:MAX_INPUT_CHARS]
    # persist_state: as the input's (ui.sidebar.choose_input), a link's target reaches a browser that missed a run
    target = st.sidebar.text_input("Target (teacher-forced)", key="target", max_chars=MAX_INPUT_CHARS,
                                   persist_state="session", help=TARGET_HELP, placeholder="the model's own output")
    foil = st.sidebar.text_input("Foil", key="foil", max_chars=MAX_INPUT_CHARS, persist_state="session",
                                 help=FOIL_HELP, disabled=not target.strip(), placeholder="another output to compare")
    if not target.strip():
        return analysis, None
    if "decoder.cross_attn" not in analysis.kinds:  # a language model's output continues or fills its own input
        st.sidebar.info("The target is not used: a teacher-forced target replaces a translation, and this model "
                        "(decoder-only or encoder-only) has no encoder-decoder pair.")
        return analysis, None
    src_ids = tuple(i for i in analysis.src_ids if i != analysis.pad_id)
    try:
        forced = passes.run(FORCED, path, version, src_ids=src_ids, target=target, foil=foil.strip() and foil)
    except ValueError as error:  # a target with nothing to read
        st.sidebar.warning(f"The target is not used: {error}")
        return analysis, None
    return dataclasses.replace(analysis, text=target, tgt_ids=forced.tgt_ids, tgt_tokens=forced.tgt_tokens,
                               output_tokens=forced.output_tokens, output_ids=forced.output_ids,
                               probs=forced.probs, attention=forced.attention), forced


def show(page: Page) -> None:
    """Under the output: the target's pieces with probability and rank, and the foil's contrast."""
    forced = page.target
    if forced is None:
        return
    table = {"position": range(len(forced.output_tokens)), "target piece": pieces_shown(forced.output_tokens),
             "probability": forced.probs, "rank": forced.ranks}
    if forced.contrast:
        table.update({"foil piece": pieces_shown(forced.foil_tokens), "log p(target) − log p(foil)": forced.contrast})
    least = min(range(len(forced.probs)), key=forced.probs.__getitem__)
    summary = (f"Teacher-forced target: the decoder reads it instead of its own output. Least likely piece: "
               f"“{plain(viz.piece_text(forced.output_tokens[least]))}” at position {least} "
               f"(p = {forced.probs[least]:.3g}, rank {forced.ranks[least]}).")
    with st.expander("Target pieces: probability and rank" + (" · foil" if forced.contrast else ""),
                     expanded=not page.lecture):
        st.caption(summary)
        st.dataframe(pd.DataFrame(table), hide_index=True, column_config={
            "probability": PROBABILITY, "log p(target) − log p(foil)": st.column_config.NumberColumn(format="%.3f")})
        if forced.contrast:
            st.caption(foil_caption(forced))


def foil_caption(forced: Forced) -> str:
    """What the foil's columns mean, and the two whole sequences' log p difference."""
    aligned = "" if forced.foil_length == len(forced.output_ids) else (
        f" The foil has {forced.foil_length} pieces and the target {len(forced.output_ids)}: they compare position by "
        "position before their first difference, from the end after their last, and in between only where a "
        "stretch is as long in both (else its first pieces); a blank cell has no foil piece.")
    return ("Both read after the target's prefix: 0 where the two agree, above 0 where the model prefers the target."
            + aligned + f" Whole sequences, each after its own prefix: log p(target) − log p(foil) = "
            f"{forced.sequence_contrast:.3f}.")
