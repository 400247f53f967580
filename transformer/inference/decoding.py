"""Generation: batched greedy and beam search, and a step-by-step generator for the app's decoding view.

Every function returns or yields decoder sequences that start with BOS and end with EOS (unless `max_len` cut them
off), right-padded with `pad_id` in a batch. `max_len` counts the whole sequence, BOS included, and never exceeds the
model's own `config.max_len` (a bigger one is clamped to it; one below 2 is a ValueError). They switch gradients
off themselves.

Each step feeds only the new token and reuses earlier keys and values (`DecoderCache`), except while an ablation is
on: "mean" ablation averages over all positions of a pass, so then every step re-runs the whole prefix.
`use_cache=False` re-runs it always: the reference the cache is tested and benchmarked against. Greedy decoding with
the cache also feeds guesses of the next tokens in the same call and keeps those the model agrees with
(`PromptLookup`): the same tokens in fewer calls.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from ..model.cache import DecoderCache
from ..model.capture import capture
from ..model.hooks import captures_active, edits_active
from ..model.model import Transformer
from ..model.sites import Site

MAX_BEAM_SIZE = 64  # beams x vocabulary scores are sorted each step: 10,000 beams took 23 s and 2 GB
COVERAGE_FLOOR = 1e-6  # a source piece no step attended to costs log(1e-6), not log(0) = -inf
# Greedy decoding's guesses continue an earlier occurrence of the last 2 tokens: matching the last token alone
# guessed wrong so often on the shipped checkpoints that checking the guesses cost more than they saved.
GUESS_NGRAM = 2
MOST_GUESSES = 32  # tokens guessed per step at most: a step that checks more costs more when a guess is wrong


def _limit(model: Transformer, max_len: int | None) -> int:
    """The sequence length to decode to: `max_len` (at least 2: BOS and one token), never more than the model's."""
    if max_len is None:
        return model.config.max_len
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2:
        raise ValueError(f"max_len must be an integer of at least 2 (BOS and one token), or None, got {max_len!r:.40}")
    return min(max_len, model.config.max_len)


def _row_limits(model: Transformer, max_len: int | list[int] | None, batch: int) -> list[int]:
    """Each row's sequence length to decode to: `max_len` for every row, or one per row (a batch of different
    inputs, each decoded as it would be alone: a row that reaches its own limit stops there)."""
    if isinstance(max_len, (list, tuple)):
        if len(max_len) != batch:
            raise ValueError(f"max_len holds {len(max_len)} limits for a batch of {batch} rows")
        return [_limit(model, limit) for limit in max_len]
    return [_limit(model, max_len)] * batch


def output_limit(src_len: int) -> int:
    """The decoder sequence length (BOS included) that an input of `src_len` source tokens (</s> included) is decoded
    to when the caller sets none: 2 x src_len + 10, within the model's max_len (the decoding functions clamp it).
    A translation is never much longer than its source: no pair of the eng-fra corpus comes within one token of this
    limit (its longest target is 2 x source + 9 tokens). It stops a model that never ends its output of noise from
    running on to max_len: 42 tokens for a 16-token input of random letters instead of eng-fra's 64."""
    return 2 * src_len + 10


def check_beam_size(beam_size: object) -> None:
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or not 1 <= beam_size <= MAX_BEAM_SIZE:
        raise ValueError(f"beam_size must be an integer from 1 to {MAX_BEAM_SIZE}, got {beam_size!r:.40}")


def new_cache(model: Transformer, use_cache: bool) -> DecoderCache | None:
    """A fresh cache for one decoding call, or None (re-run whole prefixes) if not wanted or an ablation is on."""
    return DecoderCache(model.config.num_decoder_layers) if use_cache and not edits_active() else None


def next_token_log_probs(
    model: Transformer, tokens: torch.Tensor, memory: torch.Tensor, src: torch.Tensor, cache: DecoderCache | None,
    last: int = 1,
) -> torch.Tensor:
    """log p(next token | tokens up to there, src) after each of the last `last` tokens: (batch, last, tgt_vocab).
    Padding and BOS are never generated, so they get -inf (unless one is also the end token: BART starts with </s>,
    GPT-2 pads with it). With a cache, only the tokens it has not seen yet are run,
    and only the last `last` go through the output projection."""
    fresh = tokens if cache is None else tokens[:, cache.length:]
    log_probs = model.decode(fresh, memory, src, cache, positions=slice(-last, None)).log_softmax(dim=-1)
    config = model.config
    log_probs[..., sorted({config.pad_id, config.bos_id} - {config.eos_id})] = float("-inf")
    return log_probs


