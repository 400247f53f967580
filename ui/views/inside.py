"""Inside a head, step by step: one query token's q meets every key, the scores are scaled, masked and softmaxed,
the weights mix the values into z, and W_O's slice turns z into the head's share of the layer's update; then the
layer's feed-forward neurons. Every vector is a hook point of one captured pass (INSIDE)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import streamlit as st

import viz.inside
from ui.literal_text import plain
from ui.model_pass import SHARED, SUMMARY_ON_DISK, Pass
from ui.page import Page
from ui.shared import once
from ui.state import settle
from ui.view import View
from ui.widgets import aside, controls, head_picker, head_title, kv_head, kv_sentence, show_figure


class Inside(NamedTuple):
    """One attention block's hook points and its layer's feed-forward neurons (transformer.model.hooks.INSIDE_HOOKS),
    captured in one pass over the page's ids: every number this view shows is one of these, or a product of two."""

    block_input: np.ndarray  # (q_len, d_model) the residual stream entering the block
    q: np.ndarray  # (heads, q_len, d_head) queries
    k: np.ndarray  # (heads, k_len, d_head) keys
    v: np.ndarray  # (heads, k_len, d_head) values
    scores: np.ndarray  # (heads, q_len, k_len) q·k / √d_head, before the mask
    allowed: np.ndarray  # (q_len, k_len) bool, True = may attend: the mask the model used
    weights: np.ndarray  # (heads, q_len, k_len) the softmax: the pattern every view shows
    z: np.ndarray  # (heads, q_len, d_head) the weighted sum of the values
    result: np.ndarray  # (q_len, heads, d_model) each head's z through its slice of W_O
    neurons: np.ndarray  # (length, d_ff) the layer's feed-forward hidden activations (its stack's tokens)
    # Rotary positions only (None otherwise): q and k before the rotation turned them by their positions; q and k
    # above are after it. k, v and k_unrotated have the model's key/value heads (fewer with grouped-query attention:
    # query head h reads key/value head h // (heads / kv_heads)).
    q_unrotated: np.ndarray | None = None  # (heads, q_len, d_head)
    k_unrotated: np.ndarray | None = None  # (kv_heads, k_len, d_head)


INSIDE = Pass("inside a block", "ui.passes:inside", Inside, SHARED, "Looking inside the block…")  # kind=, layer=

STEPS = ("q and k", "q ⊙ k", "softmax", "output", "neurons")
# Rotary positions turn q and k between the projections and their product: a step of its own, after the first (the
# other models' steps keep their numbers, which links and decks name).
ROTARY_STEPS = ("q and k", "rotation", "q ⊙ k", "softmax", "output", "neurons")
TOP_NEURONS = 5  # per token in the neurons' table


def steps_of(config) -> tuple[str, ...]:
    return ROTARY_STEPS if config.positional == "rotary" else STEPS


def step_label(step: int, lecture: bool, steps: tuple[str, ...] = STEPS) -> str:
    """In lecture mode the number alone (the row stays one line; the figure's title names the step)."""
    return str(step + 1) if lecture else f"{step + 1} {steps[step]}"


def step_by(delta: int, count: int = len(STEPS)) -> None:
    st.session_state.inside_step = min(max(st.session_state.inside_step + delta, 0), count - 1)


def render(page: Page) -> None:
    row = controls("inside")  # one row for every control (it wraps where it must): the figure starts high
    kind, layer, head = head_picker(page, row=row)
    analysis = page.analysis
    q_tokens, k_tokens = analysis.tokens(kind)
    if analysis.attention.of(kind).query_side == "tgt":
        q_tokens = viz.produces_labels(q_tokens, analysis.output_tokens)
    query = settle("query", range(len(q_tokens)))
    query = row.selectbox("Query token", range(len(q_tokens)), key="query", persist_state="session",
                          format_func=lambda t: f"{t}: {viz.piece_text(q_tokens[t])}",
                          width=155 if page.lecture else 180,  # lecture: the step buttons fit beside it
                          label_visibility="collapsed" if page.lecture else "visible")
    steps = steps_of(page.config)
    step = settle("inside_step", range(len(steps)))
    row.button("◀", on_click=step_by, args=(-1, len(steps)), disabled=step == 0, key="inside-back", shortcut="Left",
               type="tertiary", help="Previous step (key ←)")
    step = row.segmented_control("Step", range(len(steps)), key="inside_step", required=True,
                                 persist_state="session", format_func=lambda s: step_label(s, page.lecture, steps),
                                 label_visibility="collapsed" if page.lecture else "visible")
    row.button("▶", on_click=step_by, args=(1, len(steps)), disabled=step == len(steps) - 1, key="inside-next",
               shortcut="Right", type="tertiary", help="Next step (key →)")
    inside = page.run(INSIDE, kind=kind, layer=layer)
    name, number = steps[step], step + 1
    kv = kv_head(page.config, head)
    if name != "neurons" and not page.lecture:  # the figures' titles name the step, the controls say where
        st.caption(f"{head_title(kind, layer, head, kv)} · query {plain(viz.piece_text(q_tokens[query]))}")
    if name == "neurons":
        neurons(page, kind, layer, inside.neurons, query, number)
        return
    head_step(page, inside, name, number, kind, head, query, q_tokens, k_tokens)
    if kv is not None and name != "softmax":  # the steps that read the shared keys or values
        group = page.config.num_heads // page.config.kv_heads
        st.caption(f"Grouped-query attention: {kv_sentence(page.config, head)} (one set of keys and values for the "
                   f"{group} of them).")


