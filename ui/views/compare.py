"""Two heads, two layers, two checkpoints, two training snapshots or two inputs (a minimal pair) side by side, and
A − B."""
from __future__ import annotations

import difflib

import numpy as np
import pandas as pd
import streamlit as st

import viz
from ui.analysis import KIND_LABELS, Analysis, Unavailable
from ui.literal_text import plain
from ui.model_pass import TEACHER_FORCED, TRANSLATE
from ui.page import Page
from ui.shared import once
from ui.state import FINAL, MAX_INPUT_CHARS, draw
from ui.view import View
from ui.widgets import (
    PROBABILITY,
    aside,
    controls,
    head_label,
    head_picker,
    head_title,
    panel_picker,
    produces_caption,
    show_figure,
    shown,
    side_by_side,
    table_height,
    word_switch,
)

COMPARISONS = {"heads": "two heads", "layers": "two layers", "checkpoints": "two checkpoints",
               "snapshots": "two snapshots", "inputs": "two inputs"}
Side = tuple[np.ndarray, str]  # one head's weights (q_len, k_len) and its label
PANELS = ["A", "B", "A − B"]  # lecture mode shows one at a time (panel_picker), A − B first


def compare_title(what: str, only: int | None) -> str:
    """The title of A, B and A − B (only: of that panel alone, whose own title follows it: "cross · L0 H1")."""
    if only is None:
        return f"{what}: A − B (red: A attends more)"
    return f"{what} (red: A attends more)" if only == len(PANELS) - 1 else what


def snapshots_note(page: Page) -> str:
    return (f"The decoder's pieces: {plain(page.decoder_reads())}, which both snapshots read (teacher forcing), so the "
            "cells line up.")


def render(page: Page) -> None:
    offered = [mode for mode in COMPARISONS if mode != "checkpoints" or page.comparable_checkpoints()]
    row = controls("compare")
    compact = {"label_visibility": "collapsed"} if page.lecture else {}  # options that name themselves
    mode = draw(row.segmented_control, "Compare", "compare", offered, format_func=COMPARISONS.get, required=True,
                persist_state="session", **compact)
    words = word_switch(row) if mode != "inputs" else False  # two inputs' words need not line up
    if "checkpoints" not in offered and not page.lecture:
        st.caption("Two checkpoints can be compared when they share a vocabulary (none of the others does).")
    analysis = page.analysis
    kind, layer, head = head_picker(page, head=mode != "layers", row=row)
    if mode == "inputs":
        two_inputs(page, kind, layer, head)
        return
    a = (analysis.head(kind, layer, head), head_label(layer, head))
    compared = {"heads": other_head, "layers": other_head, "checkpoints": other_checkpoint,
                "snapshots": two_snapshots}[mode](page, mode, kind, layer, head, a)
    if compared is None:
        return
    (a, label_a), (b, label_b) = compared
    figure, b = shown(page, kind, a, words), shown(page, kind, b, words).weights
    only = panel_picker(page, PANELS, len(PANELS) - 1)
    fig = once(viz.compare_figure, figure.weights, b, figure.q_labels, figure.k_labels, label_a, label_b,
               blocked=figure.blocked, title=compare_title(KIND_LABELS[kind], only), only=only, theme=page.theme)
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
          f"({plain(page.name)}): {plain(page.decoder_reads())}.")
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


