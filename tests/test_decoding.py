"""Greedy and beam search (with its length and coverage penalties), batched and alone, against a beam search written
out by hand, and the step-by-step generator; on random models and on the trained test checkpoint, which stops at
every length."""
import math
import random

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from helpers import BOS, EOS, PAD, ROOT, TINY_LENGTHS, count_calls, random_batch, small_model
from transformer import capture, load_checkpoint
from transformer.data.tasks import REVERSE_ALPHABET
from transformer.inference.decoding import (
    PromptLookup,
    Sampling,
    beam_search,
    beam_tree,
    decode_steps,
    greedy,
    shape_distribution,
)


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
    cross = record.stack("decoder.cross_attn")  # (layers, heads, tgt_len, src_len)
    for step in steps:
        assert step.prefix == tokens[: step.index + 1]
        assert step.top[0] == (step.token_id, pytest.approx(step.prob))
        assert step.prob == pytest.approx(float(probs[step.index, step.token_id]), abs=1e-5)
        torch.testing.assert_close(step.cross_attention, cross[:, :, step.index], atol=1e-5, rtol=0)


def test_incremental_decoding_equals_full_passes(peaked_model):
    from transformer.model.cache import DecoderCache

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


def test_prompt_lookup_guesses_what_followed_the_first_occurrence_of_the_last_two_tokens():
    outputs = [[BOS, 5, 6, 7, 5, 6, 8, 5, 6], [BOS, 8, 9], [BOS, 8, 4]]
    lookup = PromptLookup([[4, 8, 9, 11, 12, EOS], [4, 8, 9, 11, 12, EOS], [4, 8, 9, EOS]], outputs)
    assert lookup.guess(0, 5) == [7, 5, 6, 8, 5]  # its own output first, from the first (5, 6) on
    assert lookup.guess(0, 2) == [7, 5]
    assert lookup.guess(1, 5) == [11, 12, EOS]  # (8, 9) is only in the source
    assert lookup.guess(2, 5) == []  # (8, 4) is nowhere before
    outputs[2].append(9)  # the output grows in the caller's list: (4, 9) is not in the source either
    assert lookup.guess(2, 5) == []
    outputs[2] += [8, 4]  # now the first (8, 4) has a 9 after it
    assert lookup.guess(2, 5) == [9, 8, 4]


def test_guesses_change_no_token_of_an_output_that_repeats_itself(monkeypatch):
    """A random model repeats one token: the guesses (more of the same) are right up to where its output turns, and
    wrong there, so a call keeps some of them and the cache must forget the rest."""
    model = small_model(seed=0)
    src, _ = random_batch(model.config, [6, 3, 5], [1, 1, 1], seed=0)
    one_at_a_time = greedy(model, src, 40, guess=False)
    assert len(set(one_at_a_time[2, 1:].tolist())) > 1  # the last row's output turns
    calls = count_calls(monkeypatch, model, "decode")
    assert torch.equal(greedy(model, src, 40), one_at_a_time)
    assert calls[0] < 39 / 3  # 39 tokens in fewer calls
    assert torch.equal(greedy(model, src, 40, use_cache=False), one_at_a_time)
    for row, length in enumerate([6, 3, 5]):
        assert torch.equal(greedy(model, src[row:row + 1, :length], 40), one_at_a_time[row:row + 1])


def test_a_captured_greedy_run_records_no_guessed_rows(monkeypatch):
    """A capture records a call's every query row: with guesses, the last call's rows would include wrong guesses.
    So a greedy run that captures makes one call per token, and its record is the last token's call."""
    model = small_model(seed=0)  # its output repeats itself: guesses would be made and kept
    src, _ = random_batch(model.config, [6], [1], seed=0)
    calls = count_calls(monkeypatch, model, "decode")
    with capture(model) as record:
        tokens = greedy(model, src, 20)
    assert calls[0] == tokens.size(1) - 1
    assert record["decoder.layers.0.self_attn"].shape[2] == 1  # (batch, heads, q_len, k_len): the last token's row


