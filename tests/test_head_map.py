"""The map of all heads and heads matched across models: divergences, scaling and matching against values computed
another way (scipy, brute force, per-sentence passes, corpus_heads' Parquet), the shipped reverse and induction
checkpoints, and the figures."""
from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.spatial.distance import jensenshannon

from transformer import capture, load_checkpoint
from transformer.analysis.corpus_heads import corpus_pairs, rank_heads, run
from transformer.analysis.head_map import (
    FINAL,
    POSITION_BINS,
    ROLE_THRESHOLD,
    assignment,
    classical_mds,
    follow_head,
    head_map,
    head_patterns,
    head_roles,
    js_divergence,
    match_heads,
    roles_no_head_reaches,
)
from viz import Theme
from viz.head_map import head_map_figure, head_matching_figure
from viz.layout import text_px

CHECKPOINTS = Path(__file__).parents[1] / "checkpoints"


@pytest.fixture(scope="module")
def reverse():
    return load_checkpoint(CHECKPOINTS / "reverse")


@pytest.fixture(scope="module")
def induction():
    return load_checkpoint(CHECKPOINTS / "induction")


@pytest.fixture(scope="module")
def reverse_pairs(reverse):
    return list(corpus_pairs(reverse, 48))


@pytest.fixture(scope="module")
def reverse_map(reverse, reverse_pairs):
    return head_map(head_patterns(reverse, reverse_pairs, batch_size=16))


def single_passes(checkpoint, pairs):
    """Per pair, its own unpadded teacher-forced pass: (source ids, decoder input ids, record)."""
    for source, target in pairs:
        src, tgt = checkpoint.encode(source), checkpoint.encode(target, side="tgt")[:-1]
        with torch.no_grad(), capture(checkpoint.model) as record:
            checkpoint.model(torch.tensor([src]), torch.tensor([tgt]))
        yield src, tgt, record


def head_rows(record, kind, layer, head):
    """One head's (q_len, k_len) weights as numpy, and which rows may attend to more than one key."""
    site = record.keys_of(kind)[layer]
    weights = record[site][0, head].double().numpy()
    return weights, record.mask(site)[0, 0].sum(dim=-1).numpy() > 1


# ----------------------------------------------------------------------------- by hand

def test_js_divergence_by_hand_and_against_scipy():
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    assert js_divergence(p, p).tolist() == [0.0, 0.0, 0.0]
    assert js_divergence(p[1], torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)).item() == pytest.approx(math.log(2))
    # [0.5, 0.5] against [1, 0]: the mixture is [0.75, 0.25], and H([1, 0]) = 0.
    mixture = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert js_divergence(p[0], p[1]).item() == pytest.approx(mixture - math.log(2) / 2)
    rng = np.random.default_rng(0)
    a, b = rng.dirichlet(np.ones(7), size=5), rng.dirichlet(np.ones(7), size=5)
    expected = jensenshannon(a, b, axis=1) ** 2  # scipy gives the distance, the divergence's square root
    assert np.allclose(js_divergence(torch.tensor(a), torch.tensor(b)).numpy(), expected)


def test_classical_mds_recovers_distances():
    line = np.array([0.0, 1.0, 3.0])
    points = classical_mds(np.abs(line[:, None] - line[None, :]))
    assert points.shape == (3, 2)
    assert np.allclose(np.abs(points[:, 0] - points[:, 0, None]), np.abs(line[:, None] - line[None, :]))
    assert np.allclose(points[:, 1], 0.0)
    assert np.allclose(points.mean(axis=0), 0.0)  # centred
    square = np.array([[0, 0], [2, 0], [2, 1], [0, 1]], dtype=float)
    distances = np.linalg.norm(square[:, None] - square[None, :], axis=-1)
    embedded = classical_mds(distances)
    assert np.allclose(np.linalg.norm(embedded[:, None] - embedded[None, :], axis=-1), distances)
    assert np.array_equal(embedded, classical_mds(distances))
    for axis in embedded.T:  # signs fixed: each axis's largest entry in absolute value is positive
        assert axis[np.abs(axis).argmax()] > 0
    assert np.array_equal(classical_mds(np.zeros((1, 1))), np.zeros((1, 2)))