def index_ngrams(tokens: list[int], places: dict[tuple[int, ...], int], since: int = 0) -> None:
    """Record in `places` where the tokens after each GUESS_NGRAM-gram of `tokens` start, for the n-grams followed by
    a token and not recorded before (`since`: how many tokens were indexed before); a first place is never moved."""
    for end in range(max(since, GUESS_NGRAM), len(tokens)):
        places.setdefault(tuple(tokens[end - GUESS_NGRAM:end]), end)


class PromptLookup:
    """Guesses of each row's next tokens by prompt lookup (Saxena 2023; transformers' `prompt_lookup_num_tokens`):
    the tokens that followed the first occurrence of the row's last GUESS_NGRAM tokens earlier in its own output, or
    else in its source. The outputs are the caller's lists, indexed as they grow."""

    def __init__(self, sources: list[list[int]], outputs: list[list[int]]) -> None:
        self.sources, self.outputs = sources, outputs
        self.in_source: list[dict[tuple[int, ...], int]] = [{} for _ in sources]
        for source, places in zip(sources, self.in_source):
            index_ngrams(source, places)
        self.in_output: list[dict[tuple[int, ...], int]] = [{} for _ in outputs]
        self.indexed = [0] * len(outputs)  # how many tokens of each output are in its index

    def guess(self, row: int, most: int) -> list[int]:
        """Up to `most` tokens that may come next in `row` (none if its last n-gram was not seen before)."""
        output, places = self.outputs[row], self.in_output[row]
        index_ngrams(output, places, self.indexed[row])
        self.indexed[row] = len(output)
        tail = tuple(output[-GUESS_NGRAM:])
        if tail in places:
            return output[places[tail]:places[tail] + most]
        start = self.in_source[row].get(tail)
        return [] if start is None else self.sources[row][start:start + most]


def agreeing(guessed: list[int], chosen: list[int]) -> int:
    """How many guesses, from the first on, are the model's own choices (`chosen[i]` follows the guesses before i).
    Guesses after an end of sentence may count too: the row's output is padding from there on."""
    count = 0
    while count < len(guessed) and guessed[count] == chosen[count]:
        count += 1
    return count


def start(model: Transformer, src: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, list[list[int]]]:
    """The encoder's memory, the source its padding mask comes from, and each row's start: BOS after an encoder; in
    a decoder-only model no memory and no source, and the prompt `src` (rows of one length) is what is continued."""
    if model.encoder is None:
        return None, None, src.tolist()
    return model.encode(src), src, [[model.config.bos_id] for _ in range(src.size(0))]


