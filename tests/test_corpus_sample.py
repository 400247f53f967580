"""Each shipped checkpoint reads its corpus on a fresh clone: a checkpoint trained on a corpus carries a sample of its
own dev inputs, written for the very weights it ships with (their SHA-256) and credited as its card credits the
corpus, and equal to the first pairs of the corpus where the corpus is here; a synthetic task's generator makes its
inputs. A sample for other weights, or a malformed one, is refused with a reason, never read."""
from __future__ import annotations

import hashlib
import json
import shutil
from itertools import islice

import pytest

from helpers import ROOT, SHARED, corpus_file
from transformer import corpus as corpus_command
from transformer import load_checkpoint
from transformer.analysis.corpus_heads import corpus_pairs, corpus_unavailable
from transformer.analysis.corpus_sample import MAX_SAMPLE_BYTES, MAX_SAMPLE_PAIRS, SAMPLE_FILE
from transformer.data.tasks import CORPUS_TASKS

SHIPPED = sorted(path.name for path in (ROOT / "checkpoints").iterdir() if path.is_dir())


@pytest.fixture(scope="module", params=SHIPPED)
def shipped(request):
    return load_checkpoint(ROOT / "checkpoints" / request.param)


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch):
    """The working folder of a fresh clone: the cards' corpus paths (../shared/data/...) lead nowhere."""
    (tmp_path / "clone").mkdir()
    monkeypatch.chdir(tmp_path / "clone")


def test_a_corpus_checkpoints_sample_is_for_the_weights_it_ships_with(shipped):
    sample = shipped.path / SAMPLE_FILE
    if shipped.card.task not in CORPUS_TASKS:
        assert not sample.exists()  # its task's generator makes fresh inputs
        return
    document = json.loads(sample.read_text(encoding="utf-8"))
    weights = hashlib.sha256((shipped.path / "model.safetensors").read_bytes()).hexdigest()
    assert document["weights_sha256"] == weights, f"python -m transformer.corpus sample {shipped.path}"
    assert document["credit"] == shipped.card.data and "Tatoeba" in document["credit"]
    assert len(document["pairs"]) == MAX_SAMPLE_PAIRS and sample.stat().st_size <= MAX_SAMPLE_BYTES


def test_without_the_corpus_every_shipped_checkpoint_reads_inputs(shipped, fresh_clone):
    assert corpus_unavailable(shipped) == ""
    pairs = list(corpus_pairs(shipped, 300))
    assert len(pairs) == 300 and all(isinstance(text, str) for pair in pairs for text in pair)
    if shipped.card.task in CORPUS_TASKS:
        document = json.loads((shipped.path / SAMPLE_FILE).read_text(encoding="utf-8"))
        assert [list(pair) for pair in pairs] == document["pairs"][:300]


def test_the_sample_is_the_first_pairs_of_the_corpus_it_stands_for(shipped):
    if shipped.card.task not in CORPUS_TASKS:
        pytest.skip("a synthetic task has no sample")
    corpus_file(SHARED / "data" / "tatoeba-eng-fra-full" / "eng-fra.tsv")
    document = json.loads((shipped.path / SAMPLE_FILE).read_text(encoding="utf-8"))
    read = list(islice(corpus_pairs(shipped, MAX_SAMPLE_PAIRS), MAX_SAMPLE_PAIRS))
    assert [list(pair) for pair in read] == document["pairs"]


@pytest.mark.parametrize("damage", ["other weights", "not pairs", "too many", "not json"])
def test_a_sample_that_cannot_be_trusted_is_named_never_read(tmp_path, fresh_clone, damage):
    folder = tmp_path / "english-lm"
    shutil.copytree(ROOT / "checkpoints" / "english-lm", folder, ignore=shutil.ignore_patterns("snapshots"))
    document = json.loads((folder / SAMPLE_FILE).read_text(encoding="utf-8"))
    if damage == "other weights":
        document["weights_sha256"] = hashlib.sha256(b"other weights").hexdigest()
    elif damage == "not pairs":
        document["pairs"][3] = ["one", "two", "three"]
    elif damage == "too many":
        document["pairs"] = document["pairs"] * 2
    (folder / SAMPLE_FILE).write_text("{" if damage == "not json" else json.dumps(document), encoding="utf-8")
    checkpoint = load_checkpoint(folder)
    problem = corpus_unavailable(checkpoint)
    assert SAMPLE_FILE in problem and "this machine does not have" in problem
    if damage == "other weights":
        assert "written for other weights" in problem


def test_a_corpus_checkpoint_without_a_sample_says_so(tmp_path, fresh_clone):
    folder = tmp_path / "english-lm"
    shutil.copytree(ROOT / "checkpoints" / "english-lm", folder,
                    ignore=shutil.ignore_patterns("snapshots", SAMPLE_FILE))
    assert f"has no {SAMPLE_FILE}" in corpus_unavailable(load_checkpoint(folder))


def test_the_sample_command_writes_the_corpus_first_pairs_and_refuses_without_it(tmp_path, monkeypatch):
    corpus_file(SHARED / "data" / "tatoeba-eng-fra-full" / "eng-fra.tsv")
    folder = tmp_path / "english-lm"
    shutil.copytree(ROOT / "checkpoints" / "english-lm", folder,
                    ignore=shutil.ignore_patterns("snapshots", SAMPLE_FILE))
    corpus_command.main(["sample", str(folder), "--count", "40"])
    document = json.loads((folder / SAMPLE_FILE).read_text(encoding="utf-8"))
    assert [tuple(pair) for pair in document["pairs"]] == list(corpus_pairs(load_checkpoint(folder), 40))
    assert not list(folder.glob(".*.partial"))
    with pytest.raises(SystemExit, match="needs no sample"):
        corpus_command.main(["sample", str(ROOT / "checkpoints" / "reverse")])
    monkeypatch.chdir(tmp_path)  # the card's corpus path leads nowhere from here
    with pytest.raises(SystemExit, match="not on this machine"):
        corpus_command.main(["sample", str(folder)])
