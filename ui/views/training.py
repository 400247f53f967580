"""The loss curve, and one head forming across the training snapshots."""
from __future__ import annotations

import math

import streamlit as st

import viz
from ui.analysis import Unavailable
from ui.page import Page
from ui.state import FINAL, settle
from ui.view import View
from ui.widgets import head_picker, head_title, show_figure

SNAPSHOT_COLUMNS = 5  # the usual four snapshots and the final model in one row


def render(page: Page) -> None:
    show_figure(page, viz.loss_curve(page.card.history, theme=page.theme), "loss-curve")
    if page.analysis is None:
        return
    snapshots = page.snapshots()
    settle("snapshot", snapshots)
    if len(snapshots) > 1:
        snapshot = st.select_slider("Training snapshot", snapshots, format_func=page.snapshot_label, key="snapshot",
                                    persist_state="session")
    else:
        snapshot = FINAL
        st.info("This checkpoint's card lists no training snapshots.")
    kind, layer, head = head_picker(page)
    analysis = page.analysis
    q_tokens, k_tokens = analysis.tokens(kind)
    blocked = analysis.blocked(kind)
    try:
        at_snapshot = page.translation(beam_size=1, snapshot=snapshot)
        forming = [(page.snapshot_label(name), page.forced(snapshot=name).head(kind, layer, head))
                   for name in snapshots]
    except Unavailable as error:
        st.error("A training snapshot of this checkpoint could not be loaded.")
        st.code(str(error), language=None)
        return
    st.markdown(f"**Output at {page.snapshot_label(snapshot)}** (greedy)")
    st.code(at_snapshot.text, language=None, wrap_lines=True)
    current = dict(forming)[page.snapshot_label(snapshot)]
    title = head_title(kind, layer, head)
    show_figure(page, viz.head_heatmap(current, q_tokens, k_tokens, blocked=blocked,
                                       title=f"{title} at {page.snapshot_label(snapshot)}", theme=page.theme),
                "training-head", rows=len(q_tokens))
    show_figure(page, viz.snapshots_figure(forming, q_tokens, k_tokens, blocked=blocked, columns=SNAPSHOT_COLUMNS,
                                           title=f"{title} across training", theme=page.theme),
                "training-snapshots", rows=len(q_tokens) * math.ceil(len(forming) / SNAPSHOT_COLUMNS))
    st.caption("Every snapshot reads the final model's output (teacher forcing), so the cells line up.")


VIEW = View("training", "Training", "Training", render, needs_input=False)
