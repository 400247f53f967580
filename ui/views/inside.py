"""Inside a head, step by step: one query token's q meets every key, the scores are scaled, masked and softmaxed,
the weights mix the values into z, and W_O's slice turns z into the head's share of the layer's update; then the
layer's feed-forward neurons. Every vector is a hook point of one captured pass (ui.passes.inside)."""
from __future__ import annotations

import numpy as np
import streamlit as st

import viz.inside
from ui.page import Page
from ui.plain import plain
from ui.shared import once
from ui.state import settle
from ui.view import View
from ui.widgets import controls, head_picker, head_title, show_figure

STEPS = ("q and k", "q ⊙ k", "softmax", "output", "neurons")
TOP_NEURONS = 5  # per token in the neurons' table


def step_label(step: int, lecture: bool) -> str:
    """In lecture mode the number alone (the row stays one line; the figure's title names the step)."""
    return str(step + 1) if lecture else f"{step + 1} {STEPS[step]}"


def step_by(delta: int) -> None:
    st.session_state.inside_step = min(max(st.session_state.inside_step + delta, 0), len(STEPS) - 1)


def render(page: Page) -> None:
    row = controls("inside")  # one row for every control (it wraps where it must): the figure starts high
    kind, layer, head = head_picker(page, row=row)
    analysis = page.analysis
    q_tokens, k_tokens = analysis.tokens(kind)
    if analysis.attention.of(kind).query_side == "tgt":
        q_tokens = viz.produces_labels(q_tokens, analysis.output_tokens)
    query = settle("query", range(len(q_tokens)))
    query = row.selectbox("Query token", range(len(q_tokens)), key="query", persist_state="session",
                          format_func=lambda t: f"{t}: {viz.piece_text(q_tokens[t])}", width=180,
                          label_visibility="collapsed" if page.lecture else "visible")
    step = settle("inside_step", range(len(STEPS)))
    row.button("◀", on_click=step_by, args=(-1,), disabled=step == 0, key="inside-back", shortcut="Left",
               type="tertiary", help="Previous step (key ←)")
    step = row.segmented_control("Step", range(len(STEPS)), key="inside_step", required=True,
                                 persist_state="session", format_func=lambda s: step_label(s, page.lecture),
                                 label_visibility="collapsed" if page.lecture else "visible")
    row.button("▶", on_click=step_by, args=(1,), disabled=step == len(STEPS) - 1, key="inside-next",
               shortcut="Right", type="tertiary", help="Next step (key →)")
    inside = page.inside(kind, layer)
    width = page.theme.width
    if step < 4 and not page.lecture:  # the figures' titles name the step, the controls say where
        st.caption(f"{head_title(kind, layer, head)} · query {plain(viz.piece_text(q_tokens[query]))}")
    d_head = inside.q.shape[-1]
    q, keys = inside.q[head, query], inside.k[head]  # (d_head,), (k_len, d_head)
    blocked = ~inside.allowed[query]  # (k_len,)
    if step == 0:
        show_figure(page, once(viz.inside.vectors_figure, np.vstack([q[None], keys]),
                               [f"q · {q_tokens[query]}"] + [f"k · {token}" for token in k_tokens],
                               title="1 · the query q = x W_Q and every key k = x W_K", width=width,
                               heading=f"{d_head} numbers each", theme=page.theme), "inside-qk")
        show_figure(page, once(viz.inside.vectors_figure, inside.block_input[query][None], [q_tokens[query]],
                               title="x: the query token's input to the block", width=width,
                               heading=f"{inside.block_input.shape[-1]} numbers (the residual stream)",
                               theme=page.theme), "inside-input")
        st.caption("Blue below 0, red above. The keys are the " + ("source tokens as the encoder left them."
                   if kind == "decoder.cross" else "tokens of the same sequence, each seen from its own input."))
    elif step == 1:
        products = q[None, :] * keys  # (k_len, d_head): the terms of each dot product q·k
        show_figure(page, once(viz.inside.vectors_figure, products, list(k_tokens),
                               title="2 · q ⊙ k for every key, and their sums", width=width,
                               heading="q ⊙ k", bars=products.sum(axis=1), bars_heading="sum = q·k",
                               theme=page.theme), "inside-products")
        st.caption("Each row multiplies q and that key's k number by number; the row's sum is the dot product q·k, "
                   "the key's raw score. Red terms pull toward that key, blue ones away.")
    elif step == 2:
        show_figure(page, once(viz.inside.softmax_figure, (q[None, :] * keys).sum(axis=1),
                               inside.scores[head, query], inside.weights[head, query], blocked, list(k_tokens),
                               d_head, title="3 · scale, mask, softmax", theme=page.theme),
                    "inside-softmax")
        st.caption(f"The scores are q·k ÷ √{d_head}; a key the mask blocks gets −∞, so weight 0. The softmax turns "
                   "the scores into weights that sum to 1: the row the attention views show for this query.")
    elif step == 3:
        weights = inside.weights[head, query]  # (k_len,)
        weighted = weights[:, None] * inside.v[head]  # (k_len, d_head): each value scaled by its weight
        show_figure(page, once(viz.inside.vectors_figure, np.vstack([weighted, inside.z[head, query][None]]),
                               [f"{w:.2f} × v · {token}" for w, token in zip(weights, k_tokens)] + ["z = the sum"],
                               title="4 · the values mixed by the weights: z", width=width,
                               heading=f"weight × v ({d_head} numbers each)", theme=page.theme), "inside-values")
        result = inside.result[query]  # (heads, d_model)
        show_figure(page, once(viz.inside.vectors_figure, result,
                               [f"H{h}" + (" (this head)" if h == head else "") for h in range(result.shape[0])],
                               title="each head's z through its slice of W_O",
                               width=width, heading=f"{result.shape[-1]} numbers each", bars=np.linalg.norm(result,
                               axis=1), bars_heading="length", theme=page.theme), "inside-heads")
        st.caption("The heads' rows (plus W_O's bias) add up to what attention adds to the residual stream at this "
                   "token; the longer a head's row, the more it moves it.")
    else:
        neurons(page, kind, layer, inside.neurons, query)


def neurons(page: Page, kind: str, layer: int, activations: np.ndarray, query: int) -> None:
    """The layer's feed-forward neurons: the most active ones at every token, and one neuron over the input (at
    first the one most active at the query token, which the layer's tokens include: its stack's)."""
    side = "src" if kind == "encoder.self" else "tgt"
    tokens = page.analysis.pieces(side)
    stack = "encoder" if side == "src" else "decoder"
    st.markdown(f"**5 · the feed-forward network of {stack} layer {layer}: its {activations.shape[1]} neurons**")
    table = viz.inside.top_neurons(activations, tokens, TOP_NEURONS)
    best = int(np.argmax(activations[query]))
    neuron = settle("neuron", range(activations.shape[1]), best)
    neuron = st.selectbox("Neuron", range(activations.shape[1]), key="neuron", persist_state="session",
                          format_func=lambda n: f"n{n}", width=200)
    show_figure(page, once(viz.inside.neuron_figure, activations[:, neuron], tokens, neuron,
                           title=f"neuron {neuron} over the input", theme=page.theme),
                "inside-neuron")
    st.dataframe(table, hide_index=True, height="content" if page.lecture else "auto")
    st.caption(f"Each row: the {TOP_NEURONS} neurons most active at that token (activation after the non-linearity).")


VIEW = View("inside", "Inside a head", render)