def test_mean_ablation_decodes_without_cache(peaked_model):
    """Mean ablation averages over a pass's positions, so decoding must re-run whole prefixes to honour it."""
    from transformer import ablate

    src, _ = random_batch(peaked_model.config, [6], [1], seed=13)
    with ablate(peaked_model, {"decoder.layers.0.self_attn": [0, 1, 2, 3]}, mode="mean"), torch.no_grad():
        tokens = greedy(peaked_model, src, 10)[0].tolist()
        for step in range(1, len(tokens)):  # by hand: each step is a full pass over its prefix
            logits = peaked_model(src, torch.tensor([tokens[:step]]))[0, -1]
            logits[[PAD, BOS]] = float("-inf")
            assert int(logits.argmax()) == tokens[step]


# ---------------------------------------------------------------------------------------- the trained test checkpoint

@pytest.fixture(scope="module")
def trained(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint)


def fresh_strings(count: int, lengths: tuple[int, int], seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(REVERSE_ALPHABET) for _ in range(rng.randint(*lengths))) for _ in range(count)]


def source_batch(checkpoint, texts: list[str]) -> torch.Tensor:
    """Right-padded source ids (batch, longest)."""
    ids = [checkpoint.encode(text) for text in texts]
    src = torch.full((len(ids), max(map(len, ids))), PAD)
    for row, row_ids in enumerate(ids):
        src[row, :len(row_ids)] = torch.tensor(row_ids)
    return src


def test_the_test_checkpoint_reverses_short_strings(trained):
    """What the other tests here rely on: the checkpoint really does its task, so it stops at every length."""
    texts = fresh_strings(100, TINY_LENGTHS, seed=99)
    tokens = greedy(trained.model, source_batch(trained, texts))
    right = [trained.tgt_tokenizer.decode(row.tolist()) == text[::-1] for row, text in zip(tokens, texts)]
    assert sum(right) >= 85, f"{sum(right)} of 100 reversed"


def test_greedy_pads_each_row_after_its_own_eos(trained):
    texts = ["a", "q1w2e3", "zz", "7k4", "m0nb", "xyz12"]  # the batch is in no order of length
    tokens = greedy(trained.model, source_batch(trained, texts)).tolist()
    stops = []
    for row in tokens:
        assert EOS in row, row
        stops.append(row.index(EOS))
        assert all(t == PAD for t in row[stops[-1] + 1:]), row  # nothing generated after EOS
        assert PAD not in row[:stops[-1]] and BOS not in row[1:]
    assert len(set(stops)) >= 4  # the rows really stop at different lengths
    assert len(tokens[0]) == max(stops) + 1  # and decoding stops when the last row has
    for row, text in zip(tokens, texts):  # each row is what the input gives alone
        assert row[:row.index(EOS) + 1] == greedy(trained.model, source_batch(trained, [text]))[0].tolist()


def test_guesses_change_no_token_and_end_where_one_token_at_a_time_ends(trained, monkeypatch):
    """Palindromes and repeats, whose reversals their sources and their own outputs predict: guessed ends of sentence
    among the guesses kept ("abba" ends on one), rows that end at different lengths, batched and alone."""
    texts = ["abba", "x1x1x1", "abcba", "q", "aaaaaa", "7k4", "zz"]
    src = source_batch(trained, texts)
    one_at_a_time = greedy(trained.model, src, guess=False)
    assert [trained.tgt_tokenizer.decode(row.tolist()) for row in one_at_a_time] == [t[::-1] for t in texts]
    assert torch.equal(greedy(trained.model, src), one_at_a_time)
    calls = count_calls(monkeypatch, trained.model, "decode")
    for row, text in enumerate(texts):
        alone = greedy(trained.model, source_batch(trained, [text]))[0].tolist()
        assert alone == one_at_a_time[row, :len(alone)].tolist() and alone[-1] == EOS
    assert calls[0] < sum(len(text) + 1 for text in texts) - 6  # the guesses were kept, in more than one row


def reference_coverage_term(model, src: torch.Tensor, tokens: list[int]) -> float:
    """GNMT's coverage term of one hypothesis, from a full pass over it: the last decoder layer's cross-attention,
    heads averaged, summed over every row the hypothesis feeds (EOS and padding are never fed), then
    sum over the source pieces of log min(coverage, 1), each at least log(1e-6)."""
    fed = [token for token in tokens if token not in (EOS, PAD)]
    key = f"decoder.layers.{model.config.num_decoder_layers - 1}.cross_attn"
    with torch.no_grad(), capture(model, [key]) as record:
        model(src, torch.tensor([fed]))
    coverage = record[key][0].mean(0).sum(0).tolist()  # (src_len,)
    return sum(math.log(min(max(c, 1e-6), 1.0)) for c in coverage)


