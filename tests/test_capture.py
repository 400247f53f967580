"""Per-call capture and ablation: neutral, fast when idle, and private to each thread."""

import pytest
import torch
import torch.nn.functional as F

from helpers import PAD, count_calls, random_batch, run_together, small_model
from transformer import KIND_SIDES, ablate, capture
from transformer.model.sites import attention_name


def test_capture_does_not_change_outputs(model):
    src, tgt = random_batch(model.config, [7, 3], [6, 2])
    with torch.no_grad():
        plain = model(src, tgt)
        with capture(model) as record:
            captured = model(src, tgt)
    torch.testing.assert_close(captured, plain, atol=1e-5, rtol=0)
    assert list(record) == ["encoder.layers.0.self_attn", "encoder.layers.1.self_attn", "decoder.layers.0.self_attn",
                            "decoder.layers.0.cross_attn", "decoder.layers.1.self_attn", "decoder.layers.1.cross_attn"]


def test_fused_path_unless_attention_is_captured(model, monkeypatch):
    calls = count_calls(monkeypatch, F, "scaled_dot_product_attention")
    src, tgt = random_batch(model.config, [5], [4])
    with torch.no_grad():
        model(src, tgt)
        assert calls[0] == 6  # 2 encoder self + 2 decoder self + 2 cross, all fused
        with capture(model, "decoder.layers.1.cross_attn"):
            model(src, tgt)
        assert calls[0] == 6 + 5  # only the captured block left the fused path
        with capture(model, "*.hook_resid_post"):
            model(src, tgt)
        assert calls[0] == 6 + 5 + 6  # residual-stream capture does not need the explicit path


def test_record_contents(model):
    src, tgt = random_batch(model.config, [7, 3], [6, 2])
    with torch.no_grad(), capture(model) as record:
        model(src, tgt)
    cross = record["decoder.layers.1.cross_attn"]
    assert cross.shape == (2, 4, 6, 7)
    assert not cross.requires_grad
    mask = record.mask("decoder.layers.1.cross_attn")
    assert mask.shape == (2, 1, 6, 7) and mask.dtype == torch.bool
    assert torch.all(cross[1, :, :, 3:] == 0)  # item 1 has 3 source tokens: padding keys get exactly 0
    torch.testing.assert_close(cross.sum(-1), torch.ones(2, 4, 6))
    self_mask = record.mask("decoder.layers.0.self_attn")[0, 0]
    assert torch.equal(self_mask, torch.ones(6, 6, dtype=torch.bool).tril())
    # scores are pre-mask: a blocked (future) cell still holds a real score, and softmax of the allowed part
    # gives the pattern back.
    scores, pattern = record.scores("decoder.layers.0.self_attn")[0], record["decoder.layers.0.self_attn"][0]
    torch.testing.assert_close(scores[:, 2, :3].softmax(-1), pattern[:, 2, :3])
    assert record.hooks["encoder.layers.0.hook_resid_post"].shape == (2, 7, 32)
    assert record.stack("decoder.cross_attn").shape == (2, 4, 6, 7)
    with pytest.raises(TypeError):
        record["x"] = 1  # read-only


def test_decoder_self_attention_blocks_padded_keys_as_well_as_the_future(model):
    """Item 1 has 2 real decoder tokens of 6: no query, its padded ones included, may read keys 2-5, whether the
    whole sequence runs at once or one token at a time from the cache."""
    from transformer.model.cache import DecoderCache

    src, tgt = random_batch(model.config, [7, 3], [6, 2])
    expected = (tgt != PAD)[:, None, None, :] & torch.ones(6, 6, dtype=torch.bool).tril()  # (batch, 1, 6, 6)
    with torch.no_grad(), capture(model) as record:
        model(src, tgt)
    for layer in range(model.config.num_decoder_layers):
        assert torch.equal(record.mask(f"decoder.layers.{layer}.self_attn").expand_as(expected), expected)
        assert torch.all(record[f"decoder.layers.{layer}.self_attn"][1, :, :, 2:] == 0)
    with torch.no_grad():
        memory, cache = model.encode(src), DecoderCache(model.config.num_decoder_layers)
        for step in range(tgt.size(1)):
            with capture(model, "decoder.layers.0.self_attn") as record:
                model.decode(tgt[:, step:step + 1], memory, src, cache)
            assert torch.equal(record.mask("decoder.layers.0.self_attn")[:, :, 0], expected[:, :, step, :step + 1])


