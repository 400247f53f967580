"""The induction task and its measures: the probe, the in-context numbers against a direct computation, and the
training command writing a decoder-only checkpoint whose card records them."""
import random

import pytest
import torch
import torch.nn.functional as F

from transformer import TransformerConfig, load_checkpoint
from transformer.capture import capture
from transformer.induction import PROBE_LENGTH, head_scores, in_context, probe
from transformer.model import Transformer
from transformer.tasks import INDUCTION_MAX_LENGTH, induction_example
from transformer.tokenizer import BOS_ID, Tokenizer
from transformer.train import main


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
        pattern = record[f"decoder.{layer}.self"]  # (batch, heads, q, k)
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
    assert any("at most 62 pieces (max_len 64 tokens with <s> and one to continue)" in w for w in long.warnings)
