"""Parallel corpora: read and normalise sentence pairs, split off a dev set, batch by length (eng-fra's extra joined
pairs are transformer/data/recipes.py's); one side of a corpus as a language model's text: its sentences, a held-out
split by sentence, and sentences packed into sequences.

Batches are made of example indices grouped by similar length, so that little of each batch is
padding, and capped by a token budget rather than a fixed number of sentences.
"""

from __future__ import annotations

import gzip
import hashlib
import random
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import TextIO

import torch

from ..io.text import normalize

Example = tuple[list[int], list[int]]  # (source ids, target ids), with whatever BOS/EOS the caller added


def _open_text(path: str | Path) -> TextIO:
    # newline="\n": only \n ends a line, so a stray \r or U+2028 inside a sentence cannot break
    # the alignment of two files; utf-8-sig drops a byte-order mark if an editor left one.
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="\n")
    return open(path, encoding="utf-8-sig", newline="\n")


def _lines(path: str | Path) -> Iterator[str]:
    with _open_text(path) as f:
        for line in f:
            yield line.rstrip("\r\n")


def iter_parallel(source: str | Path, target: str | Path | None = None) -> Iterator[tuple[str, str]]:
    """Normalised (source, target) sentence pairs, read one line at a time (memory does not grow with the
    corpus); pairs with an empty side dropped.

    With `target` None, `source` is a TSV file of `source<TAB>target` lines (further columns are
    ignored, lines without a tab skipped). Otherwise `source` and `target` are two line-aligned
    files, which must have the same number of lines (ValueError once the shorter one ends). Any of
    these files may be gzipped (.gz).
    """
    if target is None:
        columns = (line.split("\t") for line in _lines(source))
        raw_pairs = ((cols[0], cols[1]) for cols in columns if len(cols) >= 2)
    else:
        raw_pairs = _aligned_lines(source, target)
    for s, t in raw_pairs:
        s, t = normalize(s), normalize(t)
        if s and t:
            yield s, t


def _aligned_lines(source: str | Path, target: str | Path) -> Iterator[tuple[str, str]]:
    for pair in zip_longest(_lines(source), _lines(target)):
        if None in pair:
            counted = [sum(1 for _ in _lines(path)) for path in (source, target)]
            raise ValueError(f"line counts differ: {source} has {counted[0]} lines, {target} has {counted[1]}")
        yield pair


def read_parallel(source: str | Path, target: str | Path | None = None) -> list[tuple[str, str]]:
    """All pairs of `iter_parallel` as a list (so a two-file corpus of unequal line counts raises before use)."""
    return list(iter_parallel(source, target))


@dataclass(frozen=True)
class CorpusSpec:
    """One parallel corpus as a command line names it: `NAME=PATH` (a TSV file) or `NAME=SOURCE,TARGET` (two aligned
    files); without `NAME=` the corpus is named after its folder. The name labels its dev scores ("multi30k")."""

    name: str
    source: str
    target: str | None = None

    @classmethod
    def parse(cls, text: str) -> CorpusSpec:
        name, _, paths = text.rpartition("=") if "=" in text else ("", "", text)
        source, _, target = paths.partition(",")
        if not source:
            raise ValueError(f"no corpus path in {text!r}")
        return cls(name or Path(source).parent.name or Path(source).stem, source, target or None)

    def __str__(self) -> str:
        return f"{self.name}={self.source}" + (f",{self.target}" if self.target else "")

    def pairs(self) -> Iterator[tuple[str, str]]:
        return iter_parallel(self.source, self.target)


def corpus_specs(training: dict, data: str | Sequence[str] | None = None, dev_data: Sequence[str] | None = None
                 ) -> tuple[list[CorpusSpec], dict[str, CorpusSpec]]:
    """(training corpora, dev sets by corpus name) as a card's `training` records them, or as `data` and `dev_data`
    name them instead (corpora moved elsewhere, or another model's corpora, to score two models on the same inputs);
    a card written before runs took several corpora holds one path (and perhaps `data_target`)."""
    dev_sets = [CorpusSpec.parse(text) for text in (training.get("dev_data") or [] if dev_data is None else dev_data)]
    if data is not None:
        return [CorpusSpec.parse(text) for text in ([data] if isinstance(data, str) else data)], \
            {spec.name: spec for spec in dev_sets}
    data = training["data"]
    if isinstance(data, str):
        return [CorpusSpec(Path(data).parent.name, data, training.get("data_target"))], {}
    return [CorpusSpec.parse(text) for text in data], {spec.name: spec for spec in dev_sets}


