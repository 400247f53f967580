"""Heads across a corpus: per-head statistics of every sentence, streamed to Parquet; rank heads; find sentences.

    python -m transformer.corpus run checkpoints/eng-fra --out heads.parquet        # its dev split
    torchrun --nproc_per_node=2 -m transformer.corpus run checkpoints/eng-fra --out heads.parquet
    python -m transformer.corpus rank heads.parquet --statistic previous_share
    python -m transformer.corpus top heads.parquet --head decoder.self_attn.1.2 --statistic previous_share

`run` reads a translation checkpoint's dev split (rebuilt from its card, line by line) or `--count` fresh inputs of a
synthetic task, teacher-forced on the reference output, in fixed chunks of `--batch-size` consecutive sentences;
each chunk becomes one row group of the Parquet file: one row per (sentence, attention kind, layer, head). Memory
holds one chunk at a time, whatever the corpus size. Under torchrun (gloo) rank r takes chunks r, r + N, ...,
writes its own shard, and rank 0 merges the shards chunk by chunk in corpus order, so the file equals the one a
single process writes.
"""
from __future__ import annotations

import heapq
import random
import resource
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed as dist
from tqdm import tqdm

from ..data.corpora import collate, dev_pairs, lm_dev_sentences, missing_corpus_files
from ..data.tasks import CORPUS_TASKS, FRESH_SEED, TASKS
from ..inference.translation import Checkpoint
from ..io.safety import CheckpointError
from ..io.text import source_ids, target_ids
from ..io.tokenizer import Tokenizer
from ..model.capture import capture
from ..model.sites import ATTENTION_KINDS, KIND_SIDES, parse_kind
from .corpus_sample import SAMPLE_FILE, read_sample

# Per (sentence, head): a mean over the sentence's query rows that are not padding and may attend to more than one
# key. attention_statistics computes them, for a corpus's chunks and for one input (head_map.head_statistics, the
# Heads view's table).
STATISTICS = {
    "entropy": "-Σ w log w of a row, in nats",
    "mean_distance": "Σ w·|q - k|, in positions",
    "diagonal_share": "weight on key q (rows that have one)",
    "previous_share": "weight on key q - 1 (rows q >= 1)",
    "induction_share": "self-attention: weight on the keys after an earlier occurrence of the query's token",
    "first_share": "weight on key 0",
    "eos_share": "weight on </s> keys",
    "punctuation_share": "weight on keys that are punctuation pieces",
    "max_weight": "the row's largest weight",
}
SCHEMA = pa.schema([("sentence", pa.int64()), ("kind", pa.string()), ("layer", pa.int32()), ("head", pa.int32()),
                    *[(name, pa.float32()) for name in STATISTICS], ("source", pa.string()), ("target", pa.string())])


def punctuation_pieces(tokenizer: Tokenizer) -> torch.Tensor:
    """(vocab,) bool: pieces made only of punctuation once the word-start mark ▁ is removed."""
    def is_punctuation(piece: str) -> bool:
        text = piece.replace("▁", "")
        return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)
    return torch.tensor([is_punctuation(tokenizer.id_to_piece(i)) for i in range(tokenizer.vocab_size)])


def after_repeat(ids: torch.Tensor) -> torch.Tensor:
    """(batch, len, len) bool, for self-attention over `ids` (batch, len): key k follows an earlier occurrence (at
    k - 1 < q) of query q's token: where an induction head looks."""
    length = ids.size(1)
    marks = torch.zeros(ids.size(0), length, length, dtype=torch.bool)
    earlier = torch.arange(1, length)[None, :] - 1 < torch.arange(length)[:, None]  # (len, len - 1)
    marks[:, :, 1:] = (ids[:, :, None] == ids[:, None, :-1]) & earlier
    return marks