def unpadded(tokens) -> list[int]:
    """A decoded row without its trailing padding: a batch is as wide as its longest row when the search stopped."""
    tokens = list(tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens)
    while tokens and tokens[-1] == PAD:
        tokens.pop()
    return tokens


def reference_beam_search(model, src: torch.Tensor, beam_size: int, max_len: int, length_penalty: float,
                          coverage_penalty: float = 0.0) -> list[int]:
    """Beam search for one input (1, src_len), written out plainly: each hypothesis re-runs the model on its whole
    prefix (no cache, no batching). A finished hypothesis stays in the beam at its score; the last choice divides
    each score by the GNMT penalty ((5 + length) / 6) ** length_penalty, length counting EOS but not BOS. With a
    coverage penalty, every comparison adds it times the coverage term of the rows each hypothesis has run,
    the one that scored the candidates included."""
    def coverage(tokens) -> float:
        return coverage_penalty * reference_coverage_term(model, src, tokens) if coverage_penalty else 0.0

    hypotheses = [([BOS], 0.0)]
    with torch.no_grad():
        while len(hypotheses[0][0]) < max_len and not all(tokens[-1] in (EOS, PAD) for tokens, _ in hypotheses):
            candidates = []
            for tokens, score in hypotheses:
                penalty = coverage(tokens)
                if tokens[-1] in (EOS, PAD):
                    candidates.append((tokens + [PAD], score, score + penalty))
                    continue
                log_probs = model(src, torch.tensor([tokens]))[0, -1].log_softmax(-1).tolist()
                candidates += [(tokens + [token], score + log_prob, score + log_prob + penalty)
                               for token, log_prob in enumerate(log_probs) if token not in (PAD, BOS)]
            best = sorted(candidates, key=lambda candidate: candidate[2], reverse=True)[:beam_size]
            hypotheses = [(tokens, score) for tokens, score, _ in best]

    def final(hypothesis) -> float:
        tokens, score = hypothesis
        length = sum(token != PAD for token in tokens[1:])
        return score / ((5 + length) / 6) ** length_penalty + coverage(tokens)

    return max(hypotheses, key=final)[0]


def test_beam_search_equals_the_plain_one_for_every_length_penalty(peaked_model):
    src, _ = random_batch(peaked_model.config, [6, 4, 5, 3], [1, 1, 1, 1], seed=17)
    lengths = (src != PAD).sum(-1).tolist()
    winners = {}
    for length_penalty in (0.0, 0.6, 2.0):
        batched = beam_search(peaked_model, src, beam_size=3, max_len=12, length_penalty=length_penalty)
        for row, length in enumerate(lengths):
            expected = reference_beam_search(peaked_model, src[row:row + 1, :length], 3, 12, length_penalty)
            assert unpadded(batched[row]) == unpadded(expected), (length_penalty, row)
            winners[length_penalty, row] = expected
    # The penalty must matter here, or this test could not see it ignored.
    assert any(winners[0.0, row] != winners[2.0, row] for row in range(len(lengths)))


def test_beam_search_equals_the_plain_one_for_every_coverage_penalty(peaked_model):
    """The coverage penalty in the search and in the final choice, batched and cached, against full re-runs of each
    hypothesis alone; finished hypotheses keep the coverage they ended with."""
    src, _ = random_batch(peaked_model.config, [6, 4, 5, 3, 7], [1, 1, 1, 1, 1], seed=23)
    lengths = (src != PAD).sum(-1).tolist()
    winners = {}
    for coverage_penalty in (0.0, 0.3, 2.0):
        batched = beam_search(peaked_model, src, beam_size=3, max_len=12, length_penalty=0.6,
                              coverage_penalty=coverage_penalty)
        for row, length in enumerate(lengths):
            expected = reference_beam_search(peaked_model, src[row:row + 1, :length], 3, 12, 0.6, coverage_penalty)
            assert unpadded(batched[row]) == unpadded(expected), (coverage_penalty, row)
            winners[coverage_penalty, row] = expected
    assert any(winners[0.0, row] != winners[2.0, row] for row in range(len(lengths)))