@torch.no_grad()
def greedy(
    model: Transformer, src: torch.Tensor, max_len: int | list[int] | None = None, use_cache: bool = True,
    guess: bool = True,
) -> torch.Tensor:
    """(batch, src_len) source ids -> (batch, length) decoder sequences, taking the most likely token each step.
    A decoder-only model continues the prompt `src`: its sequences start with it. `max_len` may be a list, one
    limit per row.

    With the cache, each decoder call also runs `PromptLookup`'s guesses of the next tokens, and keeps those that
    are the model's own choices, then its choice after them: the tokens of one step at a time, in fewer calls. A call
    of k + 1 tokens reads the weights once, as a call of one does (a 256-token output that repeats itself takes a
    fraction of the calls; docs/performance.md); the cache forgets the guesses that were not kept. The rows advance
    together, by the guesses kept in every one. Tokens are kept in lists: a step's bookkeeping in tensors cost more.
    `guess=False` runs one token per call: the reference the guesses are tested and benchmarked against; so does a
    call that captures, so that its record holds the last token's call, as without guesses."""
    config, limits = model.config, _row_limits(model, max_len, src.size(0))
    max_len = max(limits)
    memory, source, outputs = start(model, src)
    cache = new_cache(model, use_cache)
    done = [False] * src.size(0)
    # With one vocabulary the source's ids are the output's, and worth looking up.
    lookup = PromptLookup(src.tolist() if config.share_embeddings else [[] for _ in outputs], outputs)
    guessing = guess and cache is not None and not captures_active()  # a capture would record wrong guesses' rows
    while len(outputs[0]) < max_len and not all(done):
        most = min(max_len - len(outputs[0]) - 1, MOST_GUESSES) if guessing else 0
        found = [None if finished else lookup.guess(row, most) for row, finished in enumerate(done)]
        k = min(len(ahead) for ahead in found if ahead is not None)
        guessed = [[config.pad_id] * k if ahead is None else ahead[:k] for ahead in found]  # (batch, k)
        tokens = src.new_tensor([output + ahead for output, ahead in zip(outputs, guessed)])  # (batch, length + k)
        # (batch, k + 1) the choice after the last token, then after each guess
        chosen = next_token_log_probs(model, tokens, memory, source, cache, last=k + 1).argmax(dim=-1).tolist()
        kept = min(agreeing(ahead, choice) for ahead, choice, finished in zip(guessed, chosen, done) if not finished)
        new = [[config.pad_id] * (kept + 1) if finished else ahead[:kept] + [choice[kept]]
               for ahead, choice, finished in zip(guessed, chosen, done)]  # (batch, kept + 1)
        # Each row's EOS ends it (padding after), and the batch stops once every row has ended, as one step at a time.
        ends = [-1 if finished else row.index(config.eos_id) if config.eos_id in row else None
                for row, finished in zip(new, done)]
        stop = kept + 1 if None in ends else max(ends) + 1
        for output, row, end in zip(outputs, new, ends):
            output += row[:stop] if end is None else (row[:end + 1] + [config.pad_id] * stop)[:stop]
        done = [end is not None or len(output) >= limit for output, end, limit in zip(outputs, ends, limits)]
        if kept < k:
            cache.truncate(len(outputs[0]) - 1)  # the cache keeps what was fed: every token but the last
    # A row whose guesses took it past its own limit is cut there: the tokens before are those it has alone.
    return src.new_tensor([output[:limit] + [config.pad_id] * (len(output) - limit)
                           for output, limit in zip(outputs, limits)])


def check_coverage_penalty(beta: object) -> None:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta < float("inf"):
        raise ValueError(f"coverage_penalty must be a finite number of at least 0, got {beta!r:.40}")


def coverage_term(coverage: torch.Tensor, src_real: torch.Tensor) -> torch.Tensor:
    """GNMT's coverage penalty before its weight: sum over the source pieces of log min(coverage, 1), 0 when every
    piece has had a total attention of at least 1 and more negative the more pieces were left out.
    (rows, src_len) attention summed over output steps, (rows, src_len) 1.0 for real pieces, 0.0 for padding ->
    (rows,)."""
    return (coverage.clamp(min=COVERAGE_FLOOR, max=1.0).log() * src_real).sum(dim=-1)


@torch.no_grad()
def beam_search(
    model: Transformer, src: torch.Tensor, beam_size: int = 4, max_len: int | list[int] | None = None,
    length_penalty: float = 0.6, use_cache: bool = True, coverage_penalty: float = 0.0,
) -> torch.Tensor:
    """(batch, src_len) -> (batch, length): the best of `beam_size` hypotheses per input (`max_len`: one limit for
    all, or one per input).

    Hypotheses compete on summed log-probability while searching; the final choice divides each by the GNMT length
    penalty ((5 + length) / 6) ** length_penalty, so longer translations are not punished for every extra token.

    `coverage_penalty` β > 0 adds β x `coverage_term` (Wu et al. 2016) to every comparison, in the search and in the
    final choice: a hypothesis whose cross-attention has so far left source pieces out ranks lower, which keeps a
    small model from dropping a trailing phrase. A hypothesis's coverage is the last decoder layer's cross-attention,
    heads averaged, summed over the query rows it has run (one per token, the row that produced EOS included).
    Measuring it captures that one layer at every step.

    An input's search stops when every beam has finished, at its max_len, or as soon as no active hypothesis can end
    better than its best finished one (`settled`): the same tokens as running on, in fewer steps.
    """
    tokens, final = search_beams(model, src, beam_size, max_len, length_penalty, use_cache, coverage_penalty)
    best = final.argmax(dim=-1)  # (batch,)
    return tokens[torch.arange(src.size(0)), best]


