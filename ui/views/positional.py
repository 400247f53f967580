"""The model's own positional encoding: as a matrix, as curves, or how alike two positions are. A rotary model
(Llama's) adds none: its table is the rotation each query and key is turned by, and two plots more show how fast
each dimension pair turns and what the turning does to one q·k as the two tokens move apart."""
from __future__ import annotations

import numpy as np
import streamlit as st

import viz
from ui.model_pass import HOUR, Kept, Pass
from ui.page import Page
from ui.shared import once
from ui.state import URL_STATE, draw, settle, settle_all
from ui.view import View
from ui.views.inside import INSIDE
from ui.widgets import controls, head_picker, show_figure

PE_SIDES = {"src": "encoder", "tgt": "decoder"}
PE_PLOTS = {"heatmap": "positions × dimensions", "curves": "curves by dimension", "similarity": "similarity"}
ROTARY_PLOTS = {"frequencies": "frequencies", "distance": "q·k by distance"}  # rotary models only

# (max_len, d_model) the encoding the model adds on `side` ('src' or 'tgt'); a rotary model's rotation of each
# position, (max_len, d_head).
POSITIONAL_TABLE = Pass("positional table", "ui.passes:positional_table", np.ndarray, Kept(HOUR, max_entries=16))
# A rotary model's angle per token of each dimension pair (d_head / 2,), as it turns (its rope_scaling applied) and
# before the scaling.
ROTARY_FREQUENCIES = Pass("rotary frequencies", "ui.passes:rotary_frequencies", tuple, Kept(HOUR, max_entries=16))


def number(value: float) -> str:
    """A setting as it was written: 500000, not 5e+05; 0.5 as 0.5."""
    return f"{int(value)}" if float(value).is_integer() else f"{value:g}"


def rotary_title(config) -> str:
    """rope_theta and the scaling, short enough for a figure's title on a projector."""
    factor = number(config.rope_factor)
    scaling = {"linear": f" · linear ÷{factor}", "llama3": f" · llama3 ×{factor}"}
    return f"rope_theta {number(config.rope_theta)}" + scaling.get(config.rope_scaling, "")


def rotary_name(config) -> str:
    """rope_theta and the scaling, in full, as captions name them."""
    text = f"rope_theta {number(config.rope_theta)}"
    if config.rope_scaling == "linear":
        return f"{text}, linear scaling ÷ {number(config.rope_factor)}"
    if config.rope_scaling == "llama3":
        return (f"{text}, llama3 scaling (factor {number(config.rope_factor)}, pretrained at "
                f"{config.rope_original_max_len} tokens)")
    return text


def render(page: Page) -> None:
    config = page.config
    rotary = config.positional == "rotary"
    plots = PE_PLOTS | ROTARY_PLOTS if rotary else PE_PLOTS
    row = controls("positional")
    sides = [side for side, kind in (("src", "encoder.self_attn"), ("tgt", "decoder.self_attn")) if kind in page.kinds]
    side = draw(row.segmented_control, "Side", "pe_side", sides, sides[0], required=True, format_func=PE_SIDES.get,
                persist_state="session")
    plot = draw(row.segmented_control, "Plot", "pe_plot", plots, required=True, format_func=plots.get,
                persist_state="session")
    positions = settle("pe_positions", range(2, config.max_len + 1), min(50, config.max_len))
    if plot != "frequencies":  # the one plot of no positions
        # On a projector in the row of controls, label folded: the figure starts high.
        slider_at, width = (row, 320) if page.lecture else (st, "stretch")
        label = "Distances shown" if plot == "distance" else "Positions shown"
        positions = slider_at.slider(label, 2, config.max_len, key="pe_positions", persist_state="session",
                                     width=width, label_visibility="collapsed" if page.lecture else "visible")
    if plot == "frequencies":
        frequencies(page)
    elif plot == "distance":
        distance(page, positions)
    else:
        table(page, plot, side, positions)


def table(page: Page, plot: str, side: str, positions: int) -> None:
    """The table the model adds (or, rotary, turns by) at each position: heatmap, curves or similarity."""
    config = page.config
    pe = page.run(POSITIONAL_TABLE, side=side)[:positions]
    width = pe.shape[1]  # d_model; a rotary table's d_head
    rotary = config.positional == "rotary"
    half = width // 2
    names = viz.rotary_dim_names(width) if rotary else None
    if plot == "heatmap":
        if rotary:
            fig = once(viz.pe_heatmap, pe, title=f"Rotary rotation by position · {rotary_title(config)}",
                       x_title=f"dimension: sin of pairs 0–{half - 1}, then their cos", theme=page.theme)
        else:
            fig = once(viz.pe_heatmap, pe, title=f"{config.positional} positional encoding of the {PE_SIDES[side]}",
                       theme=page.theme)
    elif plot == "curves":
        if st.session_state.pe_dims == URL_STATE["pe_dims"][1] and "pe_dims" not in st.session_state.url_pending:
            # frequencies far apart, not 0-3
            st.session_state.pe_dims = viz.rotary_dims(width) if rotary else viz.default_pe_dims(width)
        settle_all("pe_dims", range(width))
        dims = st.multiselect("Dimensions", range(width), key="pe_dims", persist_state="session",
                              format_func=(lambda dim: f"{dim}: {names[dim]}") if rotary else str)
        fig = once(viz.pe_curves, pe, dims=dims, names=names, theme=page.theme,
                   **({"title": "Rotary positions: each pair's sine and cosine by position"} if rotary else {}))
    else:
        fig = once(viz.pe_similarity, pe, cosine=True, theme=page.theme,
                   **({"title": "Rotary rotation: cosine similarity of positions"} if rotary else {}))
    show_figure(page, fig, f"positional-{plot}")
    if rotary:
        st.caption(f"Rotary positions add nothing to the embeddings: each query and key of a head is turned, pair by "
                   f"pair of its d_head = {width} dimensions (dimension i with i + {half}), by the angle position × "
                   f"θ_i. This is that rotation (RotaryPositional.table): sin(position × θ_i) in columns 0–{half - 1},"
                   f" cos in {half}–{width - 1}; θ from {rotary_name(config)}. "
                   + ("Its cosine similarity of positions m and n is the mean of cos((m − n) θ_i): it depends only on"
                      " m − n." if plot == "similarity" else ""))
    else:
        st.caption(f"d_model = {config.d_model}, max_len = {config.max_len}. Sinusoidal encodings are fixed; learned "
                   "ones are trained with the model.")


