"""Tests for transformer.data.corpora: normalisation, corpus reading, dev split, length batching, padding; one side of
a corpus as a language model's text: its sentences, the held-out split by sentence, packing."""

import gzip
import random
from pathlib import Path

import pytest
import torch

from helpers import SHARED, corpus_file
from transformer.data.corpora import (
    CorpusSpec,
    Repeat,
    collate,
    iter_sentences,
    pack_sentences,
    packed_examples,
    read_parallel,
    repeated,
    sentence_splits,
    split_dev,
    token_batches,
)
from transformer.io.text import normalize

TATOEBA = SHARED / "data" / "tatoeba-eng-fra" / "eng-fra.tsv"  # beside the repository, as CI and developers have it
TATOEBA_FULL = SHARED / "data" / "tatoeba-eng-fra-full" / "eng-fra.tsv"


# ----------------------------------------------------------------------------- normalize

def test_normalize_narrow_no_break_space():
    assert normalize("Va\u202f!") == "Va !"
    assert normalize("Quoi\u00a0?") == "Quoi ?"


def test_normalize_apostrophes():
    assert normalize("I don’t know") == "I don't know"
    assert normalize("‘hi’ ʼ ′ `") == "'hi' ' ' '"


def test_normalize_nfkc_ligatures_and_widths():
    assert normalize("ﬁne ﬂag") == "fine flag"
    assert normalize("ＡＢＣ１２") == "ABC12"


def test_normalize_collapses_whitespace_and_strips():
    assert normalize("  a \t b\u2009\u2009c \n") == "a b c"
    assert normalize(" \t ") == ""


# ----------------------------------------------------------------------------- read_parallel

def write(path: Path, text: str) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


TSV_TEXT = (
    "Go.\tVa\u202f!\n"
    "I’m here.\tJe suis là.\tCC-BY attribution\n"  # a third column is ignored
    "no tab on this line\n"  # skipped
    "Empty target.\t  \n"  # dropped
    "\tEmpty source.\n"  # dropped
    "Windows line.\tLigne Windows.\r\n"
)
TSV_PAIRS = [("Go.", "Va !"), ("I'm here.", "Je suis là."), ("Windows line.", "Ligne Windows.")]


@pytest.mark.parametrize("name", ["pairs.tsv", "pairs.tsv.gz"])
def test_read_tsv(tmp_path, name):
    assert read_parallel(write(tmp_path / name, TSV_TEXT)) == TSV_PAIRS


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_read_aligned_files(tmp_path, suffix):
    source = write(tmp_path / f"train.en{suffix}", "A dog.\nTwo  cats\u2028sleep.\n\nA ﬁsh.\n")
    target = write(tmp_path / f"train.de{suffix}", "Ein Hund.\nZwei Katzen schlafen.\nLeer.\nEin Fisch.\n")
    # A U+2028 inside a sentence must not split it: that would shift every following line.
    assert read_parallel(source, target) == [
        ("A dog.", "Ein Hund."), ("Two cats sleep.", "Zwei Katzen schlafen."), ("A fish.", "Ein Fisch."),
    ]


def test_aligned_files_must_have_the_same_line_count(tmp_path):
    source = write(tmp_path / "a.en", "one\ntwo\nthree\n")
    target = write(tmp_path / "a.fr", "un\ndeux\n")
    with pytest.raises(ValueError, match=r"3.*2"):
        read_parallel(source, target)


def test_read_real_tatoeba():
    pairs = read_parallel(corpus_file(TATOEBA))
    assert 74_000 < len(pairs) <= 74_146
    text = "".join(s + t for s, t in pairs)
    assert "\u202f" not in text and "’" not in text
    train, dev = split_dev(pairs)
    assert not {s for s, _ in train} & {s for s, _ in dev}


# ----------------------------------------------------------------------------- split_dev

def make_pairs(n_sources: int, translations: int = 3) -> list[tuple[str, str]]:
    return [(f"sentence {i}", f"traduction {i}.{k}") for i in range(n_sources) for k in range(translations)]