def dev_pairs(training: dict, data: str | Sequence[str] | None = None, dev_data: Sequence[str] | None = None
              ) -> Iterator[tuple[str, tuple[str, str]]]:
    """(corpus name, pair) for the dev split a card's training used (as corpus_splits made it), or that of the
    corpora `data` and `dev_data` name (see corpus_specs), streamed from the corpus files: memory does not grow with
    the corpus."""
    corpora, dev_sets = corpus_specs(training, data, dev_data)
    for spec in corpora:
        if spec.name in dev_sets:
            pairs = dev_sets[spec.name].pairs()
        else:
            pairs = (pair for pair in spec.pairs() if in_dev(pair[0], training["dev_fraction"], training["split_seed"]))
        yield from ((spec.name, pair) for pair in pairs)


def missing_corpus_files(training: dict) -> list[str]:
    """The files a card's dev split is read from (dev_pairs) that are not on this machine."""
    corpora, dev_sets = corpus_specs(training)
    used = [dev_sets.get(spec.name, spec) for spec in corpora]
    return [path for spec in used for path in (spec.source, spec.target) if path and not Path(path).is_file()]


def corpus_splits(
    corpora: Sequence[CorpusSpec], dev_sets: dict[str, CorpusSpec], dev_fraction: float, seed: int
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, list[tuple[str, str]]]]:
    """(training pairs by corpus name, dev pairs by corpus name). A corpus with a dev set of its own trains on all of
    its pairs; the others give `dev_fraction` of theirs (split_dev). No training pair has the source sentence of a
    dev pair of any corpus, so no corpus's score counts a sentence another corpus taught."""
    unknown = set(dev_sets) - {spec.name for spec in corpora}
    if unknown:
        raise ValueError(f"dev sets for corpora not trained on: {', '.join(sorted(unknown))}")
    train: dict[str, list[tuple[str, str]]] = {}
    dev: dict[str, list[tuple[str, str]]] = {}
    for spec in corpora:
        pairs = list(spec.pairs())
        if spec.name in dev_sets:
            train[spec.name] = pairs
            dev[spec.name] = list(dev_sets[spec.name].pairs())
        else:
            train[spec.name], dev[spec.name] = split_dev(pairs, dev_fraction, seed)
    dev_sources = {source for pairs in dev.values() for source, _ in pairs}
    return {name: [pair for pair in pairs if pair[0] not in dev_sources] for name, pairs in train.items()}, dev


@dataclass(frozen=True)
class Repeat:
    """How many times a kind of training pair comes in each epoch, as a command line names it: `multi30k=3` (every
    pair of the corpus multi30k) or `10+words=3` (every pair whose source has at least 10 words). Weighs the corpora
    without dropping any pair: the register a model is short of gets more of the steps."""

    selector: str
    times: int

    @classmethod
    def parse(cls, text: str) -> Repeat:
        selector, _, times = text.rpartition("=")
        if not selector or not times.isdigit() or int(times) < 1:
            raise ValueError(f"a repeat is NAME=TIMES or WORDS+words=TIMES, TIMES a whole number from 1, got {text!r}")
        if selector.endswith("+words") and not selector.removesuffix("+words").isdigit():
            raise ValueError(f"a length repeat is WORDS+words=TIMES, WORDS a whole number, got {text!r}")
        return cls(selector, int(times))

    def __str__(self) -> str:
        return f"{self.selector}={self.times}"

    def applies(self, corpus: str, source: str) -> bool:
        if self.selector.endswith("+words"):
            return len(source.split()) >= int(self.selector.removesuffix("+words"))
        return corpus == self.selector


def repeated(train: dict[str, list[tuple[str, str]]], repeats: Sequence[Repeat]) -> list[int]:
    """For each training pair, in the order of `train`'s corpora, how many times an epoch holds it: the largest
    repeat that applies to it (repeats do not multiply), 1 where none does."""
    return [max([r.times for r in repeats if r.applies(corpus, source)], default=1)
            for corpus, pairs in train.items() for source, _ in pairs]


def in_dev(source: str, dev_fraction: float, seed: int) -> bool:
    """Whether a pair with this source sentence belongs to the dev split (see split_dev)."""
    return _dev_score(source, seed) < dev_fraction


