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
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from ..data.corpora import collate
from ..inference.translation import Checkpoint, load_checkpoint
from ..io.text import source_ids, target_ids
from ..model.capture import capture
from ..model.device import model_device
from ..model.hooks import hook_points
from ..model.sites import KIND_SIDES, Site, parse_kind
from .corpus_heads import corpus_pairs, process_share

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


def corpus_examples(checkpoint: Checkpoint, pairs: Iterable[tuple[str, str]]
                    ) -> list[tuple[list[int], list[int]]]:
    """Each pair as the model reads it teacher-forced: (source ids, decoder input ids), unpadded."""
    config = checkpoint.config
    return [(source_ids(checkpoint.src_tokenizer, source, config.max_len, config.eos_id)[0],
             target_ids(checkpoint.tgt_tokenizer, target, config.max_len, config.bos_id, config.eos_id)[:-1])
            for source, target in pairs]


def _batches(checkpoint: Checkpoint, pairs: Iterable[tuple[str, str]], max_sentences: int, batch_size: int
             ) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[list[str]], list[list[str]]]]:
    """Chunks of at most `batch_size` pairs, of `max_sentences` in all, as the model reads them teacher-forced:
    (src (batch, src_len), decoder input tgt (batch, tgt_len), each sentence's source pieces, its decoder input
    pieces), padded, on the model's device."""
    device = model_device(checkpoint.model)
    iterator = islice(iter(pairs), max_sentences)
    while chunk := list(islice(iterator, batch_size)):
        examples = corpus_examples(checkpoint, chunk)
        src, tgt = collate(examples, checkpoint.config.pad_id)  # (batch, src_len), (batch, tgt_len)
        yield (src.to(device), tgt.to(device), [checkpoint.src_tokenizer.pieces(s) for s, _ in examples],
               [checkpoint.tgt_tokenizer.pieces(t) for _, t in examples])


def _run(model: torch.nn.Module, stack: str, src: torch.Tensor, tgt: torch.Tensor) -> None:
    """The forward pass that reaches `stack`: the encoder alone when nothing of the decoder is wanted."""
    if stack == "encoder":
        model.encode(src)
    else:
        model(src, tgt)


def queries_keys(checkpoint: Checkpoint | str | Path, kind: str, layer: int, head: int,
                 pairs: Iterable[tuple[str, str]] | None = None, max_sentences: int = MAX_SENTENCES,
                 max_points: int = MAX_POINTS, batch_size: int = BATCH_SIZE) -> QueriesKeys:
    """Head `head` of attention `kind` ("encoder.self_attn", "decoder.self_attn", "decoder.cross_attn", or any
    spelling of a kind such as "decoder.cross") in layer `layer`: its queries and keys over the first `max_sentences`
    of `pairs` (default: corpus_pairs of the checkpoint), teacher-forced, whole sentences only, stopping before the
    sentence that would pass `max_points` queries and keys."""
    kind = parse_kind(kind)
    return queries_keys_of(checkpoint, [(kind, layer, head)], pairs, max_sentences, max_points,
                           batch_size)[(kind, layer, head)]


