"""One head's queries and keys over a corpus in one 2-D picture (AttentionViz: Yeh et al. 2023, "AttentionViz: A
Global View of Transformer Attention"), and the tokens that most excite each feed-forward neuron.

    data = queries_keys(checkpoint, "decoder.cross_attn", layer=1, head=0)
    points = projected(data)                       # x, y, side, sentence, position, piece, pieces per point
    examples = top_neuron_examples(checkpoint, "encoder", 0)

Both read a corpus as transformer.analysis.corpus_heads does (corpus_pairs: a translation checkpoint's dev split or
fresh inputs of a synthetic task), teacher-forced on the reference output, in chunks of consecutive sentences, so
that memory holds one chunk's activations at a time; queries_keys also stops at a cap on the points it keeps.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..data.corpora import collate
from ..inference.translation import Checkpoint, load_checkpoint
from ..io.text import source_ids, target_ids
from ..model.capture import capture
from ..model.device import model_device
from ..model.hooks import ATTENTION_KINDS, attention_name, attention_site, hook_points
from ..model.record import KIND_SIDES
from .corpus_heads import corpus_pairs

MAX_SENTENCES = 200  # sentences read by default: a picture of a few thousand points, drawn in a second
MAX_POINTS = 20_000  # queries and keys kept at most (of whole sentences): the figure's points stay drawable
BATCH_SIZE = 64  # sentences per forward pass
PROJECTIONS = {"pca": None, "tsne": "sklearn", "umap": "umap"}  # method -> the module it needs
PACKAGES = {"sklearn": "scikit-learn", "umap": "umap-learn"}  # module -> the package that installs it


@dataclass(frozen=True)
class QueriesKeys:
    """One head's query and key vectors over a corpus, with where each came from.

    queries (n_queries, d_head) and keys (n_keys, d_head) are the vectors the head's scores are computed from
    (score = q·k / sqrt(d_head)), of every real (non-padding) token; `points` has one row per query, then one per
    key, in that order: side ("query"/"key"), sentence, position, piece, and `argmax` (for a query, the key position
    its weights peak on; -1 for a key). `pieces[s]` is sentence s's (query side, key side) pieces; `weights[s]` its
    (q_len, k_len) attention weights of the head over those pieces (0 where masked)."""

    site: str
    head: int
    queries: np.ndarray
    keys: np.ndarray
    points: pd.DataFrame
    pieces: list[tuple[list[str], list[str]]]
    weights: list[np.ndarray]


def _loaded(checkpoint: Checkpoint | str | Path) -> Checkpoint:
    return checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)


def _batches(checkpoint: Checkpoint, pairs: Iterable[tuple[str, str]], max_sentences: int, batch_size: int
             ) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[list[str]], list[list[str]]]]:
    """Chunks of at most `batch_size` pairs, of `max_sentences` in all, as the model reads them teacher-forced:
    (src (batch, src_len), decoder input tgt (batch, tgt_len), each sentence's source pieces, its decoder input
    pieces), padded, on the model's device."""
    config = checkpoint.config
    device = model_device(checkpoint.model)
    iterator = islice(iter(pairs), max_sentences)
    while chunk := list(islice(iterator, batch_size)):
        examples = [(source_ids(checkpoint.src_tokenizer, source, config.max_len, config.eos_id)[0],
                     target_ids(checkpoint.tgt_tokenizer, target, config.max_len, config.bos_id,
                                config.eos_id)[:-1]) for source, target in chunk]
        src, tgt = collate(examples, config.pad_id)  # (batch, src_len), (batch, tgt_len)
        yield (src.to(device), tgt.to(device), [checkpoint.src_tokenizer.pieces(s) for s, _ in examples],
               [checkpoint.tgt_tokenizer.pieces(t) for _, t in examples])


def _run(model: torch.nn.Module, stack: str, src: torch.Tensor, tgt: torch.Tensor) -> None:
    """The forward pass that reaches `stack`: the encoder alone when nothing of the decoder is wanted."""
    if stack == "encoder":
        model.encode(src)
    else:
        model(src, tgt)