def _dev_score(source: str, seed: int) -> float:
    """A number in [0, 1) fixed by the normalised sentence and the seed (hashlib, so unlike
    Python's hash() it is the same in every process)."""
    digest = hashlib.sha256(f"{seed}\0{normalize(source)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_dev(
    pairs: Sequence[tuple[str, str]], dev_fraction: float = 0.05, seed: int = 0
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, dev): about `dev_fraction` of the pairs go to dev, each in its input order.

    The side of a pair depends only on its source sentence, so every translation of a sentence
    lands on the same side (the model is never scored on a sentence it was trained on), and the
    split does not change when the file is reordered or grows.
    """
    if not 0.0 <= dev_fraction <= 1.0:
        raise ValueError(f"dev_fraction must be in [0, 1], got {dev_fraction}")
    train, dev = [], []
    for pair in pairs:
        (dev if in_dev(pair[0], dev_fraction, seed) else train).append(pair)
    return train, dev


def token_batches(
    examples: Sequence[Example], max_tokens: int, rng: random.Random | None
) -> list[list[int]]:
    """Example indices grouped into batches of similar length, each index exactly once.

    A batch holds as many examples as fit in batch_size * longest side <= max_tokens (at least
    one, even if that one alone is longer). With `rng`, equal-length examples are mixed and the
    batch order is shuffled, so that each epoch sees different batches in a different order.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    order = list(range(len(examples)))
    if rng is not None:
        rng.shuffle(order)  # the sort below is stable: this only reorders equal lengths

    def length(i: int) -> int:
        source, target = examples[i]
        return max(len(source), len(target))

    order.sort(key=length)
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in order:
        # Lengths ascend, so the newcomer is the longest and sets the padded width of the batch.
        if batch and (len(batch) + 1) * length(i) > max_tokens:
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    if rng is not None:
        rng.shuffle(batches)
    return batches