@pytest.mark.parametrize("coverage_penalty", [-0.1, float("inf"), True, "0.1", float("nan")])
def test_a_bad_coverage_penalty_is_refused(peaked_model, coverage_penalty):
    src, _ = random_batch(peaked_model.config, [4], [1])
    with pytest.raises(ValueError, match="coverage_penalty"):
        beam_search(peaked_model, src, beam_size=2, coverage_penalty=coverage_penalty)


def test_beams_that_swap_places_keep_their_own_cached_keys(trained):
    """Beam search continues hypotheses from other rows than their own at most steps: the cache must follow
    them (`DecoderCache.reorder`). Against full re-runs and the plain beam search, on inputs this checkpoint is
    unsure of (up to 8 characters, longer than it learnt), where the beams swap places most."""
    texts = fresh_strings(60, (1, 8), seed=7)
    src = source_batch(trained, texts)
    cached = beam_search(trained.model, src, beam_size=4)
    assert torch.equal(cached, beam_search(trained.model, src, beam_size=4, use_cache=False))
    covered = beam_search(trained.model, src, beam_size=4, coverage_penalty=0.5)  # coverage must follow them too
    assert torch.equal(covered, beam_search(trained.model, src, beam_size=4, use_cache=False, coverage_penalty=0.5))
    for row in range(0, 60, 10):
        one = src[row:row + 1, :len(trained.encode(texts[row]))]
        expected = reference_beam_search(trained.model, one, 4, trained.model.config.max_len, 0.6)
        assert unpadded(cached[row]) == unpadded(expected)


def test_beam_search_stops_once_no_active_hypothesis_can_win(peaked_model):
    """Exactly the plain search's choice, in fewer steps: the plain one runs until every beam has finished (its
    output is as long as its last step), beam_search stops once the best finished hypothesis cannot be beaten."""
    steps = plain_steps = 0
    for seed in range(10):
        one, _ = random_batch(peaked_model.config, [5], [1], seed=seed)
        stopped = beam_search(peaked_model, one, beam_size=3, max_len=16, length_penalty=0.6, coverage_penalty=0.3)
        expected = reference_beam_search(peaked_model, one, 3, 16, 0.6, 0.3)
        assert unpadded(stopped[0]) == unpadded(expected), seed
        steps, plain_steps = steps + stopped.size(1), plain_steps + len(expected)
    assert steps < plain_steps


def test_coverage_follows_the_beams_of_a_trained_model(trained):
    """Its cross-attention is sharp (each output letter looks at one input letter), so a hypothesis that skips a
    letter has a hole in its coverage: the penalty must follow each hypothesis when beams swap places, and count
    in the final choice, as the plain beam search does it, on inputs longer than the checkpoint learnt."""
    texts = fresh_strings(24, (7, 9), seed=11)
    src = source_batch(trained, texts)
    plain = beam_search(trained.model, src, beam_size=4)
    covered = beam_search(trained.model, src, beam_size=4, coverage_penalty=1.0)
    changed = [row for row in range(len(texts)) if unpadded(plain[row]) != unpadded(covered[row])]
    assert len(changed) >= 2  # it changes outputs here, or this test could not see it ignored
    for row in changed + [row for row in range(len(texts)) if row not in changed][:3]:
        one = src[row:row + 1, :len(trained.encode(texts[row]))]
        expected = reference_beam_search(trained.model, one, 4, trained.model.config.max_len, 0.6, 1.0)
        assert unpadded(covered[row]) == unpadded(expected), texts[row]


def test_mean_ablation_steps_give_the_probabilities_of_full_passes(trained):
    """The step-by-step view under mean ablation: each step's probabilities are those of a full pass over its
    prefix (a cache would average over the one new position only)."""
    from transformer import ablate

    model, src = trained.model, torch.tensor([trained.encode("q1w2e3")])
    heads = {"decoder.layers.0.self_attn": [0, 1], "decoder.layers.1.self_attn": [2]}
    with ablate(model, heads, mode="mean"), torch.no_grad():
        for step in decode_steps(model, src):
            probs = model(src, torch.tensor([step.prefix]))[0, -1].softmax(-1)
            assert step.prob == pytest.approx(float(probs[step.token_id]), abs=1e-5)