@torch.no_grad()
def queries_keys(checkpoint: Checkpoint | str | Path, kind: str, layer: int, head: int,
                 pairs: Iterable[tuple[str, str]] | None = None, max_sentences: int = MAX_SENTENCES,
                 max_points: int = MAX_POINTS, batch_size: int = BATCH_SIZE) -> QueriesKeys:
    """Head `head` of attention `kind` ("encoder.self_attn", "decoder.self_attn", "decoder.cross_attn", or a short
    name such as "decoder.cross") in layer `layer`: its queries and keys over the first `max_sentences` of `pairs`
    (default: corpus_pairs of the checkpoint), teacher-forced, whole sentences only, stopping before the sentence
    that would pass `max_points` queries and keys."""
    checkpoint = _loaded(checkpoint)
    model, pad = checkpoint.model, checkpoint.config.pad_id
    kind = attention_name(kind)
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind must be one of {ATTENTION_KINDS} (or a short name such as 'decoder.cross'), "
                         f"got {kind!r}")
    site = attention_site(kind, layer)
    if f"{site}.hook_q" not in hook_points(model):
        raise ValueError(f"this model has no {site}")
    num_heads, num_kv_heads = model.get_submodule(site).num_heads, model.get_submodule(site).num_kv_heads
    if not 0 <= head < num_heads:
        raise ValueError(f"head {head} out of range: {site} has heads 0..{num_heads - 1}")
    kv_head = head // (num_heads // num_kv_heads)  # grouped-query attention: the key head this query head reads
    query_side, key_side = KIND_SIDES[kind]
    pairs = corpus_pairs(checkpoint, max_sentences) if pairs is None else pairs
    queries, keys, rows, pieces, weights = [], [], [], [], []
    kept, full = 0, False  # queries and keys kept so far; whether the next sentence would pass max_points
    names = [f"{site}.hook_{part}" for part in ("q", "k", "pattern")]
    for src, tgt, src_pieces, tgt_pieces in _batches(checkpoint, pairs, max_sentences, batch_size):
        with capture(model, names) as record:
            _run(model, kind.split(".")[0], src, tgt)
        q = record.hooks[names[0]][:, head].cpu()  # (batch, q_len, d_head): the scores are computed from these
        k = record.hooks[names[1]][:, kv_head].cpu()  # (batch, k_len, d_head)
        pattern = record.hooks[names[2]][:, head].cpu()  # (batch, q_len, k_len)
        ids = {"src": src.cpu(), "tgt": tgt.cpu()}
        texts = {"src": src_pieces, "tgt": tgt_pieces}
        for item in range(q.size(0)):
            q_len = int((ids[query_side][item] != pad).sum())
            k_len = int((ids[key_side][item] != pad).sum())
            full = kept + q_len + k_len > max_points
            if full:
                break
            kept += q_len + k_len
            sentence = len(pieces)
            # Padding is on the right (collate): a sentence's real tokens are its first q_len / k_len positions.
            queries.append(q[item, :q_len].numpy())
            keys.append(k[item, :k_len].numpy())
            weights.append(pattern[item, :q_len, :k_len].numpy())
            q_pieces, k_pieces = texts[query_side][item][:q_len], texts[key_side][item][:k_len]
            pieces.append((q_pieces, k_pieces))
            argmax = weights[-1].argmax(axis=1) if k_len else np.full(q_len, -1)
            rows.append(pd.DataFrame({"side": "query", "sentence": sentence, "position": np.arange(q_len),
                                      "piece": q_pieces, "argmax": argmax}))
            rows.append(pd.DataFrame({"side": "key", "sentence": sentence, "position": np.arange(k_len),
                                      "piece": k_pieces, "argmax": -1}))
        if full:
            break
    d_head = model.get_submodule(site).W_q.out_features // num_heads
    columns = ["side", "sentence", "position", "piece", "argmax"]
    points = pd.concat(rows[0::2] + rows[1::2], ignore_index=True) if rows else pd.DataFrame(columns=columns)
    return QueriesKeys(site, head, _stacked(queries, d_head), _stacked(keys, d_head), points, pieces, weights)


def _stacked(vectors: list[np.ndarray], width: int) -> np.ndarray:
    return np.concatenate(vectors).astype(np.float32) if vectors else np.zeros((0, width), np.float32)


