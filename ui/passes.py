"""The only UI module that imports torch or `transformer`: checkpoint discovery and loading, and the passes views
declare (ui.model_pass.Pass) run through one cache per declaration (run()).

Checkpoints are the direct sub-folders of $ATLAS_CHECKPOINTS (default: `checkpoints/` next to app.py); a name from
the picker or a link only becomes a path through transformer.resolve_checkpoint, which never leads outside it.
Folders are checked without reading weights (transformer.io.checkpoint.folder_problem); only the checkpoints being
shown are loaded, once per folder version, and never changed (capture and ablation are per call). Passes are shared by
every session (ui.shared.shared_pass, bounded in bytes), not copied: every session gets the same read-only objects
(ui.analysis) instead of unpickling its own copy on every rerun (tens of MB at 256 tokens).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import inspect
import os
import pkgutil
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from transformer import (
    ATTENTION_KINDS,
    KIND_SIDES,
    AttentionRecord,
    Checkpoint,
    CheckpointError,
    ablate,
    beam_tree,
    capture,
    checkpoint_folders,
    checkpoint_version,
    decode_steps,
    load_checkpoint,
    model_device,
    resolve_checkpoint,
)
from transformer.analysis import attribution, corpus_heads, corpus_summary
from transformer.analysis.forced import aligned_foil, contrast, force, sequence_log_prob
from transformer.analysis.head_map import FINAL as FINAL  # re-exported: ui.state's name of the final weights
from transformer.analysis.head_map import ROLE_THRESHOLD, roles_no_head_reaches
from transformer.analysis.lens import logit_lens
from transformer.analysis.patching import patch_texts
from transformer.analysis.qk_space import attended_nearest_share
from transformer.inference.batching import Batcher
from transformer.inference.batching import Cancelled as Cancelled  # re-exported: ui.frame ends a run whose session left
from transformer.inference.decoding import Sampling, output_limit
from transformer.inference.translation import (
    OutOfMemory,
    Request,
    decoding_bytes,
    is_out_of_memory,
)
from transformer.io.checkpoint import (
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    attention_values,
    folder_problem,
    read_config,
    read_tokenizer,
)
from transformer.io.disk_cache import DiskCache, model_digest
from transformer.io.safety import BYTES_PER_ATTENTION_VALUE, PASS_BUDGET_BYTES, read_bytes
from transformer.model.config import TransformerConfig
from transformer.model.hooks import INSIDE_HOOKS
from transformer.model.positional import rotary_frequencies as model_rotary_frequencies
from transformer.model.sites import Site
from transformer.model.sites import attention_name as attention_name  # re-exported: ui.frame reads a link's spellings
from transformer.training import faithfulness

from . import memory, shared
from .analysis import Analysis, Attention, BeamTreeView, DecodingSteps, KindAttention, Unavailable, read_only
from .model_pass import (
    CORPUS_FILE,
    SUMMARY,
    TEACHER_FORCED,
    CorpusFile,
    Kept,
    Pass,
    Shared,
    Summary,
)
from .shared import Expiring, content_key, current_session, expiring, session_is_open, shared_pass
from .warnings import worded


def attention_site(kind: str, layer: int) -> str:
    """The name of `kind`'s site in `layer`, as passes, views and links hold it: 'decoder.layers.1.cross_attn'."""
    return Site(kind, layer).name


TOP_CANDIDATES = 5  # next pieces listed per decoding step
SHAPED_PIECES = 10  # pieces whose probabilities a sampled step shows before and after temperature and truncation


MEMORY = memory.MemoryBudget(memory.budget_bytes(PASS_BUDGET_BYTES))  # every pass takes its estimate from it


def pass_bytes(config: TransformerConfig, src_len: int, tgt_len: int) -> int:
    """The estimate of one captured pass over (src_len, tgt_len) tokens: what the per-pass bound counts."""
    return attention_values(config, src_len, tgt_len) * BYTES_PER_ATTENTION_VALUE


def batch_bytes(config: TransformerConfig, requests: list[Request]) -> int:
    """The estimate of decoding `requests` together and capturing each one's pass."""
    return decoding_bytes(config, requests) + sum(pass_bytes(config, len(request.ids), request.limit)
                                                  for request in requests)


@contextmanager
def model_turn(needed: int, kept: bool = True) -> Iterator[None]:
    """Run the model work inside in a turn (ui.turns), once `needed` estimated bytes are taken from the process's
    memory budget (ui.memory; ServerBusy after its wait). Nothing inside may wait for a cached result or another
    pass (load the model before): a thread that held a turn while waiting for a pass that waits for a turn could
    wait forever. `kept`: whether the rerun keeps what the pass made (memory.MemoryBudget.held). Running out of
    memory inside becomes OutOfMemory, a message the frame shows in place of the view, raised once the failed
    pass's frames (and the tensors they held) are gone."""
    failed = ""
    with MEMORY.held(needed, kept), shared.MODEL.turn():
        try:
            yield
        except (MemoryError, RuntimeError) as error:
            if not is_out_of_memory(error):
                raise
            failed = type(error).__name__
    if failed:
        raise OutOfMemory(failed)


# ---------------------------------------------------------------------------------------------- declared passes
# A view asks page.run(PASS, **args) (ui.model_pass.Pass, declared in its feature's module): run(PASS, path, version,
# **args) here, through the one cache of that declaration.

