"""Heads across a corpus: statistics against a hand-made pattern and each sentence's own, streaming, ranking, and a
2-process torchrun run that writes the same Parquet as one process."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from transformer import load_checkpoint
from transformer.analysis.corpus_heads import (
    STATISTICS,
    attention_statistics,
    corpus_pairs,
    rank_heads,
    run,
    top_sentences,
)
from transformer.analysis.head_map import head_statistics
from transformer.corpus import main

ROOT = Path(__file__).parents[1]


def test_statistics_of_a_previous_token_head_by_hand():
    # 3 queries over 3 keys, causal; row 0 may attend to one key only and is left out. Rows 1 and 2 put 0.8 on
    # the previous key. Key 2 is </s>, key 1 is punctuation.
    weights = torch.tensor([[1.0, 0.0, 0.0], [0.8, 0.2, 0.0], [0.1, 0.8, 0.1]])[None, None]
    allowed = torch.tril(torch.ones(3, 3, dtype=torch.bool))[None, None]
    stats = attention_statistics(weights, allowed, torch.ones(1, 3, dtype=torch.bool),
                                 torch.tensor([[False, False, True]]), torch.tensor([[False, True, False]]))
    assert stats["previous_share"].item() == pytest.approx(0.8)
    assert stats["diagonal_share"].item() == pytest.approx((0.2 + 0.1) / 2)
    assert stats["first_share"].item() == pytest.approx((0.8 + 0.1) / 2)
    assert stats["eos_share"].item() == pytest.approx(0.05)
    assert stats["punctuation_share"].item() == pytest.approx((0.2 + 0.8) / 2)
    assert stats["mean_distance"].item() == pytest.approx((0.8 + (0.2 + 0.8)) / 2)
    assert stats["max_weight"].item() == pytest.approx(0.8)


def test_corpus_rows_are_each_sentences_own_head_statistics(tiny_checkpoint, tmp_path):
    """A sentence read in a padded chunk has the statistics it has alone (head_map.head_statistics, the Heads view's
    table): one implementation, whatever the batch."""
    checkpoint = load_checkpoint(tiny_checkpoint)
    pairs = list(corpus_pairs(checkpoint, 5))
    run(checkpoint, tmp_path / "heads.parquet", pairs, batch_size=2, progress=False)  # padded batches
    table = pq.read_table(tmp_path / "heads.parquet").to_pandas()
    config = checkpoint.config
    assert len(table) == 5 * 3 * config.num_encoder_layers * config.num_heads
    source, target = pairs[3]
    expected = head_statistics(checkpoint, checkpoint.encode(source), checkpoint.encode(target, side="tgt")[:-1])
    ours = table[table["sentence"] == 3].reset_index(drop=True)
    heads = ["kind", "layer", "head"]
    assert list(ours[heads].itertuples(index=False)) == list(expected[heads].itertuples(index=False))
    for column in STATISTICS:
        assert np.allclose(ours[column].to_numpy(), expected[column].to_numpy(), atol=1e-5, equal_nan=True), column


def test_rank_and_top_sentences(tiny_checkpoint, tmp_path, capsys):
    checkpoint = load_checkpoint(tiny_checkpoint)
    out = tmp_path / "heads.parquet"
    run(checkpoint, out, corpus_pairs(checkpoint, 7), batch_size=3, progress=False)
    assert pq.ParquetFile(out).num_row_groups == 3  # one per chunk: memory holds one chunk
    table = pq.read_table(out).to_pandas()
    ranked = rank_heads(out, "eos_share")
    means = table.groupby(["kind", "layer", "head"])["eos_share"].mean().sort_values(ascending=False)
    assert np.allclose(ranked["mean"].to_numpy(), means.to_numpy())
    top = top_sentences(out, "decoder.cross_attn", 0, 1, "eos_share", n=3)
    head = table[(table["kind"] == "decoder.cross_attn") & (table["layer"] == 0) & (table["head"] == 1)]
    assert top["sentence"].tolist() == head.sort_values("eos_share", ascending=False)["sentence"].head(3).tolist()
    short = tmp_path / "short.parquet"  # kinds by their short names ('decoder.cross'): read as a file written now
    written, chunk = pq.read_table(out), pq.ParquetFile(out).metadata.row_group(0).num_rows
    kinds = written.schema.get_field_index("kind")
    pq.write_table(written.set_column(kinds, "kind", pa.array(table["kind"].str.removesuffix("_attn"))), short,
                   row_group_size=chunk)
    assert set(pq.read_table(short).to_pandas()["kind"]) == {"encoder.self", "decoder.self", "decoder.cross"}
    assert rank_heads(short, "eos_share").equals(ranked)
    assert top_sentences(short, "decoder.cross", 0, 1, "eos_share", n=3).equals(top)
    for head in ("decoder.cross_attn.0.1", "decoder.0.cross:1", "decoder.layers.0.cross_attn:1"):  # any spelling
        main(["top", str(out), "--head", head, "--statistic", "eos_share", "--top", "3"])
        assert capsys.readouterr().out == top.to_string(index=False) + "\n"
    with pytest.raises(SystemExit):
        main(["top", str(out), "--head", "decoder.cross_attn.0", "--statistic", "eos_share"])  # a site, no head
    assert "names no head" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown statistic"):
        rank_heads(out, "nonsense")
    assert set(STATISTICS) <= set(table.columns)


@pytest.mark.slow  # about 35 s: two processes start torch and rendezvous
def test_two_process_torchrun_writes_the_same_parquet(tiny_checkpoint, tmp_path):
    one = tmp_path / "one.parquet"
    main(["run", str(tiny_checkpoint), "--out", str(one), "--count", "11", "--batch-size", "2"])
    with socket.socket() as probe:  # a free port on loopback for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    two = tmp_path / "two.parquet"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
               f"--master_port={port}", "-m", "transformer.corpus", "run", str(tiny_checkpoint), "--out", str(two),
               "--count", "11", "--batch-size", "2"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = pq.read_table(one), pq.read_table(two)
    assert first.schema == second.schema and first.to_pandas().equals(second.to_pandas())  # (NaN where NaN)
    assert pq.ParquetFile(two).num_row_groups == 6
    assert sorted(path.name for path in tmp_path.iterdir()) == ["one.parquet", "two.parquet"]  # shards removed