def head_step(page: Page, inside, name: str, number: int, kind: str, head: int, query: int, q_tokens,
              k_tokens) -> None:
    """One step of the head's computation, `name` of STEPS or ROTARY_STEPS, numbered `number`."""
    width = page.theme.width
    kv = kv_head(page.config, head)
    of_kv = "" if kv is None else f" (kv head {kv})"
    kv = head if kv is None else kv  # keys and values: the key/value head this query head reads
    d_head = inside.q.shape[-1]
    q, keys = inside.q[head, query], inside.k[kv]  # (d_head,), (k_len, d_head)
    blocked = ~inside.allowed[query]  # (k_len,)
    if name == "q and k":
        rotary = inside.q_unrotated is not None  # q and k as the projections make them, before their turn
        q0, keys0 = (inside.q_unrotated[head, query], inside.k_unrotated[kv]) if rotary else (q, keys)
        show_figure(page, once(viz.inside.vectors_figure, np.vstack([q0[None], keys0]),
                               [f"q · {q_tokens[query]}"] + [f"k · {token}" for token in k_tokens],
                               title=f"{number} · {'the query ' if not of_kv else ''}q = x W_Q and every key "
                                     f"k = x W_K{of_kv}", width=width,  # short enough for lecture mode's line
                               heading=f"{d_head} numbers each", theme=page.theme), "inside-qk")
        show_figure(page, once(viz.inside.vectors_figure, inside.block_input[query][None], [q_tokens[query]],
                               title="x: the query token's input to the block", width=width,
                               heading=f"{inside.block_input.shape[-1]} numbers (the residual stream)",
                               theme=page.theme), "inside-input")
        st.caption("Blue below 0, red above. The keys are the " + ("source tokens as the encoder left them."
                   if kind == "decoder.cross_attn" else "tokens of the same sequence, each seen from its own input.")
                   + (" Rotary positions turn them next." if rotary else ""))
    elif name == "rotation":
        rotation(page, inside, number, head, kv, of_kv, query, q_tokens, k_tokens)
    elif name == "q ⊙ k":
        products = q[None, :] * keys  # (k_len, d_head): the terms of each dot product q·k
        show_figure(page, once(viz.inside.vectors_figure, products, list(k_tokens),
                               title=f"{number} · q ⊙ k for every key, and their sums", width=width,
                               heading="q ⊙ k", bars=products.sum(axis=1), bars_heading="sum = q·k",
                               theme=page.theme), "inside-products")
        st.caption("Each row multiplies q and that key's k number by number; the row's sum is the dot product q·k, "
                   "the key's raw score. Red terms pull toward that key, blue ones away.")
    elif name == "softmax":
        show_figure(page, once(viz.inside.softmax_figure, (q[None, :] * keys).sum(axis=1),
                               inside.scores[head, query], inside.weights[head, query], blocked, list(k_tokens),
                               d_head, title=f"{number} · scale, mask, softmax", theme=page.theme),
                    "inside-softmax")
        st.caption(f"The scores are q·k ÷ √{d_head}; a key the mask blocks gets −∞, so weight 0. The softmax turns "
                   "the scores into weights that sum to 1: the row the attention views show for this query.")
    else:  # "output"
        weights = inside.weights[head, query]  # (k_len,)
        weighted = weights[:, None] * inside.v[kv]  # (k_len, d_head): each value scaled by its weight
        show_figure(page, once(viz.inside.vectors_figure, np.vstack([weighted, inside.z[head, query][None]]),
                               [f"{w:.2f} × v · {token}" for w, token in zip(weights, k_tokens)] + ["z = the sum"],
                               title=f"{number} · the values{of_kv} mixed by the weights: z", width=width,
                               heading=f"weight × v ({d_head} numbers each)", theme=page.theme), "inside-values")
        result = inside.result[query]  # (heads, d_model)
        show_figure(page, once(viz.inside.vectors_figure, result,
                               [f"H{h}" + (" (this head)" if h == head else "") for h in range(result.shape[0])],
                               title="each head's z through its slice of W_O",
                               width=width, heading=f"{result.shape[-1]} numbers each", bars=np.linalg.norm(result,
                               axis=1), bars_heading="length", theme=page.theme), "inside-heads")
        st.caption("The heads' rows (plus W_O's bias) add up to what attention adds to the residual stream at this "
                   "token; the longer a head's row, the more it moves it.")