GIVEN = ("path", "version", "checkpoint", "model")  # what run() gives a pass's function whose parameters name it


@functools.cache
def library(reference: str):
    """The object named "module:name": a pass's function, or a limit or registry of the library that a module which
    imports no `transformer` reads (the sidebar's beam limit, a view's corpus bounds)."""
    return pkgutil.resolve_name(reference)


def parameters(declared: Pass) -> tuple[str, ...]:
    """The names of the parameters of `declared`'s function (ui.page gives those of the page's input a view leaves
    out)."""
    return tuple(inspect.signature(library(declared.function)).parameters)


def run(declared: Pass, path: str, version: int, **args):
    """`declared`'s result over the checkpoint at (path, version) and `args`: from its cache, or computed there.
    TypeError where `args` do not fit its function, or it returns no `declared.result`."""
    if taken := set(args) & set(GIVEN):
        raise TypeError(f"{declared.name}: run() gives {sorted(taken)} itself")
    bound = inspect.signature(library(declared.function)).bind_partial(**args)
    bound.apply_defaults()  # f(a) and f(a, b=default) are one result
    return _cache(declared)(path, version, **bound.arguments)


def _cache(declared: Pass) -> Callable:
    with shared.PASS_CACHES_LOCK:
        if declared.name not in shared.PASS_CACHES:
            shared.PASS_CACHES[declared.name] = (declared, _cached(declared))
        found, cache = shared.PASS_CACHES[declared.name]
    if found != declared:
        raise ValueError(f"two passes are named {declared.name!r}: {found.function} and {declared.function}")
    return cache


def _cached(declared: Pass) -> Callable:
    compute = functools.partial(_computed, declared)
    policy = declared.cache
    if isinstance(policy, Kept):
        return Expiring(compute, policy.ttl.total_seconds(), policy.max_entries, declared.spinner or None,
                        library(policy.on_release) if policy.on_release else None)
    if isinstance(policy, Shared):
        return lambda path, version, **arguments: shared_pass(
            content_key(declared.name, path, version, arguments), declared.spinner,
            lambda: compute(path, version, **arguments))
    return compute


def _computed(declared: Pass, path: str, version: int, **arguments):
    """`declared`'s function called with what its parameters name (GIVEN, then `arguments`), its result typed."""
    function = library(declared.function)
    wanted = inspect.signature(function).parameters
    given = {"path": path, "version": version}
    if "checkpoint" not in wanted and "model" not in wanted:
        return typed(declared.result, function(**{name: given[name] for name in given if name in wanted},
                                               **arguments))
    checkpoint = load(path, version).checkpoint
    given.update(checkpoint=checkpoint, model=checkpoint.model)
    needed = pass_bytes(checkpoint.config, len(arguments.get("src_ids", ())), len(arguments.get("tgt_ids", ())))
    with model_turn(needed):
        value = function(**{name: given[name] for name in given if name in wanted}, **arguments)
    return typed(declared.result, value)


def typed(result: type | tuple[type, ...], value):
    """`value` if it is a `result`; else a `result` (a NamedTuple or dataclass) built from the fields of that name
    (a dict's keys, an object's attributes), each read-only (readable)."""
    if isinstance(value, result):
        return value
    fields = (getattr(result, "_fields", None) or
              (tuple(field.name for field in dataclasses.fields(result)) if dataclasses.is_dataclass(result) else ()))
    unknown = set(value) - set(fields) if isinstance(value, dict) else set()
    if not fields or unknown:
        raise TypeError(f"a pass returned {type(value).__name__} {sorted(unknown) or ''}, not {result}")
    found = value if isinstance(value, dict) else {name: getattr(value, name) for name in fields
                                                   if hasattr(value, name)}
    return result(**{name: readable(found[name]) for name in fields if name in found})


