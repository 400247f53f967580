"""A map of all attention heads of a model, and heads matched across checkpoints or training snapshots.

    patterns = head_patterns(checkpoint)          # every head's statistics and pairwise divergences over a corpus
    frame = head_map(patterns)                    # kind, layer, head, x, y, role, statistics per head
    matched = match_heads(checkpoint, checkpoint.load_snapshot("step_000900"))
    history = follow_head(checkpoint, "decoder.self_attn", 1, 2)
    heads = head_statistics(checkpoint, src_ids, tgt_ids)  # one input's heads: their statistics and roles

A corpus is read as transformer.analysis.corpus_heads reads it (corpus_pairs: a translation checkpoint's dev split
or fresh inputs of a synthetic task), teacher-forced on the reference output, in chunks of consecutive sentences:
memory holds one chunk's attention at a time, and only sums are kept across chunks.

Two heads of one kind read the same query and key sequences: their divergence is the Jensen-Shannon divergence
(natural log, in [0, ln 2]) between their attention rows, averaged over the real query rows that may attend to more
than one key, then over sentences. Heads of different kinds read different sequences: each row is re-binned on
normalised key position (key index / the sentence's real key count, into POSITION_BINS bins), rows are averaged
within normalised query-position bins, and the divergence is the JS divergence of those binned rows, averaged over
the query bins both heads have, then over sentences.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from scipy.optimize import linear_sum_assignment

from ..data.corpora import collate
from ..inference.translation import Checkpoint, load_checkpoint
from ..model.capture import capture
from ..model.model import Transformer
from ..model.sites import ATTENTION_KINDS, KIND_SIDES, parse_kind
from .corpus_heads import (
    STATISTICS,
    after_repeat,
    attention_statistics,
    corpus_pairs,
    corpus_unavailable,
    process_share,
    punctuation_pieces,
)
from .qk_space import corpus_examples

SENTENCES = 200  # sentences read by default: a few seconds on a CPU for the shipped checkpoints
BATCH_SIZE = 32  # sentences per forward pass
POSITION_BINS = 8  # bins of normalised query and key position, for comparing heads of different kinds
ROLE_THRESHOLD = 0.4  # a head has a role where the role's statistic, averaged over the corpus, exceeds this
ROLES = {"previous_share": "previous-token", "induction_share": "induction", "diagonal_share": "diagonal",
         "first_share": "first-token", "eos_share": "end-of-sentence"}
FINAL = "final"  # the checkpoint's own (final) weights, named beside its training snapshots (here and in the app)


@dataclass(frozen=True)
class HeadPatterns:
    """Every head of a model over a corpus: `heads` [(kind, layer, head)] in ATTENTION_KINDS, layer, head order;
    `divergence` (n_heads, n_heads), symmetric with a zero diagonal (see the module docstring); `statistics` one
    row per head in `heads` order, a column per corpus_heads.STATISTICS (the mean over sentences); `sentences`
    read."""

    heads: list[tuple[str, int, int]]
    divergence: np.ndarray
    statistics: pd.DataFrame
    sentences: int


# ----------------------------------------------------------------------------- divergences, embedding, matching

def _entropy(p: torch.Tensor) -> torch.Tensor:
    """-Σ p log p over the last dimension (0 log 0 = 0)."""
    return -(p * torch.log(torch.where(p > 0, p, 1.0))).sum(dim=-1)


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The Jensen-Shannon divergence (nats, in [0, ln 2]) between distributions along the last dimension of `p` and
    `q` (broadcast against each other)."""
    divergence = _entropy((p + q) / 2) - (_entropy(p) + _entropy(q)) / 2
    return divergence.clamp_min(0.0)  # rounding may leave -1e-16 where p == q


