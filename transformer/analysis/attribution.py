"""Which source tokens does each output token come from? Eight answers side by side, for one input.

METHODS declares each method once (its function, whether it is signed, a note and a citation):
attribute() runs them, the app draws and describes them, the faithfulness command measures them.

Every method returns a tidy numpy array (output tokens x source tokens); row t explains the piece predicted at
decoder position t (teacher-forced on the decoded output). Rows are normalised as the method defines:
  attention_last / attention_mean  cross-attention weights, heads averaged, of the last layer / of all layers: rows
                                   sum to 1 by construction (softmax).
  value_norms    ‖Σ_h α^h_tj f^h(x_j)‖ of the last cross-attention layer (Kobayashi et al. 2020): how far source j
                 actually moves output t's residual stream, f^h(x) = (x W_v^h + b_v^h) W_o^h being the value vector
                 passed through head h's slice of W_o; rows divided by their sum.
  rollout        Abnar & Zuidema 2020 over encoder self-, decoder self- and cross-attention, each with its residual
                 (0.5·A + 0.5·I); the source block is divided by its row sum (the rest belongs to the decoder prefix).
  flow           the same graph as rollout, each weight a capacity; entry (t, j) is the maximum flow from output t
                 to source token j (scipy's max-flow); rows divided by their sum.
  alti_plus      Ferrando et al. 2022: each attention block (attention + residual + LayerNorm, split linearly per
                 token) gives token j's vector term T_ij of output y_i; its share is max(0, ‖y_i‖₁ - ‖y_i - T_ij‖₁),
                 rows normalised; the shares are rolled out over the same joint graph as rollout (the feed-forward
                 network mixes no tokens). The source block is divided by its row sum.
  input_x_gradient, integrated_gradients
                 e_j · ∂ log p(y_t)/∂e_j summed over the embedding dimensions, e_j = source token j's embedding
                 (before the positional encoding is added; baseline e = 0 keeps the positions); signed, rows divided
                 by the sum of absolute values. Integrated gradients integrate the gradient along 0 -> e
                 (Gauss-Legendre, as Captum does by default), so before normalising a row sums to
                 log p(y_t | e) - log p(y_t | 0).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import torch
from torch import nn

from ..model.capture import capture, patch
from ..model.model import Transformer
from ..model.record import AttentionRecord
from ..model.sites import Site


@dataclass
class Attribution:
    """Every method's (output tokens x source tokens) array for one input, with the labels to draw them."""

    methods: dict[str, np.ndarray]  # method name -> (tgt_len, src_len), rows normalised as in the module docstring
    prefix: dict[str, np.ndarray]  # rollout / flow / alti_plus onto the decoder input: (tgt_len, tgt_len)
    heads: dict[str, np.ndarray]  # "attention", "value_norms" -> (layers, heads, tgt_len, src_len), unnormalised
    src_tokens: list[str]
    tgt_tokens: list[str]  # decoder input pieces (<s> first)
    output_tokens: list[str]  # the piece each row predicts


# ----------------------------------------------------------------------------- attention and value norms

def cross_attention(record: AttentionRecord) -> np.ndarray:
    """(layers, heads, tgt_len, src_len) raw cross-attention weights of batch item 0."""
    return record.stack("decoder.cross_attn").numpy()