def test_split_is_deterministic_and_covers_every_pair():
    pairs = make_pairs(500)
    train, dev = split_dev(pairs, 0.1, seed=0)
    assert (train, dev) == split_dev(pairs, 0.1, seed=0)
    assert sorted(train + dev) == sorted(pairs)
    assert split_dev(pairs, 0.1, seed=1) != (train, dev)


def test_no_source_on_both_sides():
    train, dev = split_dev(make_pairs(500), 0.2)
    assert dev and not {s for s, _ in train} & {s for s, _ in dev}


def test_split_is_keyed_on_the_normalised_source():
    pairs = [("I don’t know.", "Je ne sais pas."), ("I don't  know.", "Je l'ignore.")]
    for seed in range(20):
        train, dev = split_dev(pairs, 0.5, seed=seed)
        assert len(train) in (0, 2)


def test_split_does_not_depend_on_order():
    pairs = make_pairs(500)
    shuffled = pairs[:]
    random.Random(0).shuffle(shuffled)
    _, dev = split_dev(pairs, 0.1)
    _, dev_of_shuffled = split_dev(shuffled, 0.1)
    assert set(dev) == set(dev_of_shuffled)


def test_split_fraction_is_approximate():
    _, dev = split_dev(make_pairs(4000, translations=1), 0.1)
    assert 300 < len(dev) < 500
    assert split_dev(make_pairs(10), 0.0)[1] == []


# ----------------------------------------------------------------------------- token_batches

