"""Every layer × head of one kind at once; pick a head below to open it in the Attention view. (Plotly reports no
clicks on the image panels the grid is drawn with, so a click cannot open it.)"""
from __future__ import annotations

import streamlit as st

import viz
from ui.analysis import KIND_LABELS
from ui.page import Page
from ui.view import View
from ui.widgets import head_label, head_picker, show_figure


def open_head(layer: int, head: int) -> None:
    """Show one head of the model view in the Attention view."""
    st.session_state.update(layer=layer, head=head, average=False, view="attention")


def render(page: Page) -> None:
    kind, _, _ = head_picker(page, layer=False)
    analysis = page.analysis
    show_masks = st.toggle("Mask overlays", key="masks", persist_state="session")
    q_tokens, k_tokens = analysis.tokens(kind)
    fig = viz.model_view(analysis.stack(kind), q_tokens, k_tokens, blocked=analysis.blocked(kind),
                         show_masks=show_masks, title=f"{KIND_LABELS[kind]}: every layer and head", theme=page.theme)
    show_figure(page, fig, f"{kind}-all-heads")
    panels = [(layer, head) for layer in range(page.layers(kind)) for head in page.heads()]
    columns = st.columns([3, 2], vertical_alignment="bottom")
    chosen = columns[0].selectbox("Head to open", panels, format_func=lambda panel: head_label(*panel),
                                  key="model-pick")
    columns[1].button("Open in the Attention view", on_click=open_head, args=chosen, key="model-open")


VIEW = View("model", "Model view", "Model view", render)
