"""The faithfulness command: the dates alignment rule by hand, deletion against a direct re-run, the table."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from helpers import ROOT
from transformer import load_checkpoint
from transformer.analysis.attribution import METHODS
from transformer.training.faithfulness import RANDOM, date_alignment, deletion_drops, load, main, table


@pytest.mark.parametrize("source, fmt, expected", [
    ("3 March 2021", "D Month YYYY",
     [{8}, {9}, {10}, {11}, None, {2, 3, 4, 5, 6}, {2, 3, 4, 5, 6}, None, {0}, {0}]),
    ("12/18/2004", "MM/DD/YYYY", [{6}, {7}, {8}, {9}, None, {0}, {1}, None, {3}, {4}]),
    ("22 Mar 67", "D Mon YY", [{7, 8}, {7, 8}, {7}, {8}, None, {3, 4, 5}, {3, 4, 5}, None, {0}, {1}]),
    ("2019-4-10", "YYYY-M-D", [{0}, {1}, {2}, {3}, None, {5}, {5}, None, {7}, {8}]),
    ("Tuesday, November 21, 1911", "Weekday, Month D, YYYY",
     [{22}, {23}, {24}, {25}, None, set(range(9, 17)), set(range(9, 17)), None, {18}, {19}]),
])
def test_date_alignment_by_hand(source, fmt, expected):
    assert date_alignment(source, fmt) == expected


def test_deletion_drops_equal_a_direct_rerun(tiny_checkpoint):
    checkpoint = load_checkpoint(tiny_checkpoint)
    t = checkpoint.translate("abcdef")
    rng = np.random.default_rng(0)
    methods = {"made up": rng.random((len(t.output_ids), len(t.src_ids)))}
    drops = deletion_drops(checkpoint.model, t.src_ids, t.tgt_ids, t.output_ids, methods, 2, random.Random(0))
    assert len(drops["made up"]) == len(drops[RANDOM]) == len(t.output_ids) - 1
    row = 1
    deleted = set(np.argsort(-methods["made up"][row, :-1])[:2].tolist())
    kept = [token for j, token in enumerate(t.src_ids) if j not in deleted]
    with torch.no_grad():
        before = checkpoint.model(torch.tensor([t.src_ids]), torch.tensor([t.tgt_ids])).softmax(-1)
        after = checkpoint.model(torch.tensor([kept]), torch.tensor([t.tgt_ids])).softmax(-1)
    target = t.output_ids[row]
    assert drops["made up"][row] == pytest.approx(float(before[0, row, target] - after[0, row, target]), abs=1e-5)


def test_command_prints_the_table_and_saves_it_as_data(tiny_checkpoint, capsys, tmp_path):
    saved = tmp_path / "faithfulness.json"
    main([str(tiny_checkpoint), "--inputs", "2", "--ig-steps", "4", "--out", str(saved)])
    out = capsys.readouterr().out
    assert "| method | tiny-reverse: top = true | tiny-reverse: drop k=1 | tiny-reverse: drop k=3 |" in out
    for method in ("attention_last", "value_norms", "rollout", "flow", "integrated_gradients", RANDOM):
        assert f"| {method} |" in out
    document = load(saved)
    assert document["command"].startswith("python -m transformer.faithfulness ") and "--out" in document["command"]
    assert set(document["results"]["tiny-reverse"]["deletion"]) == {1, 3}
    main(["--table", str(saved)])  # the saved file's table, without measuring
    assert capsys.readouterr().out.strip().splitlines() == out.strip().splitlines()[-(len(METHODS) + 3):]


def test_the_documents_show_the_saved_table():
    """A faithfulness table in README.md or docs/ is checkpoints/faithfulness.json's (`--table` prints it)."""
    saved = table(load(ROOT / "checkpoints" / "faithfulness.json")["results"]).splitlines()
    for document in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = document.read_text(encoding="utf-8").splitlines() if document.exists() else []
        for start in (i for i, line in enumerate(lines) if line.startswith("| method |") and "top = true" in line):
            assert lines[start: start + len(saved)] == saved, document.name