def frequencies(page: Page) -> None:
    """How fast each dimension pair turns, scaled as the model is and (if scaled) before."""
    config = page.config
    turned, unscaled = page.run(ROTARY_FREQUENCIES)
    half, scaled = len(turned), config.rope_scaling != "none"
    llama3 = config.rope_scaling == "llama3"
    fig = once(viz.rotary_frequencies_figure, turned, unscaled if scaled else None, context=config.max_len,
               pretrained=config.rope_original_max_len if llama3 else None,
               title=f"Rotary frequencies · {rotary_title(config)}", theme=page.theme)
    show_figure(page, fig, "positional-frequencies")
    wavelengths = viz.rotary_wavelengths(turned)
    if llama3:
        low, high = (config.rope_original_max_len / factor for factor in (config.rope_low_freq_factor,
                                                                            config.rope_high_freq_factor))
        how = (f"; llama3 scaling then divides θ_i by {number(config.rope_factor)} where the wavelength is above "
               f"{low:g} tokens, keeps it below {high:g}, and blends the two in between")
    else:
        how = f"; linear scaling divides every θ_i by {number(config.rope_factor)}" if scaled else ""
    st.caption(f"Pair i (dimensions i and i + {half} of every head's queries and keys) turns θ_i = "
               f"{number(config.rope_theta)}^(−2i/{2 * half}) radians per token{how}: the model's own frequencies "
               f"(rotary_frequencies). Pair 0 turns {turned[0]:.3g} rad per token, a full circle every "
               f"{wavelengths[0]:.3g} tokens; pair {half - 1} {turned[-1]:.3g}, every {wavelengths[-1]:.3g}. A pair "
               "above the max_len line never turns a full circle within the model's context.")


def distance(page: Page, positions: int) -> None:
    """q·k of one fixed q and k as their distance grows: this input's, from a chosen head and tokens, or all ones."""
    config = page.config
    turned, _ = page.run(ROTARY_FREQUENCIES)
    d_head = 2 * len(turned)
    distances = np.arange(positions)
    analysis = page.analysis
    if analysis is None:
        fig = once(viz.rotary_score_figure, np.ones(d_head), np.ones(d_head), turned, distances,
                   title="q·k by distance: all-ones q and k", theme=page.theme)
        show_figure(page, fig, "positional-distance")
        st.caption(f"q and k are all ones ({d_head} numbers each; type an input to see a head's own): their q·k after "
                   "the rotation is Σ_i 2 cos(Δ θ_i), which decays, unevenly, as the distance Δ grows. θ_i: "
                   f"{rotary_name(config)}.")
        return
    row = controls("positional-head")
    kind, layer, head = head_picker(page, row=row)
    tokens = analysis.tokens(kind)[0]
    compact = {"label_visibility": "collapsed"} if page.lecture else {}
    token_px = 180 if page.lecture else 150  # a short piece readable in the larger font; the list shows it whole
    query = draw(row.selectbox, "Query token", "query", range(len(tokens)), persist_state="session", width=token_px,
                 format_func=lambda t: f"q {t}: {viz.piece_text(tokens[t])}", **compact)
    key = draw(row.selectbox, "Key token", "pe_key", range(query + 1), 0, persist_state="session", width=token_px,
               format_func=lambda t: f"k {t}: {viz.piece_text(tokens[t])}", **compact)
    inside = page.run(INSIDE, kind=kind, layer=layer)
    kv_head = head // (config.num_heads // config.kv_heads)  # the key/value head this query head reads
    q, k = inside.q_unrotated[head, query], inside.k_unrotated[kv_head, key]
    own = float(inside.scores[head, query, key]) * np.sqrt(d_head)  # the model's q·k, before its ÷ √d_head
    apart = query - key
    fig = once(viz.rotary_score_figure, q, k, turned, np.arange(max(positions, apart + 1)), marked=(apart, own),
               title=f"q·k by distance · layer {layer} head {head}", theme=page.theme)
    show_figure(page, fig, "positional-distance")
    shared = f" (key/value head {kv_head}, shared by {config.num_heads // config.kv_heads} heads)" \
        if config.kv_heads != config.num_heads else ""
    st.caption(f"q: query token {query}'s, k: key token {key}'s, both from layer {layer} head {head}{shared} on this "
               "input before the rotation (hook_q_unrotated, hook_k_unrotated). The curve turns q as if it stood Δ "
               "tokens after k, as the model turns them (rotate), for every Δ: q·k = Σ_i (q_i k_i + q_j k_j) cos Δθ_i "
               f"+ (q_i k_j − q_j k_i) sin Δθ_i, with j = i + {d_head // 2} and θ from {rotary_name(config)}. Circled: "
               f"the model's own q·k for this pair, {apart} tokens apart in this input (hook_scores × √{d_head} = "
               f"{own:.4g}); the softmax reads it ÷ √{d_head}.")


VIEW = View("positional", "Positional encoding", render, needs_input=False)
