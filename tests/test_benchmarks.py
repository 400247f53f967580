"""`python -m benchmarks --smoke`: the whole benchmark on a tiny random model at tiny sizes, so that it cannot rot.
Its numbers mean nothing; that every figure is measured and checked against its target is what is tested."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import (
    app_latency,
    browser,
    capture,
    decoding,
    lecture_deck,
    memory,
    model_view,
    sessions,
    smollm,
    training,
)
from benchmarks.chromium import CHROMIUM
from deploy.server import ROOT

WITH_TARGETS = [capture, training, decoding, app_latency, browser, model_view, lecture_deck, smollm]
MEASURED = WITH_TARGETS + [memory, sessions]


SMOKE_S = 420  # a hang guard: the run takes 2-3 minutes on a quiet 2-core machine, 5.5 beside a training job


@pytest.mark.slow
@pytest.mark.timeout(SMOKE_S + 60)
def test_smoke_run_measures_and_checks_every_figure(tmp_path):
    results = tmp_path / "results.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--smoke", "--json", str(results)], cwd=ROOT,
                          capture_output=True, text=True, timeout=SMOKE_S)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(results.read_text())["rows"]
    skippable = set() if CHROMIUM.exists() else {browser.FIGURE}
    for module in MEASURED:
        mine = [row for row in rows if row["figure"] == module.FIGURE]
        assert mine, f"no row for {module.FIGURE}"
        if module.FIGURE in skippable:
            assert mine[0]["case"].startswith("skipped")
            continue
        # A difference of two measurements (signed) may fall below 0 by noise; every other value is a count or a time.
        assert all(isinstance(row["value"], (int, float)) and (row["value"] >= 0 or row.get("signed"))
                   for row in mine), mine
        if module in WITH_TARGETS:
            assert any(row["target"] for row in mine), f"{module.FIGURE} has no target"
    assert not [row for row in rows if row.get("error")]
    if CHROMIUM.exists():  # the first visitor's wait is measured, against its target
        first = [row for row in rows if row["case"].startswith("first visitor")]
        assert len(first) == 1 and first[0]["target"] == f"≤ {browser.FIRST_FIGURE_AT_MOST:g}", first
    for row in rows:  # each verdict is its value against its target, recomputed here
        if row["target"]:
            sign, bound = row["target"].split()
            assert sign in ("≤", "≥"), row
            assert row["met"] is (row["value"] <= float(bound) if sign == "≤" else row["value"] >= float(bound)), row
        else:
            assert row["met"] is None, row
    assert json.loads(results.read_text())["smoke"] is True
    assert "| figure | case | value | target |" in done.stdout and "grows with length" in done.stdout
    table = done.stdout.split("| --- |", 1)[1]
    assert all(f"| {row['figure']} | {row['case']} |" in table for row in rows)  # every row printed
    met, missed = sum(row["met"] is True for row in rows), sum(row["met"] is False for row in rows)
    assert f"{met} targets met, {missed} missed" in done.stdout


def test_the_smollm_rows_measure_smollm2_135m_shape_against_the_issues_targets():
    """The shape is SmolLM2-135M's as the llama converter maps it, and each target is the issue's."""
    from transformer.io.converters import llama

    hf = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "num_hidden_layers": 30,
          "num_key_value_heads": 3, "vocab_size": 49152, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
          "rope_theta": 100000, "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 0}
    assert smollm.SMOLLM2_135M == llama.config(hf, None, ROOT / "config.json")
    assert smollm.SMOLLM2_135M.num_decoder_layers * smollm.SMOLLM2_135M.num_heads == 270
    assert (smollm.PROMPT_TOKENS, smollm.ENTER_AT_MOST, smollm.MODEL_VIEW_AT_MOST, smollm.CAPTURE_AT_MOST,
            smollm.SERVER_AT_MOST_MB) == (64, 1.5, 2.0, 1.15, 2048)
    assert smollm.SMOKE.stacks == "decoder-only" and smollm.SMOKE.feed_forward == "gated"


@pytest.mark.slow
def test_several_checkpoints_are_measured_in_one_run_each_row_named_by_its_folder(tmp_path):
    """New weights beside the old: --checkpoint A B measures both, one after the other, in one run (the browser's
    figures too, which set up their own checkpoints for each)."""
    results = tmp_path / "results.json"
    folders = ["checkpoints/reverse", "checkpoints/reverse-1layer"]
    figures = ["capture", "browser"] if CHROMIUM.exists() else ["capture"]
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--smoke", "--only", *figures, "--checkpoint", *folders,
                           "--json", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=SMOKE_S)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(results.read_text())
    by_folder = [[row for row in report["rows"] if row["case"].startswith(f"{folder}: ")] for folder in folders]
    assert by_folder[0] and len(by_folder[0]) == len(by_folder[1]) and sum(map(len, by_folder)) == len(report["rows"])
    assert not [row for row in report["rows"] if row.get("error")]
    assert report["checkpoint"] == ", ".join(folders) and all(f"`{folder}`" in done.stdout for folder in folders)


@pytest.mark.slow  # a smoke run of one figure: a few seconds
def test_a_run_of_some_figures_leaves_the_committed_whole_run_alone(capsys):
    from benchmarks.__main__ import main

    committed = ROOT / "benchmarks" / "results.json"
    before = committed.read_bytes()
    assert main(["--smoke", "--only", "corpus"]) == 0
    assert "corpus summary" in capsys.readouterr().out  # measured and printed
    assert committed.read_bytes() == before