def normalise(queries: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AttentionViz's normalisation, so that in a joint picture a key near a query is one it scores highly.

    The keys are translated so that their mean is the queries' mean: k' = k - mean(k) + mean(q). For one query q,
    q·k' = q·k + q·(mean(q) - mean(k)), and the added term is the same for all its keys, so each query's softmax
    and the order of its keys by q·k are unchanged. Then queries are scaled by a and keys by 1/a, with a chosen so
    that their mean norms are equal: every q·k is unchanged. Returns (queries, keys), (n, d_head) each, float64."""
    queries, keys = np.asarray(queries, dtype=np.float64), np.asarray(keys, dtype=np.float64)
    if not len(queries) or not len(keys):
        return queries, keys
    keys = keys - keys.mean(axis=0) + queries.mean(axis=0)
    query_norm = np.linalg.norm(queries, axis=1).mean()
    key_norm = np.linalg.norm(keys, axis=1).mean()
    if query_norm == 0 or key_norm == 0:  # nothing to scale: all of one side at the origin
        return queries, keys
    scale = np.sqrt(key_norm / query_norm)  # a: a * query_norm == key_norm / a
    return queries * scale, keys / scale


def project(queries: np.ndarray, keys: np.ndarray, method: str = "pca", seed: int = 0
            ) -> tuple[np.ndarray, np.ndarray]:
    """Queries and keys in ONE 2-D space: (n_queries, 2), (n_keys, 2).

    "pca" (default): the two principal components of the joint matrix (queries and keys stacked, centred), by SVD;
    each component's sign set so that its largest loading is positive (the same picture on every run). "tsne" and
    "umap": scikit-learn's t-SNE or umap-learn's UMAP on the joint matrix, where installed (ImportError naming the
    package otherwise); `seed` fixes their randomness."""
    if method not in PROJECTIONS:
        raise ValueError(f"method must be one of {list(PROJECTIONS)}, got {method!r}")
    module = PROJECTIONS[method]
    if module is not None and importlib.util.find_spec(module) is None:
        raise ImportError(f"the {method!r} projection needs {PACKAGES[module]}, which is not installed "
                          f"(pip install {PACKAGES[module]}); method='pca' needs nothing more")
    joint = np.concatenate([np.asarray(queries, np.float64), np.asarray(keys, np.float64)])  # (n_q + n_k, d_head)
    if method == "pca":
        xy = _pca(joint)
    elif method == "tsne":
        from sklearn.manifold import TSNE
        xy = TSNE(n_components=2, perplexity=min(30.0, max(1.0, (len(joint) - 1) / 3)),
                  random_state=seed).fit_transform(joint)
    else:
        import umap
        xy = umap.UMAP(n_components=2, random_state=seed).fit_transform(joint)
    xy = np.asarray(xy, dtype=np.float64)
    return xy[:len(queries)], xy[len(queries):]


def _pca(joint: np.ndarray) -> np.ndarray:
    """(n, d) -> (n, 2): the centred rows on the first two right singular vectors (zeros where there are fewer)."""
    if not len(joint):
        return np.zeros((0, 2))
    centred = joint - joint.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)  # vt: (min(n, d), d), components by variance
    components = vt[:2]
    # Fixed signs: each component's largest-magnitude loading positive.
    largest = components[np.arange(len(components)), np.abs(components).argmax(axis=1)]
    components = components * np.where(largest < 0, -1.0, 1.0)[:, None]
    xy = np.zeros((len(joint), 2))
    xy[:, :len(components)] = centred @ components.T  # (n, components)
    return xy


def projected(data: QueriesKeys, method: str = "pca", normalised: bool = True, seed: int = 0) -> pd.DataFrame:
    """data.points with the 2-D place of each point (x, y) and the pieces of its sentence on its side (`pieces`, a
    tuple, for context): what viz.qk_space.queries_keys_figure draws. `normalised`: through `normalise` first."""
    queries, keys = normalise(data.queries, data.keys) if normalised else (data.queries, data.keys)
    query_xy, key_xy = project(queries, keys, method, seed)
    frame = data.points.copy()
    xy = np.concatenate([query_xy, key_xy])  # (n_queries + n_keys, 2), in the rows' order
    frame["x"], frame["y"] = xy[:, 0], xy[:, 1]
    side = (frame["side"] == "key").astype(int).to_numpy()
    frame["pieces"] = [tuple(data.pieces[sentence][which]) for sentence, which in zip(frame["sentence"], side)]
    return frame


def nearest_keys(frame: pd.DataFrame, causal: bool = False) -> pd.Series:
    """For each query of a `projected` frame, the position of the key of its own sentence nearest to it in the
    picture, indexed as the frame's query rows. `causal` (decoder self-attention): only keys at or before the
    query's position, the ones it may attend to."""
    nearest = {}
    for _, group in frame.groupby("sentence", sort=False):
        queries, keys = group[group["side"] == "query"], group[group["side"] == "key"]
        if keys.empty:
            continue
        # (n_queries, n_keys) squared distances in the picture
        distance = ((queries[["x", "y"]].to_numpy()[:, None, :] - keys[["x", "y"]].to_numpy()[None, :, :]) ** 2
                    ).sum(axis=-1)
        if causal:
            distance[keys["position"].to_numpy()[None, :] > queries["position"].to_numpy()[:, None]] = np.inf
        nearest.update(zip(queries.index, keys["position"].to_numpy()[distance.argmin(axis=1)]))
    return pd.Series(nearest, dtype=int)


@torch.no_grad()
def top_neuron_examples(checkpoint: Checkpoint | str | Path, stack: str, layer: int,
                        pairs: Iterable[tuple[str, str]] | None = None, top: int = 10, context: int = 3,
                        neurons: Sequence[int] | None = None, max_sentences: int = MAX_SENTENCES,
                        batch_size: int = BATCH_SIZE) -> pd.DataFrame:
    """Each feed-forward neuron's `top` highest activations (hook_mlp_post) in layer `layer` of `stack` ("encoder"
    or "decoder") over the first `max_sentences` of `pairs` (default: corpus_pairs of the checkpoint), teacher-forced.

    One row per (neuron, rank), neuron by neuron, rank 1 the highest: neuron, rank, activation, sentence, position,
    piece, before and after (up to `context` pieces either side, tuples), length (the sentence's pieces on that
    side). `neurons`: only these neurons (default all). A neuron with fewer tokens in the corpus than `top` has fewer
    rows. Ties: the earlier token first (sentence, then position), whatever the chunk size. Memory holds one chunk's
    activations and the best `top` per neuron so far."""
    checkpoint = _loaded(checkpoint)
    model, pad = checkpoint.model, checkpoint.config.pad_id
    if stack not in ("encoder", "decoder"):
        raise ValueError(f"stack must be 'encoder' or 'decoder', got {stack!r}")
    name = f"{stack}.layers.{layer}.feed_forward.hook_mlp_post"
    if name not in hook_points(model):
        raise ValueError(f"this model has no {stack} layer {layer} (no {name})")
    width = checkpoint.config.d_ff
    chosen = torch.arange(width) if neurons is None else torch.as_tensor(list(neurons), dtype=torch.long)
    if len(chosen) and not (0 <= int(chosen.min()) and int(chosen.max()) < width):
        raise ValueError(f"neurons must be in 0..{width - 1}")
    side = "src" if stack == "encoder" else "tgt"
    pairs = corpus_pairs(checkpoint, max_sentences) if pairs is None else pairs
    best = torch.empty(0, len(chosen))  # (kept, neurons) the best activations so far, highest first
    where = torch.empty(0, len(chosen), 2, dtype=torch.long)  # (kept, neurons, 2) their (sentence, position)
    sentences: list[list[str]] = []
    for src, tgt, src_pieces, tgt_pieces in _batches(checkpoint, pairs, max_sentences, batch_size):
        with capture(model, name) as record:
            _run(model, stack, src, tgt)
        activations = record.hooks[name].cpu()[..., chosen].float()  # (batch, length, neurons)
        ids = (src if side == "src" else tgt).cpu()
        batch, length = ids.shape
        # Padding can never be among the best: -inf (dropped at the end if a neuron has too few real tokens).
        activations = activations.masked_fill((ids == pad)[..., None], float("-inf"))
        places = torch.stack(torch.meshgrid(torch.arange(batch) + len(sentences), torch.arange(length),
                                            indexing="ij"), dim=-1).reshape(-1, 1, 2)  # (batch * length, 1, 2)
        candidates = torch.cat([best, activations.reshape(batch * length, -1)])  # (kept + batch * length, neurons)
        candidate_places = torch.cat([where, places.expand(-1, len(chosen), -1)])  # (kept + batch * length, neurons, 2)
        # A stable sort keeps equal activations in corpus order: the kept ones (earlier) before this chunk's.
        order = candidates.sort(dim=0, descending=True, stable=True).indices[:top]  # (kept, neurons)
        best = candidates.gather(0, order)
        where = candidate_places.gather(0, order[..., None].expand(-1, -1, 2))
        sentences += src_pieces if side == "src" else tgt_pieces
    rows = []
    for column, neuron in enumerate(chosen.tolist()):
        for rank in range(best.size(0)):
            activation = float(best[rank, column])
            if activation == float("-inf"):
                break
            sentence, position = where[rank, column].tolist()
            pieces = sentences[sentence]
            rows.append((neuron, rank + 1, activation, sentence, position, pieces[position],
                         tuple(pieces[max(0, position - context):position]),
                         tuple(pieces[position + 1:position + 1 + context]), len(pieces)))
    return pd.DataFrame(rows, columns=["neuron", "rank", "activation", "sentence", "position", "piece", "before",
                                       "after", "length"])
