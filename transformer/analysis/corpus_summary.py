"""Everything the corpus pictures show, computed once per checkpoint and corpus and kept in the disk cache.

    summary = corpus_summary(checkpoint, count=1000)     # read from the cache, or computed and kept there
    summary.map()                                        # the map of heads (head_map)
    summary.picture(("decoder.cross_attn", 1, 0))        # one head's queries and keys in 2-D (qk_space.projected)
    summary.neuron_examples(("encoder", 0), 17)          # a neuron's top examples (top_neuron_examples)

A summary reads the first `count` pairs of the checkpoint's corpus (corpus_pairs: its dev split, its held-out
sentences, or a synthetic task's fresh inputs), teacher-forced, in three passes of chunks: every head's patterns and
their divergences (head_map.head_patterns), the queries and keys of every head over the first PICTURE_SENTENCES
(projected by PCA; the vectors are dropped once projected), and every feed-forward layer's top examples. Each
chunk's forward pass runs inside the caller's `turn()`, so that a server can interleave its other passes and count
progress. The cache key is a digest of the weights and of the pairs read: new weights or another corpus make a new
entry, and the old one ages out of the bounded folder.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from itertools import islice

import numpy as np
import pandas as pd
import torch.distributed as dist

from ..inference.translation import Checkpoint
from ..io.disk_cache import Arrays, DiskCache, key_of, model_digest
from ..model.model import Transformer
from ..model.sites import KIND_SIDES
from .corpus_heads import STATISTICS, corpus_pairs, process_share
from .head_map import BATCH_SIZE as PATTERN_BATCH
from .head_map import HeadPatterns, _heads_of, follow_head, head_map, head_patterns, match_heads
from .qk_space import BATCH_SIZE as PICTURE_BATCH
from .qk_space import (
    MAX_POINTS,
    corpus_examples,
    placed,
    points_frame,
    projected,
    queries_keys,
    queries_keys_of,
    top_neuron_examples_of,
)

FORMAT = 1  # of a cache entry: a change of what is stored changes every key
SENTENCES = 200  # read by default: eng-fra's took 8-15 s on a busy two-core machine
MAX_SENTENCES = 1000  # the app's limit (eng-fra's took 16 s on two free cores, 23-41 s on busy ones)
PICTURE_SENTENCES = 200  # queries and keys pictured per head (thousands of points: drawn in a second)
PICTURE_BYTES = 256 * 2**20  # the query and key vectors of every head held at once before projection
TSNE_POINTS = 1000  # a t-SNE picture's points (on a busy two-core machine 4,000 took 29 s, 1,500 10 s)
MATCH_SENTENCES = 200  # pairs heads are matched on (and followed through snapshots): eng-fra's head followed through
# its 4 snapshots took 31 s on 1,000 pairs of a busy two-core machine, and about a fifth of that on 200
# What a summary of n inputs takes at most for the shipped checkpoints, SECONDS_FIXED + n * SECONDS_PER_INPUT (the view
# promises it): on a two-core machine busy with other work eng-fra's 200 inputs took 8-15 s and its 1,000 23-41 s
# (benchmarks/corpus.py, two runs), every other shipped checkpoint's 200 at most 7 s.
SECONDS_FIXED, SECONDS_PER_INPUT = 8.5, 0.0325
TOP_EXAMPLES = 10  # per neuron
CONTEXT = 3  # pieces either side of a neuron's token
MAX_DIVERGENCE = math.log(2)

Head = tuple[str, int, int]
Layer = tuple[str, int]
Turn = Callable[[], AbstractContextManager]


@dataclass(frozen=True)
class CorpusSummary:
    """`pairs` read, teacher-forced; `pieces` each pair's source and decoder-input pieces {"src": [...], "tgt": [...]};
    `patterns` every head's patterns; `points` each head's queries and keys in 2-D (PCA) over the first
    `picture_sentences` pairs: (xy (queries + keys, 2), each query's argmax key position), in qk_space.projected's
    row order; `neurons` each (stack, layer)'s top examples, numbers only (neuron, rank, activation, sentence,
    position); `key` its cache key. picture() and neuron_examples() rebuild the frames the figures take, for one head
    or neuron at a time (every head's at once would be most of a summary's reading time)."""

    key: str
    pairs: list[tuple[str, str]]
    pieces: dict[str, list[list[str]]]
    patterns: HeadPatterns
    picture_sentences: int
    points: dict[Head, tuple[np.ndarray, np.ndarray]]
    neurons: dict[Layer, pd.DataFrame]

    def map(self) -> pd.DataFrame:
        return head_map(self.patterns)

    def picture(self, head: Head) -> pd.DataFrame:
        """One head's queries and keys as qk_space.projected gives them (x, y, side, sentence, position, piece,
        argmax, pieces)."""
        xy, argmax = self.points[head]
        return _placed(_sentences(self.pieces, head[0], self.picture_sentences), argmax, xy)

    def neuron_examples(self, layer: Layer, neuron: int) -> pd.DataFrame:
        """One neuron's top examples as qk_space.top_neuron_examples gives them (with piece, before, after, length)."""
        tops = self.neurons[layer]
        return _with_context(tops[tops["neuron"] == neuron], self.pieces["src" if layer[0] == "encoder" else "tgt"])

    def neuron_order(self, layer: Layer, by: str) -> pd.DataFrame:
        """The layer's neurons, the most worth a look first (NEURON_ORDERS), one row each: neuron, strongest (its
        highest activation), tokens (how many distinct pieces its top examples are), top (its highest example's
        piece). Ties: the lower neuron first."""
        if by not in NEURON_ORDERS:
            raise ValueError(f"unknown order {by!r}; choose from {list(NEURON_ORDERS)}")
        tops = self.neurons[layer]
        pieces = self.pieces["src" if layer[0] == "encoder" else "tgt"]
        texts = [pieces[int(s)][int(p)] for s, p in zip(tops["sentence"], tops["position"])]
        grouped = tops.assign(piece=texts).sort_values(["neuron", "rank"]).groupby("neuron", sort=True)
        table = pd.DataFrame({"strongest": grouped["activation"].max(), "tokens": grouped["piece"].nunique(),
                              "top": grouped["piece"].first()}).reset_index()
        keys = ["strongest"] if by == "strongest" else ["tokens", "strongest"]
        ascending = [False] if by == "strongest" else [True, False]
        return table.sort_values([*keys, "neuron"], ascending=[*ascending, True], kind="stable").reset_index(drop=True)