def test_captured_tensors_leave_the_autograd_graph(model):
    """Outside no_grad (as a user may call it) the model's output needs gradients, and the record must not keep
    the graph of the pass alive."""
    src, tgt = random_batch(model.config, [5, 3], [4, 2])
    with capture(model) as record:
        logits = model(src, tgt)
    assert logits.requires_grad
    assert record.hooks and all(not t.requires_grad and t.grad_fn is None for t in record.hooks.values())
    assert all(not record[key].requires_grad for key in record)


def test_name_filters(model):
    src, tgt = random_batch(model.config, [4], [3])
    with torch.no_grad(), capture(model, lambda name: name.startswith("encoder.layers.1")) as record:
        model(src, tgt)
    assert list(record) == ["encoder.layers.1.self_attn"]
    assert all(name.startswith("encoder.layers.1") for name in record.hooks)
    with pytest.raises(ValueError, match="matches no hook point"):
        with capture(model, "decoder.layers.9.cross_attn"):
            pass
    with pytest.raises(KeyError, match="not captured"):
        record.scores("decoder.layers.0.cross_attn")
    with torch.no_grad(), capture(model, "decoder.layers.0.cross_attn") as record:  # a site: scores, mask, pattern
        model(src, tgt)
    assert record.scores("decoder.layers.0.cross_attn").shape == record["decoder.layers.0.cross_attn"].shape \
        == (1, 4, 3, 4)


def test_nested_captures_both_record(model):
    src, tgt = random_batch(model.config, [4], [3])
    with torch.no_grad(), capture(model, "encoder.layers.0.self_attn") as outer:
        with capture(model, "decoder.layers.0.cross_attn") as inner:
            model(src, tgt)
    assert list(outer) == ["encoder.layers.0.self_attn"] and list(inner) == ["decoder.layers.0.cross_attn"]


