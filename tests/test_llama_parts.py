"""The model parts the Llama family brought (rotary positions, RMSNorm, the gated feed-forward network, grouped-query
attention, biases on some projections, Mistral's sliding window), against hand-computed values; the equality with
transformers' own models is tests/test_convert_families.py's."""
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import count_calls, small_config
from transformer import Transformer, capture
from transformer.model.cache import DecoderCache
from transformer.model.layers import GatedFeedForward, make_norm
from transformer.model.masks import causal_mask, decoder_mask
from transformer.model.positional import RotaryPositional, rotary_frequencies, rotate

LLAMA = dict(src_vocab_size=50, tgt_vocab_size=50, num_encoder_layers=0, stacks="decoder-only", positional="rotary",
             norm="rms", norm_first=True, feed_forward="gated", activation="silu", feed_forward_bias=False,
             attention_bias="none", num_kv_heads=2, scale_embedding=False, pad_id=0, bos_id=1, eos_id=2)


def llama_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(small_config(**LLAMA | overrides)).eval()


def test_sliding_window_mask_by_hand():
    """Window 2: each query sees itself and the one key before it, as transformers' sliding window does."""
    band = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]).bool()
    assert torch.equal(causal_mask(5, window=2)[0, 0], band)
    for last in (1, 2, 5):  # a cached step's rows are the full mask's last ones
        assert torch.equal(causal_mask(5, last=last, window=2)[0, 0], band[-last:])
    assert torch.equal(causal_mask(5, window=5), causal_mask(5))  # a window as long as the input blocks nothing
    mask = decoder_mask(torch.tensor([[1, 7, 8, 0, 0, 0]]), 0, window=2)[0, 0]  # 3 real tokens, then padding
    assert mask[2].tolist() == [False, True, True, False, False, False]
    assert not mask[5].any()  # a padding query whose window holds only padding: every key blocked


def test_a_query_whose_window_holds_only_padding_gets_zeros_never_nan():
    model = llama_model(sliding_window=2)
    tgt = torch.tensor([[1, 7, 8, 9, 10, 11], [1, 7, 0, 0, 0, 0]])  # row 1: 2 real tokens, then 4 of padding
    with torch.no_grad():
        fused = model(None, tgt)
        with capture(model) as record:
            explicit = model(None, tgt)
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all()
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=0)
    assert torch.equal(record["decoder.layers.0.self_attn"][1, :, 5], torch.zeros(4, 6))  # sees nothing: weights of 0


def test_rms_norm_by_hand():
    norm = make_norm(small_config(d_model=4, num_heads=2, norm="rms", layer_norm_eps=1e-5))
    assert isinstance(norm, torch.nn.RMSNorm) and not any(name == "bias" for name, _ in norm.named_parameters())
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    x = torch.tensor([1.0, -1.0, 3.0, -3.0])  # mean square (1 + 1 + 9 + 9) / 4 = 5; nothing subtracted first
    expected = x / math.sqrt(5 + 1e-5) * torch.tensor([1.0, 2.0, 3.0, 4.0])
    torch.testing.assert_close(norm(x), expected, atol=1e-6, rtol=0)


def test_gated_feed_forward_by_hand():
    """down(silu(gate x) * up x) on one hidden unit: silu(1) = 1 / (1 + e^-1) gates up x = 6."""
    ff = GatedFeedForward(small_config(d_model=2, num_heads=1, d_ff=1, feed_forward_bias=False, activation="silu"))
    assert ff.gate.bias is None and ff.up.bias is None and ff.down.bias is None
    with torch.no_grad():
        ff.gate.weight.copy_(torch.tensor([[1.0, 0.0]]))
        ff.up.weight.copy_(torch.tensor([[0.0, 2.0]]))
        ff.down.weight.copy_(torch.tensor([[1.0], [-0.5]]))
    hidden = 1 / (1 + math.exp(-1)) * 6
    torch.testing.assert_close(ff(torch.tensor([1.0, 3.0])), torch.tensor([hidden, -0.5 * hidden]))


def rope_config(**overrides):
    return small_config(**LLAMA | dict(d_model=16, num_heads=2, num_kv_heads=0) | overrides)


def test_rotary_frequencies_by_hand():
    """d_head 8: pair i turns by theta^(-2i/8) a position. Llama 3's stretch (pretrained at 256 positions, factor 8)
    keeps the one wavelength below 256 / 4, divides the two above 256 by 8, and blends the one between."""
    inverse = [500000.0 ** (-i / 8) for i in (0, 2, 4, 6)]
    torch.testing.assert_close(rotary_frequencies(rope_config(rope_theta=500000.0)), torch.tensor(inverse))
    linear = rotary_frequencies(rope_config(rope_theta=500000.0, rope_scaling="linear", rope_factor=2.0))
    torch.testing.assert_close(linear, torch.tensor(inverse) / 2)
    llama3 = rotary_frequencies(rope_config(rope_theta=500000.0, rope_scaling="llama3", rope_factor=8.0,
                                            rope_original_max_len=256))
    wavelengths = [2 * math.pi / f for f in inverse]  # 6.3, 167, 4443, 118148
    assert wavelengths[0] < 256 / 4 < wavelengths[1] < 256 < wavelengths[2]
    smooth = (256 / wavelengths[1] - 1) / (4 - 1)
    blended = (1 - smooth) * inverse[1] / 8 + smooth * inverse[1]
    torch.testing.assert_close(llama3, torch.tensor([inverse[0], blended, inverse[2] / 8, inverse[3] / 8]))


