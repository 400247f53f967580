"""Tests for transformer.io.tokenizer: training, loading, special ids, char models, determinism."""

from pathlib import Path

import pytest

from transformer.io.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer

SENTENCES = [
    "the cat sat on the mat",
    "the dog sat on the log",
    "a cat and a dog are friends",
    "she reads a book in the garden",
    "he writes a letter to his friend",
] * 20


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> Tokenizer:
    return Tokenizer.train(SENTENCES, tmp_path_factory.mktemp("bpe") / "src.model", vocab_size=60)


@pytest.fixture(scope="module")
def char(tmp_path_factory) -> Tokenizer:
    return Tokenizer.train(["abcdefghij", "0123456789"], tmp_path_factory.mktemp("char") / "chars.model",
                           vocab_size=500, model_type="char", add_dummy_prefix=False)


def test_special_ids_and_pieces(bpe):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert bpe.pieces([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == ["<pad>", "<unk>", "<s>", "</s>"]


def test_train_writes_exactly_the_model_file(tmp_path):
    model_path = tmp_path / "out" / "src.model"  # the parent does not exist yet
    tokenizer = Tokenizer.train(SENTENCES, model_path, vocab_size=40)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["src.model"]
    assert isinstance(tokenizer.path, Path) and tokenizer.path == model_path
    assert tokenizer.vocab_size == 40


def test_training_is_deterministic(tmp_path):
    first = Tokenizer.train(SENTENCES, tmp_path / "a.model", vocab_size=50)
    second = Tokenizer.train(iter(SENTENCES), str(tmp_path / "b.model"), vocab_size=50)  # any iterable, str path
    assert first.path.read_bytes() == second.path.read_bytes()


def test_encode_decode_round_trip(bpe):
    for sentence in ["the cat sat on the mat", "a dog reads"]:
        ids = bpe.encode(sentence)
        assert all(isinstance(i, int) and i > EOS_ID for i in ids)  # no BOS/EOS added
        assert bpe.decode(ids) == sentence
        assert bpe.pieces(ids) == bpe.encode_pieces(sentence)
        assert "".join(bpe.encode_pieces(sentence)).replace("▁", " ").strip() == sentence


def test_decode_drops_pad_bos_eos(bpe):
    ids = bpe.encode("the cat")
    assert bpe.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == "the cat"


def test_reload_from_path(bpe):
    reloaded = Tokenizer(bpe.path)
    assert reloaded.vocab_size == bpe.vocab_size
    assert reloaded.encode("the dog and the cat") == bpe.encode("the dog and the cat")


def test_char_model_splits_characters_and_allows_a_large_vocab_size(char):
    assert char.vocab_size == 4 + 20  # the specials and the 20 characters, although 500 were asked for
    assert char.encode_pieces("abc") == ["a", "b", "c"]
    assert char.decode(char.encode("j9a0")) == "j9a0"


def test_unknown_character_is_unk(char):
    assert char.encode("é") == [UNK_ID]
    assert char.id_to_piece(UNK_ID) == "<unk>"
    assert char.encode("aéb") == [char.encode("a")[0], UNK_ID, char.encode("b")[0]]


def test_unigram_model_trains(tmp_path):
    tokenizer = Tokenizer.train(SENTENCES, tmp_path / "u.model", vocab_size=40, model_type="unigram")
    assert tokenizer.decode(tokenizer.encode("the cat sat")) == "the cat sat"


def test_unknown_model_type(tmp_path):
    with pytest.raises(ValueError, match="model_type"):
        Tokenizer.train(SENTENCES, tmp_path / "x.model", vocab_size=40, model_type="word-piece")


def test_missing_model_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.model"
    with pytest.raises(OSError, match="nope.model"):
        Tokenizer(missing)


def test_corrupt_model_file_names_the_path(tmp_path):
    corrupt = tmp_path / "corrupt.model"
    corrupt.write_bytes(b"not a sentencepiece model")
    with pytest.raises(ValueError, match="corrupt.model"):
        Tokenizer(corrupt)
