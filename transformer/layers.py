"""The building blocks of each stack: feed-forward network, residual connection, encoder and decoder layers."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention
from .cache import AttentionCache
from .config import TransformerConfig
from .hooks import HookPoint

ACTIVATION_FUNCTIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu,
                        "gelu_new": lambda x: F.gelu(x, approximate="tanh")}


class FeedForward(nn.Module):
    """Position-wise FFN(x) = W_2 · act(W_1 x + b_1) + b_2."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.linear1 = nn.Linear(config.d_model, config.d_ff)
        self.linear2 = nn.Linear(config.d_ff, config.d_model)
        self.activation = ACTIVATION_FUNCTIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)
        self.hook_mlp_post = HookPoint()  # (batch, length, d_ff) the hidden neurons' activations

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.hook_mlp_post(self.activation(self.linear1(x)))))


class Residual(nn.Module):
    """x + sublayer(x) with LayerNorm after the sum (post-LN, the paper) or before the sublayer (pre-LN)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
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
        self.self_attn = MultiHeadAttention(config.d_model, config.num_heads, config.dropout)
        self.feed_forward = FeedForward(config)
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
        self.self_attn = MultiHeadAttention(config.d_model, config.num_heads, config.dropout)
        if cross:
            self.cross_attn = MultiHeadAttention(config.d_model, config.num_heads, config.dropout)
        self.feed_forward = FeedForward(config)
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
    ) -> torch.Tensor:
        """`memory` and `src_mask` are None in a decoder-only model."""
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(self.self_attn_residual(x, lambda h: self.self_attn(h, h, tgt_mask, self_cache)))
        if memory is not None:
            x = self.hook_resid_cross(
                self.cross_attn_residual(x, lambda h: self.cross_attn(h, memory, src_mask, cross_cache))
            )
        return self.hook_resid_post(self.ff_residual(x, self.feed_forward))