def test_assignment_against_brute_force():
    divergence = np.random.default_rng(3).uniform(0, math.log(2), size=(6, 6))
    best = min(itertools.permutations(range(6)), key=lambda p: divergence[np.arange(6), list(p)].sum())
    assert assignment(divergence).tolist() == list(best)
    # Greedy (each row its own best column) would pick column 0 twice; the assignment gives up a little on row 0.
    assert assignment(np.array([[0.1, 0.2], [0.15, 0.9]])).tolist() == [1, 0]


def test_roles_threshold_and_largest():
    statistics = pd.DataFrame({"previous_share": [0.9, 0.5, 0.1, np.nan], "induction_share": [0.1, 0.6, 0.1, np.nan],
                               "diagonal_share": [0.0, 0.0, ROLE_THRESHOLD, 0.1], "first_share": [0.0, 0.0, 0.2, 0.1],
                               "eos_share": [0.0, 0.0, 0.3, 0.1]})
    assert head_roles(statistics) == ["previous-token", "induction", "", ""]


def test_the_roles_no_head_reaches_name_the_closest_head():
    frame = pd.DataFrame({"kind": ["decoder.self_attn"] * 3, "layer": [0, 0, 1], "head": [0, 1, 0],
                          "previous_share": [0.3, 0.35, 0.0], "induction_share": [0.0, 0.1, 0.7],
                          "diagonal_share": [0.2, 0.1, 0.0], "first_share": [0.1, 0.1, 0.45],
                          "eos_share": [0.0, 0.0, 0.0]})
    frame["role"] = head_roles(frame)
    # first-token passes the threshold in a head whose role is induction: reached; end-of-sentence is never seen
    assert roles_no_head_reaches(frame) == [("previous-token", ("decoder.self_attn", 0, 1), 0.35),
                                            ("diagonal", ("decoder.self_attn", 0, 0), 0.2)]


# ----------------------------------------------------------------------------- reverse

def test_divergences_match_per_sentence_passes(reverse):
    pairs = list(corpus_pairs(reverse, 5))
    patterns = head_patterns(reverse, pairs, batch_size=2)  # padded chunks
    index = {head: i for i, head in enumerate(patterns.heads)}
    same = (("decoder.self_attn", 0, 1), ("decoder.self_attn", 1, 2))  # causal: row 0 has one key and is left out
    across = (("encoder.self_attn", 1, 0), ("decoder.cross_attn", 1, 3))
    same_kind, other_kind = [], []
    for _, _, record in single_passes(reverse, pairs):
        (wa, rows), (wb, _) = head_rows(record, *same[0]), head_rows(record, *same[1])
        same_kind.append(np.mean(jensenshannon(wa[rows], wb[rows], axis=1) ** 2))
        profiles = [binned_by_loops(*head_rows(record, *head)) for head in across]
        shared = [d for d in range(POSITION_BINS) if d in profiles[0] and d in profiles[1]]
        other_kind.append(np.mean([jensenshannon(profiles[0][d], profiles[1][d]) ** 2 for d in shared]))
    assert patterns.divergence[index[same[0]], index[same[1]]] == pytest.approx(np.mean(same_kind), abs=1e-5)
    assert patterns.divergence[index[across[0]], index[across[1]]] == pytest.approx(np.mean(other_kind), abs=1e-5)
    assert np.allclose(patterns.divergence, patterns.divergence.T) and not np.diag(patterns.divergence).any()
    assert patterns.sentences == 5 and patterns.divergence.max() <= math.log(2)


