"""Is attention explanation? Eight attribution methods side by side for one output piece of this input, every piece
by every method on request, and how faithful each method was measured to be (the README's table)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

import viz
from ui.page import Page
from ui.state import settle
from ui.shared import once
from ui.view import View
from ui.widgets import EXPANDER_PX, controls, inset, show_figure

# What each method is, in a sentence (transformer/attribution.py has the formulas).
METHOD_NOTES = {
    "attention_last": "cross-attention weights of the last decoder layer, heads averaged.",
    "attention_mean": "cross-attention weights averaged over every layer and head.",
    "value_norms": "‖Σ α·f(x)‖ of the last cross-attention layer: how far each source token's weighted value vector "
                   "actually moves the output (Kobayashi et al. 2020), not just how much weight it gets.",
    "rollout": "attention multiplied through every layer of all three kinds, the residual counted as half (Abnar & "
               "Zuidema 2020).",
    "flow": "the same graph as rollout with weights as capacities: the maximum flow from the output to each source "
            "token (Abnar & Zuidema 2020).",
    "alti_plus": "each token's share of every attention block's output vector (attention, residual and norm), "
                 "rolled out over the layers (Ferrando et al. 2022).",
    "input_x_gradient": "embedding × gradient of the output's log-probability: a one-point, signed local estimate.",
    "integrated_gradients": "the gradient integrated from a zero embedding to the real one (Sundararajan et al. 2017); "
                            "signed, and its row sums to the change of the log-probability.",
}


BEAM_NOTE = "Attribution explains the checkpoint's default decoding; the output above may differ."


def table(lines: tuple[str, ...]) -> pd.DataFrame:
    """A Markdown table's lines as a DataFrame (its second line is the separator)."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    return pd.DataFrame(rows[2:], columns=rows[0])


def render(page: Page) -> None:
    decoded = page.default_translation()
    outputs, src = list(decoded.output_tokens), list(decoded.src_tokens)
    if page.beam_size > 1 and not page.lecture:  # on a projector under the figure: above, it pushes it down
        st.caption(BEAM_NOTE)
    token = settle("attr_token", range(len(outputs)))
    # On a projector one compact control with its label folded: the figure starts high.
    token = controls("attribution").selectbox(
        "Output piece", range(len(outputs)), key="attr_token", persist_state="session",
        format_func=lambda t: f"{t}: {outputs[t]}", label_visibility="collapsed" if page.lecture else "visible",
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
    if page.beam_size > 1 and page.lecture:
        st.caption(BEAM_NOTE)
    every = st.expander("Every output piece by every method", key="attr_all", on_change="rerun")
    if overview_open:
        with every:
            theme = inset(page, EXPANDER_PX)
            show_figure(page, once(viz.attribution_figure, chosen, outputs, src, title="Attribution by method",
                                   theme=theme), "attribution-methods", theme=theme)
            st.caption("Row t: which source tokens the piece predicted at output t comes from, by each method. Each "
                       "panel is divided by its own peak (hover a cell for the raw value); gradients are signed.")
    st.markdown("**The methods**")
    for name in chosen:
        st.text(f"{name}: {METHOD_NOTES[name]}")
    lines = page.faithfulness_table()
    if lines:
        st.markdown("**How faithful each method is** (measured by `python -m transformer.faithfulness`)")
        st.dataframe(table(lines), hide_index=True)
        st.caption("“top = true”: share of output pieces whose top-attributed source token is the true one "
                   "(reverse, dates). “drop k”: mean fall of the output piece's probability when its k "
                   "top-attributed source tokens are deleted; random deletes k random tokens.")


VIEW = View("attribution", "Attribution", render)