def classical_mds(distances: np.ndarray, dims: int = 2) -> np.ndarray:
    """(n, dims) points whose Euclidean distances approximate `distances` (n, n): classical (Torgerson) scaling, the
    top eigenvectors of the double-centred squared distances. Each axis's sign is fixed (its largest entry in
    absolute value is positive), so the same matrix always gives the same picture."""
    n = len(distances)
    squared = np.asarray(distances, dtype=float) ** 2
    centring = np.eye(n) - np.full((n, n), 1.0 / n)
    gram = -0.5 * centring @ squared @ centring
    values, vectors = np.linalg.eigh((gram + gram.T) / 2)  # ascending
    order = np.argsort(values)[::-1][:dims]
    values, vectors = values[order], vectors[:, order]  # (dims,), (n, dims)
    # Eigenvalues at rounding level are zero: their axes would be noise, and their signs arbitrary.
    values = np.where(values > 1e-10 * max(values.max(initial=0.0), 1e-300), values, 0.0)
    signs = np.sign(vectors[np.abs(vectors).argmax(axis=0), np.arange(vectors.shape[1])])
    points = vectors * np.where(signs == 0, 1.0, signs) * np.sqrt(values)
    return np.pad(points, ((0, 0), (0, dims - points.shape[1])))  # fewer heads than dims: zeros


def assignment(divergence: np.ndarray) -> np.ndarray:
    """For a square (n, n) cost matrix, the column matched to each row: the permutation of least summed cost."""
    rows, columns = linear_sum_assignment(np.asarray(divergence, dtype=float))
    matched = np.empty(len(rows), dtype=int)
    matched[rows] = columns
    return matched


def head_roles(statistics: pd.DataFrame) -> list[str]:
    """Per row, the role (ROLES) whose statistic exceeds ROLE_THRESHOLD, the largest where several do; "" if none."""
    shares = statistics[list(ROLES)].to_numpy(dtype=float)
    shares = np.where(np.isnan(shares), -np.inf, shares)  # no qualifying row: no role
    best = shares.argmax(axis=1)
    names = list(ROLES.values())
    return [names[index] if row[index] > ROLE_THRESHOLD else "" for row, index in zip(shares, best)]


def roles_no_head_reaches(frame: pd.DataFrame) -> list[tuple[str, tuple[str, int, int], float]]:
    """For each role (ROLES) whose statistic no head of a head_map frame has over ROLE_THRESHOLD, the head whose
    statistic for it is highest and that statistic: (role, (kind, layer, head), share), in ROLES order. A role whose
    statistic is zero or NaN in every head (a pattern the corpus never shows) is left out."""
    missing = []
    for statistic, role in ROLES.items():
        shares = frame[statistic].astype(float)
        if (shares > ROLE_THRESHOLD).any() or not (shares.fillna(0.0) > 0).any():
            continue
        best = frame.loc[shares.idxmax()]
        missing.append((role, (best["kind"], int(best["layer"]), int(best["head"])), float(best[statistic])))
    return missing


# ----------------------------------------------------------------------------- one chunk of the corpus

@dataclass
class _Kind:
    """One kind's attention over a chunk, every layer's heads side by side."""

    weights: torch.Tensor  # (batch, layers * heads, q_len, k_len) float64
    rows: torch.Tensor  # (batch, q_len) bool: real queries that may attend to more than one key
    query_count: torch.Tensor  # (batch,) real queries
    key_count: torch.Tensor  # (batch,) real keys
    statistics: dict[str, torch.Tensor]  # name -> (batch, layers * heads), NaN where no row qualifies


def _loaded(checkpoint: Checkpoint | str | Path) -> Checkpoint:
    return checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)


def _pairs(checkpoint: Checkpoint, pairs: Iterable[tuple[str, str]] | None) -> Iterable[tuple[str, str]]:
    if pairs is not None:
        return pairs
    problem = corpus_unavailable(checkpoint)
    if problem:
        raise ValueError(f"{checkpoint.name} has no corpus to read here: {problem}; pass pairs")
    return corpus_pairs(checkpoint, SENTENCES)


