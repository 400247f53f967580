"""One head's queries and keys in one 2-D picture, and neurons' top-activating tokens: transformer.analysis.qk_space
and viz.qk_space, checked against values computed another way."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from helpers import ROOT
from transformer.analysis import qk_space
from transformer.analysis.qk_space import (
    nearest_keys,
    normalise,
    project,
    projected,
    queries_keys,
    top_neuron_examples,
)
from transformer.data.corpora import collate
from transformer.data.tasks import generate
from transformer.inference.translation import load_checkpoint
from transformer.io.text import source_ids, target_ids
from transformer.model.capture import capture, patch
from viz.qk_space import neuron_examples_table, queries_keys_figure

REVERSE_HEAD = ("decoder.cross_attn", 1, 0)  # reads the mirrored input position (mean max weight 0.97)


@pytest.fixture(scope="module")
def reverse():
    return load_checkpoint(ROOT / "checkpoints" / "reverse")


@pytest.fixture(scope="module")
def reverse_head(reverse):
    return queries_keys(reverse, *REVERSE_HEAD, max_sentences=64)


def _scores(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    return queries @ keys.T  # (n_queries, n_keys)


def test_normalise_keeps_each_querys_key_order_and_equalises_mean_norms():
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(50, 16)) * 3 + rng.normal(size=16) * 5
    keys = rng.normal(size=(40, 16)) * 0.5 - rng.normal(size=16) * 4
    new_queries, new_keys = normalise(queries, keys)
    before, after = _scores(queries, keys), _scores(new_queries, new_keys)
    np.testing.assert_array_equal(np.argsort(before, axis=1), np.argsort(after, axis=1))
    # Each query's scores move by one constant: the same softmax.
    shift = after - before
    np.testing.assert_allclose(shift, shift[:, :1].repeat(shift.shape[1], axis=1), atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(new_queries, axis=1).mean(), np.linalg.norm(new_keys, axis=1).mean())
    scale = np.linalg.norm(new_queries[0]) / np.linalg.norm(queries[0])  # queries times a, keys over a
    np.testing.assert_allclose(new_queries / scale, queries)
    np.testing.assert_allclose(new_keys.mean(axis=0) * scale, queries.mean(axis=0), atol=1e-9)  # keys moved


def test_normalise_undoes_a_planted_translation_of_the_keys():
    rng = np.random.default_rng(1)
    queries = rng.normal(size=(30, 8)) + 2.0
    keys = rng.normal(size=(25, 8)) * 2.0
    keys = keys - keys.mean(axis=0) + queries.mean(axis=0)  # already centred where the queries are
    plain, planted = normalise(queries, keys), normalise(queries, keys + rng.normal(size=8) * 10)
    for a, b in zip(plain, planted):
        np.testing.assert_allclose(a, b, atol=1e-9)


def test_pca_is_the_joint_matrixs_svd_up_to_sign():
    rng = np.random.default_rng(2)
    queries, keys = rng.normal(size=(20, 6)) @ rng.normal(size=(6, 6)), rng.normal(size=(15, 6)) + 1.0
    query_xy, key_xy = project(queries, keys)
    joint = np.vstack([queries, keys])
    u, s, _ = np.linalg.svd(joint - joint.mean(axis=0), full_matrices=False)
    expected = u[:, :2] * s[:2]  # (35, 2) the centred rows on the first two components
    got = np.vstack([query_xy, key_xy])
    signs = np.sign((got * expected).sum(axis=0))
    np.testing.assert_allclose(got * signs, expected, atol=1e-9)


@pytest.mark.parametrize(("method", "package"), [("tsne", "scikit-learn"), ("umap", "umap-learn")])
def test_other_projections_name_the_missing_package(monkeypatch, method, package):
    monkeypatch.setattr(qk_space.importlib.util, "find_spec", lambda name, *args: None)
    with pytest.raises(ImportError, match=package):
        project(np.zeros((3, 4)), np.ones((3, 4)), method=method)
    with pytest.raises(ValueError, match="pca"):
        project(np.zeros((3, 4)), np.ones((3, 4)), method="mds")


def _hooks(checkpoint, pairs, names):
    """One captured teacher-forced pass over `pairs`, as one padded batch."""
    config = checkpoint.config
    examples = [(source_ids(checkpoint.src_tokenizer, s, config.max_len)[0],
                 target_ids(checkpoint.tgt_tokenizer, t, config.max_len)[:-1]) for s, t in pairs]
    src, tgt = collate(examples, config.pad_id)
    with torch.no_grad(), capture(checkpoint.model, names) as record:
        checkpoint.model(src, tgt)
    return record.hooks, src, tgt


def test_queries_and_keys_are_the_heads_own_projections_of_the_layer_input(reverse):
    pairs = generate("reverse", 8, seed=3)
    kind, layer, head = "decoder.cross_attn", 1, 2
    data = queries_keys(reverse, kind, layer, head, pairs)
    hooks, src, tgt = _hooks(reverse, pairs, ["decoder.layers.1.hook_resid_mid", "encoder.hook_memory"])
    block = reverse.model.decoder.layers[1].cross_attn
    d_head = reverse.config.d_model // reverse.config.num_heads
    with torch.no_grad():
        q = block.W_q(hooks["decoder.layers.1.hook_resid_mid"])[..., head * d_head:(head + 1) * d_head]
        k = block.W_k(hooks["encoder.hook_memory"])[..., head * d_head:(head + 1) * d_head]
    real_q, real_k = tgt != reverse.config.pad_id, src != reverse.config.pad_id
    np.testing.assert_allclose(data.queries, q[real_q].numpy(), atol=1e-5)
    np.testing.assert_allclose(data.keys, k[real_k].numpy(), atol=1e-5)
    for sentence in range(len(pairs)):
        rows, columns = q[sentence][real_q[sentence]], k[sentence][real_k[sentence]]
        weights = torch.softmax(rows @ columns.T / math.sqrt(d_head), dim=-1).numpy()
        np.testing.assert_allclose(data.weights[sentence], weights, atol=1e-5)
    queries = data.points[data.points["side"] == "query"]
    assert queries["argmax"].tolist() == [int(i) for w in data.weights for i in w.argmax(axis=1)]
    assert data.points["side"].value_counts().to_dict() == {"query": int(real_q.sum()), "key": int(real_k.sum())}


def test_rotary_grouped_heads_softmax_to_the_captured_pattern():
    """A Llama-shaped model (rotary positions, 2 query heads per key head): the scores come from the turned q and
    k, and query head 2 reads key head 1 (not 0, as head % kv_heads would)."""
    checkpoint = load_checkpoint(ROOT / "checkpoints" / "english-lm")
    pairs = [("", "The cat sat on the mat."), ("", "I would like a cup of tea, please.")]
    data = queries_keys(checkpoint, "decoder.self", 1, 2, pairs)
    d_head = data.queries.shape[1]
    start = 0
    for sentence, (pieces, _) in enumerate(data.pieces):
        q = data.queries[start:start + len(pieces)]
        k = data.keys[start:start + len(pieces)]
        start += len(pieces)
        scores = q @ k.T / math.sqrt(d_head)  # (q_len, k_len)
        scores[np.triu_indices(len(pieces), 1)] = -np.inf  # causal
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        np.testing.assert_allclose(data.weights[sentence], weights / weights.sum(axis=1, keepdims=True), atol=1e-5)
    hooks, _, _ = _hooks(checkpoint, pairs[:1], ["decoder.layers.1.self_attn.hook_q_unrotated"])
    unturned = hooks["decoder.layers.1.self_attn.hook_q_unrotated"][0, 2].numpy()
    assert not np.allclose(data.queries[1:len(data.pieces[0][0])], unturned[1:], atol=1e-3)


def _shares(data) -> dict[str, float]:
    """How often a query's nearest key of its own sentence is the one the head's weights peak on: in the 2-D
    picture with and without normalising, and among the normalised d_head-dimensional vectors themselves."""
    shares = {}
    for normalised in (True, False):
        frame = projected(data, normalised=normalised)
        queries = frame[frame["side"] == "query"]
        shares["picture" if normalised else "raw picture"] = float(
            (nearest_keys(frame).loc[queries.index] == queries["argmax"]).mean())
    full = data.points.copy()
    queries, keys = normalise(data.queries, data.keys)
    # Nearest in d_head dimensions: the same search with the vectors as coordinates.
    hits = 0
    for sentence in range(len(data.pieces)):
        q_rows = (full["side"] == "query").to_numpy() & (full["sentence"] == sentence).to_numpy()
        k_rows = (full["side"] == "key").to_numpy() & (full["sentence"] == sentence).to_numpy()
        q = queries[q_rows[:len(queries)]]
        k = keys[k_rows[len(queries):]]
        nearest = ((q[:, None] - k[None]) ** 2).sum(axis=-1).argmin(axis=1)
        hits += int((full.loc[q_rows, "argmax"].to_numpy() == nearest).sum())
    shares["d_head"] = hits / int((full["side"] == "query").sum())
    return shares


def test_the_reverse_head_is_sharp_and_its_normalised_vectors_put_the_attended_key_nearest(reverse_head):
    assert np.mean([w.max(axis=1).mean() for w in reverse_head.weights]) > 0.9
    shares = _shares(reverse_head)
    assert shares["d_head"] >= 0.95, shares  # measured 0.99
    assert shares["picture"] > shares["raw picture"], shares  # measured 0.74 against 0.66


def test_points_are_capped_at_whole_sentences(reverse):
    data = queries_keys(reverse, *REVERSE_HEAD, generate("reverse", 20, seed=4), max_points=200, batch_size=6)
    lengths = [len(q) + len(k) for q, k in data.pieces]
    assert sum(lengths) <= 200 < sum(lengths) + 2 * 31  # stopped before a sentence of at most 31 + 31 tokens
    assert len(data.points) == len(data.queries) + len(data.keys) == sum(lengths)


def _brute_force(checkpoint, pairs, layer, top, batch_size):
    """Every real token's activations in the encoder's layer, stacked (tokens, d_ff) in corpus order, then each
    neuron's `top` by a stable sort (ties: the earlier token)."""
    name = f"encoder.layers.{layer}.feed_forward.hook_mlp_post"
    rows, places, pieces = [], [], []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        hooks, src, _ = _hooks(checkpoint, chunk, [name])
        for item in range(len(chunk)):
            length = int((src[item] != checkpoint.config.pad_id).sum())
            rows.append(hooks[name][item, :length].numpy())
            places += [(len(pieces), position) for position in range(length)]
            pieces.append(checkpoint.src_tokenizer.pieces(src[item, :length].tolist()))
    matrix = np.concatenate(rows)  # (tokens, d_ff)
    order = np.argsort(-matrix, axis=0, kind="stable")[:top]  # (top, d_ff)
    return matrix, order, places, pieces


