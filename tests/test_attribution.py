"""Attribution methods against hand-computed values and independent implementations (networkx, Captum)."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch
from captum.attr import IntegratedGradients

from helpers import random_batch, small_model
from transformer import capture, patch
from transformer.analysis.attribution import (
    METHODS,
    ROWS_PER_PASS,
    Method,
    _log_prob_rows,
    alti_stages,
    attribute,
    block_terms,
    flow,
    head_value_vectors,
    input_x_gradient,
    integrated_gradients,
    mixing_stages,
    rollout,
    token_contributions,
    token_embeddings,
    weighted_value_norms,
)
from transformer.model.attention import MultiHeadAttention
from viz.rollout import decoder_source_rollout, encoder_rollout


def test_value_norms_follow_the_papers_formula_on_two_tokens():
    # One head, d_model 2: f(x) = (x W_v + b_v) W_o. Raw attention prefers token 0 (0.8 vs 0.2), but token 1's value
    # vector is 5 times longer, so ‖α f(x)‖ prefers token 1: 0.8·2 = 1.6 against 0.2·10 = 2.0.
    attention = MultiHeadAttention(d_model=2, num_heads=1, dropout=0.0)
    with torch.no_grad():
        attention.W_v.weight.copy_(torch.eye(2))
        attention.W_v.bias.zero_()
        attention.W_o.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 1.0]]))
        attention.W_o.bias.fill_(7.0)  # belongs to no token: must not count
    x = torch.tensor([[1.0, 0.0], [0.0, 10.0]])
    vectors = head_value_vectors(attention, x)
    assert torch.allclose(vectors, torch.tensor([[[2.0, 0.0], [0.0, 10.0]]]))
    per_head, layer = weighted_value_norms(torch.tensor([[[0.8, 0.2]]]), vectors)
    assert torch.allclose(per_head, torch.tensor([[[1.6, 2.0]]]))
    assert torch.allclose(layer, torch.tensor([[1.6, 2.0]]))  # one head: the layer norm is the head's


def test_layer_value_norm_adds_heads_before_the_norm():
    weights = torch.tensor([[[1.0]], [[1.0]]])  # two heads, one query, one key
    vectors = torch.tensor([[[3.0, 0.0]], [[0.0, 4.0]]])  # (heads, keys, d_model)
    per_head, layer = weighted_value_norms(weights, vectors)
    assert per_head.flatten().tolist() == [3.0, 4.0] and layer.item() == pytest.approx(5.0)


def test_flow_on_a_tiny_graph_by_hand():
    # Bottom stage A1 = [[1, 0], [.5, .5]], top A2 = [[.5, .5], [0, 1]]. From top node 0: to input 0 along
    # 0 -> 0 -> 0 (min(.5, 1)) and 0 -> 1 -> 0 (min(.5, .5)): 1.0; to input 1 only along 0 -> 1 -> 1: 0.5.
    # Top node 1 reaches the inputs only through middle node 1 (capacity 1), whose edges carry .5 each.
    # Rollout (A2 A1) would say 0.75 and 0.25 for top node 0.
    stages = [np.array([[1.0, 0.0], [0.5, 0.5]]), np.array([[0.5, 0.5], [0.0, 1.0]])]
    assert np.allclose(flow(stages, [0, 1], [0, 1]), [[1.0, 0.5], [0.5, 0.5]], atol=1e-6)
    assert np.allclose(rollout(stages), [[0.75, 0.25], [0.5, 0.5]])


def _record(model, src, tgt):
    with torch.no_grad(), capture(model) as record:
        model(src, tgt)
    return record


def test_flow_matches_networkx_on_a_model_graph():
    model = small_model()
    src, tgt = random_batch(model.config, [5], [4])
    stages = mixing_stages(_record(model, src, tgt))
    graph = nx.DiGraph()
    for level, stage in enumerate(stages):
        for i, j in zip(*np.nonzero(stage)):
            graph.add_edge((level + 1, i), (level, j), capacity=stage[i, j])
    top = len(stages)
    expected = [[nx.maximum_flow_value(graph, (top, i), (0, j)) for j in range(9)] for i in range(4)]
    assert np.allclose(flow(stages, range(4), range(9)), expected, atol=1e-5)


def test_joint_rollout_source_block_equals_the_viz_rollout():
    model = small_model()
    src, tgt = random_batch(model.config, [6], [5])
    record = _record(model, src, tgt)
    joint = rollout(mixing_stages(record))[:5]  # (tgt, tgt + src)
    expected = decoder_source_rollout(record.stack("decoder.self_attn").numpy(),
                                      record.stack("decoder.cross_attn").numpy(),
                                      encoder_rollout(record.stack("encoder.self_attn").numpy()))
    assert np.allclose(joint[:, 5:], expected)
    assert np.allclose(joint.sum(axis=1), 1.0)


@pytest.mark.slow  # captum's integrated gradients beside ours (tens of seconds)
def test_integrated_gradients_match_captum():
    # 2.5 blocks of rows: each block's backward passes run through a decoder pass cut after its last row, and a
    # block cut one position short, or rows given another block's targets, would differ from Captum's full passes.
    rows = 2 * ROWS_PER_PASS + ROWS_PER_PASS // 2
    model = small_model()
    src, tgt = random_batch(model.config, [6], [rows])
    targets = torch.randint(4, model.config.tgt_vocab_size, (rows,), generator=torch.Generator().manual_seed(2))
    ours = integrated_gradients(model, src, tgt, targets, steps=16)
    embeddings = token_embeddings(model, src)
    for t in range(rows):
        captum = IntegratedGradients(lambda e, t=t: _log_prob_rows(model, src, tgt, targets, e)[:, t])
        theirs = captum.attribute(embeddings, baselines=0.0, n_steps=16, method="gausslegendre").sum(dim=-1)[0]
        assert np.allclose(ours[t], theirs.detach().numpy(), atol=1e-5)
    # Some rows only (the Attribution view's chosen piece): one block from row 1 to the last, rows picked out of it.
    some = [1, ROWS_PER_PASS + 1, ROWS_PER_PASS + 2, rows - 1]
    assert np.allclose(integrated_gradients(model, src, tgt, targets, some, steps=16), ours[some], atol=1e-5)
    with pytest.raises(ValueError, match="ascending"):  # a block runs from its first row to its last
        integrated_gradients(model, src, tgt, targets, [3, 1], steps=16)


def test_integrated_gradients_complete_and_input_x_gradient_is_one_point():
    model = small_model()
    src, tgt = random_batch(model.config, [6], [5])
    targets = torch.tensor([5, 9, 11, 7, 3])
    embeddings = token_embeddings(model, src)
    with torch.no_grad():
        gap = (_log_prob_rows(model, src, tgt, targets, embeddings)
               - _log_prob_rows(model, src, tgt, targets, torch.zeros_like(embeddings)))[0]
    # Completeness, up to the quadrature error at the ReLU kinks along the path.
    assert np.allclose(integrated_gradients(model, src, tgt, targets, steps=64).sum(axis=1), gap.numpy(), atol=2e-2)
    # Input x gradient by finite differences along e: d/ds log p(s·e) at s = 1.
    step = 1e-3
    with torch.no_grad():
        slope = (_log_prob_rows(model, src, tgt, targets, embeddings * (1 + step))
                 - _log_prob_rows(model, src, tgt, targets, embeddings * (1 - step)))[0] / (2 * step)
    assert np.allclose(input_x_gradient(model, src, tgt, targets).sum(axis=1), slope.numpy(), atol=1e-2)


def test_attribute_rows_are_normalised_as_documented():
    model = small_model()
    src, tgt = random_batch(model.config, [6], [5])
    methods, prefix = attribute(model, src[0].tolist(), tgt[0].tolist(), [5, 9, 11, 7, 3], ig_steps=8)
    assert list(methods) == list(METHODS)
    for name, matrix in methods.items():
        assert matrix.shape == (5, 6)
        total = np.abs(matrix).sum(axis=1)
        assert np.allclose(total, 1.0, atol=1e-5), name
    assert prefix["flow"].shape == (5, 5)
    without, no_prefix = attribute(model, src[0].tolist(), tgt[0].tolist(), [5, 9, 11, 7, 3], ig_steps=8,
                                   with_prefix=False)  # flow over the source's columns only
    assert no_prefix == {} and all(np.allclose(without[name], methods[name], atol=1e-6) for name in METHODS)
    some, some_prefix = attribute(model, src[0].tolist(), tgt[0].tolist(), [5, 9, 11, 7, 3], rows=[3, 1], ig_steps=8)
    for name in METHODS:  # the rows asked for, in ascending order, as the whole table has them
        assert np.allclose(some[name], methods[name][[1, 3]], atol=1e-5), name
    assert all(np.allclose(some_prefix[name], prefix[name][[1, 3]], atol=1e-5) for name in prefix)
    for rows in ([], [5], [-1]):
        with pytest.raises(ValueError, match="decoder positions from 0 to 4"):
            attribute(model, src[0].tolist(), tgt[0].tolist(), [5, 9, 11, 7, 3], rows=rows, ig_steps=8)


def test_a_declared_method_is_attributed_normalised_as_declared(monkeypatch):
    """Adding a method is one declaration plus its function: attribute() runs it on the rows asked for and divides
    each row as its declaration says (signed: by the sum of |values|)."""
    def toy(inputs):  # the distance of each source token from the explained row's position, negated on odd rows
        src_len = inputs.src.size(1)
        return np.array([[(j - row) * (-1) ** row for j in range(src_len)] for row in inputs.rows], dtype=float)

    monkeypatch.setitem(METHODS, "toy", Method("toy", toy, signed=True, note="a test's method.", citation="none"))
    model = small_model()
    src, tgt = random_batch(model.config, [6], [5])
    methods, _ = attribute(model, src[0].tolist(), tgt[0].tolist(), [5, 9, 11, 7, 3], rows=[1, 3], ig_steps=4)
    assert list(methods)[-1] == "toy"
    raw = np.array([[1, 0, -1, -2, -3, -4], [3, 2, 1, 0, -1, -2]])  # rows 1 and 3 by hand
    np.testing.assert_allclose(methods["toy"], raw / np.abs(raw).sum(axis=1, keepdims=True))
    assert {name for name, method in METHODS.items() if method.signed} == {"input_x_gradient", "integrated_gradients",
                                                                          "toy"}


def test_patch_feeds_embeddings_in_without_changing_a_plain_run():
    model = small_model()
    src, tgt = random_batch(model.config, [6], [5])
    with torch.no_grad():
        plain = model(src, tgt)
        embeddings = token_embeddings(model, src)
        positions = model.encoder.embed.positional.table()[:6]
        with patch(model, {"encoder.hook_embed": lambda _: embeddings + positions}):
            fed = model(src, tgt)
    assert torch.allclose(plain, fed, atol=1e-6)


def test_alti_contributions_by_hand():
    # y = (2, 0). T_0 = (2, 0) is y itself: share ‖y‖₁ - 0 = 2. T_1 = (0, 1): 2 - ‖(2, -1)‖₁ = -1 -> 0.
    # T_2 = (1, 0): 2 - 1 = 1. Normalised: 2/3, 0, 1/3.
    shares = token_contributions(torch.tensor([[2.0, 0.0]]), torch.tensor([[[2.0, 0.0], [0.0, 1.0], [1.0, 0.0]]]))
    assert torch.allclose(shares, torch.tensor([[2 / 3, 0.0, 1 / 3]]))


@pytest.mark.parametrize("norm_first", [False, True])
def test_alti_block_terms_add_up_to_the_captured_block_output(norm_first):
    # The split is exact: the terms plus what no token owns (β + γ·(b - mean b)/σ(z) after a LayerNorm, b before
    # one) rebuild the residual stream the model carries after the block. σ(z) comes from the module's own forward.
    model = small_model(norm_first=norm_first)
    src, tgt = random_batch(model.config, [6], [5])  # no padding: the blocks below need no mask
    record = _record(model, src, tgt)
    hooks = {name: value[0] for name, value in record.hooks.items()}
    encoder, decoder = model.encoder.layers[1], model.decoder.layers[1]
    memory = hooks["encoder.hook_memory"]
    blocks = [
        (encoder.attn_residual, encoder.self_attn, hooks["encoder.layers.1.hook_resid_pre"], None,
         record["encoder.layers.1.self_attn"][0], hooks["encoder.layers.1.hook_resid_mid"]),
        (decoder.cross_attn_residual, decoder.cross_attn, hooks["decoder.layers.1.hook_resid_mid"], memory,
         record["decoder.layers.1.cross_attn"][0], hooks["decoder.layers.1.hook_resid_cross"]),
    ]
    for residual, attention, x, source, weights, captured in blocks:
        with torch.no_grad():
            terms, output = block_terms(residual, attention, x, weights, source)
            bias = attention.W_o.bias
            if norm_first:
                rebuilt = terms.sum(dim=1) + bias
            else:
                z = x + attention(x[None], (x if source is None else source)[None])[0]  # (q_len, d_model)
                sigma = (z.var(dim=-1, unbiased=False, keepdim=True) + residual.norm.eps).sqrt()
                rebuilt = terms.sum(dim=1) + residual.norm.weight * (bias - bias.mean()) / sigma + residual.norm.bias
        assert torch.allclose(output, captured, atol=1e-5)
        assert torch.allclose(rebuilt, captured, atol=1e-5)
        assert terms.shape[1] == (x.size(0) if source is None else 1 + source.size(0))


def test_alti_stages_rows_are_shares():
    model = small_model()
    src, tgt = random_batch(model.config, [6], [5])
    stages = alti_stages(model, _record(model, src, tgt))
    assert len(stages) == 2 + 2 * 2
    for stage in stages:
        assert (stage >= 0).all() and np.allclose(stage.sum(axis=1), 1.0, atol=1e-5)


def test_explain_a_checkpoint_gives_labelled_arrays(tiny_checkpoint):
    from transformer import load_checkpoint
    from transformer.analysis.attribution import explain

    checkpoint = load_checkpoint(tiny_checkpoint)
    result = explain(checkpoint, "abc", ig_steps=4)
    shape = (len(result.output_tokens), len(result.src_tokens))
    assert all(matrix.shape == shape for matrix in result.methods.values())
    assert result.heads["value_norms"].shape == (checkpoint.config.num_decoder_layers, checkpoint.config.num_heads,
                                                 *shape)
    assert np.allclose(result.heads["attention"][-1].mean(axis=0), result.methods["attention_last"], atol=1e-6)
    assert result.prefix["alti_plus"].shape == (shape[0], len(result.tgt_tokens))
