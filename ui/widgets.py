"""What views share on screen: figures with the export toolbar, rows of controls, the head picker, labels."""
from __future__ import annotations

import streamlit as st

import viz

from .analysis import KIND_LABELS
from .page import Page
from .state import draw

PROBABILITY = st.column_config.ProgressColumn(format="%.3f", min_value=0.0, max_value=1.0)


def show_figure(page: Page, fig, name: str, rows: int = 0, **kwargs) -> None:
    """Every figure with the export toolbar; theme=None, as viz.Theme already styles it for light or dark.

    rows: token rows of the tallest panel; the figure grows with them so that every row keeps its label."""
    if rows:
        fig.update_layout(height=min(max(450, rows * page.theme.font_size * 1.7 + 220), 2000))
    st.plotly_chart(fig, theme=None, config=viz.toolbar_config(page.image_format, f"{page.name}-{name}"),
                    key=kwargs.pop("key", f"figure-{name}"), **kwargs)


def controls():
    """A row of widgets, each as wide as its content, wrapping when the page is narrow (or the fonts large)."""
    return st.container(horizontal=True, vertical_alignment="bottom", gap="medium")


def head_label(layer: int, head: int | None) -> str:
    """Short name of one head (or of a layer's mean), as lists and comparisons show it."""
    return f"L{layer} " + ("mean" if head is None else f"H{head}")


def head_title(kind: str, layer: int, head: int | None) -> str:
    return f"{KIND_LABELS[kind]} · layer {layer} · " + ("mean of heads" if head is None else f"head {head}")


def head_picker(page: Page, *, layer: bool = True, head: bool = True,
                allow_average: bool = False) -> tuple[str, int | None, int | None]:
    """Kind, layer and head, shared by every view that shows one head (the same keys, kept between views).
    head is None when averaging over heads (or not asked for), layer None when not asked for."""
    row = controls()
    kind = draw(row.segmented_control, "Attention", "kind", page.kinds, format_func=KIND_LABELS.get, required=True,
                persist_state="session")
    if not layer:
        return kind, None, None
    chosen_layer = draw(row.segmented_control, "Layer", "layer", range(page.layers(kind)), required=True,
                        persist_state="session")
    if not head:
        return kind, chosen_layer, None
    head_slot = row.container()  # keeps the head before the average switch, which decides whether it is enabled
    average = allow_average and row.toggle("Average heads", key="average", persist_state="session",
                                           help="The mean of all heads' weights in this layer.")
    chosen_head = draw(head_slot.segmented_control, "Head", "head", page.heads(), required=True, disabled=average,
                       persist_state="session")
    return kind, chosen_layer, None if average else chosen_head