@pytest.mark.parametrize(("neurons", "tied"), [(None, False), ([5, 0, 200], False), (None, True)])
def test_top_neuron_examples_are_a_brute_force_search(reverse, neurons, tied):
    """`tied`: every activation made 0 or 1, so that most of each neuron's best are ties: the earlier token first,
    whatever the chunks."""
    pairs = generate("reverse", 40, seed=5)
    top, context = 5, 2
    edits = {"encoder.layers.0.feed_forward.hook_mlp_post": lambda x: (x > 1.0).float()} if tied else {}
    with patch(reverse.model, edits):
        frame = top_neuron_examples(reverse, "encoder", 0, pairs, top=top, context=context, neurons=neurons,
                                    batch_size=16)
        matrix, order, places, pieces = _brute_force(reverse, pairs, 0, top, 16)
        again = top_neuron_examples(reverse, "encoder", 0, pairs, top=top, context=context, neurons=neurons,
                                    batch_size=7)
    if tied:
        assert (frame["activation"] == 0).any() and (frame["activation"] == 1).any()
    wanted = list(range(matrix.shape[1])) if neurons is None else neurons
    assert frame["neuron"].drop_duplicates().tolist() == wanted
    assert len(frame) == top * len(wanted)
    for neuron, rows in frame.groupby("neuron", sort=False):
        np.testing.assert_array_equal(rows["activation"].to_numpy(), matrix[order[:, neuron], neuron])
        assert list(zip(rows["sentence"], rows["position"])) == [places[i] for i in order[:, neuron]]
        assert rows["rank"].tolist() == list(range(1, top + 1))
    row = frame.iloc[0]
    sentence = pieces[row["sentence"]]
    assert row["piece"] == sentence[row["position"]] and row["length"] == len(sentence)
    assert row["before"] == tuple(sentence[max(0, row["position"] - context):row["position"]])
    assert row["after"] == tuple(sentence[row["position"] + 1:row["position"] + 1 + context])
    # Another chunk size: the same tokens, the same order (ties included).
    pd.testing.assert_frame_equal(again.drop(columns="activation"), frame.drop(columns="activation"))
    np.testing.assert_allclose(again["activation"], frame["activation"], atol=1e-5)


