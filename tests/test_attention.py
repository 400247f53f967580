"""Attention against PyTorch's own nn.MultiheadAttention and against hand-computed values."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer import capture, padding_mask
from transformer.model.attention import MultiHeadAttention, scaled_dot_product
from transformer.model.hooks import name_hook_points


def copy_into_torch(ours: MultiHeadAttention, d_model: int, num_heads: int) -> nn.MultiheadAttention:
    reference = nn.MultiheadAttention(d_model, num_heads, batch_first=True).eval()
    with torch.no_grad():
        reference.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        reference.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
        reference.out_proj.weight.copy_(ours.W_o.weight)
        reference.out_proj.bias.copy_(ours.W_o.bias)
    return reference


def captured_call(module, *args):
    """Run the module with its pattern captured (the explicit path) and return (output, pattern)."""
    with capture(module, ["hook_pattern", "hook_mask", "hook_scores"]) as record:
        output = module(*args)
    return output, record.hooks["hook_pattern"]


@pytest.mark.parametrize("use_mask", [False, True])
def test_matches_nn_multihead_attention(use_mask):
    torch.manual_seed(0)
    d_model, heads = 16, 4
    ours = MultiHeadAttention(d_model, heads, dropout=0.0).eval()
    name_hook_points(ours)  # a lone module: its hook points are named by attribute, e.g. "hook_pattern"
    reference = copy_into_torch(ours, d_model, heads)
    x_q, x_kv = torch.randn(3, 5, d_model), torch.randn(3, 7, d_model)
    ids = torch.tensor([[5, 6, 7, 8, 9, 9, 9], [5, 6, 7, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0, 0]])
    mask = padding_mask(ids, 0) if use_mask else None
    expected, expected_weights = reference(
        x_q, x_kv, x_kv, key_padding_mask=(ids == 0) if use_mask else None,
        need_weights=True, average_attn_weights=False,
    )
    fused = ours(x_q, x_kv, mask)
    explicit, weights = captured_call(ours, x_q, x_kv, mask)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=1e-5, rtol=0)


def test_hand_computed_attention():
    # One head, two keys: scores q·k/sqrt(2) = [0, 2/sqrt(2)]; the output is the weighted mean of the values.
    q = torch.tensor([[[[1.0, 1.0]]]])
    k = torch.tensor([[[[0.0, 0.0], [1.0, 1.0]]]])
    v = torch.tensor([[[[10.0, 0.0], [0.0, 10.0]]]])
    output, weights = scaled_dot_product(q, k, v)
    e = math.exp(2 / math.sqrt(2))
    torch.testing.assert_close(weights, torch.tensor([[[[1 / (1 + e), e / (1 + e)]]]]))
    torch.testing.assert_close(output, torch.tensor([[[[10 / (1 + e), 10 * e / (1 + e)]]]]))


def test_masked_keys_get_exactly_zero_and_rows_sum_to_one():
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], dtype=torch.bool)[:, None, None, :]
    _, weights = scaled_dot_product(q, k, v, mask)
    assert torch.all(weights[0, :, :, 3:] == 0) and torch.all(weights[1, :, :, 5] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4))


def test_fully_masked_rows_are_finite_and_both_paths_agree():
    torch.manual_seed(2)
    module = MultiHeadAttention(16, 4, dropout=0.0).eval()
    name_hook_points(module)
    x = torch.randn(2, 4, 16)
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[0, :, 2, :] = False  # query 2 of item 0 may attend to nothing
    mask[1] = False  # nothing at all in item 1
    fused = module(x, x, mask)
    explicit, weights = captured_call(module, x, x, mask)
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all() and torch.isfinite(weights).all()
    assert torch.all(weights[0, :, 2] == 0) and torch.all(weights[1] == 0)
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=0)


def test_dropout_on_weights_only_in_training():
    torch.manual_seed(3)
    module = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(1, 6, 16)
    module.eval()
    torch.testing.assert_close(module(x, x), module(x, x))
    module.train()
    assert not torch.allclose(module(x, x), module(x, x))


def test_in_place_and_autograd_masking_agree():
    # Without gradients the masked softmax runs in place; with them it may not (autograd keeps the softmax's output).
    # Both must give the same weights, and the gradient must match PyTorch's own masked attention.
    torch.manual_seed(3)
    q, k, v = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 7, 4), torch.randn(2, 2, 7, 4)
    mask = torch.rand(2, 1, 5, 7) > 0.4
    mask[:, :, :, 0] = True  # no fully masked row: PyTorch's reference would give NaN there
    with torch.no_grad():
        _, in_place = scaled_dot_product(q, k, v, mask)
    q.requires_grad_(True)
    output, weights = scaled_dot_product(q, k, v, mask)
    torch.testing.assert_close(weights, in_place, atol=0, rtol=0)
    output.sum().backward()
    q_reference = q.detach().clone().requires_grad_(True)
    F.scaled_dot_product_attention(q_reference, k, v, attn_mask=mask).sum().backward()
    torch.testing.assert_close(q.grad, q_reference.grad, atol=1e-5, rtol=0)
    mask[1, :, 3] = False  # a query that may attend to nothing: zeros on both paths
    with torch.no_grad():
        _, in_place = scaled_dot_product(q, k, v, mask)
    assert torch.all(in_place[1, :, 3] == 0)
    torch.testing.assert_close(scaled_dot_product(q, k, v, mask)[1], in_place, atol=0, rtol=0)