def _chunks(checkpoint: Checkpoint, pairs: Iterable[tuple[str, str]], batch_size: int,
            share: tuple[int, int] = (0, 1)) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(src (batch, src_len), decoder input (batch, tgt_len)) of consecutive pairs, teacher-forced, padded; with
    `share` (rank, world), only the chunks i with i % world == rank."""
    rank, world = share
    iterator = iter(pairs)
    index = 0
    while chunk := list(islice(iterator, batch_size)):
        if index % world == rank:
            yield collate(corpus_examples(checkpoint, chunk), checkpoint.config.pad_id)
        index += 1


@torch.no_grad()
def _captured(checkpoint: Checkpoint, model: Transformer, src: torch.Tensor, tgt: torch.Tensor,
              punctuation: dict[str, torch.Tensor]) -> dict[str, _Kind]:
    """Every kind of attention `model` has over one chunk, and each head's statistics on it."""
    config = checkpoint.config
    device = next(model.parameters()).device
    with capture(model, lambda name: name.endswith(("hook_pattern", "hook_mask"))) as record:
        model(src.to(device), tgt.to(device))
    record = record.cpu()
    ids = {"src": src, "tgt": tgt}
    kinds = {}
    for kind in ATTENTION_KINDS:
        sites = record.keys_of(kind)
        if not sites:
            continue
        query_side, key_side = KIND_SIDES[kind]
        queries, keys = ids[query_side], ids[key_side]
        real_queries = queries != config.pad_id
        repeats = None if kind == "decoder.cross_attn" else after_repeat(keys)
        per_layer = [attention_statistics(record[site], record.mask(site), real_queries, keys == config.eos_id,
                                          punctuation[key_side][keys], repeats) for site in sites]
        allowed = record.mask(sites[0])  # (batch, 1, q_len, k_len): the same in every layer of a kind
        kinds[kind] = _Kind(
            weights=torch.cat([record[site] for site in sites], dim=1).double(),  # (batch, layers * heads, q, k)
            rows=real_queries & (allowed.sum(dim=-1)[:, 0] > 1),
            query_count=real_queries.sum(dim=1),
            key_count=(keys != config.pad_id).sum(dim=1),
            statistics={name: torch.cat([stats[name] for stats in per_layer], dim=1).double()  # (batch, heads)
                        for name in STATISTICS})
    return kinds