NEURON_NUMBERS = ["neuron", "rank", "activation", "sentence", "position"]
# CorpusSummary.neuron_order's orders: what each puts first, in words a view can show.
NEURON_ORDERS = {"strongest": "strongest first (its highest activation over the inputs)",
                 "selective": f"most selective first (fewest distinct tokens among its top {TOP_EXAMPLES}, then "
                              "strongest)"}


def ffn_layers(checkpoint: Checkpoint) -> list[Layer]:
    config = checkpoint.config
    return [(stack, layer) for stack, kind in (("encoder", "encoder.self_attn"), ("decoder", "decoder.self_attn"))
            for layer in range(config.layers_of(kind))]


def chunks(count: int) -> int:
    """How many forward passes (turns) a summary of `count` pairs takes at most: a caller's progress bar."""
    return (math.ceil(count / PATTERN_BATCH) + math.ceil(min(count, PICTURE_SENTENCES) / PICTURE_BATCH)
            + math.ceil(count / PICTURE_BATCH))


def _picture_points(checkpoint: Checkpoint, heads: Sequence[Head]) -> int:
    """Points per head such that every head's query and key vectors fit PICTURE_BYTES (float32)."""
    d_head = checkpoint.config.d_model // checkpoint.config.num_heads
    return max(1000, min(MAX_POINTS, PICTURE_BYTES // (4 * d_head * max(1, len(heads)))))


def summarise(checkpoint: Checkpoint, pairs: Sequence[tuple[str, str]], turn: Turn = nullcontext,
              distributed: bool = False) -> CorpusSummary:
    """The summary of `pairs` (computed, not cached: see corpus_summary). `distributed`: under an initialised
    torch.distributed group, the ranks share the work (each reads its share of the chunks for the patterns and the
    neurons, and pictures its share of the heads) and every rank returns the whole summary."""
    pairs = list(pairs)
    by_kind = _heads_of(checkpoint)
    heads = [head for kind_heads in by_kind.values() for head in kind_heads]
    rank, world = process_share() if distributed else (0, 1)
    patterns = head_patterns(checkpoint, pairs, turn=turn, distributed=distributed)
    mine = heads[rank::world]
    found = queries_keys_of(checkpoint, mine, pairs, PICTURE_SENTENCES, _picture_points(checkpoint, heads),
                            turn=turn, bounded_by=by_kind) if mine else {}
    points = {}
    for head, data in found.items():
        frame = projected(data)
        points[head] = (frame[["x", "y"]].to_numpy(np.float32),
                        frame.loc[frame["side"] == "query", "argmax"].to_numpy(np.int32))
    sentences = len(next(iter(found.values())).pieces) if found else 0
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, (points, sentences))
        points = {head: part[0][head] for head in heads for part in gathered if head in part[0]}
        sentences = max(part[1] for part in gathered)
    neurons = top_neuron_examples_of(checkpoint, ffn_layers(checkpoint), pairs, TOP_EXAMPLES, CONTEXT,
                                     max_sentences=len(pairs), turn=turn, distributed=distributed)
    examples = corpus_examples(checkpoint, pairs)
    pieces = {"src": [checkpoint.src_tokenizer.pieces(src) for src, _ in examples],
              "tgt": [checkpoint.tgt_tokenizer.pieces(tgt) for _, tgt in examples]}
    return CorpusSummary("", pairs, pieces, patterns, sentences, points,
                         {layer: frame[NEURON_NUMBERS] for layer, frame in neurons.items()})


# ----------------------------------------------------------------------------- to and from a cache entry

def _name(*parts: object) -> str:
    return "/".join(map(str, parts))


def encode(summary: CorpusSummary) -> tuple[Arrays, object]:
    """The summary as a cache entry: arrays and a JSON value."""
    arrays = {"divergence": np.asarray(summary.patterns.divergence, np.float64),
              "statistics": summary.patterns.statistics[list(STATISTICS)].to_numpy(np.float64)}
    for head, (xy, argmax) in summary.points.items():
        arrays[_name("picture", *head, "xy")] = np.asarray(xy, np.float32)
        arrays[_name("picture", *head, "argmax")] = np.asarray(argmax, np.int32)
    for layer, frame in summary.neurons.items():
        for column in NEURON_NUMBERS:
            arrays[_name("neurons", *layer, column)] = frame[column].to_numpy(
                np.float32 if column == "activation" else np.int32)
    value = {"format": FORMAT, "pairs": [list(pair) for pair in summary.pairs], "pieces": summary.pieces,
             "heads": [list(head) for head in summary.patterns.heads], "statistics": list(STATISTICS),
             "picture_sentences": summary.picture_sentences}
    return arrays, value


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(f"the cached corpus summary does not hold {what}")


def _sentences(pieces: dict[str, list[list[str]]], kind: str, count: int) -> list[tuple[list[str], list[str]]]:
    """The first `count` sentences' (query, key) pieces for heads of `kind`."""
    query_side, key_side = KIND_SIDES[kind]
    return list(zip(pieces[query_side][:count], pieces[key_side][:count]))


def _placed(pieces: list[tuple[list[str], list[str]]], argmax: np.ndarray, xy: np.ndarray) -> pd.DataFrame:
    return placed(points_frame(pieces, argmax), pieces, xy)


def _with_context(tops: pd.DataFrame, pieces: list[list[str]]) -> pd.DataFrame:
    """Top examples (NEURON_NUMBERS) with each token's piece, CONTEXT pieces either side and its sentence's length."""
    rows = []
    for neuron, rank, activation, sentence, position in tops[NEURON_NUMBERS].itertuples(index=False):
        text = pieces[int(sentence)]
        p = int(position)
        rows.append((int(neuron), int(rank), float(activation), int(sentence), p, text[p],
                     tuple(text[max(0, p - CONTEXT):p]), tuple(text[p + 1:p + 1 + CONTEXT]), len(text)))
    return pd.DataFrame(rows, columns=[*NEURON_NUMBERS, "piece", "before", "after", "length"])


def _neuron_numbers(arrays: dict[str, np.ndarray], lengths: np.ndarray, d_ff: int) -> pd.DataFrame:
    neuron, rank, sentence, position = (arrays[c].astype(np.int64) for c in ("neuron", "rank", "sentence", "position"))
    activation = arrays["activation"].astype(np.float64)
    _check(len({len(neuron), len(rank), len(sentence), len(position), len(activation)}) == 1, "neurons of one length")
    _check(bool(np.all((neuron >= 0) & (neuron < d_ff) & (rank >= 1) & (rank <= TOP_EXAMPLES))), "valid neurons")
    _check(bool(np.all((sentence >= 0) & (sentence < len(lengths)))), "sentences of the corpus")
    _check(bool(np.all((position >= 0) & (position < lengths[np.clip(sentence, 0, max(len(lengths) - 1, 0))]))),
           "positions inside their sentences")
    return pd.DataFrame({"neuron": neuron, "rank": rank, "activation": activation, "sentence": sentence,
                         "position": position})


def decode(checkpoint: Checkpoint, key: str, arrays: Arrays, value: object) -> CorpusSummary:
    """A cache entry back as a summary, once every shape, index and range is what `checkpoint` makes (ValueError
    otherwise: the entry is then rebuilt)."""
    _check(isinstance(value, dict) and value.get("format") == FORMAT, "this format")
    heads = [head for kind_heads in _heads_of(checkpoint).values() for head in kind_heads]
    _check([tuple(head) for head in value["heads"]] == heads and value["statistics"] == list(STATISTICS),
           "this model's heads")
    pairs = [tuple(pair) for pair in value["pairs"]]
    _check(all(len(pair) == 2 and all(isinstance(text, str) for text in pair) for pair in pairs), "text pairs")
    pieces = {side: value["pieces"][side] for side in ("src", "tgt")}
    _check(all(len(pieces[side]) == len(pairs) and all(isinstance(one, list) and all(isinstance(p, str) for p in one)
                                                        for one in pieces[side]) for side in pieces), "the pieces")
    divergence, statistics = arrays["divergence"], arrays["statistics"]
    _check(divergence.shape == (len(heads), len(heads)) and statistics.shape == (len(heads), len(STATISTICS)),
           "this model's heads")
    _check(bool(np.all(np.isfinite(divergence) & (divergence >= 0) & (divergence <= MAX_DIVERGENCE + 1e-9))),
           "divergences")
    patterns = HeadPatterns(heads, divergence, pd.DataFrame(statistics, columns=list(STATISTICS)), len(pairs))
    shown = int(value["picture_sentences"])
    _check(0 <= shown <= len(pairs), "a picture of its corpus")
    points = {}
    for kind, layer, head in heads:
        sentences = _sentences(pieces, kind, shown)
        xy, argmax = (arrays[_name("picture", kind, layer, head, part)] for part in ("xy", "argmax"))
        queries = sum(len(q) for q, _ in sentences)
        _check(xy.shape == (queries + sum(len(k) for _, k in sentences), 2) and bool(np.all(np.isfinite(xy))),
               "each head's points")
        keys_of = np.repeat([len(k) for _, k in sentences], [len(q) for q, _ in sentences])
        _check(argmax.shape == (queries,) and bool(np.all((argmax >= -1) & (argmax < keys_of))), "argmax positions")
        points[(kind, layer, head)] = (xy, argmax)
    neurons = {}
    for stack, layer in ffn_layers(checkpoint):
        lengths = np.array([len(one) for one in pieces["src" if stack == "encoder" else "tgt"]], dtype=np.int64)
        numbers = {column: arrays[_name("neurons", stack, layer, column)] for column in NEURON_NUMBERS}
        neurons[(stack, layer)] = _neuron_numbers(numbers, lengths, checkpoint.config.d_ff)
    return CorpusSummary(key, pairs, pieces, patterns, shown, points, neurons)


# ----------------------------------------------------------------------------- cached

def summary_key(checkpoint: Checkpoint, pairs: Sequence[tuple[str, str]], digest: str | None = None) -> str:
    """The cache key of a summary of `pairs`: the format, the weights' digest (model_digest), and the pairs."""
    return key_of("corpus-summary", FORMAT, digest or model_digest(checkpoint.model), [list(p) for p in pairs])


def corpus_pairs_list(checkpoint: Checkpoint, count: int = SENTENCES) -> list[tuple[str, str]]:
    """The first `count` pairs of the checkpoint's corpus (corpus_heads.corpus_pairs), as a list."""
    return list(islice(corpus_pairs(checkpoint, count), count))


def corpus_summary(checkpoint: Checkpoint, count: int = SENTENCES, *, pairs: Sequence[tuple[str, str]] | None = None,
                   cache: DiskCache | None = None, turn: Turn = nullcontext, digest: str | None = None,
                   distributed: bool = False) -> CorpusSummary:
    """The summary of `pairs` (default: the first `count` of the checkpoint's corpus), from `cache` (default: the
    DiskCache of the environment) or computed and kept there. `digest`: the weights' model_digest, if known.
    `distributed`: under an initialised torch.distributed group, rank 0 alone reads and writes the cache, the ranks
    share the computing (summarise) where there is something to compute, and every rank returns the summary."""
    pairs = corpus_pairs_list(checkpoint, count) if pairs is None else [tuple(pair) for pair in pairs]
    if not pairs:
        raise ValueError(f"{checkpoint.name}: no sentences to read")
    cache, digest = cache or DiskCache(), digest or model_digest(checkpoint.model)
    key = summary_key(checkpoint, pairs, digest)
    rank, world = process_share() if distributed else (0, 1)
    read = []  # the entry decoded while it was checked: a summary's reading is mostly its decoding
    computing = [False]  # rank 0 tells the others whether to join summarise()

    def check(arrays: Arrays, value: object) -> None:
        read.append(decode(checkpoint, key, arrays, value))

    def build() -> tuple[Arrays, object]:
        if world > 1:
            computing[0] = True
            dist.broadcast_object_list(computing, src=0)
        return encode(summarise(checkpoint, pairs, turn, distributed))

    entry = [None]
    if rank == 0:
        entry[0] = cache.get(key, build, check)
        cache.write(_latest_key(digest, len(pairs)), {}, {"summary": key})
    if world > 1:
        if rank == 0 and not computing[0]:
            dist.broadcast_object_list(computing, src=0)  # the entry was read: nothing to compute
        elif rank != 0:
            dist.broadcast_object_list(computing, src=0)
            if computing[0]:
                summarise(checkpoint, pairs, turn, distributed)
        dist.broadcast_object_list(entry, src=0)
    return read[0] if read else decode(checkpoint, key, *entry[0])


def _latest_key(digest: str, count: int) -> str:
    return key_of("latest-corpus-summary", FORMAT, digest, count)


def latest_summary_key(cache: DiskCache, digest: str, count: int) -> str | None:
    """The key of the summary of `count` pairs last kept for the weights of `digest`, whatever corpus it read; None
    if there is none (or its pointer cannot be trusted: it is then deleted)."""
    pointer = cache.read(_latest_key(digest, count))
    key = pointer[1].get("summary") if pointer is not None and isinstance(pointer[1], dict) else None
    if isinstance(key, str) and len(key) == 40 and all(c in "0123456789abcdef" for c in key) \
            and cache.path(key).exists():
        return key
    if pointer is not None:
        cache.discard(_latest_key(digest, count))
    return None


def latest_summary(checkpoint: Checkpoint, count: int, *, cache: DiskCache | None = None,
                   digest: str | None = None) -> CorpusSummary | None:
    """The summary of `count` pairs last kept for these weights, whatever corpus it read (a corpus of one's own
    summarised by `python -m transformer.corpus cache --data`, where the card's corpus is not on this machine); None
    if there is none, or it cannot be trusted."""
    cache, digest = cache or DiskCache(), digest or model_digest(checkpoint.model)
    key = latest_summary_key(cache, digest, count)
    entry = None if key is None else cache.read(key)
    if entry is None:
        return None
    try:
        return decode(checkpoint, key, *entry)
    except (ValueError, KeyError, TypeError, IndexError):
        cache.discard(key)
        return None


def tsne_picture(checkpoint: Checkpoint, summary: CorpusSummary, head: Head, *, cache: DiskCache | None = None,
                 turn: Turn = nullcontext) -> pd.DataFrame:
    """One head's queries and keys by scikit-learn's t-SNE (qk_space.project) over the summary's first sentences,
    at most TSNE_POINTS points (whole sentences), cached beside the summary."""
    cache = cache or DiskCache()
    kind, layer, number = head
    key = key_of("tsne", FORMAT, summary.key, list(head))

    def build() -> tuple[Arrays, object]:
        with turn():
            data = queries_keys(checkpoint, kind, layer, number, summary.pairs[:summary.picture_sentences],
                                max_points=TSNE_POINTS)
        frame = projected(data, "tsne")
        return ({"xy": frame[["x", "y"]].to_numpy(np.float32),
                 "argmax": frame.loc[frame["side"] == "query", "argmax"].to_numpy(np.int32)},
                {"sentences": len(data.pieces)})

    def rebuilt(arrays: Arrays, value: object) -> pd.DataFrame:
        sentences = int(value["sentences"])
        _check(0 <= sentences <= summary.picture_sentences, "a t-SNE picture of its corpus")
        sentence_pieces = _sentences(summary.pieces, kind, sentences)
        queries = sum(len(q) for q, _ in sentence_pieces)
        _check(arrays["xy"].shape == (queries + sum(len(k) for _, k in sentence_pieces), 2)
               and arrays["argmax"].shape == (queries,) and bool(np.all(np.isfinite(arrays["xy"]))), "its points")
        return _placed(sentence_pieces, arrays["argmax"], arrays["xy"])

    arrays, value = cache.get(key, build, lambda arrays, value: rebuilt(arrays, value))
    return rebuilt(arrays, value)


def _table(cache: DiskCache, key: str, build: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """A small table, cached as JSON rows (and its attrs)."""
    def stored() -> tuple[Arrays, object]:
        frame = build()
        rows = [[None if isinstance(v, float) and math.isnan(v) else (v.item() if hasattr(v, "item") else v)
                 for v in row] for row in frame.itertuples(index=False)]
        return {}, {"columns": list(frame.columns), "rows": rows, "attrs": dict(frame.attrs)}

    def rebuilt(value: object) -> pd.DataFrame:
        columns = value["columns"]
        _check(all(isinstance(name, str) for name in columns) and all(len(row) == len(columns)
                                                                       for row in value["rows"]), "a table")
        frame = pd.DataFrame(value["rows"], columns=columns)
        for column in columns:  # JSON's null back to NaN in a column of numbers
            values = frame[column]
            if values.isna().any() and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))
                                           for v in values):
                frame[column] = values.astype(float)
        frame.attrs.update(value["attrs"])
        return frame

    _, value = cache.get(key, stored, lambda arrays, value: rebuilt(value))
    return rebuilt(value)


