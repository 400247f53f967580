"""The loss curve, and one head forming across the training snapshots."""
from __future__ import annotations

import streamlit as st

import viz
from ui.analysis import Unavailable
from ui.literal_text import plain
from ui.model_pass import TRANSLATE
from ui.page import Page
from ui.shared import once
from ui.state import FINAL, settle
from ui.view import View
from ui.widgets import (
    controls,
    head_picker,
    head_title,
    model_output,
    produces_caption,
    show_figure,
    shown,
    word_switch,
)

SNAPSHOT_COLUMNS = 5  # the usual four snapshots and the final model in one row
# the card's dev_metric (a language model's head scores share its axis)
METRIC_NAMES = {"translate": "BLEU", "reverse": "exact match", "dates": "exact match",
                "induction": "repeat accuracy", "lm": "next-token accuracy"}


def render(page: Page) -> None:
    loss = once(viz.loss_curve, page.card.history, metric_name=METRIC_NAMES.get(page.card.task), theme=page.theme)
    if page.analysis is None or not page.lecture:  # on a projector the head comes first, the curve below it
        show_figure(page, loss, "loss-curve")
    if page.analysis is None:
        return
    snapshots = page.snapshots()
    settle("snapshot", snapshots)
    above = st.container()
    row = controls("training")
    if len(snapshots) > 1:  # on a projector in the row of controls, so that the figure starts high
        slider_at, width = (row, 320) if page.lecture else (above, "stretch")
        snapshot = slider_at.select_slider("Training snapshot", snapshots, format_func=page.snapshot_label,
                                           key="snapshot", persist_state="session", width=width,
                                           label_visibility="collapsed" if page.lecture else "visible")
    else:
        snapshot = FINAL
        above.info("This checkpoint's card lists no training snapshots.")
    kind, layer, head = head_picker(page, row=row)
    words = word_switch(row)
    try:
        # Decoded as the headline's output: at the final weights it is that output, whose pieces the rows spell.
        at_snapshot = page.run(TRANSLATE, snapshot=snapshot)
        forming = [(page.snapshot_label(name), page.forced(snapshot=name).head(kind, layer, head))
                   for name in snapshots]
    except Unavailable as error:
        st.error("A training snapshot of this checkpoint could not be loaded.")
        st.code(str(error), language=None)
        return
    named = page.output_name(snapshot=snapshot)
    if not page.lecture:  # on a projector, one line of plain text under the figure
        st.markdown(f"**{plain(named)}**")
        model_output(at_snapshot.text)
    current = shown(page, kind, dict(forming)[page.snapshot_label(snapshot)], words)
    forming = [(label, shown(page, kind, weights, words).weights) for label, weights in forming]
    title = head_title(kind, layer, head)
    show_figure(page, once(viz.head_heatmap, current.weights, current.q_labels, current.k_labels,
                           blocked=current.blocked, title=f"{title} at {page.snapshot_label(snapshot)}",
                           theme=page.theme), "training-head")
    if page.lecture:
        st.text(f"{named}: {at_snapshot.text}")
    attention = page.analysis.attention.of(kind)
    if "tgt" in (attention.query_side, attention.key_side):  # its rows or columns are the decoder's pieces
        st.caption(f"The decoder's pieces: {plain(page.decoder_reads())}, which every snapshot reads (teacher "
                   "forcing), so the cells line up.")
    produces_caption(current)
    show_figure(page, once(viz.snapshots_figure, forming, current.q_labels, current.k_labels, blocked=current.blocked,
                           columns=SNAPSHOT_COLUMNS, title=f"{title} across training",
                           theme=page.theme), "training-snapshots")
    if page.lecture:
        show_figure(page, loss, "loss-curve")


VIEW = View("training", "Training", render, needs_input=False)