def readable(value):
    """`value` as a view may hold it: a tensor as a read-only numpy array on the CPU, an array read-only, a list a
    tuple (their items too)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return read_only(value)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return tuple(readable(item) for item in value)
    return value


# Loaded checkpoints are kept per folder version, for an hour after each is loaded (a fixed count thrashed at 9+
# folders): only the checkpoints someone looks at are loaded; one still looked at an hour later is loaded again, one
# nobody asked for is freed (and a training folder's old versions).
KEPT_FOR = datetime.timedelta(hours=1)


class Loaded(NamedTuple):
    checkpoint: Checkpoint | None
    error: str  # why it could not be loaded ("" if it was)


def checkpoints_dir() -> Path:
    return Path(os.environ.get("ATLAS_CHECKPOINTS", Path(__file__).parents[1] / "checkpoints"))


# Every rerun of every session asks which folders there are and their versions: read once per this many seconds
# (a checkpoint that changes is seen that much later), not with a few hundred stat calls per click. A folder added
# or removed changes the root's own time stamp, and is seen at once.
FOLDER_SCAN_S = 2.0


@expiring(FOLDER_SCAN_S, max_entries=4)
def folder_scan(root: str, root_stamp: int) -> dict[str, tuple[str, int]]:
    """name -> (path, version) of every checkpoint folder under root (root_stamp: its modification time)."""
    return {name: (str(resolve_checkpoint(root, name)), checkpoint_version(Path(root) / name))
            for name in checkpoint_folders(root)}


def folders() -> dict[str, tuple[str, int]]:
    root = checkpoints_dir()
    try:
        stamp = root.stat().st_mtime_ns
    except OSError:
        stamp = 0
    return folder_scan(str(root), stamp)


def scanned(name: str) -> tuple[str, int]:
    """(path, version) of the folder `name`; CheckpointError unless it is one (see resolve_checkpoint)."""
    root = checkpoints_dir()
    found = folders().get(name)
    if found is None:  # not there at the last scan: checked now (new since, or never a checkpoint folder)
        path = resolve_checkpoint(root, name)
        found = (str(path), checkpoint_version(path))
    return found


def checkpoint_path(name: str) -> str:
    return scanned(name)[0]


def version_of(name: str) -> int:
    """Changes whenever a file of the folder does, so a checkpoint that finishes training is loaded again."""
    return scanned(name)[1]


def browser_model(name: str) -> tuple[bytes, dict]:
    """The checkpoint `name` as a live deck's page runs it (transformer.io.onnx_export.browser_model: its ONNX graph,
    its tokenizers as tables, what its decoding and notices read, its task's own notice as the table the page reads:
    transformer.data.tasks.CAVEAT_TABLES); ValueError saying why a page cannot run it."""
    from transformer.data.tasks import CAVEAT_TABLES, INPUT_CAVEATS
    from transformer.io.checkpoint import LoadedCheckpoint  # only packing a live deck pays for the exporter
    from transformer.io.onnx_export import browser_model as exported

    checkpoint = LoadedCheckpoint(checkpoint_path(name))
    check = INPUT_CAVEATS.get(checkpoint.card.task)
    if check is not None and check not in CAVEAT_TABLES:
        raise ValueError(f"its task ({checkpoint.card.task}) warns about inputs in a way the page does not")
    notices = {} if check is None else {check.__name__: CAVEAT_TABLES[check]()}
    return exported(checkpoint, task_notices=notices)


def read_under_policy(path: Path, folder: Path, max_bytes: int) -> bytes:
    """A file that is no checkpoint's (a deck) read under the checkpoints' loading policy; CheckpointError says
    why not."""
    return read_bytes(path, folder, max_bytes)


def unexpected(path: str, error: Exception) -> str:
    return f"{path}: unexpected {type(error).__name__}: {error}"


# Entry limits bound the memory: a few loaded models (only those someone views), cheap facts about many folders.
@expiring(KEPT_FOR, max_entries=4096)
def folder_error(path: str, version: int) -> str:
    """Why the folder at `path` cannot be loaded ("" if it passes every check short of reading its tensors), within
    a time limit (transformer.io.checkpoint.folder_problem)."""
    return folder_problem(path)


def folder_errors() -> dict[str, str]:
    """Every checkpoint folder (the only names the app accepts, from the UI or a link) and why it cannot be loaded
    ("" if it can). Reads no weights, never blocks on a file, and is checked again only when the folder changes."""
    return {name: folder_error(path, version) for name, (path, version) in folders().items()}


@expiring(KEPT_FOR, max_entries=8, spinner="Loading the checkpoint…")
def load(path: str, version: int) -> Loaded:
    """The checkpoint at `path`, loaded once and shared by every session. A failure is kept too, so a broken folder
    is not read again until it changes."""
    try:
        return Loaded(load_checkpoint(path), "")
    except CheckpointError as error:
        return Loaded(None, str(error))
    except Exception as error:  # a check the library lacks must not take every session down
        return Loaded(None, unexpected(path, error))


def loaded(name: str) -> Loaded:
    try:
        return load(checkpoint_path(name), version_of(name))
    except CheckpointError as error:  # the folder went away since it was listed
        return Loaded(None, str(error))


@expiring(KEPT_FOR, max_entries=16, spinner="Loading the training snapshot…")
def load_snapshot(path: str, version: int, snapshot: str) -> torch.nn.Module:
    try:
        return load(path, version).checkpoint.load_snapshot(snapshot)
    except CheckpointError as error:
        raise Unavailable(str(error)) from None
    except Exception as error:  # as in load()
        raise Unavailable(unexpected(path, error)) from None


def model_of(path: str, version: int, snapshot: str) -> torch.nn.Module:
    """The final model, or one of its training snapshots."""
    return load(path, version).checkpoint.model if snapshot == FINAL else load_snapshot(path, version, snapshot)


@expiring(KEPT_FOR, max_entries=256)
def vocabulary(path: str, version: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every source and target piece by id: two checkpoints with the same can read the same ids. Reads the config
    and tokenizers only, so finding the checkpoints comparable to one loads none of them. CheckpointError if the
    folder changed since it was checked."""
    folder, config = Path(path), read_config(Path(path))
    return tuple(tuple(read_tokenizer(folder, file, size).pieces(range(size)))
                 for file, size in ((SRC_TOKENIZER_FILE, config.src_vocab_size),
                                    (TGT_TOKENIZER_FILE, config.tgt_vocab_size)))


