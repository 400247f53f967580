"""Is attention explanation? Eight attribution methods side by side for one output piece of this input, every piece
by every method on request, and how faithful each method was measured to be (checkpoints/faithfulness.json)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

import viz
from ui.literal_text import plain
from ui.model_pass import FRESH, SHARED, Pass
from ui.page import Page
from ui.shared import once
from ui.state import settle
from ui.view import View
from ui.widgets import EXPANDER_PX, controls, inset, show_figure

# Each a tuple ((method, (rows, src_len)), ...) in transformer.analysis.attribution's order.
EXPLAINED = Pass("attribution", "ui.passes:explained", tuple, SHARED, "Attributing by every method…")
CONTRASTIVE = Pass("contrastive attribution", "ui.passes:contrastive", tuple, SHARED, "Attributing the contrast…")
FAITHFULNESS = Pass("faithfulness table", "ui.passes:faithfulness_measured", (pd.DataFrame, type(None)), FRESH)
METHODS = "transformer.analysis.attribution:METHODS"  # name -> its declaration (signed or not, note, citation)


def contrastive(page: Page) -> None:
    """With a target and a foil: which source tokens make the model prefer the target's piece to the foil's."""
    if page.target is None or not page.target.contrast:
        return
    forced, decoded = page.target, page.default_translation()
    rows = tuple(t for t, (a, b) in enumerate(zip(forced.output_ids, forced.foil_ids)) if a != b)
    methods = page.run(CONTRASTIVE, src_ids=decoded.src_ids, tgt_ids=forced.tgt_ids, output_ids=forced.output_ids,
                       foil_ids=forced.foil_ids, rows=rows) if rows else ()
    labels = [f"{forced.output_tokens[t]} / {forced.foil_tokens[t]}" for t in rows]  # target piece / foil piece
    st.markdown("**Why the target and not the foil**")
    if not methods:
        st.caption("The target and the foil agree at every position where they align: there is no difference to "
                   "attribute piece by piece (the whole sequences' log p(target) − log p(foil) is "
                   f"{page.target.sequence_contrast:.3f}).")
        return
    show_figure(page, once(viz.attribution_figure, dict(methods), labels, list(decoded.src_tokens),
                           signed=tuple(name for name, _ in methods),
                           title="log p(target) − log p(foil), attributed",
                           theme=page.theme), "attribution-contrastive")
    st.caption("Row: a position where they differ (target piece / foil piece), both after the target's prefix. Red "
               "source tokens raise the target's piece over the foil's (Yin & Neubig 2022), blue ones the foil's.")


def render(page: Page) -> None:
    contrastive(page)
    decoded = page.default_translation()
    outputs, src = list(decoded.output_tokens), list(decoded.src_tokens)
    # The card's decoding, whatever the sidebar's: named as the headline names an output, which may be another one.
    explains = f"Explained: {plain(page.output_name(beam_size=page.card.decoding.get('beam_size', 1)))}."
    if not page.lecture:  # on a projector under the figure: above, it pushes it down
        st.caption(explains)
    token = settle("attr_token", range(len(outputs)))
    # On a projector one compact control with its label folded: the figure starts high.
    token = controls("attribution").selectbox(
        "Output piece", range(len(outputs)), key="attr_token", persist_state="session",
        format_func=lambda t: f"{t}: {viz.piece_text(outputs[t])}",
        label_visibility="collapsed" if page.lecture else "visible",
        width=320 if page.lecture else "stretch")
    # Every piece by every method costs integrated gradients a backward pass per piece at each of 32 points (seconds
    # on a long output), so it is computed only while its expander is open; the chosen piece is then its row of that
    # table, else computed for that piece alone. (The expander's key holds whether it is open, before it is drawn.)
    overview_open = bool(st.session_state.get("attr_all"))
    chosen = dict(page.run(EXPLAINED, src_ids=decoded.src_ids, tgt_ids=decoded.tgt_ids,
                           output_ids=decoded.output_ids, row=None if overview_open else token))
    row = token if overview_open else 0
    show_figure(page, once(viz.token_attribution_figure, chosen, src, row, outputs[token], theme=page.theme),
                "attribution-token")
    st.caption("Each method's row is divided by its own peak (hover a cell for the raw value); gradients are signed.")
    if page.lecture:
        st.caption(explains)
    every = st.expander("Every output piece by every method", key="attr_all", on_change="rerun")
    if overview_open:
        with every:
            signed = tuple(name for name in chosen if page.library(METHODS)[name].signed)
            theme = inset(page, EXPANDER_PX)
            show_figure(page, once(viz.attribution_figure, chosen, outputs, src, signed=signed,
                                   title="Attribution by method", theme=theme), "attribution-methods", theme=theme)
            st.caption("Row t: which source tokens the piece predicted at output t comes from, by each method. Each "
                       "panel is divided by its own peak (hover a cell for the raw value); gradients are signed.")
    st.markdown("**The methods**")
    for name in chosen:
        method = page.library(METHODS)[name]
        st.text(f"{name}: {method.note} ({method.citation})")
    faithfulness = page.run(FAITHFULNESS)
    if faithfulness is not None:
        st.markdown("**How faithful each method is** (measured by `python -m transformer.faithfulness`)")
        st.dataframe(faithfulness, hide_index=True)
        st.caption("“top = true”: share of output pieces whose top-attributed source token is the true one "
                   "(reverse, dates). “drop k”: mean fall of the output piece's probability when its k "
                   "top-attributed source tokens are deleted; random deletes k random tokens.")


VIEW = View("attribution", "Attribution", render, needs=("decoder.cross_attn",),
            needs_why="explains an output piece by the source pieces it read through cross-attention")
