"""Scaled dot-product attention as a pure function, and the multi-head attention module around it."""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .cache import AttentionCache
from .hooks import HookPoint, is_watched
from .positional import rotate

Identity = Callable[[torch.Tensor], torch.Tensor]
Rotation = tuple[torch.Tensor, torch.Tensor]  # rotary positions' (cos, sin), each (length, d_head)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def scaled_dot_product(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scores_hook: Identity = _identity,
    weights_hook: Identity = _identity,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ / sqrt(d_head)) v, returning (output, weights).

    q: (batch, heads, q_len, d_head); k, v: (batch, kv_heads, k_len, d_head), where kv_heads divides heads: query head
    h reads key/value head h // (heads / kv_heads) (grouped-query attention; kv_heads = heads is multi-head
    attention). mask: bool, True = may attend, broadcastable to (batch, heads, q_len, k_len). Blocked keys get exactly
    0 weight; a row with every key blocked gets all-zero weights and a zero output (see masks.py). The hooks see the
    raw scores and the weights (before dropout) and may replace them; they are identities unless the caller wants to
    look.
    """
    batch, heads, q_len, d_head = q.shape
    kv_heads, k_len = k.shape[1:3]

    def grouped(x: torch.Tensor) -> torch.Tensor:
        """(batch, heads, q_len, n) -> (batch, kv_heads, group * q_len, n): the query heads of one key/value head
        side by side, so that each key/value head is read once, never copied per query head (a view when not
        grouped)."""
        return x.reshape(batch, kv_heads, -1, x.size(-1))

    # Every step below is a pass over (batch, heads, q_len, k_len), so there are as few as possible, and only one new
    # tensor of that size besides the scores: the capture keeps both, so each costs fresh, page-faulted memory (at
    # 512 tokens allocating one costs as much as the softmax). q is scaled before the product (it is smaller than the
    # scores); the masked copy of the scores is then softmaxed and zeroed where masked in place.
    scores = (grouped(q / math.sqrt(d_head)) @ k.transpose(-2, -1)).view(batch, heads, q_len, k_len)
    scores = scores_hook(scores)  # (batch, heads, q_len, k_len)
    if mask is None:
        weights = scores.softmax(dim=-1)
    else:
        weights = torch.where(mask, scores, torch.finfo(scores.dtype).min)
        if weights.requires_grad:  # autograd keeps the softmax's output for its backward: nothing in place
            weights = torch.where(mask, weights.softmax(dim=-1), 0.0)
        else:
            torch.softmax(weights, dim=-1, out=weights)
            weights.masked_fill_(~mask, 0.0)
    weights = weights_hook(weights)
    output = grouped(F.dropout(weights, dropout_p)) @ v  # (batch, kv_heads, group * q_len, d_head)
    return output.view(batch, heads, q_len, d_head), weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention with the paper's W_q, W_k, W_v, W_o projections; with `num_kv_heads` below `num_heads`,
    grouped-query attention (fewer key/value heads, each shared by a group of query heads: a smaller decoding cache);
    with `rotary`, queries and keys turned by their positions (`rotation` in forward). `bias`: which projections have
    biases, "all", "qkv" (Qwen2) or "none" (Llama).

    Uses the fused `F.scaled_dot_product_attention` unless the current call captures or edits this module's scores,
    mask or pattern; then it runs `scaled_dot_product` above, which gives the same output (within float rounding).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float, num_kv_heads: int = 0, bias: str = "all",
                 rotary: bool = False) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        self.dropout = dropout
        d_kv = d_model // num_heads * self.num_kv_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias != "none")
        self.W_k = nn.Linear(d_model, d_kv, bias=bias != "none")
        self.W_v = nn.Linear(d_model, d_kv, bias=bias != "none")
        self.W_o = nn.Linear(d_model, d_model, bias=bias == "all")
        if rotary:  # what the rotation turns, for comparing a head's q·k with and without positions
            self.hook_q_unrotated = HookPoint()  # (batch, heads, q_len, d_head) W_q x_q split by head, not yet turned
            self.hook_k_unrotated = HookPoint()  # (batch, kv_heads, new_len, d_head) this call's new keys, not turned
        self.hook_q = HookPoint()  # (batch, heads, q_len, d_head) each head's queries (turned, with rotary positions)
        self.hook_k = HookPoint()  # (batch, kv_heads, k_len, d_head) keys (with a cache: every step's so far)
        self.hook_v = HookPoint()  # (batch, kv_heads, k_len, d_head) values
        self.hook_scores = HookPoint()  # (batch, heads, q_len, k_len) q·k/sqrt(d_head), before masking
        self.hook_mask = HookPoint()  # (batch, 1, q_len, k_len) bool, True = may attend
        self.hook_pattern = HookPoint()  # (batch, heads, q_len, k_len) softmax weights, 0 on masked keys
        self.hook_z = HookPoint()  # (batch, heads, q_len, d_head) each head's output, before W_o; ablation edits it
        # (batch, q_len, heads, d_model) each head's z through its own d_head columns of W_o: the heads' results plus
        # W_o's bias are the block's output. Computed only when captured or edited (heads x the output's size).
        self.hook_result = HookPoint()

    @staticmethod
    def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
        batch, length, width = x.shape
        # (batch, length, heads * d_head) -> (batch, heads, length, d_head)
        return x.view(batch, length, heads, width // heads).transpose(1, 2)

    def _keys_values(self, x_kv: torch.Tensor, rotation: Rotation | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of x_kv, (batch, kv_heads, length, d_head) each, the keys turned by `rotation`."""
        k = self._split_heads(self.W_k(x_kv), self.num_kv_heads)
        if rotation is not None:
            k = rotate(self.hook_k_unrotated(k), *rotation)
        return k, self._split_heads(self.W_v(x_kv), self.num_kv_heads)

    def forward(
        self, x_q: torch.Tensor, x_kv: torch.Tensor, mask: torch.Tensor | None = None,
        cache: AttentionCache | None = None, rotation: Rotation | None = None,
    ) -> torch.Tensor:
        """x_q: (batch, q_len, d_model) queries; x_kv: (batch, k_len, d_model) keys and values; mask as in masks.py.
        With a `cache`, keys and values of earlier decoding steps are reused (see cache.py), kept turned. `rotation`:
        rotary positions' (cos, sin) of the queries' positions, which are the new keys' (self-attention)."""
        batch, q_len, d_model = x_q.shape
        q = self._split_heads(self.W_q(x_q), self.num_heads)  # (batch, heads, q_len, d_head)
        if rotation is not None:
            q = rotate(self.hook_q_unrotated(q), *rotation)
        q = self.hook_q(q)
        project = partial(self._keys_values, x_kv, rotation)
        k, v = project() if cache is None else cache.keys_values(project)  # (batch, kv_heads, k_len, d_head)
        k, v = self.hook_k(k), self.hook_v(v)
        dropout_p = self.dropout if self.training else 0.0
        # A mask that blocks nothing (no padding; a cached decoding step's causal row) only costs passes.
        blocks = mask is not None and not bool(mask.all())
        if is_watched(self.hook_scores, self.hook_mask, self.hook_pattern):
            if mask is not None:
                mask = self.hook_mask(mask.expand(batch, 1, q_len, k.size(2)))  # (batch, 1, q_len, k_len)
            z, _ = scaled_dot_product(q, k, v, mask if blocks else None, dropout_p, self.hook_scores, self.hook_pattern)
        else:
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if blocks else None, dropout_p=dropout_p,
                                               enable_gqa=self.num_kv_heads != self.num_heads)
        z = self.hook_z(z)  # (batch, heads, q_len, d_head)
        if is_watched(self.hook_result):
            w_o = self.W_o.weight.view(d_model, self.num_heads, -1)  # (d_model, heads, d_head): columns by head
            result = self.hook_result(torch.einsum("bhqd,mhd->bqhm", z, w_o))  # (batch, q_len, heads, d_model)
            total = result.sum(dim=2)  # (batch, q_len, d_model)
            return total if self.W_o.bias is None else total + self.W_o.bias
        return self.W_o(z.transpose(1, 2).reshape(batch, q_len, d_model))