def attention_of(record: AttentionRecord, label_probs: tuple[float, ...] = ()) -> Attention:
    """The record of one pass (batch of one) as read-only numpy on the CPU, with the model's own masks."""
    return Attention(tuple(KindAttention(kind, *KIND_SIDES[kind],
                                         weights=read_only(record.stack(kind).cpu().numpy()),
                                         scores=read_only(record.stack(kind, part="scores").cpu().numpy()),
                                         allowed=read_only(record.stack(kind, part="mask")[0, 0].cpu().numpy()))
                           for kind in ATTENTION_KINDS if any(record.keys_of(kind))), label_probs)


# Translations of different sessions asked for at once are decoded as one batch, each batch in a model turn
# (transformer.inference.batching; $ATLAS_BATCH_SIZE=1 decodes each alone). Behind the shared results: a cached one
# never queues.
# Each translation takes its memory before it joins a batch (translate()), so its batch's turn takes none.
BATCHER = Batcher.from_environment(turn=lambda: model_turn(0))


def translate(path: str, version: int, text: str, beam_size: int, snapshot: str = FINAL, ablated: tuple = (),
              mode: str = "zero") -> Analysis:
    """Translate `text` and capture the attention of one pass over (source, decoder input). ablated: ((attention
    key, heads), ...) removed during the call (such a call runs alone). Raises ValueError when the input has
    nothing to read."""
    checkpoint = load(path, version).checkpoint
    model = model_of(path, version, snapshot)
    session = current_session()
    request = checkpoint.prepare(text, beam_size)
    with MEMORY.held(batch_bytes(checkpoint.config, [request])), ablate(model, dict(ablated), mode):
        translation = BATCHER.translate(checkpoint, request, model,
                                        alive=lambda: session is None or session_is_open(session))
    return Analysis(text=translation.text, src_ids=tuple(translation.src_ids), tgt_ids=tuple(translation.tgt_ids),
                    src_tokens=tuple(translation.src_tokens), tgt_tokens=tuple(translation.tgt_tokens),
                    src_typed=tuple(translation.src_typed), output_tokens=tuple(translation.output_tokens),
                    output_ids=tuple(translation.output_ids), probs=tuple(translation.probs),
                    warnings=tuple(map(worded, translation.warnings)), pad_id=checkpoint.config.pad_id,
                    attention=attention_of(translation.attention))


def teacher_forced(path: str, version: int, snapshot: str, src_ids: tuple, tgt_ids: tuple, labels: tuple = (),
                   ablated: tuple = (), mode: str = "zero") -> Attention:
    """One captured pass of a model over given ids (no decoding), and the probability of each of `labels` at its
    position. Lets padding, snapshots and other checkpoints read exactly the same sequence."""
    model = model_of(path, version, snapshot)
    device = model_device(model)  # inputs follow the model ($ATLAS_DEVICE); what comes back is on the CPU
    needed = pass_bytes(model.config, len(src_ids), len(tgt_ids))
    with model_turn(needed), torch.no_grad(), ablate(model, dict(ablated), mode), capture(model) as record:
        logits = model(torch.tensor([src_ids], device=device), torch.tensor([tgt_ids], device=device))
        probs = logits.softmax(dim=-1)[0].cpu()  # (tgt_len, tgt_vocab)
    return attention_of(record, tuple(float(probs[position, label]) for position, label in enumerate(labels)))


def padded(path: str, version: int, plain: Analysis, pad_src: int, pad_tgt: int) -> Analysis:
    """`plain` with pad ids appended to its source and decoder input, as a batch with a longer sentence would have:
    one new teacher-forced pass over the same ids (the decoding is not repeated). The outputs on the real positions
    do not change, and the padding masks appear."""
    if not pad_src and not pad_tgt:
        return plain
    src_ids, tgt_ids = plain.src_ids + (plain.pad_id,) * pad_src, plain.tgt_ids + (plain.pad_id,) * pad_tgt
    pad_piece = load(path, version).checkpoint.src_tokenizer.pieces([plain.pad_id])[0]
    return dataclasses.replace(plain, src_ids=src_ids, tgt_ids=tgt_ids,
                               src_tokens=plain.src_tokens + (pad_piece,) * pad_src,
                               tgt_tokens=plain.tgt_tokens + (pad_piece,) * pad_tgt,
                               attention=run(TEACHER_FORCED, path, version, snapshot=FINAL, src_ids=src_ids,
                                             tgt_ids=tgt_ids))


def decoding_steps(path: str, version: int, src_ids: tuple, temperature: float = 0.0, top_k: int = 0,
                   top_p: float = 1.0, seed: int = 0) -> DecodingSteps:
    """Generation of the source `src_ids`, one token at a time, to the length the sidebar's decoding stops at:
    greedy (temperature 0), or sampled with these settings (transformer.Sampling)."""
    checkpoint = load(path, version).checkpoint
    source = torch.tensor([src_ids], device=model_device(checkpoint.model))
    sampling = Sampling(temperature, top_k, top_p, seed)
    with model_turn(pass_bytes(checkpoint.config, len(src_ids), checkpoint.output_limit(len(src_ids)))):
        steps = list(decode_steps(checkpoint.model, source, checkpoint.output_limit(len(src_ids)), top_k=TOP_CANDIDATES,
                                  sampling=sampling))
    decoder_input = tuple(steps[-1].prefix)
    pieces = checkpoint.tgt_tokenizer.pieces
    shown = [shaped_pieces(step.distributions, step.token_id) for step in steps]
    return DecodingSteps(
        src_tokens=tuple(checkpoint.src_tokenizer.pieces(src_ids)),
        prefix_tokens=tuple(pieces(decoder_input)),
        top=tuple(tuple(zip(pieces([i for i, _ in step.top]), [p for _, p in step.top])) for step in steps),
        cross=read_only(np.stack([step.cross_attention.cpu().numpy() for step in steps], axis=2)),
        decoder_self=run(TEACHER_FORCED, path, version, snapshot=FINAL, src_ids=tuple(src_ids),
                         tgt_ids=decoder_input).stack("decoder.self_attn"),
        shaped_pieces=tuple(tuple(pieces(ids)) + (f"({others:,} other pieces)",) for ids, _, others in shown),
        shaped=tuple(read_only(probs) for _, probs, _ in shown),
        drawn=tuple(ids.index(step.token_id) for (ids, _, _), step in zip(shown, steps)),
    )


