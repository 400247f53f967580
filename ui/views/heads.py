"""Numbers per head (sortable), a scatter of two of them, and attention rollout."""
from __future__ import annotations

import streamlit as st

import viz
from ui.page import Page
from ui.state import settle
from ui.view import View
from ui.widgets import show_figure, table_height


def render(page: Page) -> None:
    analysis = page.analysis
    statistics = viz.head_statistics(*analysis.by_viz_kind())
    st.dataframe(statistics, hide_index=True, key="head-table", height=table_height(page),
                 column_config={name: st.column_config.NumberColumn(format="%.3f")
                                for name in statistics.select_dtypes("float").columns})
    st.caption("Means over query rows (pad rows and rows that can attend to one key only are left out). Role: the "
               "first rule a head passes: " + "; ".join(f"{role}: {column} > {limit}"
                                                         for role, column, limit in viz.ROLE_RULES) + ".")
    numeric = list(statistics.select_dtypes("number").columns.drop(["layer", "head"]))
    x, y = settle("stat_x", numeric), settle("stat_y", numeric)
    if not page.lecture:
        columns = st.columns(2)
        x = columns[0].selectbox("x", numeric, key="stat_x", persist_state="session")
        y = columns[1].selectbox("y", numeric, key="stat_y", persist_state="session")
    show_figure(page, viz.statistics_scatter(statistics, x, y, theme=page.theme), "head-statistics")
    st.caption(viz.SCATTER_CAPTION)
    encoder = viz.encoder_rollout(analysis.stack("encoder.self"))
    source = viz.decoder_source_rollout(analysis.stack("decoder.self"), analysis.stack("decoder.cross"), encoder)
    src, tgt = analysis.pieces("src"), analysis.pieces("tgt")
    left, right = st.columns(2)
    with left:
        show_figure(page, viz.rollout_figure(encoder, src, src, title="Encoder rollout", theme=page.theme),
                    "rollout-encoder")
        st.caption("Row i: how much of each input token reaches the encoder's output at position i, through every "
                   "layer (heads averaged, residual counted as half).")
    with right:
        show_figure(page, viz.rollout_figure(source, tgt, src, title="Decoder rollout onto the source",
                                             theme=page.theme), "rollout-decoder")
        st.caption("Row t: the share of each source token in the decoder's state at position t; the rest of each "
                   "row belongs to the decoder's own input.")


VIEW = View("heads", "Heads", "Heads", render)