def attention_statistics(weights: torch.Tensor, allowed: torch.Tensor, real_queries: torch.Tensor,
                         eos_keys: torch.Tensor, punctuation_keys: torch.Tensor,
                         repeat_keys: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per sentence and head, each of STATISTICS: (batch, heads) tensors, NaN where no row qualifies.

    weights (batch, heads, q_len, k_len); allowed (batch, 1, q_len, k_len) bool mask; real_queries (batch, q_len)
    bool; eos_keys, punctuation_keys (batch, k_len) bool; repeat_keys (batch, q_len, k_len) bool from after_repeat,
    None for cross-attention (whose induction share is NaN)."""
    q_len, k_len = weights.shape[-2:]
    rows = (real_queries & (allowed.sum(dim=-1)[:, 0] > 1))[:, None, :]  # (batch, 1, q_len)
    query = torch.arange(q_len)[:, None]
    key = torch.arange(k_len)[None, :]
    entropy = -(weights * torch.log(torch.where(weights > 0, weights, 1.0))).sum(dim=-1)  # (batch, heads, q_len)
    if repeat_keys is None:
        repeat_keys = torch.zeros(weights.size(0), q_len, k_len, dtype=torch.bool)
    per_row = {
        "entropy": (entropy, rows),
        "mean_distance": ((weights * (query - key).abs()).sum(dim=-1), rows),
        "diagonal_share": ((weights * (query == key)).sum(dim=-1), rows & (torch.arange(q_len) < k_len)),
        "previous_share": ((weights * (query - 1 == key)).sum(dim=-1),
                           rows & (torch.arange(q_len) >= 1) & (torch.arange(q_len) <= k_len)),
        "induction_share": ((weights * repeat_keys[:, None]).sum(dim=-1), rows & repeat_keys.any(dim=-1)[:, None]),
        "first_share": (weights[..., 0], rows),
        "eos_share": ((weights * eos_keys[:, None, None, :]).sum(dim=-1), rows),
        "punctuation_share": ((weights * punctuation_keys[:, None, None, :]).sum(dim=-1), rows),
        "max_weight": (weights.amax(dim=-1), rows),
    }
    return {name: (values * which).sum(dim=-1) / which.sum(dim=-1)  # 0/0 = NaN where no row qualifies
            for name, (values, which) in per_row.items()}


@torch.no_grad()
def chunk_table(checkpoint: Checkpoint, first_sentence: int, pairs: Sequence[tuple[str, str]],
                punctuation: dict[str, torch.Tensor]) -> pa.Table:
    """The statistics rows of one chunk of consecutive sentences, numbered from `first_sentence`."""
    config, model = checkpoint.config, checkpoint.model
    examples = [(source_ids(checkpoint.src_tokenizer, source, config.max_len)[0],
                 target_ids(checkpoint.tgt_tokenizer, target, config.max_len)[:-1]) for source, target in pairs]
    src, tgt = collate(examples, config.pad_id)  # (batch, src_len), (batch, tgt_len)
    with capture(model, lambda name: name.endswith(("hook_pattern", "hook_mask"))) as record:
        model(src, tgt)
    ids = {"src": src, "tgt": tgt}
    columns: dict[str, list] = {name: [] for name in SCHEMA.names}
    for kind in ATTENTION_KINDS:
        query_side, key_side = KIND_SIDES[kind]
        queries, keys = ids[query_side], ids[key_side]
        for layer, site in enumerate(record.keys_of(kind)):
            stats = attention_statistics(record[site], record.mask(site), queries != config.pad_id,
                                         keys == config.eos_id, punctuation[key_side][keys],
                                         None if kind == "decoder.cross_attn" else after_repeat(keys))
            heads = config.num_heads
            columns["sentence"] += np.repeat(np.arange(len(pairs)) + first_sentence, heads).tolist()
            columns["kind"] += [kind] * len(pairs) * heads
            columns["layer"] += [layer] * len(pairs) * heads
            columns["head"] += list(range(heads)) * len(pairs)
            for name in STATISTICS:
                columns[name] += stats[name].flatten().tolist()  # (batch, heads) sentence-major
            columns["source"] += [source for source, _ in pairs for _ in range(heads)]
            columns["target"] += [target for _, target in pairs for _ in range(heads)]
    return pa.table(columns, schema=SCHEMA)


def corpus_unavailable(checkpoint: Checkpoint) -> str:
    """Why corpus_pairs cannot run here without `data` ("" if it can): a checkpoint of no task this project makes
    inputs for or trains on a corpus (a converted model: 'generate', 'fill-mask'), one trained on a corpus whose card
    names none, or whose corpus files are not on this machine."""
    if checkpoint.card.task not in CORPUS_TASKS:
        return "" if checkpoint.card.task in TASKS else (
            f"its task ({checkpoint.card.task}) has no corpus this project can read")
    if "data" not in checkpoint.card.training:
        return "its card names no corpus (a converted model)"
    missing = missing_corpus_files(checkpoint.card.training)
    if not missing:
        return ""
    try:
        return "" if read_sample(checkpoint) else (
            f"its dev split is read from {', '.join(missing)}, which this machine does not have, and its folder "
            f"has no {SAMPLE_FILE}")
    except CheckpointError as error:
        return f"its dev split is read from {', '.join(missing)}, which this machine does not have; {error}"


def _sample_or_corpus(checkpoint: Checkpoint, data: str | Sequence[str] | None) -> list[tuple[str, str]] | None:
    """The checkpoint's own sample (corpus_sample), where it is to be read instead of the card's corpus: no other
    corpus named, and the card's not on this machine; None otherwise."""
    if data is not None or not missing_corpus_files(checkpoint.card.training):
        return None
    return read_sample(checkpoint)


def corpus_pairs(checkpoint: Checkpoint, count: int | None = None,
                 data: str | Sequence[str] | None = None) -> Iterator[tuple[str, str]]:
    """A translation checkpoint's dev split, streamed from the corpus file (the first `count` pairs, if given); a
    corpus language model's held-out sentences, each one text ("", sentence) as a language model reads it; for a
    synthetic task, `count` fresh (input, output) pairs (default 1,000). Where the card's corpus is not on this
    machine and no `data` is named, the checkpoint's own sample of the same first pairs (corpus_sample), if any."""
    training = checkpoint.card.training
    sample = _sample_or_corpus(checkpoint, data) if checkpoint.card.task in CORPUS_TASKS else None
    if sample is not None:
        return islice(iter(sample), count)
    if checkpoint.card.task == "translate":
        return islice((pair for _, pair in dev_pairs(training, data)), count)
    if checkpoint.card.task == "lm":
        held_out = lm_dev_sentences(training, data)
        return islice((("", sentence) for sentences in held_out.values() for sentence in sentences), count)
    rng = random.Random(FRESH_SEED + 19)
    return (TASKS[checkpoint.card.task](rng) for _ in range(count or 1000))


def process_share() -> tuple[int, int]:
    """(rank, world size) of this process under an initialised torch.distributed process group; (0, 1) otherwise.
    A corpus pass shared by ranks gives chunk i to rank i % world."""
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def _chunks(pairs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    iterator = iter(pairs)
    while chunk := list(islice(iterator, size)):
        yield chunk


def _merge(shards: list[Path], out: Path) -> None:
    """Interleave the shards' row groups back into corpus order (chunk i is row group i // N of shard i % N)."""
    files = [pq.ParquetFile(shard) for shard in shards]
    with pq.ParquetWriter(out, SCHEMA) as writer:
        for chunk in range(sum(file.num_row_groups for file in files)):
            writer.write_table(files[chunk % len(files)].read_row_group(chunk // len(files)))
    for shard in shards:
        shard.unlink()


def run(checkpoint: Checkpoint, out: str | Path, pairs: Iterable[tuple[str, str]], batch_size: int = 64,
        progress: bool = True) -> int:
    """Write the statistics of `pairs` to `out` (Parquet); returns how many sentences this process read. Under an
    initialised process group, each rank writes a shard and rank 0 merges them into `out`."""
    out = Path(out)
    rank, world = process_share()
    target = out if world == 1 else out.with_name(f"{out.name}.shard{rank}-of-{world}")
    punctuation = {"src": punctuation_pieces(checkpoint.src_tokenizer),
                   "tgt": punctuation_pieces(checkpoint.tgt_tokenizer)}
    sentences = 0
    bar = tqdm(unit=" sentences", disable=not progress or rank != 0, desc=f"{checkpoint.name} heads")
    with pq.ParquetWriter(target, SCHEMA) as writer:
        for index, chunk in enumerate(_chunks(pairs, batch_size)):
            if index % world == rank:
                writer.write_table(chunk_table(checkpoint, index * batch_size, chunk, punctuation))
                sentences += len(chunk)
            bar.update(len(chunk))
    bar.close()
    if world > 1:
        dist.barrier()
        if rank == 0:
            _merge([out.with_name(f"{out.name}.shard{r}-of-{world}") for r in range(world)], out)
        dist.barrier()
    return sentences


def _head_rows(path: str | Path, columns: list[str], filter=None) -> Iterator[pd.DataFrame]:
    """The file's rows, a row group at a time (bounded memory), only `columns`; kinds by their own names (a file
    that holds other spellings, 'decoder.cross', reads the same)."""
    file = pq.ParquetFile(path)
    for group in range(file.num_row_groups):
        frame = file.read_row_group(group, columns=columns).to_pandas()
        frame["kind"] = frame["kind"].map({kind: parse_kind(kind) for kind in frame["kind"].unique()})
        yield frame if filter is None else frame[filter(frame)]


def rank_heads(path: str | Path, statistic: str) -> pd.DataFrame:
    """Heads by their mean `statistic` over the corpus, highest first: kind, layer, head, mean, sentences."""
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; choose from {list(STATISTICS)}")
    totals: dict[tuple, list[float]] = {}
    for frame in _head_rows(path, ["kind", "layer", "head", statistic]):
        grouped = frame.groupby(["kind", "layer", "head"])[statistic].agg(["sum", "count"])
        for head, (total, count) in grouped.iterrows():
            entry = totals.setdefault(head, [0.0, 0])
            entry[0] += total
            entry[1] += count
    rows = [(*head, total / count if count else float("nan"), int(count)) for head, (total, count) in totals.items()]
    frame = pd.DataFrame(rows, columns=["kind", "layer", "head", "mean", "sentences"])
    return frame.sort_values("mean", ascending=False, kind="stable").reset_index(drop=True)


def top_sentences(path: str | Path, kind: str, layer: int, head: int, statistic: str, n: int = 10) -> pd.DataFrame:
    """The `n` sentences where one head's `statistic` is highest: sentence, value, source, target. `kind`: any
    spelling of a kind ('decoder.self')."""
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; choose from {list(STATISTICS)}")
    kind = parse_kind(kind)
    best: list[tuple[float, int, str, str]] = []
    for frame in _head_rows(path, ["sentence", "kind", "layer", "head", statistic, "source", "target"],
                            lambda f: (f["kind"] == kind) & (f["layer"] == layer) & (f["head"] == head)):
        for row in frame.dropna(subset=[statistic]).itertuples(index=False):
            item = (float(getattr(row, statistic)), -int(row.sentence), row.source, row.target)
            (heapq.heappush if len(best) < n else heapq.heappushpop)(best, item)
    best.sort(reverse=True)
    return pd.DataFrame([(-sentence, value, source, target) for value, sentence, source, target in best],
                        columns=["sentence", statistic, "source", "target"])


def peak_memory_mib() -> float:
    """This process's peak resident memory (Linux reports kibibytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