def shaped_pieces(distributions: torch.Tensor, drawn: int) -> tuple[list[int], np.ndarray, int]:
    """The SHAPED_PIECES most likely pieces of a step (temperature keeps their order and truncation keeps the first
    of them), and the drawn one if it is not among them: their ids, their (3, pieces + 1) probabilities, all the
    other pieces' as the last column, and how many pieces that last column holds."""
    ids = distributions[0].topk(min(SHAPED_PIECES, distributions.size(1))).indices.tolist()
    if drawn not in ids:
        ids.append(drawn)
    probs = distributions[:, ids].double().numpy()  # (3, pieces)
    others = (1.0 - probs.sum(axis=1)).clip(min=0.0)[:, None]  # (3, 1)
    return ids, np.concatenate([probs, others], axis=1), distributions.size(1) - len(ids)


def beam_tree_view(path: str, version: int, src_ids: tuple, beam_size: int) -> BeamTreeView:
    """Beam search of the source `src_ids` as the sidebar runs it (the card's penalties, the same length limit),
    with every hypothesis of every step recorded."""
    checkpoint = load(path, version).checkpoint
    source = torch.tensor([src_ids], device=model_device(checkpoint.model))
    decoding = checkpoint.card.decoding
    with model_turn(pass_bytes(checkpoint.config, len(src_ids), output_limit(len(src_ids)))):
        tree = beam_tree(checkpoint.model, source, beam_size, output_limit(len(src_ids)),
                         decoding.get("length_penalty", 0.6), coverage_penalty=decoding.get("coverage_penalty", 0.0))
    pieces = checkpoint.tgt_tokenizer.pieces
    return BeamTreeView(
        src_tokens=tuple(checkpoint.src_tokenizer.pieces(src_ids)),
        pieces=tuple(pieces([node.tokens[-1] for node in tree.nodes])),
        prefixes=tuple(node.tokens[:-1] for node in tree.nodes),
        parents=tuple(node.parent for node in tree.nodes),
        log_probs=tuple(node.log_prob for node in tree.nodes),
        finals=tuple(node.final for node in tree.nodes),
        kept=tuple(node.kept for node in tree.nodes),
        best=tree.best,
        chosen=tuple(tree.path(tree.best)),
        texts=tuple(" ".join(pieces(list(node.tokens[1:]))) for node in tree.nodes),
    )


def positional_table(path: str, version: int, side: str) -> np.ndarray:
    """(max_len, d_model) positional encoding the model adds on `side` ('src' or 'tgt'); a rotary model's rotation
    of each position, (max_len, d_head) (RotaryPositional.table)."""
    return read_only(load(path, version).checkpoint.model.positional_table(side).cpu().numpy())


def rotary_frequencies(path: str, version: int) -> tuple[np.ndarray, np.ndarray]:
    """A rotary model's angles per token of each dimension pair, (d_head / 2,) each: as the model turns its queries
    and keys (its rope_scaling applied), and as they were before the scaling (rope_theta^(-2i/d_head))."""
    config = load(path, version).checkpoint.config
    return (read_only(model_rotary_frequencies(config).numpy()),
            read_only(model_rotary_frequencies(dataclasses.replace(config, rope_scaling="none")).numpy()))


# ---------------------------------------------------------------------------------------------- attribution views
# Attribution, activation patching and the logit lens of one input (transformer.analysis: attribution, patching,
# lens), as read-only arrays and tuples; each explains the output the checkpoint decodes by default (its card's
# decoding).

FAITHFULNESS = Path(__file__).parents[1] / "checkpoints" / "faithfulness.json"  # the shipped checkpoints' table


def explained(path: str, version: int, src_ids: tuple, tgt_ids: tuple, output_ids: tuple, row: int | None) -> tuple:
    """Every attribution method's (rows, src_len) array for one decoded input, for output `row` alone or for every
    row (None): ((method, array), ...) in transformer.analysis.attribution's order."""
    model = load(path, version).checkpoint.model
    with model_turn(pass_bytes(model.config, len(src_ids), len(tgt_ids))):
        methods, _ = attribution.attribute(model, list(src_ids), list(tgt_ids), list(output_ids),
                                           rows=None if row is None else [row], with_prefix=False)
    return tuple((name, read_only(matrix)) for name, matrix in methods.items())