def rotation(page: Page, inside, number: int, head: int, kv: int, of_kv: str, query: int, q_tokens,
             k_tokens) -> None:
    """Rotary positions: the query's q and every key's k before and after their positions turned them (the hook
    points before and after the rotation), and q·k without and with the turn."""
    q0, q1 = inside.q_unrotated[head, query], inside.q[head, query]  # (d_head,)
    k0, k1 = inside.k_unrotated[kv], inside.k[kv]  # (k_len, d_head)
    d_head = q0.shape[-1]
    labels = [f"q · {q_tokens[query]}"] + [f"k · {token}" for token in k_tokens]
    show_figure(page, once(viz.inside.rotation_figure, np.vstack([q0[None], k0]), np.vstack([q1[None], k1]), labels,
                           title=f"{number} · rotary positions turn q and k{of_kv}", width=page.theme.width,
                           headings=("before", "after the turn"), theme=page.theme), "inside-rotation")
    config = page.config
    theta = f"θᵢ = {config.rope_theta:g}^(−2i/{d_head})" + ("" if config.rope_scaling == "none" else
                                                              f", stretched ({config.rope_scaling} scaling)")
    st.caption(f"Dimensions i and i + {d_head // 2} form a pair, turned as a point by the angle position × θᵢ, "
               f"{theta}: the angle of every pair comes from the token's position alone (the query's is {query}, "
               "key t's is t); the first pairs turn fast and the last slowly, and no pair's length changes.")
    show_figure(page, once(viz.inside.turned_dots_figure, k0 @ q0, k1 @ q1, list(k_tokens),
                           title="q·k for every key, without and with the turn", theme=page.theme),
                "inside-turned-dots")
    st.caption("After the turn, q·k depends on how far apart the two tokens are, not on where they stand (the key at "
               "the query's own position keeps its q·k); the next steps use the turned q and k, and these sums.")


def neurons(page: Page, kind: str, layer: int, activations: np.ndarray, query: int, number: int = 5) -> None:
    """The layer's feed-forward neurons: the most active ones at every token, and one neuron over the input (at
    first the one most active at the query token, which the layer's tokens include: its stack's)."""
    side = "src" if kind == "encoder.self_attn" else "tgt"
    tokens = page.analysis.pieces(side)
    stack = "encoder" if side == "src" else "decoder"
    heading = f"**{number} · the feed-forward network of {stack} layer {layer}: its {activations.shape[1]} neurons**"
    if page.lecture:  # beside the figure: on a projector the figure keeps the screen's height
        aside(heading)
    else:
        st.markdown(heading)
    table = viz.inside.top_neurons(activations, tokens, TOP_NEURONS)
    best = int(np.argmax(activations[query]))
    neuron = settle("neuron", range(activations.shape[1]), best)
    neuron = controls("inside-neuron").selectbox("Neuron", range(activations.shape[1]), key="neuron",
                                                 persist_state="session", format_func=lambda n: f"n{n}", width=200)
    show_figure(page, once(viz.inside.neuron_figure, activations[:, neuron], tokens, neuron,
                           title=f"neuron {neuron} over the input", theme=page.theme),
                "inside-neuron")
    count = st.session_state.summary_count
    known = page.run(SUMMARY_ON_DISK, count=count)
    if known:  # read already: the neuron's top tokens over the corpus, beside this input's
        examples = viz.neuron_examples_table(page.summary(count).summary.neuron_examples((stack, layer), neuron))
        st.dataframe(examples, hide_index=True, height="content" if page.lecture else "auto",
                     column_config={"activation": st.column_config.NumberColumn(format="%.3f")})
        st.caption(f"Neuron {neuron}'s highest activations over {count} inputs of the corpus, each in its sentence "
                   "(the Across inputs view).")
    st.dataframe(table, hide_index=True, height="content" if page.lecture else "auto")
    st.caption(f"Each row: the {TOP_NEURONS} neurons most active at that token (activation after the non-linearity)."
               + ("" if known else " The Across inputs view lists each neuron's top tokens "
                  "over a corpus."))


VIEW = View("inside", "Inside a head", render)
