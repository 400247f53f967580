"""Greedy and beam search, batched and alone, and the step-by-step generator."""
import pytest
import torch

from helpers import BOS, EOS, PAD, random_batch, small_model
from transformer import capture
from transformer.decoding import beam_search, decode_steps, greedy


def sequence_log_prob(model, src, tokens) -> float:
    """Sum of log p(token) over a decoded sequence (up to and including EOS), teacher-forced."""
    ids = [int(t) for t in tokens if t != PAD]
    with torch.no_grad():
        log_probs = model(src, torch.tensor([ids[:-1]])).log_softmax(-1)[0]
    return float(sum(log_probs[i, t] for i, t in enumerate(ids[1:])))


@pytest.fixture
def peaked_model():
    """A random model whose output favours EOS a little, so that sequences end at varied lengths."""
    model = small_model(seed=3)
    with torch.no_grad():
        model.generator.bias[EOS] = 2.0
    return model


def test_greedy_shape_and_stop(peaked_model):
    src, _ = random_batch(peaked_model.config, [6, 3, 5], [1, 1, 1])
    tokens = greedy(peaked_model, src, max_len=12)
    assert tokens.shape[0] == 3 and tokens.shape[1] <= 12
    assert torch.all(tokens[:, 0] == BOS)
    for row in tokens.tolist():
        if EOS in row:
            assert all(t == PAD for t in row[row.index(EOS) + 1:])  # padding after EOS
        assert BOS not in row[1:]


def test_greedy_batched_equals_alone(peaked_model):
    src, _ = random_batch(peaked_model.config, [6, 3, 5], [1, 1, 1])
    batched = greedy(peaked_model, src, max_len=12)
    for row, length in enumerate([6, 3, 5]):
        alone = greedy(peaked_model, src[row:row + 1, :length], max_len=12)[0]
        assert batched[row, : alone.numel()].tolist() == alone.tolist()


def test_greedy_follows_argmax_by_hand(peaked_model):
    src, _ = random_batch(peaked_model.config, [4], [1])
    tokens = greedy(peaked_model, src, max_len=6)[0].tolist()
    with torch.no_grad():
        logits = peaked_model(src, torch.tensor([tokens[:-1]]))[0]
    logits[:, [PAD, BOS]] = float("-inf")
    assert logits.argmax(-1).tolist() == tokens[1:]


def test_beam_of_one_is_greedy_and_wider_beams_score_at_least_as_well(peaked_model):
    src, _ = random_batch(peaked_model.config, [6, 4], [1, 1], seed=5)
    assert torch.equal(beam_search(peaked_model, src, beam_size=1, max_len=10, length_penalty=0.0),
                       greedy(peaked_model, src, max_len=10))
    greedy_tokens = greedy(peaked_model, src, max_len=10)
    beam_tokens = beam_search(peaked_model, src, beam_size=4, max_len=10, length_penalty=0.0)
    for row in range(2):
        one = src[row:row + 1]
        greedy_log_prob = sequence_log_prob(peaked_model, one, greedy_tokens[row])
        assert sequence_log_prob(peaked_model, one, beam_tokens[row]) >= greedy_log_prob - 1e-5


def test_beam_batched_equals_alone(peaked_model):
    src, _ = random_batch(peaked_model.config, [6, 3], [1, 1], seed=7)
    batched = beam_search(peaked_model, src, beam_size=3, max_len=10)
    for row, length in enumerate([6, 3]):
        alone = beam_search(peaked_model, src[row:row + 1, :length], beam_size=3, max_len=10)[0]
        assert batched[row, : alone.numel()].tolist() == alone.tolist()


def test_decode_steps_match_one_teacher_forced_pass(peaked_model):
    src, _ = random_batch(peaked_model.config, [5], [1])
    steps = list(decode_steps(peaked_model, src, max_len=9))
    tokens = [BOS] + [step.token_id for step in steps]
    assert tokens == greedy(peaked_model, src, max_len=9)[0].tolist()
    with torch.no_grad(), capture(peaked_model, lambda n: n.endswith("cross_attn.hook_pattern")) as record:
        probs = peaked_model(src, torch.tensor([tokens[:-1]])).softmax(-1)[0]
    cross = record.stack("decoder.cross")  # (layers, heads, tgt_len, src_len)
    for step in steps:
        assert step.prefix == tokens[: step.index + 1]
        assert step.top[0] == (step.token_id, pytest.approx(step.prob))
        assert step.prob == pytest.approx(float(probs[step.index, step.token_id]), abs=1e-5)
        torch.testing.assert_close(step.cross_attention, cross[:, :, step.index], atol=1e-5, rtol=0)


def test_incremental_decoding_equals_full_passes(peaked_model):
    from transformer.cache import DecoderCache

    src, tgt = random_batch(peaked_model.config, [6, 3], [7, 4], seed=9)
    with torch.no_grad():
        memory = peaked_model.encode(src)
        full = peaked_model.decode(tgt, memory, src)
        cache = DecoderCache(peaked_model.config.num_decoder_layers)
        steps = [peaked_model.decode(tgt[:, i:i + 1], memory, src, cache) for i in range(tgt.size(1))]
    real = tgt != PAD
    torch.testing.assert_close(torch.cat(steps, dim=1)[real], full[real], atol=1e-5, rtol=0)


def test_cache_changes_no_decoded_token(peaked_model):
    src, _ = random_batch(peaked_model.config, [6, 3, 5], [1, 1, 1], seed=11)
    cached = (greedy(peaked_model, src, 12), beam_search(peaked_model, src, 3, 12))
    uncached = (greedy(peaked_model, src, 12, use_cache=False), beam_search(peaked_model, src, 3, 12, use_cache=False))
    assert all(torch.equal(a, b) for a, b in zip(cached, uncached))


def test_cache_changes_no_captured_attention(peaked_model):
    """Each step's attention rows are the same whether earlier keys and values come from the cache or are
    computed again: the decoding view's cross-attention, and every block's last row of a captured greedy run."""
    src, _ = random_batch(peaked_model.config, [6], [1], seed=5)
    cached, uncached = (list(decode_steps(peaked_model, src, 9, use_cache=use)) for use in (True, False))
    assert [step.token_id for step in cached] == [step.token_id for step in uncached]
    for with_cache, without in zip(cached, uncached):
        assert with_cache.prob == pytest.approx(without.prob, abs=1e-6)
        torch.testing.assert_close(with_cache.cross_attention, without.cross_attention, atol=1e-5, rtol=0)
    records = []
    for use in (True, False):
        with capture(peaked_model) as record:
            greedy(peaked_model, src, 9, use_cache=use)
        records.append(record)
    for key in records[1]:  # the last step's pass: one query row with the cache, the whole prefix without
        torch.testing.assert_close(records[0][key][:, :, -1], records[1][key][:, :, -1], atol=1e-5, rtol=0)


def test_mean_ablation_decodes_without_cache(peaked_model):
    """Mean ablation averages over a pass's positions, so decoding must re-run whole prefixes to honour it."""
    from transformer import ablate

    src, _ = random_batch(peaked_model.config, [6], [1], seed=13)
    with ablate(peaked_model, {"decoder.0.self": [0, 1, 2, 3]}, mode="mean"), torch.no_grad():
        tokens = greedy(peaked_model, src, 10)[0].tolist()
        for step in range(1, len(tokens)):  # by hand: each step is a full pass over its prefix
            logits = peaked_model(src, torch.tensor([tokens[:step]]))[0, -1]
            logits[[PAD, BOS]] = float("-inf")
            assert int(logits.argmax()) == tokens[step]
