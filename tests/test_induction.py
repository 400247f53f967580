"""The induction task and its measures: the probe, the in-context numbers against a direct computation, and the
training command writing a decoder-only checkpoint whose card records them; the other probes (random token ids, real
sentences of different lengths, each repeated)."""
import random

import pytest
import torch
import torch.nn.functional as F

from transformer import Caveat, TransformerConfig, load_checkpoint
from transformer.analysis.induction import (
    PROBE_LENGTH,
    TEXT_PROBE_MIN_PIECES,
    head_scores,
    in_context,
    probe,
    random_token_probe,
    repeat_measures,
    sentence_probe,
)
from transformer.data.tasks import INDUCTION_MAX_LENGTH, induction_example
from transformer.io.tokenizer import BOS_ID, Tokenizer
from transformer.model.capture import capture
from transformer.model.model import Transformer
from transformer.training.train import main


@pytest.fixture(scope="module")
def characters(tmp_path_factory):
    rng = random.Random(0)
    texts = [induction_example(rng)[1] for _ in range(300)]
    return Tokenizer.train(texts, tmp_path_factory.mktemp("tok") / "chars.model", 96, model_type="char",
                           add_dummy_prefix=False)


def test_an_example_is_a_text_whose_stretch_comes_twice():
    rng = random.Random(3)
    for _ in range(200):
        source, text = induction_example(rng)
        assert source == "" and 0 < len(text) <= INDUCTION_MAX_LENGTH and "  " not in text
        words = text.split()
        assert any(words[i:i + n] == words[j:j + n] and n >= 1 for n in (1, 2) for i in range(len(words))
                   for j in range(i + n, len(words)))  # the stretch's words come again later


def test_the_probe_is_bos_then_one_stretch_twice(characters):
    ids = probe(characters, BOS_ID, size=20)
    assert ids.shape == (20, 1 + 2 * PROBE_LENGTH)
    assert (ids[:, 0] == BOS_ID).all()
    assert torch.equal(ids[:, 1:PROBE_LENGTH + 1], ids[:, PROBE_LENGTH + 1:])
    assert (ids[:, 1:] > 3).all()  # real pieces: no special and no unknown id
    assert torch.equal(ids, probe(characters, BOS_ID, size=20))  # seeded


def test_in_context_numbers_equal_a_direct_computation(characters):
    torch.manual_seed(0)
    config = TransformerConfig(src_vocab_size=characters.vocab_size, tgt_vocab_size=characters.vocab_size, d_model=32,
                               num_heads=2, num_encoder_layers=0, num_decoder_layers=2, d_ff=64, max_len=64,
                               stacks="decoder-only", dropout=0.0)
    model = Transformer(config).eval()
    ids = probe(characters, BOS_ID, size=6)
    length = PROBE_LENGTH
    measured = in_context(model, ids)
    with torch.no_grad(), capture(model) as record:
        logits = model(None, ids)
    first, second, correct, count = [], [], 0, 0
    for row in range(ids.size(0)):
        for position in range(2, 2 * length + 1):  # the token at `position`, predicted from the one before it
            loss = F.cross_entropy(logits[row, position - 1], ids[row, position]).item()
            if position <= length:
                first.append(loss)
            elif position >= length + 2:
                second.append(loss)
                correct += int(logits[row, position - 1].argmax() == ids[row, position])
                count += 1
    assert measured["in_context_loss_drop"] == pytest.approx(sum(first) / len(first) - sum(second) / len(second),
                                                             abs=1e-5)
    assert measured["repeat_accuracy"] == pytest.approx(correct / count)
    best_induction, best_previous = 0.0, 0.0
    for layer in range(2):
        pattern = record[f"decoder.layers.{layer}.self_attn"]  # (batch, heads, q, k)
        for head in range(2):
            induction = [pattern[row, head, q, q - length + 1].item() for row in range(ids.size(0))
                         for q in range(length + 1, 2 * length + 1)]
            previous = [pattern[row, head, q, q - 1].item() for row in range(ids.size(0))
                        for q in range(1, 2 * length + 1)]
            best_induction = max(best_induction, sum(induction) / len(induction))
            best_previous = max(best_previous, sum(previous) / len(previous))
    assert measured["induction_score"] == pytest.approx(best_induction, abs=1e-6)
    assert measured["previous_token_score"] == pytest.approx(best_previous, abs=1e-6)
    assert head_scores(model, ids)[0].shape == (2, 2)


