"""Generation one token at a time: greedy, or sampled (temperature, top-k, top-p, a seed), with the step's
cross-attention, the causal mask growing and the candidates; or beam search's tree of hypotheses, each openable in
the cross-attention of the step that made it. A decoder-only model continues its prompt: each step's next-token
prediction and the causal mask growing past the prompt (no cross-attention, no beam tree)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import viz
from ui.analysis import BeamTreeView, DecodingSteps
from ui.model_pass import SHARED, TEACHER_FORCED, Pass
from ui.page import Page
from ui.shared import once
from ui.state import DEFAULT_BEAM_SIZE, FINAL, Between, draw, settle
from ui.view import View
from ui.widgets import PROBABILITY, aside, controls, show_figure, side_by_side, table_height, word_switch

TABLE_PX = {False: 300, True: 320}  # width the next pieces' table needs beside the step's figure (key: lecture mode)
MODES = {"greedy": "Greedy", "sampling": "Sampling", "tree": "Beam tree"}
MAX_TEMPERATURE = 3.0  # the slider's end: beyond it the distribution is all but flat on these models
MAX_SEED = 2 ** 31 - 1
TREE_BEAMS = range(2, 9)  # wider beams give steps of more than 64 hypotheses: no longer a readable tree
TREE_FIGURE = "figure-beam-tree"  # the tree's chart key: its selection opens a hypothesis

DECODING_STEPS = Pass("decoding steps", "ui.passes:decoding_steps", DecodingSteps, SHARED, "Decoding step by step…")
BEAM_TREE = Pass("beam tree", "ui.passes:beam_tree_view", BeamTreeView, SHARED,
                 "Searching with every hypothesis recorded…")


def step_by(delta: int, last: int) -> None:
    st.session_state.step = min(max(st.session_state.step + delta, 0), last)


def sampling_controls(page: Page) -> tuple[float, int, float, int]:
    """Temperature, top-k, top-p and seed (all in the link, so that it draws the same pieces again)."""
    row = controls("sampling")
    settle("temperature", Between(0.0, MAX_TEMPERATURE))
    temperature = row.slider("Temperature", 0.0, MAX_TEMPERATURE, step=0.05, key="temperature",
                             persist_state="session", help="Probabilities raised to 1 / temperature, renormalised: "
                             "below 1 sharper, above 1 flatter, 0 always the most likely piece.")
    settle("top_k", range(page.config.tgt_vocab_size + 1))
    top_k = row.number_input("Top-k", 0, page.config.tgt_vocab_size, step=1, key="top_k", persist_state="session",
                             help="Draw only from the k most likely pieces (0: from every piece).")
    settle("top_p", Between(0.01, 1.0))
    top_p = row.slider("Top-p", 0.01, 1.0, step=0.01, key="top_p", persist_state="session",
                       help="Then only from the fewest most likely pieces whose probabilities add up to p.")
    settle("seed", range(MAX_SEED + 1))
    seed = row.number_input("Seed", 0, MAX_SEED, step=1, key="seed", persist_state="session",
                            help="The same seed draws the same pieces: the link replays this sample.")
    return float(temperature), int(top_k), float(top_p), int(seed)


def open_selected_node() -> None:
    """A click on a hypothesis of the tree opens it below (the picker follows)."""
    points = st.session_state[TREE_FIGURE].selection.points
    if points and points[0].get("customdata") is not None:
        st.session_state.node = int(points[0]["customdata"])


def open_step(tree: BeamTreeView, depths: list[int]) -> None:
    step = st.session_state.tree_step
    on_path = [node for node in tree.chosen if depths[node] == step]
    at_step = [node for node, depth in enumerate(depths) if depth == step]
    st.session_state.node = on_path[0] if on_path else max(at_step, key=tree.log_probs.__getitem__)


def render_tree(page: Page, row) -> None:
    fallback = page.beam_size if page.beam_size in TREE_BEAMS else DEFAULT_BEAM_SIZE
    beams = draw(row.segmented_control, "Beams", "tree_beam", TREE_BEAMS, fallback, required=True,
                 persist_state="session")
    tree = page.run(BEAM_TREE, src_ids=page.source_ids(), beam_size=beams)
    depths = [0] * len(tree.parents)
    for index, parent in enumerate(tree.parents):
        depths[index] = 0 if parent < 0 else depths[parent] + 1
    node = settle("node", range(len(tree.pieces)), tree.best)
    # Any step in one move: the tree shows the steps around the open hypothesis, and the slider opens the best one
    # at the step it is moved to (the returned hypothesis's own, where its path reaches that far).
    st.session_state.tree_step = depths[node]
    row.slider("Step", 0, max(depths), key="tree_step", on_change=open_step, args=(tree, depths), width=240,
               help="Move the tree to any step: the best hypothesis there opens below.")
    fig = once(viz.beam_tree_figure, tree.pieces, tree.parents, tree.log_probs, tree.kept, tree.chosen,
               selected=node, width_px=page.theme.width, finals=tree.finals, theme=page.theme)
    show_figure(page, fig, "beam-tree", key=TREE_FIGURE, on_select=open_selected_node, selection_mode="points")
    penalties = page.card.decoding
    st.caption(f"Beam search with {beams} beams (length penalty {penalties.get('length_penalty', 0.6)}, coverage "
               f"penalty {penalties.get('coverage_penalty', 0.0)}, as the sidebar's): each step extends every "
               f"hypothesis in the beam by its {beams} most likely pieces and keeps the {beams} best of them all "
               "(blue); the others are pruned (grey). Red: the hypothesis beam search returns, and its path. Beside "
               "each piece: its hypothesis's summed log-probability; the final choice divides it by the length "
               "penalty. Click a hypothesis, or pick it here, to see the step that made it.")

    def node_text(index: int) -> str:
        state = "chosen" if index in tree.chosen else "kept" if tree.kept[index] else "pruned"
        text = viz.piece_text(tree.texts[index] or "<s>")
        return f"step {depths[index]} · {text} · {tree.log_probs[index]:.2f} · {state}"

    node = st.selectbox("Hypothesis", range(len(tree.pieces)), key="node", format_func=node_text,
                        persist_state="session")
    if node == 0:
        st.info("The root is <s> alone: no step made it. Pick a hypothesis to see the step that added its last piece.")
        return
    path = [node]
    while tree.parents[path[-1]] >= 0:
        path.append(tree.parents[path[-1]])
    prefix = [tree.pieces[index] for index in reversed(path[1:])]  # the decoder input of the step: <s> first
    step = depths[node] - 1
    # The cross-attention of the step that reads this prefix: one teacher-forced pass, its last query row.
    forced = page.run(TEACHER_FORCED, snapshot=FINAL, src_ids=page.source_ids(), tgt_ids=tuple(tree.prefixes[node]))
    rows = forced.stack("decoder.cross_attn")[:, :, -1]  # (layers, heads, src_len)
    cross = once(viz.decoding_step_figure, rows, list(tree.src_tokens), prefix, step, theme=page.theme)
    st.text(viz.decoding_step_caption(step, prefix) + f"  →  {viz.piece_text(tree.pieces[node])}")
    show_figure(page, cross, "beam-node")


def render(page: Page) -> None:
    cross = "decoder.cross_attn" in page.kinds  # beam search and each step's source attention need an encoder
    modes = tuple(mode for mode in MODES if cross or mode != "tree")
    row = controls("step")  # the mode and the step on one row: on a projector the figure starts high
    mode = draw(row.segmented_control, "Decoding steps", "step_mode", modes, required=True,
                format_func=MODES.get, persist_state="session",
                label_visibility="collapsed" if page.lecture else "visible")
    if mode == "tree":
        render_tree(page, row)
        return
    sampling = sampling_controls(page) if mode == "sampling" else (0.0, 0, 1.0, 0)
    temperature, top_k, top_p, seed = sampling
    steps = page.run(DECODING_STEPS, src_ids=page.source_ids(), temperature=temperature, top_k=top_k, top_p=top_p,
                     seed=seed)
    count = len(steps.top)  # one step per generated piece
    # A decoder-only model's prompt fills the positions before its first step's query.
    offset = len(steps.prefix_tokens) - count
    step = settle("step", range(count))
    if count > 1:  # ← and → step as a lecturer talks (Streamlit's button shortcuts)
        back, forward = ("◀", "▶") if page.lecture else ("◀ Back", "Next ▶")  # icons: one row on a projector
        row.button(back, on_click=step_by, args=(-1, count - 1), disabled=step == 0, key="step-back",
                   shortcut="Left", help="Previous step (key ←)")
        row.button(forward, on_click=step_by, args=(1, count - 1), disabled=step == count - 1, key="step-next",
                   shortcut="Right", help="Next step (key →)")
        step = row.slider("Step", 0, count - 1, key="step", persist_state="session",
                          label_visibility="collapsed" if page.lecture else "visible")
    words = word_switch(row)
    if mode == "greedy" and page.beam_size > 1:
        aside("Step by step is greedy decoding; the output comes from beam search and may differ (the beam tree "
              "shows how beam search chose it).")
    # One input, unpadded: cross-attention masks nothing here.
    # The step's query is the decoder input so far: <s> and the pieces of the earlier steps.
    source, rows = list(steps.src_tokens), steps.cross[:, :, step]  # rows: (layers, heads, src_len)
    if words:  # one query row per head: merged over the source's words only
        merged, _, source = viz.merge_words(rows[:, :, None, :], ["query"], source)  # (layers, heads, 1, words)
        rows = merged[:, :, 0]
    prefix = list(steps.prefix_tokens[: offset + step + 1])
    fig = once(viz.decoding_step_figure, rows, source, prefix, step, theme=page.theme) if cross else None
    caption = viz.decoding_step_caption(step, prefix)  # grows with every step: wrapped text, never a cut title
    if not page.lecture or not cross:
        st.text(caption)
    shaped = None
    if mode == "sampling":
        temperature, top_k, top_p, seed = sampling
        shaped = once(viz.distribution_figure, steps.shaped_pieces[step], steps.shaped[step], steps.drawn[step],
                      title=f"Step {step}: the next piece's probability", width_px=page.theme.width,
                      theme=page.theme)
    side = TABLE_PX[page.lecture] if shaped is None else int(shaped.layout.width)
    left, right = side_by_side(page, [int(fig.layout.width), side]) if cross else (None, st.container())
    if cross:
        with left:
            show_figure(page, fig, "decoding-step")
            if page.lecture:  # on a projector the figure comes first (its title names the step), the long line under
                st.text(caption)
    with right:
        if shaped is None:
            st.markdown(f"**Step {step}: the {len(steps.top[step])} most likely next pieces**")
            st.dataframe(pd.DataFrame([(viz.piece_text(piece), p) for piece, p in steps.top[step]],
                                      columns=["piece", "probability"]), hide_index=True,
                         height=table_height(page), column_config={"probability": PROBABILITY})
            st.caption("Greedy decoding takes the first.")
        else:
            show_figure(page, shaped, "decoding-distribution")
            st.caption(f"Temperature {temperature:g}, top-k {top_k or 'off'}, top-p {top_p:g}, seed {seed}: the "
                       "piece is drawn from the last bars. The same seed draws the same pieces again.")
    row = controls("decoder-self")
    layer = draw(row.segmented_control, "Decoder layer", "layer", range(page.layers("decoder.self_attn")),
                 required=True, persist_state="session")
    head = draw(row.segmented_control, "Head", "head", page.heads(), required=True, persist_state="session")
    # The whole grid from the first step, so the figure keeps its size while the causal triangle grows row by row;
    # rows not generated yet stay blank and their pieces unknown.
    positions = len(steps.prefix_tokens)
    later = np.arange(positions) > offset + step
    weights = np.where(later[:, None], np.nan, steps.decoder_self[layer, head])
    labels = prefix + ["…"] * (positions - len(prefix))
    causal = viz.mask_reasons(positions, positions, causal=True)[viz.CAUSAL] & ~later[:, None]
    growing = once(viz.head_heatmap, weights, labels, labels, blocked={viz.CAUSAL: causal},
                   title=f"decoder self-attention up to step {step} · layer {layer} · head {head}",
                   theme=page.theme)
    show_figure(page, growing, "decoding-causal")


VIEW = View("decoding", "Decoding", render, needs=("decoder.self_attn",),
            needs_why="generates an output one piece at a time with a decoder (an encoder-only model's prediction "
                      "of its masked tokens is the output above)")