@torch.no_grad()
def queries_keys_of(checkpoint: Checkpoint | str | Path, heads: Sequence[tuple[str, int, int]],
                    pairs: Iterable[tuple[str, str]] | None = None, max_sentences: int = MAX_SENTENCES,
                    max_points: int = MAX_POINTS, batch_size: int = BATCH_SIZE,
                    turn: Callable[[], AbstractContextManager] = nullcontext, bounded_by: Iterable[str] = ()
                    ) -> dict[tuple[str, int, int], QueriesKeys]:
    """queries_keys of several heads (kind, layer, head) in one pass over the corpus, each by its full kind name. They
    share their sentences: the pass stops before the sentence that would take a head of any of their kinds (and of
    the kinds `bounded_by`: several passes over parts of a model's heads then stop at the same sentence) past
    `max_points`. Each chunk's forward pass runs inside `turn()` (a caller's share of the model)."""
    checkpoint = _loaded(checkpoint)
    model, pad = checkpoint.model, checkpoint.config.pad_id
    sites = {}  # head -> (site, kv head)
    for kind, layer, head in heads:
        site = Site(kind, layer)
        if site.hook("q") not in hook_points(model):
            raise ValueError(f"this model has no {site}")
        module = model.get_submodule(site.name)
        num_heads, num_kv_heads = module.num_heads, module.num_kv_heads
        if not 0 <= head < num_heads:
            raise ValueError(f"head {head} out of range: {site} has heads 0..{num_heads - 1}")
        sites[(kind, layer, head)] = site, head // (num_heads // num_kv_heads)  # grouped-query: the key head read
    kinds = {kind for kind, _, _ in heads}
    names = [site.hook(part) for site in dict.fromkeys(site for site, _ in sites.values())
             for part in ("q", "k", "pattern")]
    stack = "decoder" if any(kind.startswith("decoder") for kind in kinds) else "encoder"
    pairs = corpus_pairs(checkpoint, max_sentences) if pairs is None else pairs
    found = {head: ([], [], [], []) for head in heads}  # head -> queries, keys, weights, argmax per sentence
    texts: dict[str, list[list[str]]] = {"src": [], "tgt": []}
    kept = dict.fromkeys(kinds | set(bounded_by), 0)  # queries and keys kept so far, per kind
    full = False
    for src, tgt, src_pieces, tgt_pieces in _batches(checkpoint, pairs, max_sentences, batch_size):
        with turn(), capture(model, names) as record:
            _run(model, stack, src, tgt)
        ids = {"src": src.cpu(), "tgt": tgt.cpu()}
        for item in range(src.size(0)):
            length = {side: int((ids[side][item] != pad).sum()) for side in ids}
            points = {kind: length[KIND_SIDES[kind][0]] + length[KIND_SIDES[kind][1]] for kind in kept}
            full = any(kept[kind] + points[kind] > max_points for kind in kept)  # whether this sentence would pass
            if full:
                break
            for kind in kept:
                kept[kind] += points[kind]
            for (kind, layer, head), (site, kv_head) in sites.items():
                q_len, k_len = length[KIND_SIDES[kind][0]], length[KIND_SIDES[kind][1]]
                # Padding is on the right (collate): a sentence's real tokens are its first q_len / k_len positions.
                weights = record.pattern(site)[item, head, :q_len, :k_len].cpu().numpy()
                queries, keys, kept_weights, argmax = found[(kind, layer, head)]
                queries.append(record.q(site)[item, head, :q_len].cpu().numpy())
                keys.append(record.k(site)[item, kv_head, :k_len].cpu().numpy())
                kept_weights.append(weights)
                argmax.append(weights.argmax(axis=1) if k_len else np.full(q_len, -1))
            for side, sentence_pieces in (("src", src_pieces), ("tgt", tgt_pieces)):
                texts[side].append(sentence_pieces[item][:length[side]])
        if full:
            break
    result = {}
    for (kind, layer, head), (site, _) in sites.items():
        query_side, key_side = KIND_SIDES[kind]
        queries, keys, weights, argmax = found[(kind, layer, head)]
        pieces = list(zip(texts[query_side], texts[key_side]))
        argmax = np.concatenate(argmax) if argmax else np.zeros(0, np.int64)
        frame = points_frame(pieces, argmax)
        module = model.get_submodule(site.name)
        d_head = module.W_q.out_features // module.num_heads
        result[(kind, layer, head)] = QueriesKeys(site.name, head, _stacked(queries, d_head), _stacked(keys, d_head),
                                                  frame, pieces, weights)
    return result


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
    # The right singular vectors of the centred rows are the eigenvectors of their (d, d) scatter matrix, found by
    # torch (its threads as the process sets them): numpy's SVD of n x d on a busy two-core machine took a second
    # for a few thousand rows, its BLAS threads waiting on each other; this takes a millisecond.
    _, vectors = torch.linalg.eigh(torch.from_numpy(centred.T @ centred))  # ascending eigenvalues
    vectors = vectors.numpy()
    components = vectors[:, ::-1][:, :min(2, len(joint))].T  # (components, d), by variance
    # Fixed signs: each component's largest-magnitude loading positive.
    largest = components[np.arange(len(components)), np.abs(components).argmax(axis=1)]
    components = components * np.where(largest < 0, -1.0, 1.0)[:, None]
    xy = np.zeros((len(joint), 2))
    xy[:, :len(components)] = centred @ components.T  # (n, components)
    return xy


