"""The masks the model used on this input, for each kind, each explained in one sentence."""
from __future__ import annotations

import streamlit as st

import viz
from ui.analysis import KIND_LABELS
from ui.page import Page
from ui.shared import once
from ui.state import draw
from ui.view import View
from ui.widgets import aside, controls, panel_picker, show_figure

MASK_EXPLANATIONS = {
    viz.PADDING: "Padding mask: pad tokens only fill a batch up to its longest sentence, so no query may attend "
                 "to them (their key columns are blocked).",
    viz.CAUSAL: "Causal mask: the decoder must not see pieces it has not generated yet, so position i may attend "
                "only to positions 0…i.",
    viz.SLIDING_WINDOW: "Sliding window: each decoder position attends only to itself and the window − 1 positions "
                        "before it (the model's `sliding_window`); earlier keys are blocked.",
    viz.PADDED_QUERY: "Padded query (shaded, not masked): a pad position's row is computed like any other, but its "
                      "output is ignored.",
    "all reasons": "Combined: the model blocks a cell if any mask blocks it; blocked scores are set to the lowest "
                   "float before the softmax and their weights to exactly 0, so even a row with every key blocked "
                   "stays finite.",
}


def padding_note(lecture: bool) -> str:
    """What to do to see padding: the sidebar's Padding, which lecture mode folds away (its link still works)."""
    where = ("Leave lecture mode and use **Padding** in the sidebar (or add `pad_src=4` to the link)" if lecture
             else "Use **Padding** in the sidebar")
    return (f"A single sentence has no padding. {where} to append pad tokens to the source or decoder input, as "
            "batching with a longer sentence would: the padding masks appear, and the model's outputs on the real "
            "positions do not change.")


def render(page: Page) -> None:
    analysis = page.analysis
    # On a projector the figure comes first (within the top of the screen), the explanations under it; and one kind
    # and one panel at a time: three 30-piece panels side by side cannot keep readable labels there.
    top, bottom = st.container(), st.container()
    notes, figures = (bottom, top) if page.lecture else (top, bottom)
    kinds = analysis.kinds
    masked = [kind for kind in kinds if analysis.blocked(kind)]
    if page.lecture and masked:  # the kinds with a mask to show (a single sentence's cross-attention has none)
        compact = dict(label_visibility="collapsed", persist_state="session")
        kinds = [draw(controls("masks").segmented_control, "Attention", "kind", masked, masked[0],
                      format_func=KIND_LABELS.get, required=True, **compact)]
    if not analysis.padded():
        notes.info(padding_note(page.lecture))
    shown = [sentence for reason, sentence in MASK_EXPLANATIONS.items()
             if reason != viz.SLIDING_WINDOW or page.config.sliding_window]  # only a model with one has a window
    notes.markdown("\n".join(f"- {sentence}" for sentence in shown))
    for kind in kinds:
        q_tokens, k_tokens = analysis.tokens(kind)
        blocked = analysis.blocked(kind)
        if not blocked:
            aside(f"**{KIND_LABELS[kind]}-attention**: nothing is masked for this input.", figures)
            continue
        names = [name for name, _ in viz.mask_panels(blocked)]
        only = panel_picker(page, names, len(names) - 1)
        fig = once(viz.mask_figure, blocked, q_tokens, k_tokens, title=f"{KIND_LABELS[kind]}-attention masks",
                   only=only, theme=page.theme)
        with figures:
            show_figure(page, fig, f"masks-{kind}")


VIEW = View("masks", "Masks", render)