def test_top_neuron_examples_never_return_padding(reverse):
    pairs = [("ab", "ba"), ("abcdefgh", "hgfedcba")]  # 3 and 9 source tokens with </s>: 12 in all
    frame = top_neuron_examples(reverse, "encoder", 1, pairs, top=50, neurons=[0, 1])
    assert frame.groupby("neuron").size().tolist() == [12, 12]
    assert np.isfinite(frame["activation"]).all()
    assert set(zip(frame["sentence"], frame["position"])) == {(0, p) for p in range(3)} | {(1, p) for p in range(9)}


def _frame() -> pd.DataFrame:
    pieces = ("▁a", "<b>", "c", "d", "e", "f", "g", "h", "i", "j")
    rows = [dict(side=side, sentence=0, position=position, piece=pieces[position], pieces=pieces,
                 x=float(position), y=float(position % 3) + (side == "key"), token_class="odd" if position % 2 else
                 "even") for side in ("query", "key") for position in range(len(pieces))]
    return pd.DataFrame(rows)


def test_figure_shows_both_sides_with_click_data_and_escaped_tokens():
    frame = _frame()
    fig = queries_keys_figure(frame, title="<b>head")
    queries, keys = fig.data
    assert (queries.name, keys.name) == ("queries", "keys") and queries.marker.symbol != keys.marker.symbol
    for trace, side in zip(fig.data, ("query", "key")):
        assert [list(point) for point in trace.customdata] == [[0, p, side] for p in range(10)]
    hover = queries.hovertext[1]
    assert "&lt;b&gt;" in hover and "<b>[&lt;b&gt;]</b>" in hover and "·a" in hover
    assert queries.hovertext[9].startswith("query · sentence 0 · position 9") and "… " in queries.hovertext[9]
    assert fig.layout.title.text == "&lt;b&gt;head"
    assert fig.layout.yaxis.scaleanchor == "x" and fig.layout.xaxis.showticklabels is False
    assert fig.layout.coloraxis.colorbar.title.text == "position"


