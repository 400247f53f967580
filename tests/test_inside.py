"""The hook points inside attention and the feed-forward block (hook_q, hook_k, hook_v, hook_result, hook_mlp_post),
checked against the same numbers computed by hand from the weights with plain matrix products."""
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import count_calls, random_batch, small_model
from transformer import capture
from transformer.model.hooks import INSIDE_HOOKS

TOLERANCE = dict(atol=1e-5, rtol=0)


def by_hand(attn, x_q, x_kv, mask):
    """Every stage of one attention block from its weights: q, k, v, scores, weights, z, each head's result."""
    batch, q_len, d_model = x_q.shape
    heads = attn.num_heads
    d_head = d_model // heads

    def split(x, linear):  # (batch, length, d_model) -> (batch, heads, length, d_head)
        return (x @ linear.weight.T + linear.bias).view(batch, -1, heads, d_head).transpose(1, 2)

    q, k, v = split(x_q, attn.W_q), split(x_kv, attn.W_k), split(x_kv, attn.W_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)  # (batch, heads, q_len, k_len)
    weights = scores.masked_fill(~mask, -math.inf).softmax(-1).nan_to_num(0.0)
    z = weights @ v  # (batch, heads, q_len, d_head)
    result = torch.stack([z[:, h] @ attn.W_o.weight[:, h * d_head:(h + 1) * d_head].T for h in range(heads)],
                         dim=2)  # (batch, q_len, heads, d_model)
    return dict(q=q, k=k, v=v, scores=scores, pattern=weights, z=z, result=result)


@pytest.mark.parametrize("lengths", [([2], [2]), ([7, 3], [6, 2])], ids=["two tokens", "padded batch"])
def test_every_stage_inside_attention_equals_the_products_of_the_weights(lengths):
    model = small_model()
    src, tgt = random_batch(model.config, *lengths)
    with torch.no_grad(), capture(model, "*") as record:
        model(src, tgt)
    hooks = record.hooks
    inputs = {  # post-LN: each block reads the residual stream as it enters it
        "encoder.layers.0.self_attn": ("encoder.layers.0.hook_resid_pre", "encoder.layers.0.hook_resid_pre"),
        "encoder.layers.1.self_attn": ("encoder.layers.1.hook_resid_pre", "encoder.layers.1.hook_resid_pre"),
        "decoder.layers.0.self_attn": ("decoder.layers.0.hook_resid_pre", "decoder.layers.0.hook_resid_pre"),
        "decoder.layers.1.cross_attn": ("decoder.layers.1.hook_resid_mid", "encoder.hook_memory"),
    }
    with torch.no_grad():
        for path, (query_input, key_input) in inputs.items():
            mask = hooks[f"{path}.hook_mask"]
            expected = by_hand(model.get_submodule(path), hooks[query_input], hooks[key_input], mask)
            for stage, tensor in expected.items():
                torch.testing.assert_close(hooks[f"{path}.hook_{stage}"], tensor, **TOLERANCE, msg=f"{path} {stage}")


def test_the_heads_results_sum_to_the_attention_blocks_output():
    model = small_model()
    attn = model.decoder.layers[1].cross_attn
    generator = torch.Generator().manual_seed(3)
    x_q, x_kv = torch.randn(2, 5, 32, generator=generator), torch.randn(2, 7, 32, generator=generator)
    mask = torch.ones(2, 1, 5, 7, dtype=torch.bool)
    mask[1, ..., 4:] = False  # the second item's last three keys are padding
    with torch.no_grad():
        plain = attn(x_q, x_kv, mask)
        with capture(model, "decoder.layers.1.cross_attn.hook_result") as record:
            through_heads = attn(x_q, x_kv, mask)
    result = record.hooks["decoder.layers.1.cross_attn.hook_result"]  # (batch, q_len, heads, d_model)
    assert result.shape == (2, 5, 4, 32)
    torch.testing.assert_close(result.sum(dim=2) + attn.W_o.bias, plain, **TOLERANCE)
    torch.testing.assert_close(through_heads, plain, **TOLERANCE)


def test_the_feed_forward_hidden_activation_is_relu_of_the_first_layer():
    model = small_model()
    src, tgt = random_batch(model.config, [7, 3], [6, 2])
    with torch.no_grad(), capture(model, ["*.hook_mlp_post", "*.hook_resid_mid", "*.hook_resid_cross"]) as record:
        model(src, tgt)
    for layer, ff_input in (("encoder.layers.0", "hook_resid_mid"), ("decoder.layers.1", "hook_resid_cross")):
        feed_forward = model.get_submodule(f"{layer}.feed_forward")
        x = record.hooks[f"{layer}.{ff_input}"]
        expected = F.relu(x @ feed_forward.linear1.weight.T + feed_forward.linear1.bias)  # (batch, length, d_ff)
        torch.testing.assert_close(record.hooks[f"{layer}.feed_forward.hook_mlp_post"], expected, **TOLERANCE)


def test_the_inside_hooks_are_captured_only_where_named_and_keep_the_fused_path(monkeypatch):
    """capture() with no names leaves the inside hooks out (they are many numbers); q, k, v and the feed-forward
    activation are there without leaving the fused attention, so the output stays bit-identical."""
    model = small_model()
    src, tgt = random_batch(model.config, [7, 3], [6, 2])
    calls = count_calls(monkeypatch, F, "scaled_dot_product_attention")
    with torch.no_grad():
        plain = model(src, tgt)
        with capture(model) as everything_else:
            model(src, tgt)
        assert not any(name.endswith(INSIDE_HOOKS) for name in everything_else.hooks)
        fused_before = calls[0]
        with capture(model, ["*.hook_q", "*.hook_k", "*.hook_v", "*.hook_mlp_post"]) as inside:
            captured = model(src, tgt)
    assert calls[0] == fused_before + 6  # every block still fused
    assert torch.equal(captured, plain)
    assert inside.hooks["decoder.layers.0.cross_attn.hook_k"].shape == (2, 4, 7, 8)
    assert inside.hooks["decoder.layers.0.self_attn.hook_q"].shape == (2, 4, 6, 8)
    assert inside.hooks["encoder.layers.1.feed_forward.hook_mlp_post"].shape == (2, 7, 64)
