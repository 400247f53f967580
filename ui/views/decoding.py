"""Greedy generation, one token at a time: the step's cross-attention, the causal mask growing, the candidates."""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import viz
from ui.page import Page
from ui.state import draw, settle
from ui.shared import once
from ui.view import View
from ui.widgets import PROBABILITY, controls, show_figure, side_by_side, table_height, word_switch

TABLE_PX = {False: 300, True: 320}  # width the next pieces' table needs beside the step's figure (key: lecture mode)


def step_by(delta: int, last: int) -> None:
    st.session_state.step = min(max(st.session_state.step + delta, 0), last)


def render(page: Page) -> None:
    steps = page.decoding()
    count = len(steps.prefix_tokens)  # one decoder input piece per step
    step = settle("step", range(count))
    row = controls("step")
    if count > 1:  # ← and → step as a lecturer talks (Streamlit's button shortcuts)
        back, forward = ("◀", "▶") if page.lecture else ("◀ Back", "Next ▶")  # icons: one row on a projector
        row.button(back, on_click=step_by, args=(-1, count - 1), disabled=step == 0, key="step-back",
                   shortcut="Left", help="Previous step (key ←)")
        row.button(forward, on_click=step_by, args=(1, count - 1), disabled=step == count - 1, key="step-next",
                   shortcut="Right", help="Next step (key →)")
        step = row.slider("Step", 0, count - 1, key="step", persist_state="session",
                          label_visibility="collapsed" if page.lecture else "visible")
    words = word_switch(row)
    if page.beam_size > 1:
        st.caption("Step by step is greedy decoding; the output above comes from beam search and may differ.")
    # One input, unpadded: cross-attention masks nothing here.
    # The step's query is the decoder input so far: <s> and the pieces of the earlier steps.
    source, rows = list(steps.src_tokens), steps.cross[:, :, step]  # rows: (layers, heads, src_len)
    if words:  # one query row per head: merged over the source's words only
        merged, _, source = viz.merge_words(rows[:, :, None, :], ["query"], source)  # (layers, heads, 1, words)
        rows = merged[:, :, 0]
    prefix = list(steps.prefix_tokens[: step + 1])
    fig = once(viz.decoding_step_figure, rows, source, prefix, step, theme=page.theme)
    caption = viz.decoding_step_caption(step, prefix)  # grows with every step: wrapped text, never a cut title
    if not page.lecture:
        st.text(caption)
    left, right = side_by_side(page, [int(fig.layout.width), TABLE_PX[page.lecture]])
    with left:
        show_figure(page, fig, "decoding-step")
        if page.lecture:  # on a projector the figure comes first (its title names the step), the long line under it
            st.text(caption)
    with right:
        st.markdown(f"**Step {step}: the {len(steps.top[step])} most likely next pieces**")
        st.dataframe(pd.DataFrame(steps.top[step], columns=["piece", "probability"]), hide_index=True,
                     height=table_height(page), column_config={"probability": PROBABILITY})
        st.caption("Greedy decoding takes the first.")
    row = controls("decoder-self")
    layer = draw(row.segmented_control, "Decoder layer", "layer", range(page.layers("decoder.self")), required=True,
                 persist_state="session")
    head = draw(row.segmented_control, "Head", "head", page.heads(), required=True, persist_state="session")
    # The whole grid from the first step, so the figure keeps its size while the causal triangle grows row by row;
    # rows not generated yet stay blank and their pieces unknown.
    later = np.arange(count) > step
    weights = np.where(later[:, None], np.nan, steps.decoder_self[layer, head])
    labels = list(steps.prefix_tokens[: step + 1]) + ["…"] * (count - step - 1)
    causal = viz.mask_reasons(count, count, causal=True)[viz.CAUSAL] & ~later[:, None]
    growing = once(viz.head_heatmap, weights, labels, labels, blocked={viz.CAUSAL: causal},
                   title=f"decoder self-attention up to step {step} · layer {layer} · head {head}",
                   theme=page.theme)
    show_figure(page, growing, "decoding-causal")


VIEW = View("decoding", "Decoding", render)