def points_frame(pieces: Sequence[tuple[Sequence[str], Sequence[str]]], argmax: np.ndarray) -> pd.DataFrame:
    """One row per query of every sentence, then one per key: side, sentence, position, piece, and argmax (each
    query's, in order; -1 for a key), from each sentence's (query pieces, key pieces): QueriesKeys.points."""
    parts = []
    for side, which in (("query", 0), ("key", 1)):
        lengths = [len(sentence[which]) for sentence in pieces]
        parts.append(pd.DataFrame({
            "side": side, "sentence": np.repeat(np.arange(len(pieces)), lengths),
            "position": np.concatenate([np.arange(n) for n in lengths]) if lengths else np.zeros(0, np.int64),
            "piece": [piece for sentence in pieces for piece in sentence[which]],
            "argmax": np.asarray(argmax, np.int64) if side == "query" else -1}))
    return pd.concat(parts, ignore_index=True)


def placed(points: pd.DataFrame, pieces: Sequence[tuple[Sequence[str], Sequence[str]]], xy: np.ndarray
           ) -> pd.DataFrame:
    """`points` (points_frame) with each point's 2-D place (x, y, from xy in the rows' order) and the pieces of its
    sentence on its side (`pieces`, a tuple, for context): what viz.qk_space.queries_keys_figure draws."""
    frame = points.copy()
    frame["x"], frame["y"] = np.asarray(xy, np.float64)[:, 0], np.asarray(xy, np.float64)[:, 1]
    side = (frame["side"] == "key").astype(int).to_numpy()
    frame["pieces"] = [tuple(pieces[sentence][which]) for sentence, which in zip(frame["sentence"], side)]
    return frame


def projected(data: QueriesKeys, method: str = "pca", normalised: bool = True, seed: int = 0) -> pd.DataFrame:
    """data.points placed (see `placed`) by `project`. `normalised`: through `normalise` first."""
    queries, keys = normalise(data.queries, data.keys) if normalised else (data.queries, data.keys)
    query_xy, key_xy = project(queries, keys, method, seed)
    return placed(data.points, data.pieces, np.concatenate([query_xy, key_xy]))


def attended_nearest_share(frame: pd.DataFrame, causal: bool = False) -> float:
    """Of the queries of a placed frame, the share whose nearest key of their sentence in the picture (nearest_keys)
    is the key they attend to most (argmax): how well the picture shows what the head reads. NaN without queries."""
    queries = frame[frame["side"] == "query"]
    if not len(queries):
        return float("nan")
    return float((nearest_keys(frame, causal).reindex(queries.index) == queries["argmax"]).mean())


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
    return top_neuron_examples_of(checkpoint, [(stack, layer)], pairs, top, context, neurons, max_sentences,
                                  batch_size)[(stack, layer)]