def lens(path: str, version: int, src_ids: tuple, tgt_ids: tuple, output_ids: tuple) -> dict:
    """The logit lens of one decoded input: its stages, top pieces [stage][position][rank] and top probabilities."""
    checkpoint = load(path, version).checkpoint
    with model_turn(pass_bytes(checkpoint.config, len(src_ids), len(tgt_ids))):
        result = logit_lens(checkpoint.model, list(src_ids), list(tgt_ids), list(output_ids))
    pieces = tuple(tuple(tuple(ranked) for ranked in stage) for stage in result.top_pieces(checkpoint.tgt_tokenizer))
    return dict(stages=tuple(result.stages), top_pieces=pieces, top_probs=read_only(result.top_probs))


def patched(path: str, version: int, clean: str, corrupted: str, position: int) -> dict:
    """Activation patching from `clean` into `corrupted` at output `position`: every head's and position's effect,
    or the error that says why the two cannot be patched."""
    checkpoint = load(path, version).checkpoint
    try:
        src_len = len(checkpoint.encode(clean))
        with model_turn(pass_bytes(checkpoint.config, src_len, checkpoint.output_limit(src_len))):
            result, _ = patch_texts(checkpoint, clean, corrupted, position)
    except ValueError as error:
        return dict(error=str(error))
    return dict(error="", heads=tuple(result.heads.items()), positions=tuple(result.positions.items()),
                clean_log_prob=result.clean_log_prob, corrupted_log_prob=result.corrupted_log_prob)


@expiring(KEPT_FOR, max_entries=4)
def faithfulness_table(version: int) -> pd.DataFrame | None:
    """The shipped checkpoints' faithfulness table, as `python -m transformer.faithfulness --out` saved it (too slow to
    measure per page); None when there is none."""
    if not FAITHFULNESS.exists():
        return None
    header, rows = faithfulness.table_rows(faithfulness.load(FAITHFULNESS)["results"])
    return pd.DataFrame(rows, columns=header)


def faithfulness_version() -> int:
    return FAITHFULNESS.stat().st_mtime_ns if FAITHFULNESS.exists() else 0


def faithfulness_measured() -> pd.DataFrame | None:
    """The shipped checkpoints' faithfulness table, read again once its file changes."""
    return faithfulness_table(faithfulness_version())


# ---------------------------------------------------------------------------------------------- heads across a corpus
# transformer.analysis.corpus_heads over a small corpus (the checkpoint's generated inputs or its dev split's first
# sentences): the Parquet file lives in a temporary folder as long as its cache entry, and is removed when the entry is
# released. Rankings and top sentences are shared by every session, read-only as every cached result is (ui.shared).

TOP_SENTENCES = 10  # listed for the chosen head


def remove_corpus_file(result: CorpusFile) -> None:
    if result.parquet:
        shutil.rmtree(Path(result.parquet).parent, ignore_errors=True)


def corpus_file(path: str, version: int, count: int) -> CorpusFile:
    """The checkpoint's heads over `count` corpus inputs, as a Parquet file. Takes no model turn: one run holds the
    model for seconds to minutes, and the passes of everyone else's clicks must not wait for it."""
    checkpoint = load(path, version).checkpoint
    folder = Path(tempfile.mkdtemp(prefix="atlas-corpus-"))
    parquet = folder / "heads.parquet"
    try:
        sentences = corpus_heads.run(checkpoint, parquet, corpus_heads.corpus_pairs(checkpoint, count), progress=False)
    except OSError as error:  # a translation checkpoint whose corpus file is not on this machine
        shutil.rmtree(folder, ignore_errors=True)
        return CorpusFile(f"The corpus could not be read: {error}")
    return CorpusFile("", str(parquet), sentences)


def corpus_unavailable(path: str, version: int) -> str:
    """Why the checkpoint cannot run over its corpus on this machine ("" if it can), as
    transformer.analysis.corpus_heads says."""
    return corpus_heads.corpus_unavailable(load(path, version).checkpoint)


def corpus_ranking(path: str, version: int, count: int, statistic: str) -> pd.DataFrame:
    """Heads by their mean `statistic` over the corpus (transformer.analysis.corpus_heads.rank_heads)."""
    return corpus_heads.rank_heads(run(CORPUS_FILE, path, version, count=count).parquet, statistic)


def corpus_top(path: str, version: int, count: int, kind: str, layer: int, head: int,
               statistic: str) -> pd.DataFrame:
    """The sentences where one head's `statistic` is highest (transformer.analysis.corpus_heads.top_sentences)."""
    return corpus_heads.top_sentences(run(CORPUS_FILE, path, version, count=count).parquet, kind, layer, head,
                                      statistic, TOP_SENTENCES)


# ---------------------------------------------------------------------------------------------- across many inputs
# transformer.analysis.corpus_summary: every head's patterns, every head's queries and keys in 2-D and every neuron's
# top examples over a corpus, computed once per checkpoint and corpus in chunks, each chunk a model turn of its own
# (other sessions' clicks go between them), and kept in the disk cache (transformer.io.disk_cache: $ATLAS_CACHE,
# bounded, shared by every session and worker, kept across restarts). In memory, the summaries of the checkpoints
# being looked at.

CORPUS_CHUNK_LENGTH = 64  # pieces a side a chunk's memory estimate assumes (the dev splits' sentences are shorter)
corpus_progress: ContextVar[Callable[[float], None] | None] = ContextVar("attention_atlas_corpus_progress",
                                                                         default=None)