def matched_heads(checkpoint: Checkpoint, other: Checkpoint | Transformer, summary: CorpusSummary, *,
                  cache: DiskCache | None = None, turn: Turn = nullcontext) -> pd.DataFrame:
    """head_map.match_heads of the checkpoint and another of one vocabulary and shape (or a model, such as one of its
    training snapshots) on the summary's first MATCH_SENTENCES pairs, cached."""
    key = key_of("match", FORMAT, summary.key, model_digest(other.model if isinstance(other, Checkpoint) else other))
    return _table(cache or DiskCache(), key,
                  lambda: match_heads(checkpoint, other, summary.pairs[:MATCH_SENTENCES], turn=turn))


def followed_head(checkpoint: Checkpoint, summary: CorpusSummary, head: Head, *, cache: DiskCache | None = None,
                  turn: Turn = nullcontext) -> pd.DataFrame:
    """head_map.follow_head of one head through the checkpoint's snapshots on the summary's first MATCH_SENTENCES
    pairs, cached (the snapshots' names and steps are in the key: a new snapshot makes a new entry)."""
    snapshots = [[snapshot["name"], snapshot.get("step")] for snapshot in checkpoint.card.snapshots]
    key = key_of("follow", FORMAT, summary.key, list(head), snapshots)
    return _table(cache or DiskCache(), key,
                  lambda: follow_head(checkpoint, *head, summary.pairs[:MATCH_SENTENCES], turn=turn))