def _highest(candidates: torch.Tensor, places: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per neuron, the `top` highest of `candidates` (n, neurons), given in corpus order, and their places (n, neurons,
    2): a stable sort keeps equal activations in corpus order."""
    order = candidates.sort(dim=0, descending=True, stable=True).indices[:top]  # (kept, neurons)
    return candidates.gather(0, order), places.gather(0, order[..., None].expand(-1, -1, 2))


@torch.no_grad()
def top_neuron_examples_of(checkpoint: Checkpoint | str | Path, layers: Sequence[tuple[str, int]],
                           pairs: Iterable[tuple[str, str]] | None = None, top: int = 10, context: int = 3,
                           neurons: Sequence[int] | None = None, max_sentences: int = MAX_SENTENCES,
                           batch_size: int = BATCH_SIZE, turn: Callable[[], AbstractContextManager] = nullcontext,
                           distributed: bool = False) -> dict[tuple[str, int], pd.DataFrame]:
    """top_neuron_examples of several feed-forward layers (stack, layer) in one pass over the corpus; each chunk's
    forward pass runs inside `turn()`. `distributed`: under an initialised torch.distributed group, each rank reads
    its share of the chunks (corpus_heads.process_share) and the ranks' best are merged, so that every rank returns
    the examples of all the sentences."""
    checkpoint = _loaded(checkpoint)
    model, pad = checkpoint.model, checkpoint.config.pad_id
    names = {}
    for stack, layer in layers:
        if stack not in ("encoder", "decoder"):
            raise ValueError(f"stack must be 'encoder' or 'decoder', got {stack!r}")
        names[(stack, layer)] = f"{stack}.layers.{layer}.feed_forward.hook_mlp_post"
        if names[(stack, layer)] not in hook_points(model):
            raise ValueError(f"this model has no {stack} layer {layer} (no {names[(stack, layer)]})")
    width = checkpoint.config.d_ff
    chosen = torch.arange(width) if neurons is None else torch.as_tensor(list(neurons), dtype=torch.long)
    if len(chosen) and not (0 <= int(chosen.min()) and int(chosen.max()) < width):
        raise ValueError(f"neurons must be in 0..{width - 1}")
    run_stack = "decoder" if any(stack == "decoder" for stack, _ in layers) else "encoder"
    pairs = corpus_pairs(checkpoint, max_sentences) if pairs is None else pairs
    # Per layer: (kept, neurons) the best activations so far, highest first, and (kept, neurons, 2) their places.
    best = {layer: torch.empty(0, len(chosen)) for layer in names}
    where = {layer: torch.empty(0, len(chosen), 2, dtype=torch.long) for layer in names}
    sentences: dict[str, list[list[str]]] = {"src": [], "tgt": []}
    rank, world = process_share() if distributed else (0, 1)
    for index, (src, tgt, src_pieces, tgt_pieces) in enumerate(_batches(checkpoint, pairs, max_sentences, batch_size)):
        if index % world != rank:  # another rank's chunk: only its pieces are needed here
            sentences["src"] += src_pieces
            sentences["tgt"] += tgt_pieces
            continue
        with turn(), capture(model, list(names.values())) as record:
            _run(model, run_stack, src, tgt)
        for (stack, layer), name in names.items():
            ids = (src if stack == "encoder" else tgt).cpu()
            batch, length = ids.shape
            activations = record.hooks[name].cpu()[..., chosen].float()  # (batch, length, neurons)
            # Padding can never be among the best: -inf (dropped at the end if a neuron has too few real tokens).
            activations = activations.masked_fill((ids == pad)[..., None], float("-inf"))
            first = len(sentences["src" if stack == "encoder" else "tgt"])
            places = torch.stack(torch.meshgrid(torch.arange(batch) + first, torch.arange(length), indexing="ij"),
                                 dim=-1).reshape(-1, 1, 2)  # (batch * length, 1, 2)
            # The kept ones (earlier in the corpus) before this chunk's: candidates in corpus order.
            best[(stack, layer)], where[(stack, layer)] = _highest(
                torch.cat([best[(stack, layer)], activations.reshape(batch * length, -1)]),
                torch.cat([where[(stack, layer)], places.expand(-1, len(chosen), -1)]), top)
        sentences["src"] += src_pieces
        sentences["tgt"] += tgt_pieces
    if world > 1:
        for layer in names:
            gathered = [None] * world
            dist.all_gather_object(gathered, (best[layer], where[layer]))
            candidates, places = (torch.cat(part) for part in zip(*gathered))
            width = int(places[..., 1].max()) + 1 if places.numel() else 1
            corpus_order = (places[..., 0] * width + places[..., 1]).sort(dim=0, stable=True).indices
            best[layer], where[layer] = _highest(candidates.gather(0, corpus_order),
                                                 places.gather(0, corpus_order[..., None].expand(-1, -1, 2)), top)
    frames = {}
    for stack, layer in names:
        side_pieces = sentences["src" if stack == "encoder" else "tgt"]
        rows = []
        for column, neuron in enumerate(chosen.tolist()):
            for rank in range(best[(stack, layer)].size(0)):
                activation = float(best[(stack, layer)][rank, column])
                if activation == float("-inf"):
                    break
                sentence, position = where[(stack, layer)][rank, column].tolist()
                pieces = side_pieces[sentence]
                rows.append((neuron, rank + 1, activation, sentence, position, pieces[position],
                             tuple(pieces[max(0, position - context):position]),
                             tuple(pieces[position + 1:position + 1 + context]), len(pieces)))
        frames[(stack, layer)] = pd.DataFrame(rows, columns=["neuron", "rank", "activation", "sentence", "position",
                                                             "piece", "before", "after", "length"])
    return frames
