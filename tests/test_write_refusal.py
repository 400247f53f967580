"""No command writes over what it reads: `refuse_output_over_inputs` refuses an output that is an input (by path,
symlink or hard link), holds one or lies inside one, and the folder the command runs in; `train` refuses an --out
over its --init-from checkpoint or a corpus before it reads or writes anything, --replace or not."""
from __future__ import annotations

import os

import pytest

from helpers import TINY_TRAINING
from transformer.io.safety import OutputOverInput, refuse_output_over_inputs
from transformer.training import train


def test_an_output_over_an_input_is_refused_by_path_symlink_and_hard_link(tmp_path, monkeypatch):
    deck = tmp_path / "decks" / "tiny.toml"
    deck.parent.mkdir()
    deck.write_text("title = 'tiny'\n")
    (tmp_path / "alias.toml").symlink_to(deck)
    os.link(deck, tmp_path / "linked.toml")
    cases = {deck: "is", tmp_path / "decks" / ".." / "decks" / "tiny.toml": "is", tmp_path / "alias.toml": "is",
             tmp_path / "linked.toml": "is", tmp_path / "decks": "holds", tmp_path: "holds"}
    for out, relation in cases.items():
        with pytest.raises(OutputOverInput, match=f"^{out}: {relation} {deck}, which this command reads; nothing was "
                                                  "written"):
            refuse_output_over_inputs(out, [tmp_path.parent / "elsewhere", deck])
    with pytest.raises(OutputOverInput, match="lies inside"):
        refuse_output_over_inputs(tmp_path / "decks" / "out.html", [tmp_path / "decks"])
    refuse_output_over_inputs(tmp_path / "tiny.html", [deck])  # beside it: fine
    refuse_output_over_inputs(tmp_path / "decks" / "tiny.html", [deck])
    monkeypatch.chdir(tmp_path / "decks")
    for out in (".", "..", str(tmp_path)):
        with pytest.raises(OutputOverInput, match="is the folder this command runs in, or holds it"):
            refuse_output_over_inputs(out, [])
    refuse_output_over_inputs("out.html", [])


def test_training_never_writes_over_its_init_checkpoint_or_corpus(tiny_checkpoint, tmp_path):
    before = {path: path.read_bytes() for path in tiny_checkpoint.rglob("*") if path.is_file()}
    for extra in ([], ["--replace"]):
        with pytest.raises(SystemExit, match=f"error: {tiny_checkpoint}: is {tiny_checkpoint}, which this command "
                                             "reads; nothing was written"):
            train.main(TINY_TRAINING + ["--init-from", str(tiny_checkpoint), "--steps", "1",
                                        "--out", str(tiny_checkpoint), *extra])
    assert {path: path.read_bytes() for path in tiny_checkpoint.rglob("*") if path.is_file()} == before
    corpus = tmp_path / "data" / "pairs.tsv"
    corpus.parent.mkdir()
    corpus.write_text("a b\tb a\n" * 20)
    for out, relation in ((corpus, "is"), (corpus.parent, "holds"), (corpus / "model", "lies inside")):
        with pytest.raises(SystemExit, match=f"error: {out}: {relation} {corpus}, which this command reads"):
            train.main(["--task", "translate", "--data", f"pairs={corpus}", "--out", str(out), "--replace"])
    assert corpus.read_text() == "a b\tb a\n" * 20
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["data", "pairs.tsv"]