def binned_by_loops(weights, rows):
    """Query bin -> the mean of its rows re-binned on key position (key * bins // keys), for an unpadded head."""
    q_len, k_len = weights.shape
    rebinned = np.zeros((q_len, POSITION_BINS))
    for k in range(k_len):
        rebinned[:, k * POSITION_BINS // k_len] += weights[:, k]
    by_bin = {}
    for q in np.flatnonzero(rows):
        by_bin.setdefault(q * POSITION_BINS // q_len, []).append(rebinned[q])
    return {d: np.mean(rows, axis=0) for d, rows in by_bin.items()}


def test_statistics_match_corpus_heads(reverse, reverse_pairs, reverse_map, tmp_path):
    run(reverse, tmp_path / "heads.parquet", reverse_pairs, batch_size=20, progress=False)
    for statistic in ("previous_share", "eos_share", "entropy"):
        ranked = rank_heads(tmp_path / "heads.parquet", statistic).set_index(["kind", "layer", "head"])["mean"]
        ours = reverse_map.set_index(["kind", "layer", "head"])[statistic]
        assert np.allclose(ours.to_numpy(), ranked.loc[ours.index].to_numpy(), atol=1e-5), statistic


def test_reverse_map_puts_anti_diagonal_heads_together(reverse, reverse_pairs, reverse_map):
    # Mirrored key of query q, for a string of n characters: n - 1 - q (the source character the output at q is).
    shares = {}
    for src, _, record in single_passes(reverse, reverse_pairs):
        n = len(src) - 1  # characters, then </s>
        for kind in ("encoder.self_attn", "decoder.self_attn", "decoder.cross_attn"):
            for layer, site in enumerate(record.keys_of(kind)):
                mirrored = record[site][0, :, torch.arange(n), n - 1 - torch.arange(n)].mean(dim=-1)  # (heads,)
                for head, share in enumerate(mirrored.tolist()):
                    shares.setdefault((kind, layer, head), []).append(share)
    anti = {head for head, values in shares.items() if np.mean(values) > 0.5}
    # The shipped model has five: cross-attention layer 0 head 3 and all of layer 1's.
    assert len(anti) >= 2 and {kind for kind, _, _ in anti} == {"decoder.cross_attn"}
    points = reverse_map[["x", "y"]].to_numpy()
    heads = list(zip(reverse_map["kind"], reverse_map["layer"], reverse_map["head"]))
    for head in anti:
        distances = np.linalg.norm(points - points[heads.index(head)], axis=1)
        distances[heads.index(head)] = np.inf
        assert heads[int(distances.argmin())] in anti, head
    assert list(reverse_map.columns[:6]) == ["kind", "layer", "head", "x", "y", "role"]


# ----------------------------------------------------------------------------- induction

def test_induction_heads_and_following_one_through_training(induction, tmp_path):
    pairs = list(corpus_pairs(induction, 48))
    frame = head_map(head_patterns(induction, pairs))
    marked = frame[frame["role"] == "induction"]
    assert len(marked) >= 1 and set(marked["layer"]) == {1}  # the induction heads sit in the second layer
    # ... and read what the previous-token head of the first layer wrote
    previous = frame[frame["role"] == "previous-token"]
    assert len(previous) >= 1 and set(previous["layer"]) == {0}
    assert (previous["previous_share"] > ROLE_THRESHOLD).all()
    assert "previous-token" not in [role for role, _, _ in roles_no_head_reaches(frame)]

    strongest = frame.loc[frame["induction_share"].idxmax()]
    followed = follow_head(induction, strongest["kind"], int(strongest["layer"]), int(strongest["head"]), pairs)
    assert followed["snapshot"].tolist() == induction.snapshot_names() + [FINAL]
    assert followed.attrs["statistic"] == "induction_share"
    final = followed.iloc[-1]
    assert (final["layer"], final["head"], final["divergence"]) == (strongest["layer"], strongest["head"], 0.0)
    assert final["induction_share"] == pytest.approx(strongest["induction_share"])
    shares = followed["induction_share"].to_numpy()
    assert shares[0] < 0.2 and shares[-1] > ROLE_THRESHOLD
    first = int(np.flatnonzero(followed["first_above"])[0])
    assert followed["first_above"].sum() == 1 and (shares[:first] <= ROLE_THRESHOLD).all()
    assert shares[first] > ROLE_THRESHOLD and followed["role"].iloc[first] == "induction"

    # The matched head's share at that snapshot, as corpus_heads computes it over the snapshot's model.
    snapshot = copy.copy(induction)
    snapshot.model = induction.load_snapshot(followed["snapshot"].iloc[first])
    run(snapshot, tmp_path / "snapshot.parquet", pairs, batch_size=16, progress=False)
    ranked = rank_heads(tmp_path / "snapshot.parquet", "induction_share").set_index(["kind", "layer", "head"])
    row = followed.iloc[first]
    assert ranked.loc[(strongest["kind"], row["layer"], row["head"]), "mean"] == pytest.approx(shares[first],
                                                                                              abs=1e-5)


# ----------------------------------------------------------------------------- matching

def test_matching_a_checkpoint_against_itself_and_refusals(reverse, induction):
    pairs = list(corpus_pairs(reverse, 16))
    matched = match_heads(reverse, CHECKPOINTS / "reverse", pairs)
    assert list(matched.columns) == ["kind", "layer_a", "head_a", "layer_b", "head_b", "divergence"]
    assert len(matched) == 24
    assert (matched["layer_a"] == matched["layer_b"]).all() and (matched["head_a"] == matched["head_b"]).all()
    assert matched["divergence"].abs().max() < 1e-9
    snapshot = match_heads(reverse, reverse.load_snapshot("step_002100"), pairs)  # a snapshot as B
    assert sorted(zip(snapshot["layer_b"], snapshot["head_b"])) == sorted(zip(matched["layer_b"], matched["head_b"]))
    with pytest.raises(ValueError, match="different vocabularies"):
        match_heads(reverse, induction, pairs)
    with pytest.raises(ValueError, match="different vocabularies"):
        match_heads(reverse, induction.load_snapshot("step_000000"), pairs)
    with pytest.raises(ValueError, match="attention differs"):
        match_heads(reverse, CHECKPOINTS / "reverse-1layer", pairs)
    with pytest.raises(ValueError, match="no head"):
        follow_head(reverse, "decoder.cross", 2, 0, pairs)
    with pytest.raises(ValueError, match="unknown role statistic"):
        follow_head(reverse, "decoder.cross", 1, 0, pairs, statistic="entropy")
    with pytest.raises(ValueError, match="no sentences"):
        head_patterns(reverse, [])


# ----------------------------------------------------------------------------- figures

def test_head_map_figure(reverse_map):
    chosen = ("decoder.cross_attn", 1, 0)
    fig = head_map_figure(reverse_map, title="<b>heads", chosen=chosen)
    layers = [trace for trace in fig.data if trace.customdata is not None and trace.legendgroup not in ("roles",
                                                                                                        "chosen")]
    assert sum(len(trace.x) for trace in layers) == len(reverse_map)
    for trace in fig.data:
        for (kind, layer, head), x in zip(trace.customdata or (), trace.x):
            row = reverse_map[(reverse_map["kind"] == kind) & (reverse_map["layer"] == layer)
                              & (reverse_map["head"] == head)].iloc[0]
            assert x == pytest.approx(row["x"])
            if trace.legendgroup == "roles":  # a ring round each head of that role
                assert trace.name == row["role"]
    rings = {trace.name: len(trace.x) for trace in fig.data if trace.legendgroup == "roles"}
    assert rings == reverse_map[reverse_map["role"] != ""]["role"].value_counts().to_dict()
    assert "previous-token" in rings
    # Every head named on the map at its point ("L1 H0"), its role after its name, the chosen head's in bold.
    names = [(note.x, note.y, note.text) for note in fig.layout.annotations]
    assert len(names) == len(reverse_map)
    for row in reverse_map.itertuples(index=False):
        name = next(text for x, y, text in names if x == pytest.approx(row.x) and y == pytest.approx(row.y))
        plain = name.replace("<b>", "").replace("</b>", "")
        assert plain == f"L{row.layer} H{row.head}" + (f" {row.role}" if row.role else "")
        assert (name != plain) == ((row.kind, row.layer, row.head) == chosen)
    square = [trace for trace in fig.data if trace.legendgroup == "chosen"]
    assert len(square) == 1 and list(square[0].customdata[0]) == list(chosen) and "L1 H0" in square[0].name
    assert "near = alike" in fig.layout.xaxis.title.text and fig.layout.xaxis.showticklabels is False
    assert fig.layout.title.text == "&lt;b&gt;heads"
    # One scale on both axes, and every name inside the plot.
    height = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    width = 800 - fig.layout.margin.l - fig.layout.margin.r
    x_range, y_range = fig.layout.xaxis.range, fig.layout.yaxis.range
    assert (x_range[1] - x_range[0]) / width == pytest.approx((y_range[1] - y_range[0]) / height)
    assert not [trace for trace in head_map_figure(reverse_map, chosen=("encoder.self_attn", 9, 9)).data
                if trace.legendgroup == "chosen"]  # a head the map has not: nothing marked


def test_head_map_names_stand_apart_in_a_cluster():
    """Heads that attend alike lie on one spot: their names move out along lines rather than pile up."""
    frame = pd.DataFrame({"kind": ["decoder.self_attn"] * 12, "layer": [i // 4 for i in range(12)],
                          "head": [i % 4 for i in range(12)], "x": [0.0] * 6 + [1e-3 * i for i in range(6)],
                          "y": [1e-3 * i for i in range(6)] + [0.0] * 6, "role": ["first-token"] * 12})
    frame.loc[11, ["x", "y"]] = [1.0, 1.0]  # one head far away: the cluster is small on the map
    for theme in (Theme(width=800), Theme(large=True, width=880, height=600)):
        fig = head_map_figure(frame, theme=theme)
        font = fig.layout.annotations[0].font.size
        boxes = [(note.ax - text_px(note.text, font) / 2, note.ay - font * 0.65,
                  note.ax + text_px(note.text, font) / 2, note.ay + font * 0.65)
                 for note in fig.layout.annotations[:11]]  # relative to one spot: the cluster's heads
        overlapping = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                       if min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1]
        assert not overlapping, overlapping


    odd = pd.DataFrame({"kind": ["<b>", "decoder.self_attn"], "layer": [0, 1], "head": [2, 0], "x": [0.0, 1.0],
                        "y": [0.0, 1.0], "role": ["<b>", ""], "previous_share": [np.nan, 0.5]})
    odd_fig = head_map_figure(odd)
    names = [trace.name for trace in odd_fig.data]
    hovers = " ".join(text for trace in odd_fig.data if trace.hovertext is not None for text in trace.hovertext)
    assert "&lt;b&gt;" in names and "<b>" not in names
    assert "&lt;b&gt; · L0 H2" in hovers and "<b>" not in hovers and "previous token: n/a" in hovers
    assert [trace.name for trace in odd_fig.data if trace.customdata is None] == ["&lt;b&gt; attention",
                                                                                 "decoder self attention"]
    assert head_map_figure(odd.iloc[:0]).layout.annotations[0].text == "no heads to map"


def test_head_matching_figure():
    matched = pd.DataFrame({"kind": ["decoder.self_attn"] * 3 + ["decoder.cross_attn"],
                            "layer_a": [0, 0, 1, 0], "head_a": [0, 1, 0, 0], "layer_b": [1, 0, 0, 0],
                            "head_b": [0, 0, 1, 0], "divergence": [0.05, 0.3, 0.6, 0.0]})
    fig = head_matching_figure(matched, names=("final", "<b>"))
    a, b = [trace for trace in fig.data if trace.customdata is not None]
    assert [list(row) for row in a.customdata] == [["decoder.self_attn", 0, 0], ["decoder.self_attn", 0, 1],
                                                   ["decoder.self_attn", 1, 0], ["decoder.cross_attn", 0, 0]]
    assert [list(row) for row in b.customdata] == [["decoder.self_attn", 1, 0], ["decoder.self_attn", 0, 0],
                                                   ["decoder.self_attn", 0, 1], ["decoder.cross_attn", 0, 0]]
    assert list(a.text) == ["L0 H0", "L0 H1", "L1 H0", "L0 H0"] and b.text[0] == "L1 H0"
    lines = [trace for trace in fig.data if trace.mode == "lines"]
    # A's L0 H0 (first row) goes to B's L1 H0, the third of B's decoder self heads; more alike, more opaque.
    assert (lines[0].y[0], lines[0].y[1]) == (0, 2)
    alphas = [float(trace.line.color.rsplit(",", 1)[1].rstrip(")")) for trace in lines]
    assert alphas[3] > alphas[0] > alphas[1] > alphas[2]
    notes = [note.text for note in fig.layout.annotations]
    assert "<b>&lt;b&gt;</b>" in notes and "decoder self" in notes and "cross" in notes
    assert "&lt;b&gt; L1 H0" in a.hovertext[0] and "divergence 0.050" in a.hovertext[0]