def test_the_shortest_limit_still_generates_one_token(peaked_model):
    src, _ = random_batch(peaked_model.config, [4, 2], [1, 1])
    assert greedy(peaked_model, src, max_len=2).shape == (2, 2)  # BOS and one token: max_len counts both
    with pytest.raises(ValueError, match="at least 2"):
        greedy(peaked_model, src, max_len=1)  # no room for a token: refused, not clamped
    assert beam_search(peaked_model, src, beam_size=2, max_len=2).shape == (2, 2)


# ---------------------------------------------------------------------------------------------- sampling


def sampled(model, src, max_len: int, **settings) -> list[int]:
    return [step.token_id for step in decode_steps(model, src, max_len, sampling=Sampling(**settings))]


def greedy_tokens(model, src, max_len: int) -> list[int]:
    return [token for token in greedy(model, src, max_len)[0].tolist()[1:] if token != PAD]


def test_the_distribution_is_shaped_as_computed_by_hand():
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])
    tempered, truncated = shape_distribution(probs.log(), Sampling(temperature=2.0, top_k=3, top_p=0.7))
    by_hand = probs.sqrt() / probs.sqrt().sum()  # p ** (1 / 2), renormalised: 0.1271, 0.4019, 0.2201, 0.3113 (+/-)
    torch.testing.assert_close(tempered, by_hand)
    # top_k 3 drops 0.05; of the other three, renormalised, 0.43 + 0.33 reach 0.7: the third is dropped
    kept = torch.tensor([0.0, by_hand[1], 0.0, by_hand[3]])
    torch.testing.assert_close(truncated, kept / kept.sum())
    _, exact = shape_distribution(torch.tensor([0.5, 0.3, 0.2]).log(), Sampling(top_p=0.8))
    torch.testing.assert_close(exact, torch.tensor([0.625, 0.375, 0.0]))  # 0.5 + 0.3 reach 0.8: no third piece
    tempered, truncated = shape_distribution(probs.log(), Sampling(temperature=0))
    assert tempered.tolist() == truncated.tolist() == [0.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("settings", [dict(temperature=-1.0), dict(temperature=1e9), dict(top_k=-1), dict(top_k=1.5),
                                      dict(top_p=0.0), dict(top_p=1.5), dict(seed=-1), dict(seed=True),
                                      dict(temperature=float("nan"))])
def test_bad_sampling_settings_are_refused(settings):
    with pytest.raises(ValueError, match="out of range"):
        Sampling(**settings)


def test_sampling_with_a_seed_draws_the_same_pieces_again(peaked_model):
    src, _ = random_batch(peaked_model.config, [6], [1], seed=3)
    settings = dict(temperature=1.5, top_k=20, top_p=0.95)
    draws = [sampled(peaked_model, src, 12, seed=seed, **settings) for seed in (7, 7, 8, 9)]
    assert draws[0] == draws[1]
    assert draws[0] != draws[2] or draws[0] != draws[3]  # another seed, other pieces
    again = list(decode_steps(peaked_model, src, 12, sampling=Sampling(seed=7, **settings)))
    assert [step.token_id for step in again] == draws[0]
    for step in again:  # each piece was drawn from what truncation kept, and the model's own view is unchanged
        model_probs, tempered, truncated = step.distributions
        assert truncated[step.token_id] > 0
        assert step.prob == pytest.approx(float(model_probs[step.token_id]))
        torch.testing.assert_close(truncated.sum(), torch.tensor(1.0))
        assert int((truncated > 0).sum()) <= 20


def test_temperature_near_zero_and_top_k_of_one_are_greedy(peaked_model):
    src, _ = random_batch(peaked_model.config, [6, 4], [1, 1], seed=13)
    for row in range(src.size(0)):
        one = src[row:row + 1]
        expected = greedy_tokens(peaked_model, one, 14)
        assert sampled(peaked_model, one, 14, temperature=1e-4, seed=row) == expected
        assert sampled(peaked_model, one, 14, top_k=1, temperature=3.0, seed=row) == expected
        assert sampled(peaked_model, one, 14, temperature=0.0) == expected


def test_temperature_one_and_top_p_one_draw_from_the_models_distribution():
    """Chi-square on the rank (by the model's probability) of each drawn piece, over every step of a dozen seeded
    samples: the expected count of rank r is the sum over steps of the r-th largest probability. A tiny random model,
    so that no piece takes almost all the probability; its end of sentence made unlikely, so samples run long.
    The model's distribution is over the pieces it may generate (padding and <s> never are), renormalised.
    Drawing at temperature 1.3 or 0.8, or from the top 6 only, fails it (p < 0.005)."""
    model = small_model(seed=4, src_vocab_size=12, tgt_vocab_size=12, d_model=16, num_heads=2, num_encoder_layers=1,
                        num_decoder_layers=1, d_ff=32)
    with torch.no_grad():
        model.generator.bias[EOS] = -4.0
    src, _ = random_batch(model.config, [5], [1])
    observed, expected = np.zeros(12), np.zeros(12)
    for seed in range(12):
        for step in decode_steps(model, src, 40, sampling=Sampling(seed=seed)):
            probs = step.distributions[0].double().numpy()
            probs = probs / probs.sum()
            torch.testing.assert_close(step.distributions[1].double(), torch.from_numpy(probs), atol=1e-6, rtol=0)
            order = np.argsort(-probs, kind="stable")
            observed[np.flatnonzero(order == step.token_id)[0]] += 1
            expected += probs[order]
    assert observed.sum() > 400
    rare = expected < 5  # the least likely ranks, pooled into one bin
    observed = np.append(observed[~rare], observed[rare].sum())
    expected = np.append(expected[~rare], expected[rare].sum())
    assert chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 0.01


# ---------------------------------------------------------------------------------------------- the beam tree


def check_tree(tree, beam_size: int) -> None:
    """Every step keeps at most beam_size hypotheses, each kept new one outranking every pruned one; pruned ones are
    never extended; the best is in the last beam."""
    for depth in range(1, len(tree.beams) + 1):
        new = [node for node in tree.nodes if node.depth == depth]
        kept = [node.rank for node in new if node.kept]
        pruned = [node.rank for node in new if not node.kept]
        assert kept and len(tree.beams[depth - 1]) <= beam_size
        assert not pruned or min(kept) >= max(pruned)
    assert all(tree.nodes[node.parent].kept for node in tree.nodes[1:])
    assert tree.best in tree.beams[-1]
    assert tree.path(tree.best)[0] == 0 and [tree.nodes[i].depth for i in tree.path(tree.best)] == list(
        range(tree.nodes[tree.best].depth + 1))


def test_the_beam_trees_best_is_beam_search_and_its_scores_are_the_models(peaked_model):
    src, _ = random_batch(peaked_model.config, [6, 4], [1, 1], seed=5)
    for row, (length_penalty, coverage_penalty) in enumerate([(0.6, 0.0), (1.0, 0.4)]):
        one = src[row:row + 1]
        tree = beam_tree(peaked_model, one, 3, 10, length_penalty, coverage_penalty=coverage_penalty)
        check_tree(tree, 3)
        best = beam_search(peaked_model, one, 3, 10, length_penalty, coverage_penalty=coverage_penalty)[0]
        assert list(tree.nodes[tree.best].tokens) == unpadded(best)
        for node in tree.nodes[1:]:  # every hypothesis's score, the model's log-probability of its pieces
            assert node.log_prob == pytest.approx(sequence_log_prob(peaked_model, one, node.tokens), abs=1e-4)
    with pytest.raises(ValueError, match="one input"):
        beam_tree(peaked_model, src, 3, 10)


@pytest.mark.parametrize("name", ["reverse", "dates", "eng-fra"])
def test_the_beam_trees_best_is_beam_search_on_the_shipped_checkpoints(name):
    checkpoint = load_checkpoint(ROOT / "checkpoints" / name)
    penalties = dict(length_penalty=checkpoint.card.decoding.get("length_penalty", 0.6),
                     coverage_penalty=checkpoint.card.decoding.get("coverage_penalty", 0.0))
    for text in checkpoint.card.examples[:2]:
        src = torch.tensor([checkpoint.translate(text).src_ids])
        limit = 2 * src.size(1) + 10
        for beam_size in (2, 4, 8):
            tree = beam_tree(checkpoint.model, src, beam_size, limit, **penalties)
            check_tree(tree, beam_size)
            expected = unpadded(beam_search(checkpoint.model, src, beam_size, limit, **penalties)[0])
            assert list(tree.nodes[tree.best].tokens) == expected, (text, beam_size)