def two_inputs(page: Page, kind: str, layer: int, head: int | None) -> None:
    """The same head (or layer mean) on the input (A) and on a second input (B), each read with its own output: the
    minimal pair of a lecture ("... because it was too tired." / "... too big."). A − B where the two line up piece
    for piece on both axes of the kind; else side by side, naming the pieces that differ. Under it, per output
    position, how B changes the probability of A's next piece."""
    # Input B starts as the input (edit one word of it), and starts again when the input changes; a link's B belongs
    # to the link's input.
    if st.session_state.get("text_b") is None or st.session_state.get("text_b_of", page.text) != page.text:
        st.session_state.text_b = page.text
    st.session_state.text_b_of = page.text
    compact = {"label_visibility": "collapsed"} if page.lecture else {}
    text_b = controls("compare-input").text_input(
        "Input B (the input with a word changed)", key="text_b", max_chars=MAX_INPUT_CHARS, persist_state="session",
        width=560 if page.lecture else "stretch", placeholder="Input B", **compact,
        help="The same head on a second input. A is the input above, B this one; each is read with the model's own "
             "output for it.")
    if text_b.strip() == page.text.strip():
        st.info("Change a word of input B: the same head on two inputs shows what the change does to it.", icon="✏️")
        return
    try:
        a, b = page.run(TRANSLATE), page.run(TRANSLATE, text=text_b)  # decoded as the sidebar says
    except ValueError as error:  # nothing to read in B: translate says what to do
        st.info(f"Input B: {error}")
        return
    aside(f"A: {plain(page.text)} → {plain(a.text)}  \nB: {plain(text_b)} → {plain(b.text)}  \n"
          f"(each: {plain(page.output_name())})")
    attention = a.attention.of(kind)
    sides = (attention.query_side, attention.key_side)
    title = head_title(kind, layer, head)
    if all(len(a.ids(side)) == len(b.ids(side)) for side in sides):
        q_labels = paired(*(row_labels(analysis, kind) for analysis in (a, b)))
        k_labels = paired(a.pieces(attention.key_side), b.pieces(attention.key_side))
        only = panel_picker(page, PANELS, len(PANELS) - 1)
        fig = once(viz.compare_figure, a.head(kind, layer, head), b.head(kind, layer, head), q_labels, k_labels,
                   "A", "B", blocked=a.blocked(kind), title=compare_title(title, only), only=only, theme=page.theme)
        show_figure(page, fig, "compare-inputs")
        st.caption("Where the two inputs (or outputs) have different pieces, a label reads “A's piece / B's piece”.")
    else:
        differing = [side for side in dict.fromkeys(sides) if a.ids(side) != b.ids(side)]
        aside("The two do not line up piece for piece, so A − B is not drawn: "
              + "; ".join(differences(a.pieces(side), b.pieces(side), side) for side in differing) + ".")
        only = panel_picker(page, ["A", "B"], 0)  # lecture mode: one at a time, each as large as the screen allows
        sides = [("A", a), ("B", b)] if only is None else [[("A", a), ("B", b)][only]]
        figures = [once(viz.head_heatmap, analysis.head(kind, layer, head), row_labels(analysis, kind),
                        analysis.pieces(attention.key_side), blocked=analysis.blocked(kind), title=f"{name}: {title}",
                        theme=page.theme) for name, analysis in sides]
        # Side by side where both fit the page as laid out, else one under the other: never cut to half a page.
        for column, (name, _), fig in zip(side_by_side(page, [int(fig.layout.width) for fig in figures]), sides,
                                          figures, strict=True):
            with column:
                show_figure(page, fig, f"compare-inputs-{name}")
    if attention.query_side == "tgt":
        st.caption(viz.PRODUCES_CAPTION)
    st.dataframe(next_piece_changes(page, a, b), hide_index=True, height=table_height(page),
                 column_config={"p after A": PROBABILITY, "p after B": PROBABILITY})
    st.caption("Per output position: the probability of A's next piece, read after A and after B"
               + (" (B's source with A's output teacher-forced)." if "decoder.cross_attn" in a.kinds else
                  " (B's own next piece where it is the same piece at the same position; else blank)."))


def row_labels(analysis: Analysis, kind: str) -> list[str]:
    """A kind's query labels: decoder rows read "input → output", as every heatmap shows them."""
    q_tokens, _ = analysis.tokens(kind)
    if analysis.attention.of(kind).query_side == "tgt":
        return viz.produces_labels(q_tokens, analysis.output_tokens)
    return q_tokens


def paired(a_labels: list[str], b_labels: list[str]) -> list[str]:
    """One label per position of two sequences that line up: the piece, or "A's / B's" where they differ."""
    return [x if x == y else f"{x} / {y}" for x, y in zip(a_labels, b_labels, strict=True)]


def differences(a_pieces: list[str], b_pieces: list[str], side: str) -> str:
    """Which pieces of B differ from A's on one side, in words: 'the source has 6 pieces in A and 7 in B (nothing in
    A, “d” in B)'."""
    def quoted(pieces):
        return " ".join(f"“{plain(viz.piece_text(piece))}”" for piece in pieces) or "nothing"

    matcher = difflib.SequenceMatcher(a=a_pieces, b=b_pieces, autojunk=False)
    changes = [f"{quoted(a_pieces[i1:i2])} in A, {quoted(b_pieces[j1:j2])} in B"
               for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]
    where = {"src": "the source", "tgt": "the output"}[side]
    return f"{where} has {len(a_pieces)} pieces in A and {len(b_pieces)} in B ({', '.join(changes)})"


def next_piece_changes(page: Page, a: Analysis, b: Analysis) -> pd.DataFrame:
    """Per position of A's output: A's next piece, its probability after A and after B, and the change. A translation
    model reads B's source with A's output teacher-forced (the same pieces, after the other source); a language or
    masked model has no other reading of the same pieces, so B's probability is its own where its piece there is A's."""
    if "decoder.cross_attn" in a.kinds:
        after_b = page.run(TEACHER_FORCED, snapshot=FINAL, src_ids=b.src_ids, tgt_ids=a.tgt_ids,
                           labels=a.output_ids).label_probs
    else:
        after_b = [b.probs[t] if t < len(b.output_ids) and b.output_ids[t] == piece else np.nan
                   for t, piece in enumerate(a.output_ids)]
    after_a = np.asarray(a.probs, dtype=float)
    after_b = np.asarray(after_b, dtype=float)
    return pd.DataFrame({"position": range(len(a.output_ids)),
                         "A's next piece": [viz.piece_text(piece) for piece in a.output_tokens],
                         "p after A": after_a, "p after B": after_b, "change": after_b - after_a})


VIEW = View("compare", "Compare", render)