@expiring(KEPT_FOR, max_entries=16)
def weights_digest(path: str, version: int) -> str:
    """The digest of the checkpoint's weights that its disk cache entries are keyed on."""
    return model_digest(load(path, version).checkpoint.model)


@expiring(KEPT_FOR, max_entries=16)
def summary_pairs(path: str, version: int, count: int) -> tuple[tuple[str, str], ...]:
    """The first `count` pairs of the checkpoint's corpus (read once: an LM's held-out split takes a second)."""
    return tuple(corpus_summary.corpus_pairs_list(load(path, version).checkpoint, count))


def summary_on_disk(path: str, version: int, count: int) -> bool:
    """Whether the summary of `count` inputs is in the disk cache already (computed by another session, an earlier
    run of the server, or `python -m transformer.corpus cache`); where the card's corpus is not on this machine,
    the summary last kept for these weights (a corpus of one's own)."""
    checkpoint, digest = load(path, version).checkpoint, weights_digest(path, version)
    if corpus_heads.corpus_unavailable(checkpoint):
        return corpus_summary.latest_summary_key(DiskCache(), digest, count) is not None
    key = corpus_summary.summary_key(checkpoint, summary_pairs(path, version, count), digest)
    return DiskCache().path(key).exists()


def _corpus_turns(checkpoint: Checkpoint, count: int) -> Callable[[], contextlib.AbstractContextManager]:
    """Each chunk's forward pass in a model turn of its own, its memory given back after it; progress reported to
    the session that asked (corpus_progress) after each."""
    config, report = checkpoint.config, corpus_progress.get()
    needed = corpus_summary.PICTURE_BATCH * pass_bytes(config, *(min(config.max_len, CORPUS_CHUNK_LENGTH),) * 2)
    total, done = corpus_summary.chunks(count), 0

    @contextmanager
    def turn() -> Iterator[None]:
        nonlocal done
        with model_turn(needed, kept=False):
            yield
        done += 1
        if report is not None:
            report(min(1.0, done / total))
    return turn


def summary(path: str, version: int, count: int) -> Summary:
    """The checkpoint's corpus summary of `count` inputs, from the disk cache or computed (and kept there); where
    the card's corpus is not on this machine, the summary last kept for these weights, if any."""
    checkpoint, digest = load(path, version).checkpoint, weights_digest(path, version)
    unavailable = corpus_heads.corpus_unavailable(checkpoint)
    if unavailable:
        found = corpus_summary.latest_summary(checkpoint, count, digest=digest)
        return Summary("", found) if found else Summary(f"Not on this server: {unavailable}.")
    try:
        pairs = summary_pairs(path, version, count)
        return Summary("", corpus_summary.corpus_summary(checkpoint, pairs=pairs, digest=digest,
                                                         turn=_corpus_turns(checkpoint, len(pairs))))
    except (OSError, ValueError) as error:  # a corpus file that went missing, an empty corpus
        return Summary(f"The corpus could not be read: {error}")


def head_map(path: str, version: int, count: int) -> pd.DataFrame:
    """Every head placed by how alike it attends (transformer.analysis.head_map.head_map), with its role; in its
    attrs, the roles no head has with the closest head to each (roles_no_head_reaches), and ROLE_THRESHOLD."""
    frame = run(SUMMARY, path, version, count=count).summary.map()
    frame.attrs.update(roles_no_head_reaches=roles_no_head_reaches(frame), role_threshold=ROLE_THRESHOLD)
    return frame


def queries_keys_picture(path: str, version: int, count: int, head: tuple[str, int, int], method: str
                         ) -> tuple[pd.DataFrame, float]:
    """One head's queries and keys in 2-D (PCA from the summary; t-SNE computed once and kept on disk), and the
    share of its queries whose nearest key in the picture is the one it attends to most."""
    found = run(SUMMARY, path, version, count=count).summary
    if method == "pca":
        frame = found.picture(head)
    else:
        checkpoint = load(path, version).checkpoint
        frame = corpus_summary.tsne_picture(checkpoint, found, head, turn=_corpus_turns(checkpoint, 1))
    return frame, attended_nearest_share(frame, causal=head[0] == "decoder.self_attn")


def matched_heads(path: str, version: int, count: int, other_path: str, other_version: int) -> pd.DataFrame:
    """This checkpoint's heads matched to another's of the same vocabulary, on the summary's corpus."""
    checkpoint, other = load(path, version).checkpoint, load(other_path, other_version).checkpoint
    return corpus_summary.matched_heads(checkpoint, other, run(SUMMARY, path, version, count=count).summary,
                                        turn=_corpus_turns(checkpoint, 1))


def matched_snapshot(path: str, version: int, count: int, snapshot: str) -> pd.DataFrame:
    """The final weights' heads matched to those of one training snapshot, on the summary's corpus."""
    checkpoint, model = load(path, version).checkpoint, load_snapshot(path, version, snapshot)
    return corpus_summary.matched_heads(checkpoint, model, run(SUMMARY, path, version, count=count).summary,
                                        turn=_corpus_turns(checkpoint, 1))