def test_figure_colours_by_side_or_a_token_class():
    frame = _frame()
    by_side = queries_keys_figure(frame, colour_by="side")
    assert by_side.data[0].marker.color != by_side.data[1].marker.color
    by_class = queries_keys_figure(frame, colour_by="token_class")
    assert [trace.name for trace in by_class.data] == ["queries", "keys", "even", "odd"]
    assert len(set(by_class.data[0].marker.color)) == 2 and "token_class: odd" in by_class.data[0].hovertext[1]
    with pytest.raises(ValueError, match="colour_by"):
        queries_keys_figure(frame, colour_by="nothing")


def test_neuron_table_marks_the_token_in_its_context():
    frame = pd.DataFrame([dict(neuron=3, rank=1, activation=2.5, sentence=4, position=5, piece="▁cat",
                               before=("b", "<s>"), after=("d",), length=7),
                          dict(neuron=3, rank=2, activation=1.0, sentence=0, position=0, piece="x", before=(),
                               after=("y", "z"), length=4)])
    table = neuron_examples_table(frame)
    assert table.columns.tolist() == ["neuron", "rank", "activation", "context", "sentence", "position"]
    assert table["context"].tolist() == ["… b <s> [·cat] d", "[x] y z …"]


def test_token_classes():
    from viz.qk_space import token_class

    assert [token_class(p) for p in ["</s>", "<s>", "▁,", ".", "▁12", "7", "▁chat", "Ġthe", "ons", "<", "é"]] == [
        "special", "special", "punctuation", "punctuation", "digit", "digit", "word start", "word start",
        "inside a word", "punctuation", "inside a word"]
