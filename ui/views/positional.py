"""The model's own positional encoding: as a matrix, as curves, or how alike two positions are."""
from __future__ import annotations

import streamlit as st

import viz
from ui.page import Page
from ui.shared import once
from ui.state import URL_STATE, draw, settle, settle_all
from ui.view import View
from ui.widgets import controls, show_figure

PE_SIDES = {"src": "encoder", "tgt": "decoder"}
PE_PLOTS = {"heatmap": "positions × dimensions", "curves": "curves by dimension", "similarity": "similarity"}


def render(page: Page) -> None:
    config = page.config
    row = controls("positional")
    sides = [side for side, kind in (("src", "encoder.self"), ("tgt", "decoder.self")) if kind in page.kinds]
    side = draw(row.segmented_control, "Side", "pe_side", sides, sides[0], required=True, format_func=PE_SIDES.get,
                persist_state="session")
    plot = draw(row.segmented_control, "Plot", "pe_plot", PE_PLOTS, required=True, format_func=PE_PLOTS.get,
                persist_state="session")
    settle("pe_positions", range(2, config.max_len + 1), min(50, config.max_len))
    # On a projector in the row of controls, label folded: the figure starts high.
    slider_at, width = (row, 320) if page.lecture else (st, "stretch")
    positions = slider_at.slider("Positions shown", 2, config.max_len, key="pe_positions", persist_state="session",
                                 width=width, label_visibility="collapsed" if page.lecture else "visible")
    pe = page.positional_table(side)[:positions]
    if plot == "heatmap":
        fig = once(viz.pe_heatmap, pe, title=f"{config.positional} positional encoding of the {PE_SIDES[side]}",
                   theme=page.theme)
    elif plot == "curves":
        if st.session_state.pe_dims == URL_STATE["pe_dims"][1] and "pe_dims" not in st.session_state.url_pending:
            st.session_state.pe_dims = viz.default_pe_dims(config.d_model)  # frequencies far apart, not 0-3
        settle_all("pe_dims", range(config.d_model))
        dims = st.multiselect("Dimensions", range(config.d_model), key="pe_dims", persist_state="session")
        fig = once(viz.pe_curves, pe, dims=dims, theme=page.theme)
    else:
        fig = once(viz.pe_similarity, pe, cosine=True, theme=page.theme)
    show_figure(page, fig, f"positional-{plot}")
    st.caption(f"d_model = {config.d_model}, max_len = {config.max_len}. Sinusoidal encodings are fixed; learned "
               "ones are trained with the model.")


VIEW = View("positional", "Positional encoding", render, needs_input=False)
