"""Attention rollout (Abnar & Zuidema 2020): how much each input token flows into each position through the layers.

Each layer mixes positions by its head-averaged attention and keeps the rest through the residual connection;
rollout models that as A' = 0.5·A + 0.5·I (rows renormalised) and multiplies the layers.
"""
import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Tokens
from .panels import colour_axis, panels_figure
from .theme import Theme


def _mean_heads(stack, name) -> np.ndarray:
    stack = np.asarray(stack, dtype=float)
    if stack.ndim != 4:
        raise ValueError(f"{name} must be (layers, heads, q_len, k_len); got shape {stack.shape}")
    return stack.mean(axis=1)


def _with_residual(attention) -> np.ndarray:
    """0.5·A + 0.5·I with rows renormalised (a fully masked, all-zero row becomes the identity row)."""
    mixed = 0.5 * attention + 0.5 * np.eye(attention.shape[0], attention.shape[1])
    return mixed / mixed.sum(axis=1, keepdims=True)


def encoder_rollout(self_stack: ArrayLike) -> np.ndarray:
    """Rollout of self-attention (layers, heads, n, n) -> (n, n): row i = share of each input token in the
    last layer's output at position i. R = A'_{L-1} · ... · A'_1 · A'_0 (layer 0 is applied first)."""
    layers = _mean_heads(self_stack, "self_stack")
    rollout = np.eye(layers.shape[-1])
    for attention in layers:
        rollout = _with_residual(attention) @ rollout
    return rollout


def decoder_source_rollout(dec_self_stack: ArrayLike, cross_stack: ArrayLike, enc_rollout: ArrayLike) -> np.ndarray:
    """Share of each source token in the decoder's output positions: (tgt_len, src_len).

    dec_self_stack: (layers, heads, tgt, tgt); cross_stack: (layers, heads, tgt, src); enc_rollout: (src, src)
    from encoder_rollout (the encoder outputs' shares of the source tokens). Per decoder layer, starting from
    S = 0 (decoder inputs hold no source information):
        S <- Â_self · S                          self-attention with residual, as in encoder_rollout
        S <- 0.5·S + 0.5·(Ā_cross · enc_rollout)  cross-attention: half residual, half the encoder's outputs
    (Ā: heads averaged.) This is the source block of a rollout over target and source tokens together, starting
    from each target position owning itself; the target block holds the rest. So each row sums to 1 - 0.5^layers:
    the share of the source, the remainder being the decoder's own input tokens.
    """
    self_layers, cross_layers = _mean_heads(dec_self_stack, "dec_self_stack"), _mean_heads(cross_stack, "cross_stack")
    enc_rollout = np.asarray(enc_rollout, dtype=float)
    if len(self_layers) != len(cross_layers) or cross_layers.shape[2] != enc_rollout.shape[0]:
        raise ValueError(f"shapes do not fit: dec_self_stack {np.shape(dec_self_stack)}, cross_stack "
                         f"{np.shape(cross_stack)}, enc_rollout {enc_rollout.shape}")
    source = np.zeros((cross_layers.shape[1], enc_rollout.shape[1]))
    for self_attention, cross_attention in zip(self_layers, cross_layers):
        source = _with_residual(self_attention) @ source
        source = 0.5 * source + 0.5 * (cross_attention @ enc_rollout)
    return source


def rollout_figure(matrix: ArrayLike, q_tokens: Tokens, k_tokens: Tokens, *, title: str = "Attention rollout",
                   theme: Theme = Theme()) -> go.Figure:
    """A rollout matrix: output positions (rows) x input tokens (columns), on a 0-to-max scale."""
    return panels_figure([dict(matrix=matrix, axis_names=("position", "token"), value_name="rollout")], q_tokens,
                         k_tokens, colour_axes=[colour_axis("coloraxis", theme.sequential, 0.0, float(np.max(matrix)),
                                                            "share")],
                         colour_bars=[("coloraxis", 1)], title=title, theme=theme)