def collate(examples: Sequence[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad the source and target ids into two LongTensors, (batch, max_src_len) and (batch, max_tgt_len)."""

    def pad(sequences: list[list[int]]) -> torch.Tensor:
        width = max((len(ids) for ids in sequences), default=0)
        padded = torch.full((len(sequences), width), pad_id, dtype=torch.long)
        for row, ids in enumerate(sequences):
            padded[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return padded

    return pad([source for source, _ in examples]), pad([target for _, target in examples])


# ----------------------------------------------------------------------------- one side as a language model's text

TEXT_SIDES = ("source", "target")


def iter_sentences(spec: CorpusSpec, side: str = "source") -> Iterator[str]:
    """The normalised sentences of one side of a corpus, in file order, empty ones dropped (memory does not grow with
    the corpus): a TSV's first column (`source`) or second (`target`; a line without one is skipped), or one of two
    line-aligned files (each read alone). A file whose lines have no tab is one sentence a line, its `source` side:
    `--data multi30k=.../train.en.gz` trains a language model on Multi30k's English."""
    if side not in TEXT_SIDES:
        raise ValueError(f"side must be one of {TEXT_SIDES}, got {side!r}")
    if spec.target is not None:
        lines: Iterator[str] = _lines(spec.source if side == "source" else spec.target)
    else:
        column = TEXT_SIDES.index(side)
        lines = (cols[column] for cols in (line.split("\t") for line in _lines(spec.source)) if len(cols) > column)
    for line in lines:
        sentence = normalize(line)
        if sentence:
            yield sentence


def sentence_splits(
    corpora: Sequence[CorpusSpec], dev_sets: dict[str, CorpusSpec], side: str, dev_fraction: float, seed: int
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(training sentences by corpus name, held-out sentences by corpus name) of one side of each corpus, for a
    language model. Every sentence comes once (its first occurrence: Tatoeba gives an English sentence once per
    French translation), and a held-out sentence never trains: a corpus with a dev set of its own holds that out,
    the others about `dev_fraction` of their sentences, chosen by the sentence itself (in_dev, as split_dev chooses a
    pair by its source), so the split does not change when the file is reordered or grows. A sentence held out by
    one corpus trains in none, and one that two corpora share trains once, under the first."""
    unknown = set(dev_sets) - {spec.name for spec in corpora}
    if unknown:
        raise ValueError(f"dev sets for corpora not trained on: {', '.join(sorted(unknown))}")
    train: dict[str, list[str]] = {}
    dev: dict[str, list[str]] = {}
    held_out: set[str] = set()
    for spec in corpora:
        sentences = list(dict.fromkeys(iter_sentences(spec, side)))
        if spec.name in dev_sets:
            dev[spec.name] = [s for s in dict.fromkeys(iter_sentences(dev_sets[spec.name], side)) if s not in held_out]
            train[spec.name] = sentences
        else:
            dev[spec.name] = [s for s in sentences if in_dev(s, dev_fraction, seed) and s not in held_out]
            train[spec.name] = [s for s in sentences if not in_dev(s, dev_fraction, seed)]
        held_out.update(dev[spec.name])
    seen: set[str] = set()
    for name, sentences in train.items():
        train[name] = [s for s in sentences if s not in held_out and s not in seen]
        seen.update(train[name])
    return train, dev


def lm_dev_sentences(training: dict, data: str | Sequence[str] | None = None,
                     dev_data: Sequence[str] | None = None) -> dict[str, list[str]]:
    """The held-out sentences a language model's card records its training with (as sentence_splits made them), or
    those of the corpora `data` and `dev_data` name instead (see corpus_specs)."""
    corpora, dev_sets = corpus_specs(training, data, dev_data)
    return sentence_splits(corpora, dev_sets, training.get("text_side", "source"), training["dev_fraction"],
                           training["split_seed"])[1]


def pack_sentences(lengths: Sequence[int], capacity: int, rng: random.Random | None = None,
                   repeat_share: float = 0.0) -> list[list[int]]:
    """Sentences (by their lengths in tokens) packed into sequences of at most `capacity` tokens, whole sentences
    only: a list of packs, each the indices of its sentences in reading order. Every sentence comes in one pack
    (one longer than `capacity`, or empty, in none), in `lengths` order, or shuffled by `rng`.

    repeat_share (with `rng`): this share of the packs (drawn at random) has a stretch of its sentences, one or
    several in a row and at most half the capacity, a second time later in the same pack (right after it or further
    on), so that looking back at an earlier occurrence pays, as in real text, which repeats names, phrases and
    passages (Olsson et al. 2022's induction heads). Sentences of the pack around the stretch make room for the copy
    (they start the next pack); a pack whose sentences all exceed half the capacity goes without."""
    order = [i for i in range(len(lengths)) if 0 < lengths[i] <= capacity]
    if rng is not None:
        rng.shuffle(order)
    queue = deque(order)
    packs: list[list[int]] = []
    while queue:
        pack, used = [], 0
        while queue and used + lengths[queue[0]] <= capacity:
            index = queue.popleft()
            pack.append(index)
            used += lengths[index]
        if rng is not None and repeat_share and rng.random() < repeat_share:
            pack, left_out = with_a_repeat(pack, lengths, capacity, rng)
            queue.extendleft(reversed(left_out))
        packs.append(pack)
    return packs


def with_a_repeat(pack: list[int], lengths: Sequence[int], capacity: int, rng: random.Random
                  ) -> tuple[list[int], list[int]]:
    """(`pack` with a stretch of its sentences repeated later in it, the sentences left out to make room), as
    pack_sentences repeats: a stretch from a random sentence on, of a random number of sentences cut to at most half
    the capacity; room made by leaving out sentences after the stretch, then before it; the copy put at a random
    place after the stretch."""
    first = rng.randrange(len(pack))
    stretch = pack[first : first + rng.randint(1, len(pack) - first)]
    while len(stretch) > 1 and 2 * sum(lengths[i] for i in stretch) > capacity:
        stretch.pop()
    size = sum(lengths[i] for i in stretch)
    if 2 * size > capacity:
        return pack, []
    before, after = pack[:first], pack[first + len(stretch):]
    kept_before, kept_after = len(before), len(after)
    while sum(lengths[i] for i in before[len(before) - kept_before:] + after[:kept_after]) + 2 * size > capacity:
        if kept_after:
            kept_after -= 1
        else:
            kept_before -= 1
    left_out = before[: len(before) - kept_before] + after[kept_after:]  # in reading order
    before, after = before[len(before) - kept_before:], after[:kept_after]
    at = rng.randint(0, len(after))
    return before + stretch + after[:at] + stretch + after[at:], left_out


def packed_examples(sentences: Sequence[list[int]], max_len: int, bos_id: int, eos_id: int,
                    rng: random.Random | None = None, repeat_share: float = 0.0) -> list[Example]:
    """A language model's examples: ([], BOS + the pieces of the sentences of one pack + EOS), packs of
    pack_sentences filling max_len. The sentences' pieces follow each other as those of their text joined by spaces
    do (each sentence's first piece carries its word-start mark), so a sequence reads as a paragraph would."""
    packs = pack_sentences([len(ids) for ids in sentences], max_len - 2, rng, repeat_share)
    return [([], [bos_id, *(token for index in pack for token in sentences[index]), eos_id]) for pack in packs]