def test_training_the_induction_task_writes_a_decoder_only_checkpoint(tmp_path):
    out = tmp_path / "induction"
    main(["--task", "induction", "--out", str(out), "--steps", "20", "--eval-every", "10", "--train-size", "400",
          "--dev-size", "40", "--d-model", "32", "--d-ff", "64", "--max-tokens", "1024", "--dropout", "0",
          "--snapshot-metrics", "0.5", "--quiet"])
    checkpoint = load_checkpoint(out)
    config, card = checkpoint.config, checkpoint.card
    assert (config.stacks, config.num_encoder_layers, config.num_decoder_layers) == ("decoder-only", 0, 2)
    assert checkpoint.src_tokenizer.vocab_size == checkpoint.tgt_tokenizer.vocab_size  # one vocabulary
    for entry in card.history + card.snapshots:
        assert {"in_context_loss_drop", "induction_score", "previous_token_score"} <= set(entry)
    measured = in_context(checkpoint.model, probe(checkpoint.tgt_tokenizer, config.bos_id))
    assert card.metrics["dev_repeat_accuracy"] == pytest.approx(measured["repeat_accuracy"], abs=1e-4)
    assert card.metrics["induction_score"] == pytest.approx(measured["induction_score"], abs=1e-4)
    assert card.training["longest_source_tokens"] > 20  # the texts' lengths, not their empty inputs'
    translation = checkpoint.translate("ab cd ab")
    assert translation.src_ids[0] == config.bos_id and config.eos_id not in translation.src_ids  # a prompt
    assert translation.tgt_ids[: len(translation.src_ids)] == translation.src_ids  # continued from the prompt
    assert not translation.warnings
    long = checkpoint.translate("ab " * 40)  # 119 pieces: cut to leave room for one continued token at least
    assert len(long.src_ids) == config.max_len - 1
    assert Caveat("cut_off_pieces", {"pieces": 119, "cut": 57, "reads": 62, "max_len": 64,
                                     "around": "bos_and_continuation"}) in long.warnings


def llama_model(vocab_size: int, **overrides) -> Transformer:
    torch.manual_seed(0)
    values = dict(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=32, num_heads=4, num_kv_heads=2,
                  num_encoder_layers=0, num_decoder_layers=2, d_ff=48, max_len=64, stacks="decoder-only",
                  dropout=0.0, positional="rotary", norm="rms", norm_first=True, feed_forward="gated",
                  activation="silu", attention_bias="none", feed_forward_bias=False)
    return Transformer(TransformerConfig(**(values | overrides))).eval()


def test_the_random_token_probe_repeats_ids_that_are_no_special_token():
    ids = random_token_probe(500, BOS_ID, size=30, length=12)
    assert ids.shape == (30, 25) and (ids[:, 0] == BOS_ID).all()
    assert torch.equal(ids[:, 1:13], ids[:, 13:]) and (ids[:, 1:] >= 4).all() and (ids < 500).all()
    assert len(set(ids[:, 1:13].flatten().tolist())) > 250  # spread over the vocabulary
    assert torch.equal(ids, random_token_probe(500, BOS_ID, size=30, length=12))  # seeded


def test_the_sentence_probe_types_each_sentence_twice(tmp_path):
    sentences = ["Tom is here.", "Go.", "Mary has a red car.", " ".join(["Tom is here."] * 12), "Is Tom here?"]
    pieces = Tokenizer.train(sentences * 20, tmp_path / "words.model", 60)  # subword pieces, word-start marks
    rows = sentence_probe(pieces, sentences, BOS_ID, max_len=64, size=10)
    assert len(rows) == 3 and all(row[0] == BOS_ID for row in rows)  # "Go." is too short, the long one too long
    for row in rows:
        length = (len(row) - 1) // 2
        assert length >= TEXT_PROBE_MIN_PIECES
        text = pieces.decode(row[1:length + 1])
        assert text in sentences and row[1:] == pieces.encode(f"{text} {text}")  # as typed twice
    assert sentence_probe(pieces, sentences, BOS_ID, 64, size=2) == sentence_probe(pieces, sentences, BOS_ID, 64,
                                                                                   size=2)


def test_repeat_measures_are_in_contexts_numbers_on_a_probe_of_one_length(characters):
    model = llama_model(characters.vocab_size)
    ids = probe(characters, BOS_ID, size=8)
    assert repeat_measures(model, ids).numbers() == pytest.approx(in_context(model, ids), abs=1e-5)


def test_repeat_measures_weigh_every_position_of_rows_of_different_lengths_alike(characters):
    """Rows of 5 and 9 pieces a stretch: each mean is over all positions, not a mean of the two groups' means."""
    model = llama_model(characters.vocab_size)
    short, long = random_token_probe(characters.vocab_size, BOS_ID, size=6, length=5), \
        random_token_probe(characters.vocab_size, BOS_ID, size=2, length=9, seed=1)
    result = repeat_measures(model, short.tolist() + long.tolist())
    (short_ind, short_prev), (long_ind, long_prev) = head_scores(model, short), head_scores(model, long)
    assert torch.allclose(result.induction, (short_ind * 6 * 5 + long_ind * 2 * 9) / (6 * 5 + 2 * 9), atol=1e-6)
    assert torch.allclose(result.previous_token, (short_prev * 6 * 10 + long_prev * 2 * 18) / (6 * 10 + 2 * 18),
                          atol=1e-6)
    first, second = [], []
    for ids in (short, long):
        length = (ids.size(1) - 1) // 2
        with torch.no_grad():
            losses = F.cross_entropy(model(None, ids[:, :-1]).transpose(1, 2), ids[:, 1:], reduction="none")
        first += losses[:, 1:length].flatten().tolist()
        second += losses[:, length + 1:].flatten().tolist()
    assert result.in_context_loss_drop == pytest.approx(sum(first) / len(first) - sum(second) / len(second), abs=1e-5)
    assert result.strongest(result.induction) == divmod(int(result.induction.argmax()), 4)
