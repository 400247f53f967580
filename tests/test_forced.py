"""A forced target through the decoder, a foil's contrastive score, and contrastive attribution."""
import numpy as np
import pytest
import torch

from helpers import ROOT, random_batch, small_model
from transformer import (
    aligned_foil,
    contrast,
    contrastive,
    contrastive_scores,
    force,
    forced_target,
    load_checkpoint,
    sequence_log_prob,
)
from transformer.analysis.attribution import _log_prob_rows, token_embeddings


@pytest.fixture(scope="module")
def reverse():
    return load_checkpoint(ROOT / "checkpoints" / "reverse")


def test_forcing_the_models_own_output_gives_exactly_its_attention_and_probabilities(reverse):
    translation = reverse.translate("attention42")
    forced = forced_target(reverse, "attention42", translation.text)
    assert forced.tgt_ids == translation.tgt_ids and forced.output_ids == translation.output_ids
    assert forced.probs == translation.probs
    assert forced.ranks == [1] * len(translation.output_ids)  # greedy: the model's own choice everywhere
    assert forced.attention.hooks.keys() == translation.attention.hooks.keys()
    for name, tensor in translation.attention.hooks.items():
        assert torch.equal(forced.attention.hooks[name], tensor), name


def test_a_changed_character_of_a_forced_target_collapses_its_probability(reverse):
    own = forced_target(reverse, "attention42", "24noitnetta")
    changed = forced_target(reverse, "attention42", "24noitnexta")
    where = next(t for t, (a, b) in enumerate(zip(own.output_ids, changed.output_ids)) if a != b)
    assert reverse.tgt_tokenizer.pieces([changed.output_ids[where]]) == ["x"]
    assert own.probs[where] > 0.5 and changed.probs[where] < 0.01
    assert changed.ranks[where] > 1
    assert changed.probs[:where] == own.probs[:where]  # the decoder is causal: nothing before it changes
    scores = contrastive_scores(reverse, "attention42", "24noitnetta", "24noitnexta")
    assert scores[where] > 4 and np.all(np.delete(scores, where) == 0)


def test_the_contrastive_score_of_a_target_with_itself_is_zero_everywhere(reverse):
    forced = forced_target(reverse, "lecture2026", "6202erutcel")
    assert np.all(contrast(forced, forced.output_ids) == 0.0)
    shorter = contrast(forced, forced.output_ids[1:])  # the first piece left out: the rest aligns from the end
    assert np.isnan(shorter[0]) and np.all(shorter[1:] == 0.0)


@pytest.mark.parametrize(("target", "foil", "aligned"), [
    ("abcd", "abxd", "abxd"),  # one length: position by position
    ("abcd", "abxyd", "abxd"),  # a longer stretch between the differences: its first pieces only
    ("abcde", "abxe", "abx.e"),
    ("abcd", "abd", "ab.d"),  # a piece left out: nothing for it
    ("abcd", "xbcd", "xbcd"),
    ("abcd", "abcdef", "abcd"),  # the foil goes on: the target's pieces all align before the difference
    ("ab", "xyz", "x."),
    ("", "xy", ""),
])
def test_a_foil_aligns_before_its_first_difference_and_after_its_last(target, foil, aligned):
    pieces = aligned_foil([ord(c) for c in target], [ord(c) for c in foil])
    assert "".join("." if piece is None else chr(piece) for piece in pieces) == aligned


def test_a_foil_of_another_length_compares_where_it_aligns_and_as_a_whole_sequence(reverse):
    target, foil = "24noitnetta", "24noitnettaxx"
    forced, forced_foil = forced_target(reverse, "attention42", target), forced_target(reverse, "attention42", foil)
    scores = contrastive_scores(reverse, "attention42", target, foil)
    assert np.all(scores == 0.0)  # every target piece aligns with the same piece: "xx" comes between a and </s>
    by_hand = sum(np.log(forced.probs)) - sum(np.log(forced_foil.probs))
    assert sequence_log_prob(forced) - sequence_log_prob(forced_foil) == pytest.approx(by_hand, rel=1e-4)
    assert by_hand > 5  # the model's own output, far likelier than it with "xx" before its end


def test_force_takes_ids_and_captures_what_it_is_asked_for():
    model = small_model()
    src, tgt = random_batch(model.config, [5], [4])
    outputs = [*tgt[0, 1:].tolist(), 3]
    forced = force(model, src[0].tolist(), outputs, names=["decoder.layers.1.cross_attn", "*.hook_q"])
    assert forced.tgt_ids == tgt[0].tolist()
    assert "decoder.layers.1.cross_attn.hook_pattern" in forced.attention.hooks
    assert "encoder.layers.0.self_attn.hook_q" in forced.attention.hooks
    with torch.no_grad():
        expected = model(src, tgt)[0].log_softmax(dim=-1)
    torch.testing.assert_close(forced.log_probs, expected)


def contrast_rows(model, src, tgt, targets, foils, embeddings):
    return (_log_prob_rows(model, src, tgt, targets, embeddings)
            - _log_prob_rows(model, src, tgt, foils, embeddings))  # (batch, tgt_len)


def test_contrastive_attribution_attributes_the_difference_of_log_probabilities():
    model = small_model()
    src, tgt = random_batch(model.config, [6], [5])
    targets = torch.tensor([*tgt[0, 1:].tolist(), 3])
    foils = targets.clone()
    foils[2] = 7 if int(targets[2]) != 7 else 8
    embeddings = token_embeddings(model, src)
    # gradient x input of the difference, taken directly
    point = embeddings.clone().requires_grad_(True)
    difference = contrast_rows(model, src, tgt, targets, foils, point)[0, 2]
    (gradient,) = torch.autograd.grad(difference, point)
    expected = (gradient * embeddings)[0].sum(dim=-1).numpy()
    got = contrastive(model, src, tgt, targets, foils, method="input_x_gradient")
    np.testing.assert_allclose(got[2], expected, atol=1e-5)
    assert np.all(np.delete(got, 2, axis=0) == 0.0)  # where target and foil agree there is nothing to attribute
    # integrated gradients: a row sums to the difference at the input minus at a zero embedding
    integrated = contrastive(model, src, tgt, targets, foils, rows=[2], steps=64)
    with torch.no_grad():
        change = (contrast_rows(model, src, tgt, targets, foils, embeddings)
                  - contrast_rows(model, src, tgt, targets, foils, torch.zeros_like(embeddings)))[0, 2]
    assert integrated.shape == (1, 6)
    np.testing.assert_allclose(integrated.sum(), float(change), rtol=5e-3)  # float32, 64 points
    assert np.all(contrastive(model, src, tgt, targets, targets) == 0.0)
    with pytest.raises(ValueError, match="method"):
        contrastive(model, src, tgt, targets, foils, method="attention_last")
