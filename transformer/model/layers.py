"""The building blocks of each stack: feed-forward network, residual connection, encoder and decoder layers."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention, Rotation
from .cache import AttentionCache
from .config import TransformerConfig
from .hooks import HookPoint

ACTIVATION_FUNCTIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu,
                        "gelu_new": lambda x: F.gelu(x, approximate="tanh")}


class FeedForward(nn.Module):
    """Position-wise FFN(x) = W_2 · act(W_1 x + b_1) + b_2."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.linear1 = nn.Linear(config.d_model, config.d_ff, bias=config.feed_forward_bias)
        self.linear2 = nn.Linear(config.d_ff, config.d_model, bias=config.feed_forward_bias)
        self.activation = ACTIVATION_FUNCTIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)
        self.hook_mlp_post = HookPoint()  # (batch, length, d_ff) the hidden neurons' activations

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.hook_mlp_post(self.activation(self.linear1(x)))))


class GatedFeedForward(nn.Module):
    """A gated FFN(x) = down(act(gate x) * up x): each hidden unit's activation scales another projection of the
    same input (SwiGLU when act is silu; Shazeer 2020), the feed-forward network of Llama, Qwen2 and Mistral."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(config.d_model, config.d_ff, bias=config.feed_forward_bias)
        self.up = nn.Linear(config.d_model, config.d_ff, bias=config.feed_forward_bias)
        self.down = nn.Linear(config.d_ff, config.d_model, bias=config.feed_forward_bias)
        self.activation = ACTIVATION_FUNCTIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)
        self.hook_mlp_post = HookPoint()  # (batch, length, d_ff) the hidden neurons: act(gate x) * up x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.dropout(self.hook_mlp_post(self.activation(self.gate(x)) * self.up(x))))


def make_feed_forward(config: TransformerConfig) -> FeedForward | GatedFeedForward:
    return GatedFeedForward(config) if config.feed_forward == "gated" else FeedForward(config)


def make_norm(config: TransformerConfig) -> nn.LayerNorm | nn.RMSNorm:
    """Every normalisation of the model: LayerNorm (the paper), or RMSNorm (Llama's: x / sqrt(mean(x²) + eps) times a
    weight, no mean taken off and no bias)."""
    if config.norm == "rms":
        return nn.RMSNorm(config.d_model, eps=config.layer_norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)


def make_attention(config: TransformerConfig, rotary: bool = False) -> MultiHeadAttention:
    return MultiHeadAttention(config.d_model, config.num_heads, config.dropout, config.num_kv_heads,
                              config.attention_bias, rotary)


class Residual(nn.Module):
    """x + sublayer(x) with the norm after the sum (post-LN, the paper) or before the sublayer (pre-LN)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm = make_norm(config)
        self.dropout = nn.Dropout(config.dropout)
        self.norm_first = config.norm_first

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.hook_resid_pre = HookPoint()  # (batch, src_len, d_model) residual stream entering the layer
        self.self_attn = make_attention(config)
        self.feed_forward = make_feed_forward(config)
        self.attn_residual = Residual(config)
        self.ff_residual = Residual(config)
        self.hook_resid_mid = HookPoint()  # (batch, src_len, d_model) after self-attention
        self.hook_resid_post = HookPoint()  # (batch, src_len, d_model) after the feed-forward network

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(self.attn_residual(x, lambda h: self.self_attn(h, h, src_mask)))
        return self.hook_resid_post(self.ff_residual(x, self.feed_forward))


class DecoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.hook_resid_pre = HookPoint()  # (batch, tgt_len, d_model) residual stream entering the layer
        # Parts are created in this order so that a seed initialises them as it always has. A decoder-only model
        # has no encoder to attend to, so no cross-attention.
        cross = config.cross_attention
        self.self_attn = make_attention(config, rotary=config.positional == "rotary")
        if cross:
            self.cross_attn = make_attention(config)
        self.feed_forward = make_feed_forward(config)
        self.self_attn_residual = Residual(config)
        if cross:
            self.cross_attn_residual = Residual(config)
        self.ff_residual = Residual(config)
        self.hook_resid_mid = HookPoint()  # (batch, tgt_len, d_model) after masked self-attention
        if cross:
            self.hook_resid_cross = HookPoint()  # (batch, tgt_len, d_model) after cross-attention
        self.hook_resid_post = HookPoint()  # (batch, tgt_len, d_model) after the feed-forward network

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor | None, tgt_mask: torch.Tensor, src_mask: torch.Tensor | None,
        self_cache: AttentionCache | None = None, cross_cache: AttentionCache | None = None,
        rotation: Rotation | None = None,
    ) -> torch.Tensor:
        """`memory` and `src_mask` are None in a decoder-only model; `rotation` turns self-attention's queries and
        keys where positions are rotary."""
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(self.self_attn_residual(
            x, lambda h: self.self_attn(h, h, tgt_mask, self_cache, rotation)))
        if memory is not None:
            x = self.hook_resid_cross(
                self.cross_attn_residual(x, lambda h: self.cross_attn(h, memory, src_mask, cross_cache))
            )
        return self.hook_resid_post(self.ff_residual(x, self.feed_forward))
