"""Two heads, two layers, two checkpoints or two training snapshots side by side, and A − B."""
from __future__ import annotations

import numpy as np
import streamlit as st

import viz
from ui.analysis import KIND_LABELS, Unavailable
from ui.literal_text import plain
from ui.page import Page
from ui.shared import once
from ui.state import FINAL, draw
from ui.view import View
from ui.widgets import (
    aside,
    controls,
    head_label,
    head_picker,
    head_title,
    produces_caption,
    show_figure,
    shown,
    word_switch,
)

COMPARISONS = {"heads": "two heads", "layers": "two layers", "checkpoints": "two checkpoints",
               "snapshots": "two snapshots"}
Side = tuple[np.ndarray, str]  # one head's weights (q_len, k_len) and its label


def snapshots_note(page: Page) -> str:
    return f"Both snapshots read {page.decoder_reads()} (teacher forcing), so the cells line up."


def render(page: Page) -> None:
    offered = [mode for mode in COMPARISONS if mode != "checkpoints" or page.comparable_checkpoints()]
    row = controls("compare")
    compact = {"label_visibility": "collapsed"} if page.lecture else {}  # options that name themselves
    mode = draw(row.segmented_control, "Compare", "compare", offered, format_func=COMPARISONS.get, required=True,
                persist_state="session", **compact)
    words = word_switch(row)
    if "checkpoints" not in offered and not page.lecture:
        st.caption("Two checkpoints can be compared when they share a vocabulary (none of the others does).")
    analysis = page.analysis
    kind, layer, head = head_picker(page, head=mode != "layers", row=row)
    a = (analysis.head(kind, layer, head), head_label(layer, head))
    compared = {"heads": other_head, "layers": other_head, "checkpoints": other_checkpoint,
                "snapshots": two_snapshots}[mode](page, mode, kind, layer, head, a)
    if compared is None:
        return
    (a, label_a), (b, label_b) = compared
    figure, b = shown(page, kind, a, words), shown(page, kind, b, words).weights
    fig = once(viz.compare_figure, figure.weights, b, figure.q_labels, figure.k_labels, label_a, label_b,
               blocked=figure.blocked, title=f"{KIND_LABELS[kind]}: A − B (red: A attends more)",
               theme=page.theme)
    show_figure(page, fig, f"compare-{mode}")
    produces_caption(figure)
    if page.lecture and mode == "snapshots":
        st.caption(snapshots_note(page))


def other_head(page: Page, mode: str, kind: str, layer: int, head: int | None, a: Side) -> tuple[Side, Side]:
    """B: another layer (mean of its heads) or another head of this analysis."""
    row = controls("compare-pair")
    layers = range(page.layers(kind))
    compact = {"label_visibility": "collapsed"} if page.lecture else {}  # options that name themselves: B: L1
    layer_b = draw(row.segmented_control, "Layer B", "layer_b", layers, min(1, len(layers) - 1), required=True,
                   persist_state="session", format_func=(lambda n: f"B: L{n}") if page.lecture else str, **compact)
    head_b = None
    if mode == "heads":
        heads = page.heads()
        head_b = draw(row.segmented_control, "Head B", "head_b", heads, min(1, len(heads) - 1), required=True,
                      persist_state="session", format_func=(lambda n: f"B: H{n}") if page.lecture else str, **compact)
    return a, (page.analysis.head(kind, layer_b, head_b), head_label(layer_b, head_b))


def other_checkpoint(page: Page, mode: str, kind: str, layer: int, head: int | None,
                     a: Side) -> tuple[Side, Side] | None:
    """B: the same head of another checkpoint on this very sequence (teacher-forced, so A − B is meaningful)."""
    others = page.comparable_checkpoints()
    name_b = draw(controls("compare-checkpoint").selectbox, "Checkpoint B", "checkpoint_b", others, others[0],
                  persist_state="session")
    config = page.config_of(name_b)
    longest = max(len(page.analysis.src_ids), len(page.analysis.tgt_ids))
    if layer >= config.layers_of(kind) or (head is not None and head >= config.num_heads):
        st.info(f"{plain(name_b)} has no {head_title(kind, layer, head)}: it has {config.layers_of(kind)} layer(s) and "
                f"{config.num_heads} heads.")
        return None
    if longest > config.max_len:
        st.info(f"{plain(name_b)} reads at most {config.max_len} tokens (its max_len, </s> included), fewer than "
                f"this sequence's {longest}.")
        return None
    b = page.forced(checkpoint=name_b).head(kind, layer, head)
    aside(f"B ({plain(name_b)}) reads the same source and, teacher-forced, the same decoder input as A "
          f"({plain(page.name)}).")
    return (a[0], f"{page.name} {a[1]}"), (b, f"{name_b} {head_label(layer, head)}")


def two_snapshots(page: Page, mode: str, kind: str, layer: int, head: int | None,
                  a: Side) -> tuple[Side, Side] | None:
    """The same head at two points of training, both teacher-forced on the final model's sequence."""
    snapshots = page.snapshots()
    if len(snapshots) < 2:
        st.info("This checkpoint's card lists no training snapshots.")
        return None
    # On a projector one compact row, labels folded into the options (A: step 250): the figure starts high.
    columns = [controls("compare-snapshots")] * 2 if page.lecture else st.columns(2)
    sides = ((columns[0], "snapshot_a", snapshots[0]), (columns[1], "snapshot_b", FINAL))
    chosen = [draw(column.selectbox, f"Snapshot {name[-1].upper()}", name, snapshots, fallback,
                   format_func=(lambda s, name=name: f"{name[-1].upper()}: {page.snapshot_label(s)}")
                   if page.lecture else page.snapshot_label, persist_state="session",
                   label_visibility="collapsed" if page.lecture else "visible",
                   width=300 if page.lecture else "stretch") for column, name, fallback in sides]
    try:
        sides = [(page.forced(snapshot=snapshot).head(kind, layer, head), page.snapshot_label(snapshot))
                 for snapshot in chosen]
    except Unavailable as error:
        st.error("This snapshot could not be loaded.")
        st.code(str(error), language=None)
        return None
    if not page.lecture:  # on a projector under the figure (render): above, it pushes the figure down
        st.caption(snapshots_note(page))
    return sides[0], sides[1]


VIEW = View("compare", "Compare", render)