def followed_head(path: str, version: int, count: int, head: tuple[str, int, int]) -> pd.DataFrame:
    """One head of the final weights matched in each training snapshot, on the summary's corpus."""
    checkpoint = load(path, version).checkpoint
    return corpus_summary.followed_head(checkpoint, run(SUMMARY, path, version, count=count).summary, head,
                                        turn=_corpus_turns(checkpoint, 1))


# ---------------------------------------------------------------------------------------------- inside a block
# One attention block's hook points and its layer's feed-forward neurons (transformer.model.hooks.INSIDE_HOOKS),
# captured in one pass over the page's ids: every number the "Inside a head" view shows is one of these, or a product
# of two.

# The residual stream each kind's block reads its queries from (post-LN: as it is; pre-LN: normalised first).
BLOCK_INPUT = {"encoder.self_attn": "hook_resid_pre", "decoder.self_attn": "hook_resid_pre",
               "decoder.cross_attn": "hook_resid_mid"}


def inside(path: str, version: int, src_ids: tuple, tgt_ids: tuple, kind: str, layer: int) -> dict:
    """The hook points of attention block (`kind`, `layer`) and of its layer's feed-forward network, batch item 0
    (ui.views.inside.Inside's fields)."""
    model = load(path, version).checkpoint.model
    site = Site(kind, layer)
    parts = ("q", "k", "v", "scores", "mask", "pattern", "z", "result")
    names = [site.hook(part) for part in parts]
    names += [f"{site.layer_name}.{BLOCK_INPUT[kind]}", f"{site.layer_name}.feed_forward.hook_mlp_post"]
    if model.config.positional == "rotary":
        names += [site.hook("q_unrotated"), site.hook("k_unrotated")]
    wanted = set(names)
    device = model_device(model)

    def captured(name: str) -> bool:
        """These hooks, and what every pass captures as well, so that every block computes as it does there (none
        fused): the weights are bit for bit the ones the other views show."""
        return name in wanted or not name.endswith(INSIDE_HOOKS)

    with model_turn(pass_bytes(model.config, len(src_ids), len(tgt_ids))), torch.no_grad(), \
            capture(model, captured) as record:
        model(torch.tensor([src_ids], device=device), torch.tensor([tgt_ids], device=device))
    found = [read_only(record.hooks[name][0].cpu().numpy()) for name in names]
    q, k, v, scores, mask, weights, z, result, block_input, neurons = found[:10]
    return dict(block_input=block_input, q=q, k=k, v=v, scores=scores, allowed=mask[0], weights=weights, z=z,
                result=result, neurons=neurons, **dict(zip(("q_unrotated", "k_unrotated"), found[10:])))


# ---------------------------------------------------------------------------------------------- a target, a foil
# Any target teacher-forced through the decoder instead of the model's own output (transformer.analysis.forced): its
# attention, and each of its pieces' probability and rank; with a foil, per position log p(target) - log p(foil),
# and the same for the two whole sequences.


def forced(path: str, version: int, src_ids: tuple, target: str, foil: str = "") -> dict:
    """`target` teacher-forced after the source `src_ids`, and the foil's contrast with it (ui.target.Forced's
    fields; ValueError: the target has nothing to read)."""
    checkpoint = load(path, version).checkpoint
    target_ids = checkpoint.encode(target, "tgt")[1:]
    with model_turn(pass_bytes(checkpoint.config, len(src_ids), len(target_ids))):
        result = force(checkpoint.model, list(src_ids), target_ids)
    pieces = checkpoint.tgt_tokenizer.pieces
    attention = attention_of(result.attention)
    made = dict(tgt_ids=result.tgt_ids, output_ids=result.output_ids, tgt_tokens=pieces(result.tgt_ids),
                output_tokens=pieces(result.output_ids), probs=result.probs, ranks=result.ranks, attention=attention)
    if not foil:
        return made
    foil_ids = checkpoint.encode(foil, "tgt")[1:]
    with model_turn(pass_bytes(checkpoint.config, len(src_ids), len(foil_ids))):
        foil_run = force(checkpoint.model, list(src_ids), foil_ids, names=[])
    aligned = aligned_foil(result.output_ids, foil_ids)
    return dict(
        made, foil_ids=[own if piece is None else piece for own, piece in zip(result.output_ids, aligned, strict=True)],
        foil_tokens=["" if piece is None else pieces([piece])[0] for piece in aligned],
        contrast=[float(score) for score in contrast(result, foil_ids)], foil_length=len(foil_ids),
        sequence_contrast=sequence_log_prob(result) - sequence_log_prob(foil_run))


def contrastive(path: str, version: int, src_ids: tuple, tgt_ids: tuple, output_ids: tuple, foil_ids: tuple,
                rows: tuple) -> tuple:
    """Contrastive attribution of log p(target_t) - log p(foil_t) for the decoder positions `rows`: ((method,
    (rows, src_len)), ...), each row divided by the sum of its absolute values."""
    model = load(path, version).checkpoint.model
    src, tgt = torch.tensor([src_ids]), torch.tensor([tgt_ids])
    targets, foils = torch.tensor(output_ids), torch.tensor(foil_ids)
    with model_turn(pass_bytes(model.config, len(src_ids), len(tgt_ids))):
        return tuple((f"contrastive {method}", read_only(attribution.normalise_rows(
            attribution.contrastive(model, src, tgt, targets, foils, list(rows), method), signed=True)))
            for method in ("input_x_gradient", "integrated_gradients"))