def test_ablation_zero_removes_the_heads_contribution(model):
    src, tgt = random_batch(model.config, [5], [4])
    with torch.no_grad():
        plain = model(src, tgt)
        with ablate(model, {"decoder.layers.1.cross_attn": [0, 2]}), capture(model, "*.hook_z") as record:
            ablated = model(src, tgt)
        z = record.hooks["decoder.layers.1.cross_attn.hook_z"]
        assert torch.all(z[:, [0, 2]] == 0) and z[:, 1].abs().sum() > 0
        # By hand: the same model with those heads' slices of W_o zeroed gives the same logits.
        manual = small_model()
        d_head = model.config.d_head
        with torch.no_grad():
            for head in (0, 2):
                manual.decoder.layers[1].cross_attn.W_o.weight[:, head * d_head:(head + 1) * d_head] = 0
        expected = manual(src, tgt)
    assert not torch.allclose(ablated, plain)
    torch.testing.assert_close(ablated, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(model(src, tgt), plain)  # nothing stays behind after the block


@pytest.mark.parametrize("short,own", [("encoder.0.self", "encoder.layers.0.self_attn"),
                                       ("decoder.1.self", "decoder.layers.1.self_attn"),
                                       ("decoder.1.cross", "decoder.layers.1.cross_attn"),
                                       ("encoder.self", "encoder.self_attn"), ("decoder.self", "decoder.self_attn"),
                                       ("decoder.cross", "decoder.cross_attn")])
def test_a_short_name_reads_as_the_site_or_kind_it_names(short, own):
    assert attention_name(short) == own
    assert attention_name(own) == own


@pytest.mark.parametrize("name", ["encoder.cross", "encoder.0.cross", "decoder.layers.1", "decoder.1.cross.hook_z",
                                  "decoder.1.cross\n", "*.hook_q", "decoder.layers.0.hook_resid_pre", ""])
def test_a_name_that_is_no_short_name_comes_back_unchanged(name):
    assert attention_name(name) == name


def test_capture_ablate_and_the_record_read_short_names_as_the_sites_they_name(model):
    src, tgt = random_batch(model.config, [5], [4])
    with torch.no_grad(), ablate(model, {"decoder.0.cross": [1]}), \
            capture(model, ["decoder.1.cross", "encoder.0.self"]) as short:
        model(src, tgt)
    with torch.no_grad(), ablate(model, {"decoder.layers.0.cross_attn": [1]}), \
            capture(model, ["decoder.layers.1.cross_attn", "encoder.layers.0.self_attn"]) as own:
        model(src, tgt)
    assert list(short) == list(own) == ["encoder.layers.0.self_attn", "decoder.layers.1.cross_attn"]
    assert short.hooks.keys() == own.hooks.keys()
    assert "decoder.1.cross" in short and short.keys_of("decoder.cross") == own.keys_of("decoder.cross_attn")
    for part in ("pattern", "scores", "mask"):
        torch.testing.assert_close(short.stack("decoder.cross", part=part), own.stack("decoder.cross_attn", part=part))
    torch.testing.assert_close(short["encoder.0.self"], own["encoder.layers.0.self_attn"])
    torch.testing.assert_close(short.scores("decoder.1.cross"), own.scores("decoder.layers.1.cross_attn"))
    torch.testing.assert_close(short.mask("decoder.1.cross"), own.mask("decoder.layers.1.cross_attn"))
    with pytest.raises(KeyError, match="not an attention site"):
        own["encoder.cross"]


def test_ablation_mean_and_validation(model):
    src, tgt = random_batch(model.config, [5], [4])
    with torch.no_grad(), ablate(model, {"encoder.layers.0.self_attn": [1]}, mode="mean"), \
            capture(model, "*.hook_z") as record:
        model(src, tgt)
    z = record.hooks["encoder.layers.0.self_attn.hook_z"][0, 1]  # (q_len, d_head): every row is the same mean
    with torch.no_grad(), capture(model, "encoder.layers.0.self_attn.hook_z") as plain:
        model(src, tgt)
    mean = plain.hooks["encoder.layers.0.self_attn.hook_z"][0, 1].mean(dim=0)  # (d_head,) over query positions
    torch.testing.assert_close(z, mean.expand_as(z))
    with pytest.raises(KeyError, match="not an attention block"):
        with ablate(model, {"encoder.0": [0]}):
            pass
    with pytest.raises(ValueError, match="out of range"):
        with ablate(model, {"encoder.layers.0.self_attn": [4]}):
            pass
    with pytest.raises(KeyError):
        with ablate(model, {"encoder.layers.0.cross_attn": [0]}):
            pass
    with pytest.raises(ValueError, match="mode"):
        with ablate(model, {"encoder.layers.0.self_attn": [0]}, mode="noise"):
            pass


def test_threads_share_one_model_without_leaking(model):
    """16 threads, each with its own input, capture and ablation, at the same time as each other."""
    inputs = [random_batch(model.config, [3 + i % 5], [2 + i % 4], seed=i) for i in range(16)]
    ablations = [{} if i % 2 else {f"decoder.layers.{i % 2}.cross_attn": [i % 4]} for i in range(16)]

    def run(i):
        src, tgt = inputs[i]
        with torch.no_grad(), ablate(model, ablations[i]), capture(model) as record:
            logits = model(src, tgt)
        return logits, record["decoder.layers.1.cross_attn"], record["encoder.layers.0.self_attn"]

    expected = [run(i) for i in range(16)]  # sequential, one at a time
    results: dict[tuple[int, int], tuple] = {}  # (thread, loop): every loop's result, not only the last

    def worker(i):
        for loop in range(3):
            results[i, loop] = run(i)

    run_together(worker, 16)
    assert sorted(results) == [(i, loop) for i in range(16) for loop in range(3)]
    for (i, _), result in results.items():
        for got, want in zip(result, expected[i], strict=True):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_kind_sides_name_the_sequences_of_each_kinds_rows_and_columns(model):
    src, tgt = random_batch(model.config, [5], [3])
    with torch.no_grad(), capture(model) as record:
        model(src, tgt)
    length = {"src": 5, "tgt": 3}
    for kind, (query_side, key_side) in KIND_SIDES.items():
        assert record.stack(kind).shape[-2:] == (length[query_side], length[key_side]), kind
        assert record.stack(kind).shape[0] == model.config.layers_of(kind)