@dataclass(frozen=True)
class BeamStep:
    """What one step of beam search saw and chose, as `search_beams` hands it to its observer."""

    tokens: torch.Tensor  # (batch * beam, length) the hypotheses the step extended, BOS first
    done: torch.Tensor  # (batch * beam,) which of them had finished (they only extend with free padding)
    candidates: torch.Tensor  # (batch, beam, vocab) summed log-probability of each hypothesis + each piece
    coverage: torch.Tensor  # (batch * beam,) β x coverage_term after this step's query row (0 without β)
    chosen: torch.Tensor  # (batch, beam) indices into each input's (beam x vocab) candidates: the new beam


@torch.no_grad()
def search_beams(
    model: Transformer, src: torch.Tensor, beam_size: int, max_len: int | list[int] | None, length_penalty: float,
    use_cache: bool, coverage_penalty: float, observe: Callable[[BeamStep], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Beam search (see beam_search): the last beam of every input, (batch, beam, length), and the final score of
    each of its hypotheses, (batch, beam). `observe` is called with every step's BeamStep (beam_tree records them).

    An input that reaches its own limit (max_len one per input) has all its hypotheses marked finished: from then on
    they only extend with free padding, which changes neither their scores nor their coverage, so the batch ends
    with the beam that input ends with alone."""
    check_beam_size(beam_size)
    check_coverage_penalty(coverage_penalty)
    if not model.config.cross_attention:
        raise ValueError(f"beam search translates: a {model.config.stacks} model has no encoder and decoder pair")
    config, batch, vocab = model.config, src.size(0), model.config.tgt_vocab_size
    limits = _row_limits(model, max_len, batch)
    max_len = max(limits)
    row_limit = torch.tensor(limits, device=src.device).repeat_interleave(beam_size)  # (batch * beam,)
    # (batch, 1) the length penalty of each input's longest possible output, for `settled`
    longest_penalty = torch.tensor([[((5.0 + limit - 1) / 6.0) ** length_penalty] for limit in limits],
                                   device=src.device)
    memory = model.encode(src).repeat_interleave(beam_size, dim=0)  # (batch * beam, src_len, d_model)
    src = src.repeat_interleave(beam_size, dim=0)  # (batch * beam, src_len)
    src_real = (src != config.pad_id).float()  # (batch * beam, src_len)
    last_cross = Site("decoder.cross_attn", config.num_decoder_layers - 1)
    coverage = memory.new_zeros(src.shape)  # (batch * beam, src_len) attention each source piece has had so far
    tokens = src.new_full((batch * beam_size, 1), config.bos_id)
    scores = torch.full((batch, beam_size), float("-inf"), device=src.device)
    scores[:, 0] = 0.0  # all beams start as the same hypothesis: let only one of them expand at first
    done = torch.zeros(batch * beam_size, dtype=torch.bool, device=src.device)
    first_beam = torch.arange(batch, device=src.device)[:, None] * beam_size  # (batch, 1) index of each input's beam 0
    cache = new_cache(model, use_cache)
    searching = list(range(batch))  # the inputs still in the search, by their place in `src`
    ended: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # input -> its last beam (beam, length), final scores

    def final_scores() -> torch.Tensor:
        """(batch, beam) the final score of each hypothesis as it stands."""
        lengths = (tokens[:, 1:] != config.pad_id).sum(dim=-1).view(batch, beam_size)
        covered = (coverage_penalty * coverage_term(coverage, src_real)).view(batch, beam_size)
        return scores / ((5.0 + lengths) / 6.0) ** length_penalty + covered

    while tokens.size(1) < max_len and not done.all():
        with capture(model, [last_cross]) if coverage_penalty else nullcontext() as record:
            log_probs = next_token_log_probs(model, tokens, memory, src, cache)[:, -1]  # (batch * beam, vocab)
        log_probs[done] = float("-inf")
        log_probs[done, config.pad_id] = 0.0  # a finished hypothesis only extends with free padding
        candidates = (scores.view(-1, 1) + log_probs).view(batch, beam_size, vocab)
        ranks, penalty = candidates, coverage.new_zeros(batch * beam_size)
        if coverage_penalty:
            step = record[last_cross][:, :, -1].mean(dim=1)  # (batch * beam, src_len) this step's query, heads averaged
            coverage = coverage + step * ~done[:, None]  # a finished hypothesis runs no more rows of its own
            penalty = coverage_penalty * coverage_term(coverage, src_real)  # (batch * beam,)
            ranks = candidates + penalty.view(batch, beam_size, 1)
        flat = ranks.view(batch, -1).topk(beam_size, dim=-1).indices  # (batch, beam)
        if observe is not None:
            observe(BeamStep(tokens, done, candidates, penalty, flat))
        scores = candidates.view(batch, -1).gather(1, flat)
        origin = (first_beam + flat // vocab).view(-1)  # (batch * beam) row each new hypothesis extends
        next_token = (flat % vocab).view(-1)
        tokens = torch.cat([tokens[origin], next_token[:, None]], dim=1)
        done = done[origin] | (next_token == config.eos_id) | (tokens.size(1) >= row_limit)
        coverage = coverage[origin]
        if cache is not None:
            cache.reorder(origin)
        over = done.view(batch, beam_size).all(dim=-1)  # (batch,) inputs whose search has ended
        if length_penalty >= 0 and bool(done.any()):
            over |= settled(scores, final_scores(), done.view(batch, beam_size), longest_penalty)
        if bool(over.any()):
            # An input whose search has ended leaves the batch, with the beam and scores it ends with alone: the
            # others' steps cost less without its rows (a batch's inputs end tens of steps apart).
            beams, final = tokens.view(batch, beam_size, -1), final_scores()
            for row in over.nonzero().flatten().tolist():
                ended[searching[row]] = beams[row], final[row]
            stay = ~over
            rows = stay.repeat_interleave(beam_size).nonzero().flatten()  # (staying inputs * beam,)
            memory, src, src_real, coverage, tokens, done, row_limit = (
                kept[rows] for kept in (memory, src, src_real, coverage, tokens, done, row_limit))
            scores, longest_penalty = scores[stay], longest_penalty[stay]
            searching = [place for place, stays in zip(searching, stay.tolist()) if stays]
            batch = len(searching)
            first_beam = first_beam[:batch]
            if cache is not None:
                cache.keep(rows)
    if searching:  # stopped at max_len
        beams, final = tokens.view(batch, beam_size, -1), final_scores()
        ended.update((place, (beams[row], final[row])) for row, place in enumerate(searching))
    length = max(beam.size(1) for beam, _ in ended.values())
    return (torch.stack([torch.cat([beam, beam.new_full((beam_size, length - beam.size(1)), config.pad_id)], dim=1)
                         for beam, _ in (ended[place] for place in range(len(ended)))]),  # (batch, beam, length)
            torch.stack([ended[place][1] for place in range(len(ended))]))


def settled(scores: torch.Tensor, final: torch.Tensor, done: torch.Tensor, longest_penalty: torch.Tensor | float
            ) -> torch.Tensor:
    """(batch,) bool: the inputs for which more steps of beam search cannot change its choice, so that their search may
    stop with exactly the tokens it would choose running on (length_penalty >= 0). An input is settled when its best
    finished hypothesis f (by final score) beats the best that any active hypothesis's descendants can end with:
    their summed log-probability only falls (it is at most the active one's now, s <= 0), their coverage part is at
    most 0, and the length penalty grows with length, so they end at most s / longest_penalty. That also keeps f in
    the beam: s / longest_penalty < final(f) gives s < f's rank in the search (its score plus its coverage part, as
    longest_penalty >= 1 and f's own penalty is at most longest_penalty), so no descendant outranks it. (batch,
    beam) each: summed log-probabilities, final scores, finished; longest_penalty: the length penalty of an output
    of max_len - 1 tokens, (batch, 1) one per input or one for all."""
    best = torch.where(done, final, float("-inf")).amax(dim=-1, keepdim=True)  # (batch, 1) best finished
    return done.any(dim=-1) & (done | (scores / longest_penalty < best)).all(dim=-1)


@dataclass(frozen=True)
class BeamNode:
    """One hypothesis of a beam tree: its pieces, its scores, and whether it made the beam."""

    tokens: tuple[int, ...]  # BOS first; the last is the piece its step added
    parent: int  # index of the hypothesis it extends in BeamTree.nodes (-1: the root, BOS alone)
    log_prob: float  # summed log-probability of its pieces
    rank: float  # what it competed on in the search: log_prob plus the coverage part
    final: float  # what the final choice compares: log_prob / length penalty plus the coverage part
    kept: bool  # made the beam at its step; False: pruned there (never extended)

    @property
    def depth(self) -> int:
        """The step that added its last piece, counted from 1 (0: the root)."""
        return len(self.tokens) - 1


@dataclass(frozen=True)
class BeamTree:
    """Every hypothesis beam search considered for one input: at each step the `beam_size` best extensions of each
    hypothesis in the beam (no other can make the beam), those kept and those pruned, and the chosen one."""

    nodes: tuple[BeamNode, ...]  # the root first, then step by step, each step's in the order of their parents
    beams: tuple[tuple[int, ...], ...]  # the hypotheses in the beam after each step (a finished one stays in it)
    best: int  # the hypothesis beam_search returns

    def path(self, node: int) -> list[int]:
        """The hypotheses from the root to `node`, the root first."""
        path = [node]
        while self.nodes[path[-1]].parent >= 0:
            path.append(self.nodes[path[-1]].parent)
        return path[::-1]


@torch.no_grad()
def beam_tree(
    model: Transformer, src: torch.Tensor, beam_size: int = 4, max_len: int | None = None, length_penalty: float = 0.6,
    use_cache: bool = True, coverage_penalty: float = 0.0,
) -> BeamTree:
    """beam_search of one input (1, src_len), recording every hypothesis of every step. Its best hypothesis is the
    one beam_search returns: the same search, observed. Each step adds, for every unfinished hypothesis in the beam,
    its `beam_size` most likely extensions (one of them outranks each extension left out, so none of those could
    have made the beam); the beam_size best of all of them are kept, the others pruned."""
    if src.size(0) != 1:
        raise ValueError(f"beam_tree reads one input, got a batch of {src.size(0)}")
    config = model.config
    nodes = [BeamNode((config.bos_id,), -1, 0.0, 0.0, 0.0, True)]
    in_row: list[int | None] = [0] + [None] * (beam_size - 1)  # the node each row of the beam holds (None: unused)
    beams: list[tuple[int, ...]] = []

    def record(step: BeamStep) -> None:
        candidates, chosen = step.candidates[0].cpu(), step.chosen[0].cpu().tolist()  # (beam, vocab), (beam,)
        vocab, length = candidates.size(1), step.tokens.size(1)  # the new pieces are the length-th generated
        divisor = ((5.0 + length) / 6.0) ** length_penalty
        made: dict[int, int] = {}  # flat index (row x vocab + piece) -> node
        for row, node in enumerate(in_row):
            if node is None or bool(step.done[row]):
                continue
            coverage = float(step.coverage[row])
            pieces = candidates[row].topk(min(beam_size, vocab)).indices.tolist()
            pieces += [index % vocab for index in chosen if index // vocab == row and index % vocab not in pieces]
            for piece in sorted(pieces, key=lambda piece: -float(candidates[row, piece])):
                log_prob = float(candidates[row, piece])
                if log_prob == float("-inf"):
                    continue
                made[row * vocab + piece] = len(nodes)
                nodes.append(BeamNode(nodes[node].tokens + (piece,), node, log_prob, log_prob + coverage,
                                      log_prob / divisor + coverage, row * vocab + piece in chosen))
        # A finished hypothesis stays in the beam as itself, extended by padding.
        in_row[:] = [in_row[index // vocab] if bool(step.done[index // vocab]) else made.get(index)
                     for index in chosen]
        beams.append(tuple(node for node in in_row if node is not None))

    _, final = search_beams(model, src, beam_size, max_len, length_penalty, use_cache, coverage_penalty, record)
    best = in_row[int(final[0].argmax())]
    return BeamTree(tuple(nodes), tuple(beams), best)


@dataclass(frozen=True)
class Sampling:
    """How each step picks its piece from the model's distribution p: p ** (1 / temperature), renormalised; then
    only the top_k most likely pieces, and of those the fewest whose probabilities add up to top_p; then a draw
    from what is left, by a generator seeded with `seed` (the same seed draws the same pieces)."""

    temperature: float = 1.0  # 0: always the most likely piece (greedy); below 1 sharper, above 1 flatter
    top_k: int = 0  # 0: no limit
    top_p: float = 1.0  # 1: no limit
    seed: int = 0

    def __post_init__(self) -> None:
        checks = (("temperature", self.temperature, lambda t: 0 <= t <= MAX_TEMPERATURE),
                  ("top_k", self.top_k, lambda k: isinstance(k, int) and k >= 0),
                  ("top_p", self.top_p, lambda p: 0 < p <= 1),
                  ("seed", self.seed, lambda seed: isinstance(seed, int) and 0 <= seed < 2 ** 63))
        for name, value, fits in checks:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not fits(value):
                raise ValueError(f"{name} is out of range: {value!r:.40} (see Sampling)")


MAX_TEMPERATURE = 100.0  # p ** (1 / 100) is all but uniform already
GREEDY = Sampling(temperature=0.0)


def shape_distribution(log_probs: torch.Tensor, sampling: Sampling) -> tuple[torch.Tensor, torch.Tensor]:
    """(vocab,) log-probabilities -> (vocab,) probabilities after temperature, and (vocab,) after truncation by
    top-k and top-p (what the piece is drawn from). Temperature 0 puts all the probability on the most likely."""
    if sampling.temperature == 0:
        tempered = torch.zeros_like(log_probs)
        tempered[log_probs.argmax()] = 1.0
    else:
        tempered = (log_probs / sampling.temperature).softmax(dim=-1)
    order = tempered.argsort(descending=True, stable=True)
    ranked = tempered[order]  # (vocab,) most likely first
    keep = torch.ones_like(ranked, dtype=torch.bool)
    if sampling.top_k:
        keep[sampling.top_k:] = False
    if sampling.top_p < 1:
        within = torch.where(keep, ranked, 0.0)
        within = within / within.sum()
        keep &= within.cumsum(dim=-1) - within < sampling.top_p  # the probability before each is still short of p
    truncated = torch.zeros_like(tempered)
    truncated[order[keep]] = ranked[keep]
    return tempered, truncated / truncated.sum()


@dataclass(frozen=True)
class Step:
    """One step of generation, as the decoding view shows it."""

    index: int  # 0 for the first generated token
    prefix: list[int]  # decoder input that produced this token, BOS first
    token_id: int  # the token chosen (the most likely, or drawn)
    prob: float  # its probability by the model
    top: list[tuple[int, float]]  # the most likely candidates at this step by the model, best first
    cross_attention: torch.Tensor  # (layers, heads, src_len) this step's query row of every cross-attention head
    distributions: torch.Tensor  # (3, vocab) the model's probabilities, after temperature, after truncation


@torch.no_grad()
def decode_steps(
    model: Transformer, src: torch.Tensor, max_len: int | None = None, top_k: int = 5, use_cache: bool = True,
    sampling: Sampling = GREEDY,
) -> Iterator[Step]:
    """Decoding of one input (1, src_len), yielding each step with its cross-attention: greedy, or drawing each
    piece as `sampling` says (on the CPU, so that a seed draws the same pieces on every device). A decoder-only model
    continues the prompt `src`, and its steps' cross-attention is empty, (0, heads, 0)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r:.40}")
    config, max_len = model.config, _limit(model, max_len)
    memory, source, (prefix,) = start(model, src)
    cross_sites = [Site("decoder.cross_attn", i) for i in range(config.layers_of("decoder.cross_attn"))]
    cache = new_cache(model, use_cache)
    generator = torch.Generator().manual_seed(sampling.seed)
    while len(prefix) < max_len:
        with capture(model, cross_sites) as record:
            log_probs = next_token_log_probs(model, src.new_tensor([prefix]), memory, source, cache)[0, -1].cpu()
        probs = log_probs.exp()
        top = probs.topk(min(top_k, probs.numel()))
        tempered, truncated = shape_distribution(log_probs, sampling)
        token_id = (int(log_probs.argmax()) if sampling.temperature == 0 else
                    int(torch.multinomial(truncated, 1, generator=generator)))
        yield Step(
            index=len(prefix) - 1,
            prefix=list(prefix),
            token_id=token_id,
            prob=float(probs[token_id]),
            top=[(int(i), float(p)) for i, p in zip(top.indices, top.values)],
            cross_attention=(record.stack("decoder.cross_attn")[:, :, -1].cpu()  # (layers, heads, src_len)
                             if cross_sites else torch.zeros(0, config.num_heads, 0)),
            distributions=torch.stack([probs, tempered, truncated]),  # (3, vocab)
        )
        prefix.append(token_id)
        if token_id == config.eos_id:
            return
