"""The head view (as in BertViz): queries on the left, keys on the right, one line per pair whose opacity is the
weight, several heads in distinct colours. A list, so it stays readable at any length; click a token to keep only
its lines."""
from __future__ import annotations

import streamlit as st

import viz
from ui.analysis import KIND_LABELS
from ui.page import Page
from ui.shared import once
from ui.state import settle_all
from ui.view import View
from ui.widgets import controls, head_label, head_picker, produces_caption, show_figure, shown, word_switch

FIGURE_KEY = "figure-head-view"


def clicked_token(q_len: int, k_len: int) -> tuple[str, int] | None:
    """The token last clicked in the figure (its customdata: side, position), if it is still on the axes."""
    selection = st.session_state.get(FIGURE_KEY)
    points = selection["selection"]["points"] if selection else []
    for point in points:
        side, position = (point.get("customdata") or [None, None])[:2]
        if side in ("query", "key") and 0 <= int(position) < (q_len if side == "query" else k_len):
            return side, int(position)
    return None


def render(page: Page) -> None:
    row = controls("head-view")
    kind, layer, _ = head_picker(page, head=False, row=row)
    heads = page.heads()
    if not settle_all("lines_heads", heads):
        st.session_state.lines_heads = [0]
    # In lecture mode, as head_picker's: options that name themselves (H0, H1) and no label above the row.
    chosen = row.segmented_control("Heads", heads, key="lines_heads", selection_mode="multi", persist_state="session",
                                   format_func=(lambda n: f"H{n}") if page.lecture else str,
                                   label_visibility="collapsed" if page.lecture else "visible") or [0]
    words = word_switch(row)
    figure = shown(page, kind, page.analysis.stack(kind)[layer, chosen], words)  # (heads, q_len, k_len)
    selected = clicked_token(len(figure.q_labels), len(figure.k_labels))
    fig = once(viz.head_view, figure.weights, figure.q_labels, figure.k_labels,
               head_names=[head_label(layer, head) for head in chosen], blocked=figure.blocked,
               selected=selected, title=f"{KIND_LABELS[kind]} · layer {layer}", theme=page.theme)
    show_figure(page, fig, f"{kind}-L{layer}-lines", key=FIGURE_KEY, on_select="rerun", selection_mode="points")
    st.caption("Each line joins a query (left) to a key (right); the stronger the weight, the darker the line. "
               + ("Showing the clicked token's lines only: click it again, or elsewhere, to show all."
                  if selected else "Click a token to keep only its lines."))
    produces_caption(figure)


VIEW = View("headview", "Head view", render)
