"""Activation patching and the logit lens: identities that hold exactly, and independence of threads."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from helpers import random_batch, small_model
from transformer import capture, hook_points
from transformer.analysis.lens import logit_lens
from transformer.analysis.patching import activation_patching, run_patched


def _inputs(model, seed=1):
    src, tgt = random_batch(model.config, [7, 7], [5, 5], seed=seed)
    return src[0].tolist(), src[1].tolist(), tgt[0].tolist()


def test_patching_a_run_with_itself_changes_nothing():
    model = small_model()
    clean, _, tgt = _inputs(model)
    result = activation_patching(model, clean, clean, tgt, position=3, target=9, batch_size=16)
    for table in [*result.heads.values(), *result.positions.values()]:
        # up to the last bit: the clean run is one row, the patched runs a batch, and matmuls of other sizes may
        # round differently
        assert np.abs(table).max() < 1e-5
    assert result.clean_log_prob == pytest.approx(result.corrupted_log_prob, abs=1e-5)


def test_patching_every_hook_point_reproduces_the_other_run():
    model = small_model()
    clean, corrupted, tgt = _inputs(model)
    tgt_ids = torch.tensor([tgt])
    with torch.no_grad(), capture(model, "*") as record:  # "*": the hook points inside attention and the FFN too
        clean_logits = model(torch.tensor([clean]), tgt_ids)
    with torch.no_grad():
        patched = run_patched(model, torch.tensor([corrupted]), tgt_ids, dict(record.hooks))
        assert not torch.equal(model(torch.tensor([corrupted]), tgt_ids), clean_logits)
    assert len(record.hooks) == len(hook_points(model))
    assert torch.equal(patched, clean_logits)


def test_patching_the_one_changed_token_at_layer_0_restores_the_clean_output():
    model = small_model()
    clean, _, tgt = _inputs(model)
    corrupted = list(clean)
    corrupted[4] = 4 if clean[4] != 4 else 5  # one token changed
    result = activation_patching(model, clean, corrupted, tgt, position=2, target=9)
    restored = result.clean_log_prob - result.corrupted_log_prob
    assert restored != 0
    assert result.positions["encoder"][0, 4] == pytest.approx(restored, abs=1e-5)
    assert not np.delete(result.positions["encoder"][0], 4).any()  # tokens the runs share restore nothing
    assert not result.positions["decoder"][0].any()  # both runs read the same decoder input
    # decoder layer 0 self-attention sees only that input (up to the last bit, as above)
    assert np.abs(result.heads["decoder.self_attn"][0]).max() < 1e-5


def test_patching_shapes_and_a_single_head_by_hand():
    model = small_model()
    clean, corrupted, tgt = _inputs(model)
    result = activation_patching(model, clean, corrupted, tgt, position=4, target=9, batch_size=5)
    assert result.heads["decoder.cross_attn"].shape == (2, 4) and result.positions["encoder"].shape == (2, 7)
    # One head patched by hand with run_patched gives the same effect as the batched sweep.
    with torch.no_grad(), capture(model, "*.hook_z") as record:
        model(torch.tensor([clean]), torch.tensor([tgt]))
    name = "decoder.layers.1.cross_attn.hook_z"
    with torch.no_grad(), capture(model, name) as corrupted_record:
        base = model(torch.tensor([corrupted]), torch.tensor([tgt])).log_softmax(-1)[0, 4, 9]
    mixed = corrupted_record.hooks[name].clone()
    mixed[:, 2] = record.hooks[name][:, 2]
    with torch.no_grad():
        patched = run_patched(model, torch.tensor([corrupted]), torch.tensor([tgt]), {name: mixed})
    expected = float(patched.log_softmax(-1)[0, 4, 9] - base)
    assert result.heads["decoder.cross_attn"][1, 2] == pytest.approx(expected, abs=1e-5)


def test_patching_under_eight_threads_equals_sequential():
    model = small_model()
    jobs = [(*_inputs(model, seed), position, 9) for seed in range(4) for position in (1, 3)]
    sequential = [activation_patching(model, *job) for job in jobs]
    with ThreadPoolExecutor(8) as pool:
        threaded = list(pool.map(lambda job: activation_patching(model, *job), jobs))
    for one, other in zip(sequential, threaded):
        for kind in one.heads:
            assert np.array_equal(one.heads[kind], other.heads[kind])
        for stack in one.positions:
            assert np.array_equal(one.positions[stack], other.positions[stack])


def test_patching_before_the_last_position_equals_full_runs_by_hand():
    # The sweep stops its runs at the measured position (the decoder is causal): every effect must still be what a
    # run over the whole decoder input gives, and a decoder position after the measured one has exactly none.
    model = small_model()
    clean, corrupted, tgt = _inputs(model)
    position, target = 2, 9
    result = activation_patching(model, clean, corrupted, tgt, position=position, target=target, batch_size=7)
    src, tgt_ids = torch.tensor([corrupted]), torch.tensor([tgt])
    with torch.no_grad(), capture(model, ["*.hook_z", "*.hook_resid_pre"]) as record:
        model(torch.tensor([clean]), tgt_ids)
    with torch.no_grad(), capture(model, ["*.hook_z", "*.hook_resid_pre"]) as corrupted_record:
        base = model(src, tgt_ids).log_softmax(-1)[0, position, target]

    def effect(name: str, column: int) -> float:
        mixed = corrupted_record.hooks[name].clone()
        mixed[:, column] = record.hooks[name][:, column]
        with torch.no_grad():
            patched = run_patched(model, src, tgt_ids, {name: mixed})
        return float(patched.log_softmax(-1)[0, position, target] - base)

    for layer in range(2):
        for head in range(4):
            assert result.heads["decoder.self_attn"][layer, head] == pytest.approx(
                effect(f"decoder.layers.{layer}.self_attn.hook_z", head), abs=1e-5)
        for column in range(len(tgt)):
            assert result.positions["decoder"][layer, column] == pytest.approx(
                effect(f"decoder.layers.{layer}.hook_resid_pre", column), abs=1e-5)
        for column in range(len(clean)):
            assert result.positions["encoder"][layer, column] == pytest.approx(
                effect(f"encoder.layers.{layer}.hook_resid_pre", column), abs=1e-5)
    assert result.positions["decoder"].shape == (2, len(tgt))
    assert not result.positions["decoder"][:, position + 1:].any()


def test_unequal_lengths_are_refused():
    model = small_model()
    clean, corrupted, tgt = _inputs(model)
    with pytest.raises(ValueError, match="same number of tokens"):
        activation_patching(model, clean, corrupted[:-1], tgt, 0, 9)


def test_logit_lens_last_stage_is_the_model_output():
    model = small_model()
    src, tgt = random_batch(model.config, [6], [5])
    with torch.no_grad():
        probs = model(src, tgt).softmax(-1)[0]  # (tgt_len, vocab)
    outputs = probs.argmax(-1).tolist()
    lens = logit_lens(model, src[0].tolist(), tgt[0].tolist(), outputs, top_k=2)
    assert lens.stages == ["L0 self", "L0 cross", "L0 ffn", "L1 self", "L1 cross", "L1 ffn"]
    assert lens.top_ids.shape == (6, 5, 2)
    assert lens.top_ids[-1, :, 0].tolist() == outputs
    assert np.allclose(lens.target_probs[-1], probs.max(-1).values.numpy(), atol=1e-6)
    # An earlier stage by hand: layer 0's stream after cross-attention through the output projection.
    with torch.no_grad(), capture(model, "decoder.layers.0.hook_resid_cross") as record:
        model(src, tgt)
        by_hand = model.generator(record.hooks["decoder.layers.0.hook_resid_cross"][0]).softmax(-1)
    assert np.allclose(lens.top_probs[1, :, 0], by_hand.max(-1).values.numpy(), atol=1e-6)


def test_logit_lens_applies_the_final_norm_of_pre_ln_models():
    model = small_model(norm_first=True)
    src, tgt = random_batch(model.config, [6], [5])
    with torch.no_grad():
        probs = model(src, tgt).softmax(-1)[0]
    lens = logit_lens(model, src[0].tolist(), tgt[0].tolist(), probs.argmax(-1).tolist())
    assert np.allclose(lens.target_probs[-1], probs.max(-1).values.numpy(), atol=1e-6)


def test_patching_attention_weights_takes_the_unfused_path():
    # Weights patched to 0 leave the block's heads with zero output: the same as ablating them all. If an edit of
    # hook_pattern did not switch the fused kernel off, the edit would be silently skipped.
    from transformer import ablate, patch

    model = small_model()
    src, tgt = random_batch(model.config, [6], [5])
    with torch.no_grad():
        with patch(model, {"decoder.layers.0.cross_attn.hook_pattern": torch.zeros_like}):
            patched = model(src, tgt)
        with ablate(model, {"decoder.layers.0.cross_attn": [0, 1, 2, 3]}):
            ablated = model(src, tgt)
        plain = model(src, tgt)
    assert torch.allclose(patched, ablated, atol=1e-6) and not torch.allclose(patched, plain)
    with pytest.raises(KeyError, match="not hook points"):
        with patch(model, {"decoder.layers.0.nothing": torch.zeros_like}):
            pass


def test_patch_texts_and_lens_pieces_on_a_checkpoint(tiny_checkpoint):
    from transformer import load_checkpoint
    from transformer.analysis.patching import patch_texts

    checkpoint = load_checkpoint(tiny_checkpoint)
    result, translation = patch_texts(checkpoint, "abcd", "abce", position=0)
    assert result.positions["encoder"].shape == (checkpoint.config.num_encoder_layers, len(translation.src_ids))
    with pytest.raises(ValueError, match="same number of tokens"):
        patch_texts(checkpoint, "abcd", "abcde", position=0)
    lens = logit_lens(checkpoint.model, translation.src_ids, translation.tgt_ids, translation.output_ids)
    pieces = lens.top_pieces(checkpoint.tgt_tokenizer)
    assert pieces[-1][0][0] == translation.output_tokens[0]