def random_examples(n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    return [([5] * rng.randint(1, 40), [6] * rng.randint(1, 40)) for _ in range(n)]


def longest(example) -> int:
    return max(len(example[0]), len(example[1]))


@pytest.mark.parametrize("rng", [None, random.Random(0)])
def test_batches_cover_each_index_once_and_respect_max_tokens(rng):
    examples = random_examples(500)
    batches = token_batches(examples, max_tokens=200, rng=rng)
    assert sorted(i for batch in batches for i in batch) == list(range(500))
    for batch in batches:
        assert len(batch) * max(longest(examples[i]) for i in batch) <= 200


def test_batches_group_similar_lengths():
    examples = random_examples(500)
    batches = token_batches(examples, max_tokens=200, rng=None)
    widths = [[longest(examples[i]) for i in batch] for batch in batches]
    # Unshuffled, batches are consecutive slices of the examples sorted by length: no two overlap.
    assert all(max(earlier) <= min(later) for earlier, later in zip(widths, widths[1:]))


def test_an_example_longer_than_max_tokens_gets_a_batch_of_its_own():
    examples = [([1] * 3, [1] * 3), ([1] * 50, [1] * 2), ([1] * 3, [1] * 4)]
    batches = token_batches(examples, max_tokens=10, rng=None)
    assert [1] in batches and sorted(i for b in batches for i in b) == [0, 1, 2]


def test_shuffled_batches_are_deterministic_per_rng_seed():
    examples = random_examples(300)
    first = token_batches(examples, 150, random.Random(1))
    assert first == token_batches(examples, 150, random.Random(1))
    assert first != token_batches(examples, 150, random.Random(2))


def test_max_tokens_must_be_positive():
    with pytest.raises(ValueError):
        token_batches(random_examples(3), 0, None)


# ----------------------------------------------------------------------------- collate

def test_collate_right_pads_both_sides():
    source, target = collate([([2, 7, 8, 3], [2, 9, 3]), ([2, 5, 3], [2, 4, 4, 4, 3])], pad_id=0)
    assert source.dtype == target.dtype == torch.long
    assert source.tolist() == [[2, 7, 8, 3], [2, 5, 3, 0]]
    assert target.tolist() == [[2, 9, 3, 0, 0], [2, 4, 4, 4, 3]]


def test_collate_uses_the_given_pad_id():
    source, target = collate([([4], [4, 4]), ([4, 4, 4], [4])], pad_id=-1)
    assert source.tolist() == [[4, -1, -1], [4, 4, 4]]
    assert target.tolist() == [[4, 4], [4, -1]]


def test_a_repeat_names_a_corpus_or_a_least_number_of_words():
    train = {"short": [("I am cold.", "J'ai froid."), ("The old man walks his dog by the river.", "x")],
             "scenes": [("A dog runs.", "Un chien court."), ("Two men in red shirts sit on a bench.", "y")]}
    assert repeated(train, []) == [1, 1, 1, 1]
    assert repeated(train, [Repeat.parse("scenes=3")]) == [1, 1, 3, 3]
    assert repeated(train, [Repeat.parse("scenes=3"), Repeat.parse("8+words=2")]) == [1, 2, 3, 3]  # largest, not both
    assert repeated(train, [Repeat.parse("8+words=4"), Repeat.parse("scenes=3")]) == [1, 4, 3, 4]
    assert str(Repeat.parse("10+words=3")) == "10+words=3"
    for bad in ("scenes", "scenes=0", "scenes=-1", "scenes=1.5", "=2", "x+words=2"):
        with pytest.raises(ValueError, match="repeat"):
            Repeat.parse(bad)


# ----------------------------------------------------------------------------- a language model's sentences

def test_a_side_is_a_tsv_column_one_of_two_files_or_a_file_of_lines(tmp_path):
    tsv = CorpusSpec.parse(str(write(tmp_path / "pairs.tsv", TSV_TEXT)))
    # One side alone: a sentence whose other side is empty stays, a line without a tab is a sentence of its own.
    assert list(iter_sentences(tsv, "source")) == ["Go.", "I'm here.", "no tab on this line", "Empty target.",
                                                   "Windows line."]
    assert list(iter_sentences(tsv, "target")) == ["Va !", "Je suis là.", "Empty source.", "Ligne Windows."]
    source = write(tmp_path / "train.en.gz", "A dog.\n\nA ﬁsh.\n")
    target = write(tmp_path / "train.de.gz", "Ein Hund.\nLeer.\nEin Fisch.\n")
    aligned = CorpusSpec.parse(f"scenes={source},{target}")
    assert list(iter_sentences(aligned, "source")) == ["A dog.", "A fish."]
    assert list(iter_sentences(aligned, "target")) == ["Ein Hund.", "Leer.", "Ein Fisch."]
    assert list(iter_sentences(CorpusSpec.parse(str(source)))) == ["A dog.", "A fish."]  # one sentence a line
    with pytest.raises(ValueError, match="side"):
        list(iter_sentences(tsv, "french"))


def lm_corpus(tmp_path, name: str, sentences: list[str]) -> CorpusSpec:
    path = write(tmp_path / f"{name}.tsv", "".join(sentence + "\tx\n" for sentence in sentences))
    return CorpusSpec.parse(f"{name}={path}")


def test_held_out_sentences_never_train_and_each_sentence_comes_once(tmp_path):
    sentences = [f"Sentence number {i}." for i in range(400)]
    # Tatoeba gives a sentence once per translation: here every sentence three times, in another order each time.
    spec = lm_corpus(tmp_path, "tatoeba", sentences + sentences[::-1] + sentences[::2] + sentences[1::2])
    train, dev = sentence_splits([spec], {}, "source", 0.1, 0)
    assert not set(train["tatoeba"]) & set(dev["tatoeba"])
    assert sorted(train["tatoeba"] + dev["tatoeba"]) == sorted(sentences)  # each once, none lost
    assert 20 < len(dev["tatoeba"]) < 60
    assert train["tatoeba"] == [s for s in sentences if s not in dev["tatoeba"]]  # first occurrences, in file order
    again = sentence_splits([lm_corpus(tmp_path, "again", sentences[::-1])], {}, "source", 0.1, 0)[1]["again"]
    assert sorted(again) == sorted(dev["tatoeba"])  # chosen by the sentence: any order, the same split
    assert sentence_splits([spec], {}, "source", 0.1, 1)[1]["tatoeba"] != dev["tatoeba"]  # another seed, another


def test_a_dev_set_is_held_out_of_every_corpus_and_shared_sentences_train_once(tmp_path):
    first = lm_corpus(tmp_path, "first", ["Shared one.", "Held elsewhere.", "Only first."])
    second = lm_corpus(tmp_path, "second", ["Shared one.", "Only second."])
    dev_set = lm_corpus(tmp_path, "val", ["Held elsewhere.", "Val only."])
    train, dev = sentence_splits([first, second], {"second": dev_set}, "source", 1e-9, 0)
    assert dev == {"first": [], "second": ["Held elsewhere.", "Val only."]}
    assert train == {"first": ["Shared one.", "Only first."], "second": ["Only second."]}
    with pytest.raises(ValueError, match="not trained on"):
        sentence_splits([first], {"second": dev_set}, "source", 0.1, 0)


def test_packs_hold_whole_sentences_each_once_up_to_the_capacity():
    lengths = [random.Random(i).randint(1, 12) for i in range(300)] + [0, 41]  # empty and too long: left out
    for rng in (None, random.Random(3)):
        packs = pack_sentences(lengths, 40, rng)
        assert sorted(i for pack in packs for i in pack) == list(range(300))
        assert all(sum(lengths[i] for i in pack) <= 40 for pack in packs)
        # Full: the sentence that starts the next pack would not have fitted in this one.
        assert all(sum(lengths[i] for i in pack) + lengths[after[0]] > 40 for pack, after in zip(packs, packs[1:]))
    assert [i for pack in pack_sentences(lengths, 40) for i in pack] == list(range(300))  # no rng: in order
    assert pack_sentences(lengths, 40, random.Random(3)) == pack_sentences(lengths, 40, random.Random(3))


def test_a_share_of_packs_repeats_a_stretch_of_its_sentences_later_in_it():
    lengths = [random.Random(i).randint(2, 12) for i in range(3000)]
    packs = pack_sentences(lengths, 120, random.Random(0), repeat_share=0.3)
    assert all(sum(lengths[i] for i in pack) <= 120 for pack in packs)
    assert sorted({i for pack in packs for i in pack}) == list(range(3000))  # room made, nothing lost
    with_repeat = [pack for pack in packs if len(set(pack)) < len(pack)]
    assert 0.25 < len(with_repeat) / len(packs) < 0.35
    sizes, gaps = [], []
    for pack in with_repeat:
        twice = [i for i in dict.fromkeys(pack) if pack.count(i) == 2]
        assert all(pack.count(i) <= 2 for i in pack) and 2 * sum(lengths[i] for i in twice) <= 120
        first = pack.index(twice[0])
        again = pack.index(twice[0], first + 1)
        assert pack[first:first + len(twice)] == pack[again:again + len(twice)] == twice  # a stretch, in a row, twice
        sizes.append(len(twice))
        gaps.append(again - first - len(twice))
    assert min(sizes) == 1 and max(sizes) > 5 and min(gaps) == 0 and max(gaps) > 3  # short and long, near and far
    assert all(len(set(pack)) < len(pack) for pack in pack_sentences(lengths, 120, random.Random(0), 1.0))


def test_packed_examples_read_as_the_sentences_joined():
    sentences = [[10, 11], [12], [13, 14, 15], [16, 17]]
    examples = packed_examples(sentences, 7, bos_id=2, eos_id=3)  # 5 pieces a pack
    assert examples == [([], [2, 10, 11, 12, 3]), ([], [2, 13, 14, 15, 16, 17, 3])]


def test_real_tatoeba_english_held_out_by_sentence():
    train, dev = sentence_splits([CorpusSpec.parse(str(corpus_file(TATOEBA_FULL)))], {}, "source", 0.05, 0)
    train, dev = train["tatoeba-eng-fra-full"], dev["tatoeba-eng-fra-full"]
    assert not set(train) & set(dev) and len(set(train)) == len(train)
    assert 100_000 < len(train) < 115_000 and 0.04 < len(dev) / (len(train) + len(dev)) < 0.06