def head_value_vectors(attention: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """f^h(x_j) = (x_j W_v^h + b_v^h) W_o^h for every head and token: x (k_len, d_model) -> (heads, k_len, d_model).

    W_o's bias is left out: it is added once whatever the weights, so it belongs to no token."""
    heads, d_model = attention.num_heads, x.size(-1)
    values = attention.W_v(x).view(x.size(0), heads, d_model // heads)  # (k_len, heads, d_head)
    w_o = attention.W_o.weight.view(d_model, heads, d_model // heads)  # (d_model, heads, d_head): W_o^h = [:, h]
    return torch.einsum("khi,dhi->hkd", values, w_o)


def weighted_value_norms(weights: torch.Tensor, vectors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weights (heads, q_len, k_len), vectors f^h(x_j) (heads, k_len, d_model) -> per head ‖α^h_ij f^h(x_j)‖
    (heads, q_len, k_len) and per layer ‖Σ_h α^h_ij f^h(x_j)‖ (q_len, k_len)."""
    per_head = weights * vectors.norm(dim=-1)[:, None, :]
    layer = torch.einsum("hqk,hkd->qkd", weights, vectors).norm(dim=-1)
    return per_head, layer


def value_norms(model: Transformer, record: AttentionRecord) -> tuple[np.ndarray, np.ndarray]:
    """Cross-attention value norms of batch item 0: per head (layers, heads, tgt, src) and per layer (layers, tgt,
    src), unnormalised. Needs the record of a capture that included encoder.hook_memory."""
    memory = record.hooks["encoder.hook_memory"][0]  # (src_len, d_model)
    per_head, per_layer = [], []
    with torch.no_grad():
        for layer, weights in zip(model.decoder.layers, record.stack("decoder.cross_attn")):
            head, whole = weighted_value_norms(weights, head_value_vectors(layer.cross_attn, memory))
            per_head.append(head)
            per_layer.append(whole)
    return torch.stack(per_head).numpy(), torch.stack(per_layer).numpy()


# ----------------------------------------------------------------------------- rollout and flow

def _with_residual(attention: np.ndarray) -> np.ndarray:
    """0.5·A + 0.5·I, rows renormalised (a masked all-zero row becomes the identity row)."""
    mixed = 0.5 * attention + 0.5 * np.eye(*attention.shape)
    return mixed / mixed.sum(axis=1, keepdims=True)


def mixing_stages(record: AttentionRecord) -> list[np.ndarray]:
    """The residual-aware mixing matrices of every attention block, bottom first, over the joint token set
    [decoder input (tgt_len); source (src_len)]: stage[i, j] = share of node j (below) in node i (above).

    Encoder self-attention mixes source nodes; decoder self-attention mixes target nodes; cross-attention gives
    each target node half of itself and half of the encoder's output nodes (heads averaged everywhere)."""
    enc = record.stack("encoder.self_attn").mean(dim=1).numpy()  # (layers, src, src)
    dec = record.stack("decoder.self_attn").mean(dim=1).numpy()  # (layers, tgt, tgt)
    cross = record.stack("decoder.cross_attn").mean(dim=1).numpy()  # (layers, tgt, src)
    tgt_len, src_len = cross.shape[1:]
    source, target = slice(tgt_len, None), slice(0, tgt_len)
    stages = []
    for attention in enc:
        stage = np.eye(tgt_len + src_len)
        stage[source, source] = _with_residual(attention)
        stages.append(stage)
    for self_attention, cross_attention in zip(dec, cross):
        stage = np.eye(tgt_len + src_len)
        stage[target, target] = _with_residual(self_attention)
        stages.append(stage)
        stage = np.eye(tgt_len + src_len)
        stage[target, target] *= 0.5
        stage[target, source] = 0.5 * cross_attention
        stages.append(stage)
    return stages


def rollout(stages: list[np.ndarray]) -> np.ndarray:
    """Product of the stages, top one leftmost: (nodes, nodes); row i = shares of the input tokens in node i."""
    result = np.eye(stages[0].shape[0])
    for stage in stages:
        result = stage @ result
    return result


FLOW_RESOLUTION = 2**24  # scipy's max-flow takes integer capacities: weights in steps of 6e-8


def flow_graph(stages: list[np.ndarray]) -> scipy.sparse.csr_array:
    """The layered graph as a sparse capacity matrix over nodes level * n + token (level 0 = the input tokens,
    n = tokens per level): an edge from (level + 1, i) down to (level, j) of capacity stage[i, j] for each non-zero
    entry of the stage between them, in integer units of 1 / FLOW_RESOLUTION."""
    n, levels = stages[0].shape[0], len(stages) + 1
    rows, columns, capacities = [], [], []
    for level, stage in enumerate(stages):
        i, j = np.nonzero(stage)
        rows.append((level + 1) * n + i)
        columns.append(level * n + j)
        capacities.append(np.rint(stage[i, j] * FLOW_RESOLUTION).astype(np.int32))
    shape = (levels * n, levels * n)
    return scipy.sparse.csr_array((np.concatenate(capacities), (np.concatenate(rows), np.concatenate(columns))), shape)


def flow(stages: list[np.ndarray], rows, columns) -> np.ndarray:
    """Maximum flow from each top node in `rows` to each input node in `columns`: (len(rows), len(columns)).

    One max-flow problem per cell (scipy's Dinic, much faster than networkx's preflow-push on these graphs; the
    tests check it against networkx)."""
    graph, top = flow_graph(stages), len(stages) * stages[0].shape[0]
    result = np.zeros((len(rows), len(columns)))
    for a, i in enumerate(rows):
        for b, j in enumerate(columns):
            result[a, b] = scipy.sparse.csgraph.maximum_flow(graph, top + i, j, method="dinic").flow_value
    return result / FLOW_RESOLUTION


# ----------------------------------------------------------------------------- ALTI+

def token_contributions(output: torch.Tensor, terms: torch.Tensor) -> torch.Tensor:
    """ALTI's share of each term in an output: max(0, ‖y‖₁ - ‖y - T_j‖₁), rows normalised (a term that moves y
    away from itself counts 0). output (q_len, d_model), terms (q_len, k, d_model) -> (q_len, k)."""
    closeness = output.abs().sum(dim=-1, keepdim=True) - (output[:, None, :] - terms).abs().sum(dim=-1)
    shares = closeness.clamp(min=0)
    return shares / shares.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(shares.dtype).tiny)


def block_terms(residual: nn.Module, attention: nn.Module, x: torch.Tensor, weights: torch.Tensor,
                source: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One attention block of one sequence split into per-token terms: (terms, output).

    x (q_len, d_model): the residual stream entering the block; weights (heads, q_len, k_len). Self-attention
    (source None): terms (q_len, q_len, d_model), token i's own term holding the residual x_i as well. Cross-
    attention: values come from `source` (k_len, d_model) and terms are (q_len, 1 + k_len, d_model), the residual
    x_i first. Post-LN: LN(z) = Σ_j γ (T_j - mean T_j) / σ(z) + (what no token owns: β and the biases); pre-LN:
    the sum itself. The output is the block's real output, the terms plus that unowned part."""
    keys = residual.norm(x) if source is None and residual.norm_first else (x if source is None else source)
    moved = torch.einsum("hqk,hkd->qkd", weights, head_value_vectors(attention, keys))  # (q_len, k_len, d_model)
    if source is None:
        terms = moved.clone()
        own = torch.arange(x.size(0))
        terms[own, own] += x  # the residual x_i is token i's
    else:
        terms = torch.cat([x[:, None, :], moved], dim=1)
    total = terms.sum(dim=1) + attention.W_o.bias  # (q_len, d_model): the block's pre-norm sum
    if residual.norm_first:
        return terms, total
    norm = residual.norm
    scale = (total.var(dim=-1, unbiased=False, keepdim=True) + norm.eps).sqrt()[:, None, :]  # σ(z) per query
    return norm.weight * (terms - terms.mean(dim=-1, keepdim=True)) / scale, norm(total)


def alti_stages(model: Transformer, record: AttentionRecord) -> list[np.ndarray]:
    """ALTI+'s per-block contribution matrices over [decoder input; source], bottom first, laid out as
    mixing_stages lays out attention. Needs a capture of all hook points of batch item 0."""
    hooks = {name: value[0] for name, value in record.hooks.items()}  # batch item 0
    memory = hooks["encoder.hook_memory"]
    tgt_len, src_len = hooks["decoder.hook_out"].shape[0], memory.shape[0]
    source, target = slice(tgt_len, None), slice(0, tgt_len)
    stages = []
    with torch.no_grad():
        for i, layer in enumerate(model.encoder.layers):
            site = Site("encoder.self_attn", i)
            terms, output = block_terms(layer.attn_residual, layer.self_attn,
                                        hooks[f"{site.layer_name}.hook_resid_pre"], record[site][0])
            stage = np.eye(tgt_len + src_len)
            stage[source, source] = token_contributions(output, terms).numpy()
            stages.append(stage)
        for i, layer in enumerate(model.decoder.layers):
            site = Site("decoder.self_attn", i)
            terms, output = block_terms(layer.self_attn_residual, layer.self_attn,
                                        hooks[f"{site.layer_name}.hook_resid_pre"], record[site][0])
            stage = np.eye(tgt_len + src_len)
            stage[target, target] = token_contributions(output, terms).numpy()
            stages.append(stage)
            site = Site("decoder.cross_attn", i)
            terms, output = block_terms(layer.cross_attn_residual, layer.cross_attn,
                                        hooks[f"{site.layer_name}.hook_resid_mid"], record[site][0], memory)
            shares = token_contributions(output, terms).numpy()  # (tgt_len, 1 + src_len): own residual first
            stage = np.eye(tgt_len + src_len)
            stage[target, target] *= shares[:, :1]
            stage[target, source] = shares[:, 1:]
            stages.append(stage)
    return stages


# ----------------------------------------------------------------------------- gradients

def _memory(model: Transformer, src: torch.Tensor, token_embeddings: torch.Tensor) -> torch.Tensor:
    """The encoder's output (batch, src_len, d_model) with the source's token embeddings replaced by
    `token_embeddings` (batch, src_len, d_model); src (batch, src_len)."""
    positions = model.encoder.embed.positional.table()[: src.size(1)]  # (src_len, d_model)
    with patch(model, {"encoder.hook_embed": lambda _: token_embeddings + positions}):
        return model.encode(src)


def _log_prob_rows(model: Transformer, src: torch.Tensor, tgt: torch.Tensor, targets: torch.Tensor,
                   token_embeddings: torch.Tensor) -> torch.Tensor:
    """log p(targets[t]) at every decoder position, with the source's token embeddings replaced by
    `token_embeddings` (batch, src_len, d_model): (batch, tgt_len). src (1, src_len) and tgt (1, tgt_len). What the
    gradient methods differentiate, in one pass (the tests integrate it with Captum)."""
    batch = token_embeddings.size(0)
    src = src.expand(batch, -1)
    log_probs = model.decode(tgt.expand(batch, -1), _memory(model, src, token_embeddings), src).log_softmax(dim=-1)
    return log_probs[:, torch.arange(tgt.size(1)), targets]  # (batch, tgt_len)


def token_embeddings(model: Transformer, src: torch.Tensor) -> torch.Tensor:
    """(1, src_len, d_model) the source's token embeddings as the encoder scales them, positions not added."""
    return (model.encoder.embed.token(src) * model.encoder.embed.scale).detach()


ROWS_PER_PASS = 8  # output rows whose backward passes share one decoder pass cut after the last of them


def _gradients(model, src, tgt, targets, points: torch.Tensor, rows: list[int] | None) -> torch.Tensor:
    """∂ log p(y_t)/∂e at each point (points, src_len, d_model), for each t in `rows` (ascending; None: every row):
    (len(rows), points, src_len, d_model).

    One backward pass per output row. The decoder is causal, so row t needs decoder positions up to t only: rows go
    in blocks of ROWS_PER_PASS, each over a decoder pass cut after its last row, with the output projection of the
    positions from its first row on. At 63 rows that is about half the work of backward passes through the whole
    decoder; the encoder runs once for all."""
    rows = list(range(tgt.size(1))) if rows is None else list(rows)
    if rows != sorted(set(rows)):  # each block runs from its first row to its last
        raise ValueError(f"rows must be distinct and ascending, got {rows!r:.60}")
    points = points.detach().requires_grad_(True)
    batch = points.size(0)
    src = src.expand(batch, -1)
    memory = _memory(model, src, points)  # (points, src_len, d_model)
    grads = []
    for first in range(0, len(rows), ROWS_PER_PASS):
        block = rows[first: first + ROWS_PER_PASS]
        start, stop = block[0], block[-1] + 1
        logits = model.decode(tgt[:, :stop].expand(batch, -1), memory, src, positions=slice(start, None))
        log_probs = logits.log_softmax(dim=-1)[:, [row - start for row in block], targets[block]]  # (points, block)
        grads += [torch.autograd.grad(log_probs[:, i].sum(), points, retain_graph=True)[0] for i in range(len(block))]
    return torch.stack(grads)


def input_x_gradient(model: Transformer, src: torch.Tensor, tgt: torch.Tensor, targets: torch.Tensor,
                     rows: list[int] | None = None) -> np.ndarray:
    """e_j · ∂ log p(y_t)/∂e_j, summed over dimensions, for t in `rows` (ascending; None: every row):
    (len(rows), src_len), unnormalised."""
    embeddings = token_embeddings(model, src)
    grads = _gradients(model, src, tgt, targets, embeddings, rows)[:, 0]  # (rows, src_len, d_model)
    return (grads * embeddings[0]).sum(dim=-1).numpy()


def integrated_gradients(model: Transformer, src: torch.Tensor, tgt: torch.Tensor, targets: torch.Tensor,
                         rows: list[int] | None = None, steps: int = 32) -> np.ndarray:
    """(e_j - 0) · ∫₀¹ ∂ log p(y_t)/∂e_j(α e) dα summed over dimensions, for t in `rows` (ascending; None: every
    row): (len(rows), src_len), unnormalised.

    The integral is a `steps`-point Gauss-Legendre rule on [0, 1], all points in one batched pass."""
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    alphas = torch.tensor((nodes + 1) / 2, dtype=torch.float32)  # (steps,) from [-1, 1] to [0, 1]
    weights = torch.tensor(weights / 2, dtype=torch.float32)
    embeddings = token_embeddings(model, src)
    grads = _gradients(model, src, tgt, targets, alphas[:, None, None] * embeddings, rows)  # (rows, steps, src, d)
    average = torch.einsum("s,tsjd->tjd", weights, grads)  # (rows, src_len, d_model)
    return (average * embeddings[0]).sum(dim=-1).numpy()


def contrastive(model: Transformer, src: torch.Tensor, tgt: torch.Tensor, targets: torch.Tensor,
                foils: torch.Tensor, rows: list[int] | None = None, method: str = "integrated_gradients",
                steps: int = 32) -> np.ndarray:
    """Contrastive attribution (Yin & Neubig 2022): how much each source token moves log p(target_t) -
    log p(foil_t), both after the same decoder input `tgt`, for t in `rows` (ascending; None: every row):
    (len(rows), src_len), unnormalised. method: "input_x_gradient" or "integrated_gradients".

    Both methods are linear in the function they differentiate, so the difference's attribution is the target's
    minus the foil's; with integrated gradients a row sums to the change of the difference from a zero embedding.
    Rows where foil and target agree are exactly 0."""
    if method == "input_x_gradient":
        return (input_x_gradient(model, src, tgt, targets, rows) - input_x_gradient(model, src, tgt, foils, rows))
    if method == "integrated_gradients":
        return (integrated_gradients(model, src, tgt, targets, rows, steps)
                - integrated_gradients(model, src, tgt, foils, rows, steps))
    raise ValueError(f"method must be 'input_x_gradient' or 'integrated_gradients', got {method!r:.40}")


# ----------------------------------------------------------------------------- one input, every method

@dataclass
class Inputs:
    """One input to attribute, what every method's function reads; what several methods share (the attention record
    of one forward pass, the mixing stages) is computed on first use."""

    model: Transformer
    src: torch.Tensor  # (1, src_len) encoder input, EOS last
    tgt: torch.Tensor  # (1, tgt_len) decoder input, BOS first
    targets: torch.Tensor  # (tgt_len,) the piece each decoder position predicts
    rows: list[int]  # the decoder positions to explain, ascending
    with_prefix: bool  # whether the decoder-prefix block of a graph method is wanted
    ig_steps: int  # integration points of integrated gradients

    @cached_property
    def record(self) -> AttentionRecord:
        """Every hook point of one forward pass (batch item 0 is the input)."""
        with torch.no_grad(), capture(self.model) as record:
            self.model(self.src, self.tgt)
        return record

    @cached_property
    def stages(self) -> list[np.ndarray]:
        return mixing_stages(self.record)


def _attention_last(inputs: Inputs) -> np.ndarray:
    return cross_attention(inputs.record)[-1][:, inputs.rows].mean(axis=0)  # heads averaged: (rows, src_len)


def _attention_mean(inputs: Inputs) -> np.ndarray:
    return cross_attention(inputs.record)[:, :, inputs.rows].mean(axis=(0, 1))  # layers and heads averaged


def _value_norms(inputs: Inputs) -> np.ndarray:
    return value_norms(inputs.model, inputs.record)[1][-1][inputs.rows]  # the last layer's: (rows, src_len)


def _rollout(inputs: Inputs) -> np.ndarray:
    return rollout(inputs.stages)[inputs.rows]  # (rows, tgt_len + src_len)


def _flow(inputs: Inputs) -> np.ndarray:
    """Flow over the joint graph; without the prefix, its columns (a max-flow per cell) are left 0."""
    tgt_len, nodes = inputs.tgt.size(1), inputs.stages[0].shape[0]
    first = 0 if inputs.with_prefix else tgt_len
    flowed = np.zeros((len(inputs.rows), nodes))
    flowed[:, first:] = flow(inputs.stages, inputs.rows, range(first, nodes))
    return flowed


def _alti_plus(inputs: Inputs) -> np.ndarray:
    return rollout(alti_stages(inputs.model, inputs.record))[inputs.rows]  # (rows, tgt_len + src_len)


def _input_x_gradient(inputs: Inputs) -> np.ndarray:
    return input_x_gradient(inputs.model, inputs.src, inputs.tgt, inputs.targets, inputs.rows)


def _integrated_gradients(inputs: Inputs) -> np.ndarray:
    return integrated_gradients(inputs.model, inputs.src, inputs.tgt, inputs.targets, inputs.rows, inputs.ig_steps)


# ----------------------------------------------------------------------------- the registry

@dataclass(frozen=True)
class Method:
    """One attribution method, declared once: attribute() runs it, the app draws and describes it, the faithfulness
    command measures it."""

    name: str
    function: Callable[[Inputs], np.ndarray]  # (rows, src_len), or (rows, tgt_len + src_len) if graph; unnormalised
    signed: bool  # values of either sign: rows divided by their sum of |values|, drawn on a diverging scale
    note: str  # what it is, in a sentence
    citation: str  # where it comes from
    graph: bool = False  # columns are the joint graph [decoder input; source]: the source block is the method's
    # rows and the decoder-input block its `prefix`, each divided by its row sum


METHODS: dict[str, Method] = {method.name: method for method in (
    Method("attention_last", _attention_last, False, "cross-attention weights of the last decoder layer, heads "
           "averaged.", "Bahdanau et al. 2015"),
    Method("attention_mean", _attention_mean, False, "cross-attention weights averaged over every layer and head.",
           "Bahdanau et al. 2015"),
    Method("value_norms", _value_norms, False, "‖Σ α·f(x)‖ of the last cross-attention layer: how far each source "
           "token's weighted value vector actually moves the output, not just how much weight it gets.",
           "Kobayashi et al. 2020"),
    Method("rollout", _rollout, False, "attention multiplied through every layer of all three kinds, the residual "
           "counted as half.", "Abnar & Zuidema 2020", graph=True),
    Method("flow", _flow, False, "the same graph as rollout with weights as capacities: the maximum flow from the "
           "output to each source token.", "Abnar & Zuidema 2020", graph=True),
    Method("alti_plus", _alti_plus, False, "each token's share of every attention block's output vector (attention, "
           "residual and norm), rolled out over the layers.", "Ferrando et al. 2022", graph=True),
    Method("input_x_gradient", _input_x_gradient, True, "embedding × gradient of the output's log-probability: a "
           "one-point, signed local estimate.", "Shrikumar et al. 2016"),
    Method("integrated_gradients", _integrated_gradients, True, "the gradient integrated from a zero embedding to "
           "the real one; signed, and its row sums to the change of the log-probability.", "Sundararajan et al. 2017"),
)}


def normalise_rows(matrix: np.ndarray, signed: bool = False) -> np.ndarray:
    """Rows divided by their sum (by the sum of absolute values if `signed`); an all-zero row stays 0."""
    total = np.abs(matrix).sum(axis=1, keepdims=True) if signed else matrix.sum(axis=1, keepdims=True)
    return matrix / np.where(total > 0, total, 1.0)


def attribute(model: Transformer, src_ids: list[int], tgt_ids: list[int], output_ids: list[int], *,
              rows: Sequence[int] | None = None, with_flow: bool = True, with_prefix: bool = True, ig_steps: int = 32,
              ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every method of METHODS for one input: (methods, prefix), method name -> (rows, src_len) / (rows, tgt_len).

    src_ids: encoder input (ending with EOS); tgt_ids: decoder input (BOS first); output_ids: the piece each decoder
    position predicts (same length as tgt_ids). `rows`: the decoder positions to explain (all by default); the
    gradient methods, whose cost grows with every row, then run those rows' backward passes only.
    `with_flow=False` skips flow, the slow one (a max-flow per cell); `with_prefix=False` returns no prefix and
    spares flow the prefix's columns (a third of the cells at most)."""
    rows = list(range(len(tgt_ids))) if rows is None else sorted(set(rows))
    if not rows or not 0 <= rows[0] <= rows[-1] < len(tgt_ids):
        raise ValueError(f"rows must be decoder positions from 0 to {len(tgt_ids) - 1}, got {rows!r:.60}")
    inputs = Inputs(model, torch.tensor([src_ids]), torch.tensor([tgt_ids]), torch.tensor(output_ids), rows,
                    with_prefix, ig_steps)
    methods, prefix = {}, {}
    for method in METHODS.values():
        if method.name == "flow" and not with_flow:
            continue
        matrix = method.function(inputs)
        if method.graph:
            methods[method.name] = normalise_rows(matrix[:, len(tgt_ids):])
            if with_prefix:
                prefix[method.name] = normalise_rows(matrix[:, :len(tgt_ids)])
        else:
            methods[method.name] = normalise_rows(matrix, signed=method.signed)
    return methods, prefix


@torch.no_grad()
def per_head(model: Transformer, src_ids: list[int], tgt_ids: list[int]) -> dict[str, np.ndarray]:
    """Cross-attention weights and value norms ‖α^h f^h(x)‖ of every head: (layers, heads, tgt_len, src_len) each."""
    with capture(model) as record:
        model(torch.tensor([src_ids]), torch.tensor([tgt_ids]))
    return {"attention": cross_attention(record), "value_norms": value_norms(model, record)[0]}


def explain(checkpoint, text: str, *, with_flow: bool = True, ig_steps: int = 32) -> Attribution:
    """Translate `text` with a loaded Checkpoint (greedy) and attribute every output piece by every method."""
    translation = checkpoint.translate(text)
    methods, prefix = attribute(checkpoint.model, translation.src_ids, translation.tgt_ids, translation.output_ids,
                                with_flow=with_flow, ig_steps=ig_steps)
    heads = per_head(checkpoint.model, translation.src_ids, translation.tgt_ids)
    return Attribution(methods, prefix, heads, translation.src_tokens, translation.tgt_tokens,
                       translation.output_tokens)