def test_rotation_by_hand():
    """d_head 4, theta 100: pairs (x0, x2) and (x1, x3) turn by 2 and 2 x 0.1 radians at position 2."""
    cos, sin = RotaryPositional(rope_config(d_model=8, rope_theta=100.0)).rotation(2, 1)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    (a, b), (c, d) = (math.cos(2), math.sin(2)), (math.cos(0.2), math.sin(0.2))
    expected = torch.tensor([1 * a - 3 * b, 2 * c - 4 * d, 3 * a + 1 * b, 4 * c + 2 * d])
    torch.testing.assert_close(rotate(x, cos[0], sin[0]), expected)


def test_rotated_queries_and_keys_meet_by_distance_alone():
    """Why rotary positions: q at position m and k at position n give the product that q at m + 3 and k at n + 3
    give."""
    rotary = RotaryPositional(rope_config())
    q, k = torch.randn(2, 8)

    def product(m: int, n: int) -> torch.Tensor:
        return rotate(q, *rotary.rotation(m, 1)) @ rotate(k, *rotary.rotation(n, 1)).T

    torch.testing.assert_close(product(5, 2), product(8, 5), atol=1e-5, rtol=0)
    assert not torch.allclose(product(5, 2), product(5, 3), atol=1e-3)


def test_grouped_query_attention_fused_and_explicit_agree_and_the_cache_keeps_the_kv_heads(monkeypatch):
    model = llama_model(num_kv_heads=2, sliding_window=3)  # 4 query heads, 2 key/value heads
    attention = model.decoder.layers[0].self_attn
    assert attention.W_k.weight.shape == (16, 32) and attention.W_q.bias is None and attention.W_o.bias is None
    tgt = torch.tensor([[1, 5, 6, 7, 8, 9, 10]])
    calls = count_calls(monkeypatch, F, "scaled_dot_product_attention")
    with torch.no_grad():
        fused = model(None, tgt)
        assert calls[0] == 2  # nothing captured: every layer fused
        with capture(model, "*") as record:
            explicit = model(None, tgt)
        cache = DecoderCache(2)
        stepped = torch.cat([model.decode(tgt[:, :4], cache=cache), model.decode(tgt[:, 4:], cache=cache)], dim=1)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=0)
    torch.testing.assert_close(stepped, fused, atol=1e-5, rtol=0)
    assert cache.self_attn[0].keys.shape == (1, 2, 7, 8)  # (batch, kv_heads, k_len, d_head)
    hooks = record.hooks
    assert hooks["decoder.layers.0.self_attn.hook_k"].shape == (1, 2, 7, 8)
    assert hooks["decoder.layers.0.self_attn.hook_pattern"].shape == (1, 4, 7, 7)
    # Query heads 0 and 1 read key/value head 0, heads 2 and 3 head 1, as transformers' repeat_kv pairs them.
    q, k = hooks["decoder.layers.0.self_attn.hook_q"], hooks["decoder.layers.0.self_attn.hook_k"]
    torch.testing.assert_close(hooks["decoder.layers.0.self_attn.hook_scores"][0, 3], q[0, 3] @ k[0, 1].T / 8 ** 0.5)


def test_the_rotation_s_input_is_a_hook_of_its_own_recorded_only_when_named():
    model = llama_model()
    tgt = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad(), capture(model) as default:
        model(None, tgt)
    assert not any(name.endswith("_unrotated") for name in default.hooks)  # inside hooks: named, or '*'
    with torch.no_grad(), capture(model, "*.hook_[qk]*") as record:
        model(None, tgt)
    hooks, layer = record.hooks, "decoder.layers.1.self_attn."
    cos, sin = model.decoder.rotary.rotation(0, 4)
    torch.testing.assert_close(rotate(hooks[layer + "hook_q_unrotated"], cos, sin), hooks[layer + "hook_q"])
    torch.testing.assert_close(rotate(hooks[layer + "hook_k_unrotated"], cos, sin), hooks[layer + "hook_k"])
    assert not any(name.endswith("_unrotated") for name in Transformer(small_config())._hook_points)


def test_the_llama_fields_refuse_what_they_cannot_mean():
    with pytest.raises(ValueError, match=r"num_kv_heads \(3\) must divide num_heads \(4\)"):
        small_config(**LLAMA | dict(num_kv_heads=3))
    with pytest.raises(ValueError, match="rotary positions need a decoder-only model"):
        small_config(positional="rotary")
    with pytest.raises(ValueError, match="rope_scaling 'linear' needs rotary positions"):
        small_config(rope_scaling="linear", rope_factor=2.0)
    with pytest.raises(ValueError, match=r"rope_scaling must be one of 'none', 'linear', 'llama3', got 'yarn'"):
        small_config(**LLAMA | dict(rope_scaling="yarn"))
    with pytest.raises(ValueError, match="rope_high_freq_factor"):
        small_config(**LLAMA | dict(rope_scaling="llama3", rope_low_freq_factor=4.0, rope_high_freq_factor=4.0))
    with pytest.raises(ValueError, match="an encoder-only model has none"):
        small_config(num_decoder_layers=0, stacks="encoder-only", src_vocab_size=41, sliding_window=4)
