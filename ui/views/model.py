"""Every layer × head of one kind at once; click a panel (or pick a head below) to open it in the Attention view."""
from __future__ import annotations

import dataclasses
from functools import partial

import streamlit as st

import viz
from ui.analysis import KIND_LABELS
from ui.page import Page
from ui.shared import once
from ui.state import draw, settle
from ui.view import View
from ui.widgets import controls, head_picker, produces_caption, show_figure, shown, word_switch
from viz.grid import panel_title

FIGURE_KEY = "figure-model-view"
DRAWN_AS = ["heatmaps", "lines"]


def open_head(layer: int, head: int) -> None:
    """Show one head of the model view in the Attention view."""
    st.session_state.update(layer=layer, head=head, average=False, view="attention")


def open_clicked(panels: list) -> None:
    """A click on a panel (its invisible hover heatmap reports the point): open that panel's head. panels: each
    trace's meta ([layer, head] or None), by curve number."""
    points = st.session_state[FIGURE_KEY]["selection"]["points"]
    for point in points:
        meta = panels[point["curve_number"]] if point.get("curve_number", -1) < len(panels) else None
        if meta:
            open_head(*meta)
            return


def render(page: Page) -> None:
    row = controls("model")
    kind, _, _ = head_picker(page, layer=False, row=row)
    # On a projector, lines: a heatmap needs a column per token, so 4 of them at 24 tokens cannot keep 12 px labels.
    as_lines = draw(row.segmented_control, "Heads as", "model_as", DRAWN_AS, "lines" if page.lecture else "heatmaps",
                    required=True, help="Heatmaps: a cell per query and key. Lines: each query (left) joined to "
                                        "each key (right), as in the Head view; their panels stay narrow at any "
                                        "length, so more heads fit with readable labels.") == "lines"
    words = word_switch(row)
    show_masks = not as_lines and row.toggle("Mask overlays", key="masks", persist_state="session")
    figure = shown(page, kind, page.analysis.stack(kind), words)
    layers, heads = figure.weights.shape[:2]
    title = f"{KIND_LABELS[kind]}: every layer and head"
    # Grouped-query attention: every panel names its key/value head ("L2 H5 · kv1").
    per_kv = page.config.num_heads // page.config.kv_heads
    # As many layers and heads as fit the page (and, in lecture mode, the screen's height); the rest page by page.
    # Heatmap panels are thumbnails, their labels as small as a laptop's even on a projector: each opens full size.
    theme = page.theme if as_lines else dataclasses.replace(page.theme, smallest_font=viz.Theme().min_font_size)
    if as_lines:
        rows, cols = once(viz.fit_model_lines, figure.q_labels, figure.k_labels, layers, heads, title=title,
                          theme=theme)
    else:
        rows, cols = once(viz.fit_model_view, figure.q_labels, figure.k_labels, layers, heads, title=title,
                          legend=bool(figure.blocked) and show_masks, heads_per_kv=per_kv, theme=theme)
    if per_kv < cols < heads:  # a page holds whole key/value groups: the heads that share one stand together
        cols -= cols % per_kv
    windows = [(layer, head) for layer in range(0, layers, rows) for head in range(0, heads, cols)]
    first = windows[0]
    if len(windows) > 1:
        def named(window):
            (layer, head), last = window, (min(window[0] + rows, layers) - 1, min(window[1] + cols, heads) - 1)
            return (f"L{layer}" + (f"–{last[0]}" if last[0] > layer else "") + f" H{head}"
                    + (f"–{last[1]}" if last[1] > head else ""))
        settle("model_window", windows, windows[0])
        first = row.segmented_control("Shown", windows, key="model_window", format_func=named, required=True,
                                      help="The heads that fit the page at once: the others are a click away.",
                                      label_visibility="collapsed" if page.lecture else "visible")
        title += f" ({named(first)})"
    stack = figure.weights[first[0]: first[0] + rows, first[1]: first[1] + cols]  # (layers shown, heads shown, ...)
    if as_lines:
        fig = once(viz.model_lines, stack, figure.q_labels, figure.k_labels, blocked=figure.blocked, title=title,
                   first=tuple(first), heads_per_kv=per_kv, theme=theme)
    else:
        fig = once(viz.model_view, stack, figure.q_labels, figure.k_labels, blocked=figure.blocked,
                   show_masks=show_masks, title=title, first=tuple(first), heads_per_kv=per_kv, theme=theme)
    panels = [tuple(trace.meta[:2]) if trace.meta is not None else None for trace in fig.data]
    show_figure(page, fig, f"{kind}-all-heads", key=FIGURE_KEY, on_select=partial(open_clicked, panels),
                selection_mode="points")
    produces_caption(figure)
    if as_lines:
        st.caption("Each line joins a query (left) to a key (right), as opaque as its weight; a masked pair has none.")
    panels = [(layer, head) for layer in range(page.layers(kind)) for head in page.heads()]
    columns = st.columns([3, 2], vertical_alignment="bottom")
    chosen = columns[0].selectbox("Head to open", panels, format_func=lambda panel: panel_title(*panel, per_kv),
                                  key="model-pick")
    columns[1].button("Open in the Attention view", on_click=open_head, args=chosen, key="model-open")
    st.caption("Click a panel to open its head in the Attention view.")


VIEW = View("model", "Model view", render)
