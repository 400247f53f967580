"""Is attention explanation? Eight attribution methods side by side for one output piece of this input, every piece
by every method on request, and how faithful each method was measured to be (checkpoints/faithfulness.json)."""
from __future__ import annotations

import streamlit as st

import viz
from ui.literal_text import plain
from ui.page import Page
from ui.shared import once
from ui.state import settle
from ui.view import View
from ui.widgets import EXPANDER_PX, controls, inset, show_figure


def contrastive(page: Page) -> None:
    """With a target and a foil: which source tokens make the model prefer the target's piece to the foil's."""
    if page.target is None or not page.target.contrast:
        return
    explained = page.contrastive()
    st.markdown("**Why the target and not the foil**")
    if not explained.methods:
        st.caption("The target and the foil agree at every position where they align: there is no difference to "
                   "attribute piece by piece (the whole sequences' log p(target) − log p(foil) is "
                   f"{page.target.sequence_contrast:.3f}).")
        return
    show_figure(page, once(viz.attribution_figure, dict(explained.methods), list(explained.output_tokens),
                           list(explained.src_tokens), signed=tuple(name for name, _ in explained.methods),
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
    chosen, row = ((dict(page.explained().methods), token) if overview_open
                   else (dict(page.explained(row=token).methods), 0))
    show_figure(page, once(viz.token_attribution_figure, chosen, src, row, outputs[token], theme=page.theme),
                "attribution-token")
    st.caption("Each method's row is divided by its own peak (hover a cell for the raw value); gradients are signed.")
    if page.lecture:
        st.caption(explains)
    every = st.expander("Every output piece by every method", key="attr_all", on_change="rerun")
    if overview_open:
        with every:
            signed = tuple(name for name in chosen if page.attribution_methods[name].signed)
            theme = inset(page, EXPANDER_PX)
            show_figure(page, once(viz.attribution_figure, chosen, outputs, src, signed=signed,
                                   title="Attribution by method", theme=theme), "attribution-methods", theme=theme)
            st.caption("Row t: which source tokens the piece predicted at output t comes from, by each method. Each "
                       "panel is divided by its own peak (hover a cell for the raw value); gradients are signed.")
    st.markdown("**The methods**")
    for name in chosen:
        method = page.attribution_methods[name]
        st.text(f"{name}: {method.note} ({method.citation})")
    faithfulness = page.faithfulness_table()
    if faithfulness is not None:
        st.markdown("**How faithful each method is** (measured by `python -m transformer.faithfulness`)")
        st.dataframe(faithfulness, hide_index=True)
        st.caption("“top = true”: share of output pieces whose top-attributed source token is the true one "
                   "(reverse, dates). “drop k”: mean fall of the output piece's probability when its k "
                   "top-attributed source tokens are deleted; random deletes k random tokens.")


VIEW = View("attribution", "Attribution", render, needs=("decoder.cross_attn",),
            needs_why="explains an output piece by the source pieces it read through cross-attention")