def _row_divergence(a: _Kind, b: _Kind) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sentence, the mean JS divergence between the rows of each head of `a` and each head of `b` (one kind, the
    same inputs): (batch, heads_a, heads_b), and (batch,) which sentences have a row to average."""
    rows = a.rows.double()[:, None, :]  # (batch, 1, q_len)
    counts = rows.sum(dim=-1)  # (batch, 1)
    divergences = []
    for head in range(a.weights.size(1)):  # one head against all at a time: (batch, heads_b, q, k) at most
        per_row = js_divergence(a.weights[:, head:head + 1], b.weights)  # (batch, heads_b, q_len)
        divergences.append((per_row * rows).sum(dim=-1) / counts.clamp_min(1))  # (batch, heads_b)
    return torch.stack(divergences, dim=1), counts[:, 0] > 0


def _position_bins(count: torch.Tensor, length: int) -> torch.Tensor:
    """(batch, length, POSITION_BINS) one-hot: position / count (the sentence's real positions) in equal bins;
    padding positions fall in the last bin (their weights and rows are zero or left out)."""
    positions = torch.arange(length)[None, :].double()  # (1, length)
    bins = (positions * POSITION_BINS / count.clamp_min(1)[:, None]).long().clamp_max(POSITION_BINS - 1)
    return torch.nn.functional.one_hot(bins, POSITION_BINS).double()  # (batch, length, bins)


def _binned(kind: _Kind) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's rows re-binned on normalised key position and averaged within normalised query-position bins:
    (batch, heads, query bins, key bins), and (batch, query bins) which bins hold a row."""
    key_bins = _position_bins(kind.key_count, kind.weights.size(-1))  # (batch, k_len, bins)
    query_bins = _position_bins(kind.query_count, kind.weights.size(-2)) * kind.rows.double()[..., None]
    rebinned = torch.einsum("bnqk,bkc->bnqc", kind.weights, key_bins)  # (batch, heads, q_len, key bins)
    sums = torch.einsum("bnqc,bqd->bndc", rebinned, query_bins)  # (batch, heads, query bins, key bins)
    counts = query_bins.sum(dim=1)  # (batch, query bins)
    return sums / counts.clamp_min(1)[:, None, :, None], counts > 0


def _binned_divergence(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sentence, the JS divergence between binned rows (_binned) of each head of `a` and each of `b`, averaged
    over the query bins both have: (batch, heads_a, heads_b), and (batch,) which sentences share a bin."""
    (profiles_a, present_a), (profiles_b, present_b) = a, b
    shared = (present_a & present_b).double()[:, None, :]  # (batch, 1, bins)
    counts = shared.sum(dim=-1)  # (batch, 1)
    divergences = []
    for head in range(profiles_a.size(1)):
        per_bin = js_divergence(profiles_a[:, head:head + 1], profiles_b)  # (batch, heads_b, bins)
        divergences.append((per_bin * shared).sum(dim=-1) / counts.clamp_min(1))  # (batch, heads_b)
    return torch.stack(divergences, dim=1), counts[:, 0] > 0


class _Mean:
    """A running mean over sentences of values of some shape, each sentence counted only where it has a value."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.total = torch.zeros(shape, dtype=torch.float64)
        self.count = torch.zeros(shape, dtype=torch.float64)

    def add(self, values: torch.Tensor, valid: torch.Tensor | None = None) -> None:
        """values (batch, *shape); valid (batch,) or None: NaN values are left out as well."""
        keep = ~torch.isnan(values)
        if valid is not None:
            keep &= valid.reshape(-1, *[1] * (values.dim() - 1))
        self.total += torch.where(keep, values, 0.0).sum(dim=0)
        self.count += keep.sum(dim=0)

    def add_across_ranks(self) -> None:
        """Every rank's sums added (torch.distributed): each rank then holds the mean over all of their sentences."""
        dist.all_reduce(self.total)
        dist.all_reduce(self.count)

    def mean(self) -> np.ndarray:
        return (self.total / self.count).numpy()  # 0/0 = NaN where no sentence had a value


def _punctuation(checkpoint: Checkpoint) -> dict[str, torch.Tensor]:
    return {"src": punctuation_pieces(checkpoint.src_tokenizer), "tgt": punctuation_pieces(checkpoint.tgt_tokenizer)}


def _heads_of(checkpoint: Checkpoint) -> dict[str, list[tuple[str, int, int]]]:
    """Each kind's heads, in the order _captured stacks them (layer, then head)."""
    config = checkpoint.config
    return {kind: [(kind, layer, head) for layer in range(config.layers_of(kind)) for head in range(config.num_heads)]
            for kind in ATTENTION_KINDS if config.layers_of(kind)}


# ----------------------------------------------------------------------------- the map of one model's heads

def head_patterns(checkpoint: Checkpoint | str | Path, pairs: Iterable[tuple[str, str]] | None = None, *,
                  batch_size: int = BATCH_SIZE, turn: Callable[[], AbstractContextManager] = nullcontext,
                  distributed: bool = False) -> HeadPatterns:
    """Every head's mean statistics and every two heads' divergence over `pairs` (default: SENTENCES of the
    checkpoint's corpus), read in chunks of `batch_size` sentences, each chunk's forward pass inside `turn()` (a
    caller's share of the model). `distributed`: under an initialised torch.distributed group, each rank reads its
    share of the chunks (corpus_heads.process_share) and the sums are added across ranks, so that every rank returns
    the patterns of all `pairs`."""
    checkpoint = _loaded(checkpoint)
    by_kind = _heads_of(checkpoint)
    heads = [head for kind_heads in by_kind.values() for head in kind_heads]
    spans, start = {}, 0
    for kind, kind_heads in by_kind.items():
        spans[kind] = slice(start, start + len(kind_heads))
        start += len(kind_heads)
    divergence = _Mean((len(heads), len(heads)))
    statistics = {kind: {name: _Mean((len(kind_heads),)) for name in STATISTICS}
                  for kind, kind_heads in by_kind.items()}
    punctuation = _punctuation(checkpoint)
    sentences = 0
    share = process_share() if distributed else (0, 1)
    for src, tgt in _chunks(checkpoint, _pairs(checkpoint, pairs), batch_size, share):
        with turn():
            kinds = _captured(checkpoint, checkpoint.model, src, tgt, punctuation)
        binned = {kind: _binned(captured) for kind, captured in kinds.items()}
        chunk = torch.full((src.size(0), len(heads), len(heads)), float("nan"), dtype=torch.float64)
        for kind_a, captured_a in kinds.items():
            for kind_b, captured_b in kinds.items():
                if kind_a == kind_b:
                    values, valid = _row_divergence(captured_a, captured_b)
                else:
                    values, valid = _binned_divergence(binned[kind_a], binned[kind_b])
                # (batch, heads_a, heads_b): sentences without a row to compare stay NaN, left out of the mean
                chunk[:, spans[kind_a], spans[kind_b]] = torch.where(valid[:, None, None], values, float("nan"))
            for name in STATISTICS:
                statistics[kind_a][name].add(captured_a.statistics[name])
        divergence.add(chunk)
        sentences += src.size(0)
    if share[1] > 1:
        for mean in [divergence, *(mean for kind in statistics.values() for mean in kind.values())]:
            mean.add_across_ranks()
        read = torch.tensor(sentences)
        dist.all_reduce(read)
        sentences = int(read)
    if not sentences:
        raise ValueError("no sentences to read: pairs is empty")
    matrix = np.nan_to_num(divergence.mean(), nan=np.log(2))  # never compared (no row to): as far apart as can be
    matrix = (matrix + matrix.T) / 2  # equal up to rounding already
    np.fill_diagonal(matrix, 0.0)
    table = pd.DataFrame({name: np.concatenate([statistics[kind][name].mean() for kind in by_kind])
                          for name in STATISTICS})
    return HeadPatterns(heads, matrix, table, sentences)


def head_map(patterns: HeadPatterns) -> pd.DataFrame:
    """One row per head: kind, layer, head, x, y (classical scaling of the JS distances, the square roots of the
    divergences), role (head_roles) and the statistics."""
    points = classical_mds(np.sqrt(np.clip(patterns.divergence, 0.0, None)))  # (n_heads, 2)
    frame = pd.DataFrame(patterns.heads, columns=["kind", "layer", "head"])
    frame["x"], frame["y"] = points[:, 0], points[:, 1]
    statistics = patterns.statistics.reset_index(drop=True)
    frame["role"] = head_roles(statistics)
    return pd.concat([frame, statistics], axis=1)


def head_statistics(checkpoint: Checkpoint, src_ids: Sequence[int], tgt_ids: Sequence[int]) -> pd.DataFrame:
    """One input's heads, as a corpus's are measured (one sentence, teacher-forced on `tgt_ids`, the decoder input;
    pad ids are padding): one row per head with kind, layer, head, each of corpus_heads.STATISTICS and role
    (head_roles)."""
    src, tgt = collate([(list(src_ids), list(tgt_ids))], checkpoint.config.pad_id)
    kinds = _captured(checkpoint, checkpoint.model, src, tgt, _punctuation(checkpoint))
    by_kind = _heads_of(checkpoint)
    frame = pd.DataFrame([head for kind in kinds for head in by_kind[kind]], columns=["kind", "layer", "head"])
    for name in STATISTICS:
        frame[name] = np.concatenate([captured.statistics[name][0].numpy() for captured in kinds.values()])
    frame["role"] = head_roles(frame)
    return frame


# ----------------------------------------------------------------------------- heads of two models

def _pieces(tokenizer) -> list[str]:
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]


def _compatible_model(checkpoint: Checkpoint, other: Checkpoint | Transformer | str | Path) -> Transformer:
    """The model of `other` (a checkpoint, its folder, or a model such as a training snapshot), once it is known to
    read the same vocabulary and to have the same attention kinds, layers and heads as `checkpoint`'s model;
    ValueError naming what differs."""
    if isinstance(other, (str, Path)):
        other = load_checkpoint(other)
    if isinstance(other, Checkpoint):
        for side in ("src_tokenizer", "tgt_tokenizer"):
            if _pieces(getattr(checkpoint, side)) != _pieces(getattr(other, side)):
                raise ValueError(f"{checkpoint.name} and {other.name} have different vocabularies ({side}): heads "
                                 "can only be matched on the same inputs")
        other = other.model
    if not isinstance(other, Transformer):
        raise TypeError(f"expected a checkpoint, its folder or a Transformer, got {type(other).__name__}")
    a, b = checkpoint.config, other.config
    for field in ("src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id"):
        if getattr(a, field) != getattr(b, field):
            raise ValueError(f"the models have different vocabularies: {field} {getattr(a, field)} against "
                             f"{getattr(b, field)}")
    shapes_a = [(kind, a.layers_of(kind), a.num_heads) for kind in ATTENTION_KINDS]
    shapes_b = [(kind, b.layers_of(kind), b.num_heads) for kind in ATTENTION_KINDS]
    if shapes_a != shapes_b:
        raise ValueError(f"the models' attention differs: (kind, layers, heads) {shapes_a} against {shapes_b}")
    return other


def _compared(checkpoint: Checkpoint, models: Sequence[Transformer], pairs: Iterable[tuple[str, str]],
              batch_size: int, turn: Callable[[], AbstractContextManager]
              ) -> tuple[list[dict[str, np.ndarray]], list[dict[str, dict[str, np.ndarray]]]]:
    """One pass over `pairs` with every model: per model, each kind's divergence (heads of models[0], heads of this
    model) and each kind's mean statistics {kind: {name: (heads,)}}."""
    by_kind = _heads_of(checkpoint)
    divergences = [{kind: _Mean((len(heads), len(heads))) for kind, heads in by_kind.items()} for _ in models]
    statistics = [{kind: {name: _Mean((len(heads),)) for name in STATISTICS} for kind, heads in by_kind.items()}
                  for _ in models]
    punctuation = _punctuation(checkpoint)
    for src, tgt in _chunks(checkpoint, pairs, batch_size):
        with turn():
            captured = [_captured(checkpoint, model, src, tgt, punctuation) for model in models]
        reference = captured[0]
        for index, kinds in enumerate(captured):
            for kind, captured in kinds.items():
                divergences[index][kind].add(*_row_divergence(reference[kind], captured))
                for name in STATISTICS:
                    statistics[index][kind][name].add(captured.statistics[name])
    return ([{kind: mean.mean() for kind, mean in model.items()} for model in divergences],
            [{kind: {name: mean.mean() for name, mean in names.items()} for kind, names in model.items()}
             for model in statistics])


def _matched(checkpoint: Checkpoint, divergences: dict[str, np.ndarray]) -> pd.DataFrame:
    """Each kind's heads matched one-to-one (assignment) on their divergence (heads of A, heads of B)."""
    heads = checkpoint.config.num_heads
    rows = []
    for kind, divergence in divergences.items():
        for a, b in enumerate(assignment(np.nan_to_num(divergence, nan=np.log(2)))):
            rows.append((kind, a // heads, a % heads, int(b) // heads, int(b) % heads, float(divergence[a, b])))
    return pd.DataFrame(rows, columns=["kind", "layer_a", "head_a", "layer_b", "head_b", "divergence"])


def match_heads(checkpoint_a: Checkpoint | str | Path, checkpoint_b: Checkpoint | Transformer | str | Path,
                pairs: Iterable[tuple[str, str]] | None = None, *, batch_size: int = BATCH_SIZE,
                turn: Callable[[], AbstractContextManager] = nullcontext) -> pd.DataFrame:
    """The heads of two models of one vocabulary and one shape matched one-to-one within each kind, so that the
    summed divergence of matched heads' rows on the same teacher-forced inputs (`pairs`, default SENTENCES of A's
    corpus) is least. B may be a checkpoint, its folder, or a model such as `checkpoint_a.load_snapshot(name)`.
    One row per head of A: kind, layer_a, head_a, layer_b, head_b, divergence."""
    checkpoint_a = _loaded(checkpoint_a)
    model_b = _compatible_model(checkpoint_a, checkpoint_b)
    divergences, _ = _compared(checkpoint_a, [checkpoint_a.model, model_b], _pairs(checkpoint_a, pairs), batch_size,
                                  turn)
    return _matched(checkpoint_a, divergences[1])


def follow_head(checkpoint: Checkpoint | str | Path, kind: str, layer: int, head: int,
                pairs: Iterable[tuple[str, str]] | None = None, *, statistic: str | None = None,
                batch_size: int = BATCH_SIZE, turn: Callable[[], AbstractContextManager] = nullcontext
                ) -> pd.DataFrame:
    """One head of the final weights followed back through training: for each snapshot (in training order) and the
    final weights, the head matched to it (match_heads against the final weights), its divergence and statistics.
    `kind`: any spelling of a kind ('decoder.self'). Every snapshot is loaded at once, so that the corpus is read once.

    Columns: snapshot (FINAL for the final weights), step, layer, head, divergence, role, the ROLES statistics, and
    first_above: True on the first row whose `statistic` (default: the followed head's own role's, at the final
    weights) exceeds ROLE_THRESHOLD. The statistic is in frame.attrs["statistic"] ("" where the head has no role)."""
    checkpoint = _loaded(checkpoint)
    kind, heads = parse_kind(kind), checkpoint.config.num_heads
    if statistic is not None and statistic not in ROLES:
        raise ValueError(f"unknown role statistic {statistic!r}; choose from {list(ROLES)}")
    if kind not in _heads_of(checkpoint) or not (0 <= layer < checkpoint.config.layers_of(kind)
                                                  and 0 <= head < heads):
        raise ValueError(f"{checkpoint.name} has no head {kind} layer {layer} head {head}")
    snapshots = sorted(checkpoint.card.snapshots, key=lambda snapshot: snapshot.get("step", 0))
    models = [checkpoint.model] + [checkpoint.load_snapshot(snapshot["name"]) for snapshot in snapshots]
    divergences, statistics = _compared(checkpoint, models, _pairs(checkpoint, pairs), batch_size, turn)
    names = [FINAL] + [snapshot["name"] for snapshot in snapshots]
    steps = [checkpoint.card.training.get("steps")] + [snapshot.get("step") for snapshot in snapshots]
    followed = layer * heads + head
    rows = []
    for name, step, divergence, stats in zip(names, steps, divergences, statistics):
        matched = int(assignment(np.nan_to_num(divergence[kind], nan=np.log(2)))[followed])
        rows.append({"snapshot": name, "step": step, "layer": matched // heads, "head": matched % heads,
                     "divergence": float(divergence[kind][followed, matched]),
                     **{column: float(values[matched]) for column, values in stats[kind].items() if column in ROLES}})
    frame = pd.DataFrame(rows[1:] + rows[:1])  # training order: the snapshots, then the final weights
    frame.insert(5, "role", head_roles(frame))
    if statistic is None:
        role = frame["role"].iloc[-1]
        statistic = next((column for column, name in ROLES.items() if name == role), "")
    above = (frame[statistic] > ROLE_THRESHOLD).to_numpy() if statistic else np.zeros(len(frame), dtype=bool)
    frame["first_above"] = above & (np.cumsum(above) == 1)
    frame.attrs["statistic"] = statistic
    return frame
