"""One head (or a layer's mean) as a heatmap with its masks, or its three stages from scores to weights."""
from __future__ import annotations

import json

import streamlit as st

import viz
from ui.page import Page
from ui.shared import once
from ui.view import View
from ui.widgets import (
    controls,
    head_label,
    head_picker,
    head_title,
    panel_picker,
    produces_caption,
    show_figure,
    shown,
    word_switch,
)


def render(page: Page) -> None:
    options = controls("attention")  # one row for everything: the figure starts high on a projector
    kind, layer, head = head_picker(page, allow_average=True, row=options)
    analysis = page.analysis
    words = word_switch(options)
    show_masks = options.toggle("Masks" if page.lecture else "Mask overlays", key="masks", persist_state="session")
    stages = options.toggle("Stages" if page.lecture else "Scores → masked → softmax", key="stages",
                            persist_state="session", disabled=words,
                            help="The three stages of attention side by side (of pieces: scores do not add up into "
                                 "words).")
    show_values, own_scale = False, False
    if not page.lecture:
        show_values = options.toggle("Numbers in cells", key="values", persist_state="session")
        own_scale = options.toggle("Own colour scale", key="own_scale", persist_state="session",
                                   help="On: this head's own range. Off: 0 to 1 for every head, so heads compare at a "
                                        "glance.")
    figure = shown(page, kind, analysis.head(kind, layer, head), words)
    title = head_title(kind, layer, head)
    if stages and not words:
        only = panel_picker(page, ["raw scores", "masked", "softmax"], 0)
        fig = once(viz.stages_figure, analysis.head(kind, layer, head, part="scores"), figure.blocked, figure.weights,
                   figure.q_labels, figure.k_labels, show_masks=show_masks, title=title, only=only,
                   theme=page.theme)
    else:
        scores = None if words else analysis.head(kind, layer, head, part="scores")
        fig = once(viz.head_heatmap, figure.weights, figure.q_labels, figure.k_labels, scores=scores,
                   blocked=figure.blocked, show_masks=show_masks, fixed_scale=not own_scale, show_values=show_values,
                   title=title, theme=page.theme)
    show_figure(page, fig, f"{kind}-{head_label(layer, head).replace(' ', '-')}")
    st.caption("Rows are queries, columns keys; each row's weights sum to 1 over the keys it may attend to. "
               + ("Averaged scores are the mean of the heads' scores; the softmax of that mean is not shown."
                  if head is None and stages and not words else ""))
    produces_caption(figure)
    if not page.lecture:
        export_downloads(page)


def export_downloads(page: Page) -> None:
    """This input's attention (every kind, layer and head, one row per weight) and its input and output."""
    analysis = page.analysis

    def table():
        return viz.tidy_frame(*analysis.by_viz_kind())

    decoding = f"beam search, {page.beam_size} beams" if page.beam_size > 1 else "greedy"
    record = {"checkpoint": page.name, "input": page.text, "decoding": decoding, "output": analysis.text,
              "source_pieces": list(analysis.src_tokens), "decoder_input_pieces": list(analysis.tgt_tokens),
              "output_pieces": list(analysis.output_tokens), "probabilities": list(analysis.probs),
              "warnings": list(analysis.warnings)}
    columns = st.columns(3)
    # Built only when clicked (a callable): a table of every weight is big and most reruns never need it.
    columns[0].download_button("Attention as CSV", lambda: viz.to_csv_bytes(table()), f"{page.name}-attention.csv",
                               "text/csv", key="download-csv", on_click="ignore",
                               help="One row per weight of every kind, layer and head of this input.")
    columns[1].download_button("Attention as Parquet", lambda: viz.to_parquet_bytes(table()),
                               f"{page.name}-attention.parquet", "application/vnd.apache.parquet",
                               key="download-parquet", on_click="ignore")
    columns[2].download_button("Input and output as JSON", json.dumps(record, ensure_ascii=False, indent=1),
                               f"{page.name}-translation.json", "application/json", key="download-json",
                               on_click="ignore")


VIEW = View("attention", "Attention", render)
