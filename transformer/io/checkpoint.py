"""A checkpoint is a folder: config.json, model.safetensors, src.model / tgt.model (sentencepiece), card.json,
snapshots/ (NAME.safetensors each), and for a model trained on a corpus source_words.txt (every word of its training
sources, for the unseen-word warning).

Loading never runs code from the folder: weights are safetensors, which hold tensors and nothing else. A folder whose
weights are torch zips instead (model.pt, snapshots/NAME.pt) still loads: its pickle is checked to be a plain state
dict first, then read with `torch.load(..., weights_only=True)`, which refuses any pickle that would build something
other than tensors. Every file is read under the loading policy of
safety.py (regular files inside the folder, size caps, bounded JSON, every field checked), and the weights are checked
against the config (names, shapes, dtypes, storage sizes, finite values) before the model is built. Every problem
raises `CheckpointError` naming the file and the field. `checkpoint_status` says which folders would load without
reading any weights. A folder of checkpoints is listed with `checkpoint_folders`, and a name from a user (a link, a
picker) becomes a path only through `resolve_checkpoint`, which never leads outside that folder.

Writing (training, conversion) never changes a checkpoint in place: the new folder is written whole beside it under a
hidden name and renamed into place under a lock (`writer_lock`, `commit_checkpoint`), and an existing checkpoint is
replaced only when the writer was told to (`check_replaceable`).
"""
from __future__ import annotations

import fcntl
import itertools
import json
import os
import pickle
import shutil
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, NamedTuple

import safetensors.torch
import torch
from torch.overrides import TorchFunctionMode

from ..model.config import TransformerConfig
from ..model.device import atlas_device
from ..model.model import Transformer
from ..model.schema import schema_problem
from .safety import (
    BYTES_PER_ATTENTION_VALUE,
    BYTES_PER_WEIGHT,
    MAX_CARD_BYTES,
    MAX_CONFIG_BYTES,
    MAX_TOKENIZER_BYTES,
    MAX_WORD_LIST_BYTES,
    MIN_PASS_TOKENS,
    PASS_BUDGET_BYTES,
    WEIGHTS_OVERHEAD_BYTES,
    CheckpointError,
    check_safetensors_start,
    check_torch_zip,
    memory_limit,
    native_errors,
    open_regular,
    read_bytes,
    read_json,
    refuse_output_over_inputs,
    size_text,
)
from .text import normalize, words
from .tokenizer import JsonTokenizer, Tokenizer, VocabTokenizer

CONFIG_FILE, WEIGHTS_FILE, CARD_FILE = "config.json", "model.safetensors", "card.json"
WEIGHTS_SUFFIX = ".safetensors"  # of the weights files: model.safetensors, snapshots/NAME.safetensors
TORCH_WEIGHTS_SUFFIX = ".pt"  # a torch zip in a weights file's place (model.pt, snapshots/NAME.pt): it loads too
SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE = "src.model", "tgt.model"
JSON_TOKENIZER_FILE = "tokenizer.json"  # converted GPT-2, BERT, BART: one `tokenizers` file for both sides
# A converted model numbers its pieces through a vocabulary next to its sentencepiece model (see VocabTokenizer).
VOCAB_FILES = {SRC_TOKENIZER_FILE: "src.vocab.json", TGT_TOKENIZER_FILE: "tgt.vocab.json"}
SNAPSHOT_DIR = "snapshots"
SOURCE_WORDS_FILE = "source_words.txt"


@dataclass
class ModelCard:
    """What a user should know about a checkpoint; saved as card.json."""

    name: str  # folder name, e.g. "eng-fra"
    task: str  # "reverse", "dates", "translate"; converted language models: "generate", "fill-mask"
    description: str  # one paragraph for the app's sidebar
    data: str  # where the training data came from, with its licence and credit
    metrics: dict[str, float] = field(default_factory=dict)  # e.g. {"exact_match": 0.998} or {"bleu": 41.2}
    examples: list[str] = field(default_factory=list)  # inputs that demo well
    training_command: str = ""  # the exact command that trained it
    wall_time_s: float = 0.0  # how long training took
    machine: str = ""  # what it was trained on
    parameters: int = 0  # number of trainable parameters
    # Loss curve: {"step", "train_loss", "dev_loss", "dev_metric", "data"}, "data" naming the corpora they measure.
    history: list[dict] = field(default_factory=list)
    snapshots: list[dict] = field(default_factory=list)  # earlier states: {"name", "step", "fraction", "dev_metric"}
    training: dict = field(default_factory=dict)  # options needed to rebuild the data and its dev split
    decoding: dict = field(default_factory=dict)  # app default: {"beam_size", "length_penalty", "coverage_penalty"}
    # --- Converted models (transformer/io/convert.py): where the weights came from, under which licence, and how.
    source: str = ""  # e.g. "Hugging Face Helsinki-NLP/opus-mt-en-fr" or the folder converted
    licence: str = ""  # the licence the original model was published under, e.g. "apache-2.0"
    conversion_command: str = ""  # the exact command that wrote this folder
    weights: str = ""  # the weights file and its format, e.g. "model.safetensors (safetensors, float16)"

    @classmethod
    def from_dict(cls, values: object, source: str = CARD_FILE) -> ModelCard:
        """A card from parsed JSON, checked against schemas/card.schema.json (every field's type and bounds, the
        limits of safety.py); CheckpointError naming `source` and the field."""
        problem = schema_problem(values, "card")
        if problem:
            raise CheckpointError(f"{source}: {problem}")
        return cls(**values)

    def save(self, path: Path) -> None:
        """Written beside and renamed into place: a card being updated (evaluate --record) is never half there."""
        text = json.dumps(asdict(self), indent=1, ensure_ascii=False) + "\n"
        save_atomically(lambda temporary: temporary.write_text(text, encoding="utf-8"), path)


class _ShapesOnly(TorchFunctionMode):
    """Random initialisation skipped: a meta tensor has no values, and nn.Embedding's normal_ on the meta device runs
    through PyTorch's Python decompositions, whose first use imports torch._dynamo (seconds at a server's cold
    start, before the first visitor's first figure). A torch function mode is per thread: nothing else changes."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.nn.init.normal_, torch.Tensor.normal_):
            return args[0] if args else kwargs["tensor"]  # the tensor it would have filled, as the real call returns
        return func(*args, **kwargs)


def _shapes_only(config: TransformerConfig) -> Transformer:
    with torch.device("meta"), _ShapesOnly():
        return Transformer(config)


def parameter_count(config: TransformerConfig) -> int:
    """How many parameters a model of `config` has, from one built with at most one layer a stack (the layers of a
    stack are alike): counting a config that asks for thousands of layers costs what one layer does."""
    shallow = replace(config, num_encoder_layers=min(config.num_encoder_layers, 1),
                      num_decoder_layers=min(config.num_decoder_layers, 1))
    model = _shapes_only(shallow)
    count = model.num_parameters()
    for stack, layers in ((model.encoder, config.num_encoder_layers), (model.decoder, config.num_decoder_layers)):
        if stack is not None:
            count += (layers - 1) * sum(parameter.numel() for parameter in stack.layers[0].parameters())
    return count


def expected_state(config: TransformerConfig, source: Path) -> dict[str, torch.Tensor]:
    """The names, shapes and dtypes of the state_dict `config` needs, from a model built on the meta device (no
    memory): its state_dict(keep_vars=True), where a tied weight is one Parameter under each of its names
    (tied_names). CheckpointError, before the model is built, if it and its longest pass would take more memory
    than this server allows (check_model_memory)."""
    check_model_memory(config, source)
    return _shapes_only(config).state_dict(keep_vars=True)


class MemoryEstimate(NamedTuple):
    """What a model of a config would hold, in bytes (model_memory)."""

    parameters: int  # its parameters, a tied weight counted once
    weights: int  # its parameters and buffers as held in memory (BYTES_PER_WEIGHT each)
    loading: int  # held beside them while they load: the file's tensors, as float32
    pass_tokens: int  # the longest pass a model of it may run (pass_length)
    attention: int  # what that pass records of attention (weights and scores, numpy copies too)
    activations: int  # what else it holds at its longest: caches, the layers' work, the logits

    @property
    def total(self) -> int:
        """The most held at once: the weights, and beside them either their copy while loading or the longest
        pass."""
        return self.weights + max(self.loading, self.attention + self.activations)


def activation_values(config: TransformerConfig, length: int) -> int:
    """About how many float32 values one pass over `length` tokens holds besides its attention: every layer's keys and
    values (decoding's caches; cross-attention's too), the residual stream and one layer's work at a time (a few
    d_model-wide tensors and three d_ff-wide ones: gate, up and their product), and the logits with their
    probabilities over the vocabulary."""
    cached = 2 * length * config.d_model * (config.num_encoder_layers + 2 * config.num_decoder_layers)
    return cached + length * (6 * config.d_model + 3 * config.d_ff + 3 * config.tgt_vocab_size)


def model_memory(config: TransformerConfig) -> MemoryEstimate:
    """What a model of `config` and its longest allowed pass would hold, from the config alone (no weights read, no
    memory taken: the model is counted from one of one layer a stack on the meta device)."""
    parameters = parameter_count(config)
    shallow = replace(config, num_encoder_layers=min(config.num_encoder_layers, 1),
                      num_decoder_layers=min(config.num_decoder_layers, 1))
    buffers = sum(buffer.numel() for buffer in _shapes_only(shallow).buffers())  # positions: one table a stack
    length = pass_length(config)
    return MemoryEstimate(parameters=parameters, weights=BYTES_PER_WEIGHT * (parameters + buffers),
                          loading=BYTES_PER_WEIGHT * parameters, pass_tokens=length,
                          attention=attention_values(config, length, length) * BYTES_PER_ATTENTION_VALUE,
                          activations=BYTES_PER_WEIGHT * activation_values(config, length))


def check_model_memory(config: TransformerConfig, source: Path) -> MemoryEstimate:
    """model_memory(config); CheckpointError, naming both numbers, when it needs more than memory_limit()."""
    estimate = model_memory(config)
    limit, how = memory_limit()
    if estimate.total > limit:
        beside = max(estimate.loading, estimate.attention + estimate.activations)
        raise CheckpointError(
            f"{source}: the model would have {estimate.parameters:,} parameters, more than this server's memory "
            f"allows: it needs about {size_text(estimate.total)} ({size_text(estimate.weights)} of float32 weights "
            f"and up to {size_text(beside)} beside them, while they load or for its longest pass of "
            f"{estimate.pass_tokens:,} tokens), and this server allows {size_text(limit)} ({how})")
    return estimate


def tied_names(state: dict[str, torch.Tensor]) -> dict[str, str]:
    """Each name of a state_dict(keep_vars=True) whose tensor is the very tensor of an earlier name (tied
    embeddings), mapped to the first name of that tensor: the one name a safetensors file stores it under."""
    first: dict[int, str] = {}
    tied = {}
    for name, tensor in state.items():
        first.setdefault(id(tensor), name)
        if first[id(tensor)] != name:
            tied[name] = first[id(tensor)]
    return tied


def attention_values(config: TransformerConfig, src_len: int, tgt_len: int) -> int:
    """How many attention values one captured pass over (src_len, tgt_len) tokens records: every layer and head of
    the encoder's self-attention (src x src), the decoder's (tgt x tgt) and its cross-attention (tgt x src)."""
    return config.num_heads * (config.num_encoder_layers * src_len ** 2
                               + config.num_decoder_layers * tgt_len ** 2
                               + config.layers_of("decoder.cross_attn") * tgt_len * src_len)


def pass_length(config: TransformerConfig) -> int:
    """The longest source and decoder sequence (tokens) whose captured pass fits PASS_BUDGET_BYTES; at most max_len."""
    length = config.max_len
    while length > 1 and attention_values(config, length, length) * BYTES_PER_ATTENTION_VALUE > PASS_BUDGET_BYTES:
        length -= 1
    return length


def check_pass_budget(config: TransformerConfig, source: Path) -> int:
    """pass_length(config); CheckpointError when max_len or the pass budget leaves room for fewer than
    MIN_PASS_TOKENS (nothing useful could be shown: every view would fail on the shortest sentence)."""
    if config.max_len < MIN_PASS_TOKENS:
        raise CheckpointError(f"{source}: max_len is {config.max_len}, fewer than the {MIN_PASS_TOKENS} positions the "
                              "shortest sentence needs with its start and end tokens")
    length = pass_length(config)
    if length < MIN_PASS_TOKENS:
        need = attention_values(config, MIN_PASS_TOKENS, MIN_PASS_TOKENS) * BYTES_PER_ATTENTION_VALUE
        raise CheckpointError(f"{source}: one pass over {MIN_PASS_TOKENS} tokens would record {need:,} bytes of "
                              f"attention ({config.num_encoder_layers} + {config.num_decoder_layers} layers x "
                              f"{config.num_heads} heads x length²), more than the {PASS_BUDGET_BYTES:,} allowed")
    return length


def weights_file(path: Path) -> Path:
    """The weights file `path` (NAME.safetensors), or the torch zip NAME.pt where only that one is there. Only
    lstat: a link or a FIFO in either place is chosen as it is, and refused when it is read."""
    torch_zip = path.with_suffix(TORCH_WEIGHTS_SUFFIX)
    return torch_zip if not os.path.lexists(path) and os.path.lexists(torch_zip) else path


def max_weights_bytes(expected: dict[str, torch.Tensor]) -> int:
    """The largest weights file the model `expected` describes may have: 4 bytes per value, plus a little."""
    return 4 * sum(tensor.numel() for tensor in expected.values()) + WEIGHTS_OVERHEAD_BYTES


def load_weights(path: Path, folder: Path, expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state_dict in `path` (safetensors, or a torch zip named .pt), read under the loading policy, no bigger
    than max_weights_bytes, checked against `expected` (names, shapes, dtypes, storage sizes, finite values) before
    any tensor is converted, then converted to fp32. A safetensors file holds a tied weight once, under its first
    name (tied_names), which then serves each of its names; a torch zip holds every name."""
    if path.suffix == TORCH_WEIGHTS_SUFFIX:
        state = read_torch_zip(path, folder, max_weights_bytes(expected), len(expected))
        check_state(state, expected, path)
    else:
        tied = tied_names(expected)
        state = read_safetensors(path, folder, max_weights_bytes(expected))
        check_state(state, {name: tensor for name, tensor in expected.items() if name not in tied}, path)
        state |= {name: state[first] for name, first in tied.items()}
    return {name: tensor.float() if tensor.is_floating_point() else tensor for name, tensor in state.items()}


def read_safetensors(path: Path, folder: Path, max_bytes: int) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file `path`: its bytes read under the loading policy (`read_bytes`, at most
    `max_bytes`), then parsed by the safetensors library, which checks the header (dtypes, shapes, offsets that cover
    the data exactly) and runs nothing; what it refuses is a CheckpointError."""
    data = read_bytes(path, folder, max_bytes)
    with native_errors(path, "not a readable safetensors file"):  # truncated or foreign: the library's own errors
        return safetensors.torch.load(data)


def read_torch_zip(path: Path, folder: Path, max_bytes: int, tensors: int) -> object:
    """What the torch zip `path` holds, read under the loading policy (`open_regular`, at most `max_bytes`): only
    once check_torch_zip has found a plain state dict of at most about `tensors` tensors in it, and with
    weights_only."""
    with open_regular(path, folder, max_bytes) as file:
        check_torch_zip(file, path, max_members=2 * tensors + 16)
        return torch_load(file, path)


def torch_load(file: BinaryIO, path: Path) -> object:
    """torch.load(weights_only=True) of a file that passed check_torch_zip; its errors as CheckpointError, without
    torch's advice to load the file with weights_only=False (which would run any code the file holds)."""
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(f"{path}: refused to load, it holds more than tensors ({_first_reason(error)})") from None
    except Exception as error:  # truncated or not a torch file at all
        raise CheckpointError(f"{path}: not a readable weights file ({type(error).__name__}: "
                              f"{_first_reason(error)})") from None


def _first_reason(error: Exception) -> str:
    """The line of a torch.load error that says what is wrong (torch's own message goes on to advise retrying with
    weights_only=False)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = next((line.partition("error:")[2].strip() for line in lines if "WeightsUnpickler error:" in line),
                  lines[0] if lines else type(error).__name__)
    return reason if "weights_only" not in reason else "the file holds more than a state dict of tensors"


_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_state(state: object, expected: dict[str, torch.Tensor], path: Path) -> None:
    """CheckpointError unless `state` is a dict of exactly the expected tensors: same names and shapes, a float
    dtype where a float is expected, contiguous and inside their storage (no small storage viewed as a big tensor),
    with finite values."""
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: expected a state_dict (a dict of tensors)")
    missing, unexpected = sorted(expected.keys() - state.keys()), sorted(state.keys() - expected.keys(), key=str)
    if missing or unexpected:
        raise CheckpointError(f"{path} does not match {CONFIG_FILE}: missing {missing[:3]}, unexpected "
                              f"{[str(name)[:80] for name in unexpected[:3]]}")
    for name, tensor in state.items():
        want = expected[name]
        if tuple(tensor.shape) != tuple(want.shape):
            raise CheckpointError(f"{path} does not match {CONFIG_FILE}: {name} has shape {tuple(tensor.shape)}, "
                                  f"the config needs {tuple(want.shape)}")
        if tensor.dtype not in (_FLOAT_DTYPES if want.is_floating_point() else (want.dtype,)):
            raise CheckpointError(f"{path}: {name} is {tensor.dtype}, expected a float tensor")
        end = (tensor.storage_offset() + tensor.numel()) * tensor.element_size()
        if not tensor.is_contiguous() or end > tensor.untyped_storage().nbytes():
            raise CheckpointError(f"{path}: {name} is not a plain tensor over its own storage "
                                  f"({tensor.untyped_storage().nbytes():,} bytes stored for {tuple(tensor.shape)})")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{path}: {name} holds NaN or infinite values")


def build_model(config: TransformerConfig, state: dict[str, torch.Tensor], source: Path) -> Transformer:
    model = Transformer(config)
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        first_line = str(error).splitlines()[1:2] or [str(error)]
        raise CheckpointError(f"{source} does not match {CONFIG_FILE}: {first_line[0].strip()}") from None
    return model.eval().to(atlas_device())


def read_config(folder: Path) -> TransformerConfig:
    path = folder / CONFIG_FILE
    try:
        return TransformerConfig.from_dict(read_json(path, folder, MAX_CONFIG_BYTES))
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: {error}") from None


def read_card(folder: Path) -> ModelCard:
    return ModelCard.from_dict(read_json(folder / CARD_FILE, folder, MAX_CARD_BYTES), str(folder / CARD_FILE))


def read_source_words(folder: Path) -> frozenset[str] | None:
    """The words of the training sources (one lower-cased run of letters a line, as `words` splits them); None when
    the folder has no such list (synthetic tasks, converted models)."""
    path = folder / SOURCE_WORDS_FILE
    if not os.path.lexists(path):
        return None
    try:
        lines = read_bytes(path, folder, MAX_WORD_LIST_BYTES).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: {error}") from None
    for number, line in enumerate(lines, 1):
        if words(normalize(line)) != [line]:
            raise CheckpointError(f"{path}, line {number}: not one lower-case word of letters: {line[:40]!r}")
    return frozenset(lines)


def read_tokenizer(folder: Path, file: str, vocab_size: int) -> Tokenizer | JsonTokenizer:
    """The sentencepiece tokenizer of one side; in a converted GPT-2, BERT or BART folder, its one tokenizer.json
    (both sides), whose vocabulary may be smaller than the model's (their embeddings are often padded)."""
    if os.path.lexists(folder / JSON_TOKENIZER_FILE):
        path = folder / JSON_TOKENIZER_FILE
        try:
            tokenizer = JsonTokenizer(path, read_bytes(path, folder, MAX_TOKENIZER_BYTES))
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{path}: {error}") from None
        if tokenizer.vocab_size > vocab_size:
            raise CheckpointError(f"{path}: vocabulary of {tokenizer.vocab_size} tokens, more than the "
                                  f"{vocab_size} {CONFIG_FILE} says")
        return tokenizer
    path, vocab = folder / file, folder / VOCAB_FILES[file]
    try:
        model_bytes = read_bytes(path, folder, MAX_TOKENIZER_BYTES)
        if os.path.lexists(vocab):
            tokenizer = VocabTokenizer(path, vocab, model_bytes, read_json(vocab, folder, MAX_TOKENIZER_BYTES))
        else:
            tokenizer = Tokenizer(path, model_bytes=model_bytes)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: {error}") from None
    if tokenizer.vocab_size != vocab_size:
        raise CheckpointError(f"{path}: vocabulary of {tokenizer.vocab_size} pieces, "
                              f"but {CONFIG_FILE} says {vocab_size}")
    return tokenizer


class LoadedCheckpoint:
    """A loaded checkpoint folder: `.model` (eval mode; never mutated), `.config`, `.card`, the two tokenizers, the
    training sources' words. What a model does with an input is inference.translation.Checkpoint's.

    Every file is read under the loading policy of safety.py; the weights are checked against the config before
    the model is built."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise CheckpointError(f"{self.path}: no such checkpoint folder")
        self.config = read_config(self.path)
        self.pass_len = check_pass_budget(self.config, self.path / CONFIG_FILE)  # inputs are cut to this many tokens
        self.card = read_card(self.path)
        self._expected = expected_state(self.config, self.path / CONFIG_FILE)
        self.src_tokenizer = read_tokenizer(self.path, SRC_TOKENIZER_FILE, self.config.src_vocab_size)
        self.tgt_tokenizer = read_tokenizer(self.path, TGT_TOKENIZER_FILE, self.config.tgt_vocab_size)
        self.model = self._build(weights_file(self.path / WEIGHTS_FILE))
        self.source_words = read_source_words(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    def _build(self, weights: Path) -> Transformer:
        return build_model(self.config, load_weights(weights, self.path, self._expected), weights)

    def snapshot_names(self) -> list[str]:
        return [snapshot["name"] for snapshot in self.card.snapshots]

    def load_snapshot(self, name: str) -> Transformer:
        """The model as it was at an earlier point of training (a name from `snapshot_names()`), in eval mode."""
        if name not in self.snapshot_names():
            raise CheckpointError(f"{self.path / CARD_FILE}: no snapshot named {name!r}")
        return self._build(weights_file(self.path / SNAPSHOT_DIR / f"{name}{WEIGHTS_SUFFIX}"))


def _is_checkpoint_folder(root: Path, path: Path) -> bool:
    """Whether `path` is a visible folder that, once symlinks are followed, is still a direct sub-folder of the
    resolved `root` (a link to a folder elsewhere, or to the root itself, is not)."""
    return not path.name.startswith(".") and path.is_dir() and path.resolve().parent == root.resolve()


def checkpoint_folders(root: str | Path) -> list[str]:
    """The names of the checkpoint folders in `root`, sorted: the only names `resolve_checkpoint` accepts."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(path.name for path in root.iterdir() if _is_checkpoint_folder(root, path))


def resolve_checkpoint(root: str | Path, name: str) -> Path:
    """root/name if `name` is one of `checkpoint_folders(root)`; CheckpointError for anything else: '..', an absolute
    path, a nested path, a hidden folder, a symlink out of `root`."""
    root = Path(root)
    if Path(name).name != name or not _is_checkpoint_folder(root, root / name):  # name: a bare name, no separator
        raise CheckpointError(f"{root}: no checkpoint folder named {name!r}")
    return root / name


class FolderStatus(NamedTuple):
    name: str  # as listed by checkpoint_folders
    error: str  # "" if the folder passed every check short of reading its tensors, else why it cannot be loaded


def inspect_checkpoint(path: str | Path) -> None:
    """Every check `LoadedCheckpoint` makes except reading the tensors: config, card, tokenizers, word list, and the
    weights file's kind, size and structure (a safetensors file's start; a torch zip's members and pickle). Cheap (no
    weights are read); CheckpointError naming what is wrong."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint folder")
    config = read_config(path)
    check_pass_budget(config, path / CONFIG_FILE)
    read_card(path)
    expected = expected_state(config, path / CONFIG_FILE)
    read_tokenizer(path, SRC_TOKENIZER_FILE, config.src_vocab_size)
    read_tokenizer(path, TGT_TOKENIZER_FILE, config.tgt_vocab_size)
    read_source_words(path)
    weights = weights_file(path / WEIGHTS_FILE)
    with open_regular(weights, path, max_weights_bytes(expected)) as file:
        if weights.suffix == TORCH_WEIGHTS_SUFFIX:
            check_torch_zip(file, weights, max_members=2 * len(expected) + 16)
        else:
            check_safetensors_start(file, weights)


INSPECTION_S = 10.0  # a folder whose checks take longer is listed as broken (each takes well under a second)


def folder_problem(path: str | Path) -> str:
    """Why the folder at `path` cannot be loaded (inspect_checkpoint's message), "" if it passes. A watchdog: the
    checks run in a thread of their own, and a folder still being checked after INSPECTION_S is reported as broken
    while its thread finishes in the background, so one folder never holds up a listing, a server's start or
    another session."""
    outcome: list[str] = []

    def inspect() -> None:
        try:
            inspect_checkpoint(path)
            outcome.append("")
        except CheckpointError as error:
            outcome.append(str(error))
        except Exception as error:  # one odd folder must never hide the others
            outcome.append(f"{path}: unexpected {type(error).__name__}: {error}")

    thread = threading.Thread(target=inspect, name=f"inspect {Path(path).name}", daemon=True)
    thread.start()
    thread.join(INSPECTION_S)
    return outcome[0] if outcome else f"{path}: checking it took longer than {INSPECTION_S:g} s"


def checkpoint_status(root: str | Path) -> list[FolderStatus]:
    """Each of `checkpoint_folders(root)` with "" if it should load, or the reason it cannot; never raises, never
    blocks, reads no weights. A folder that passes may still fail on its tensors when loaded (NaN, wrong shapes)."""
    return [FolderStatus(name, folder_problem(Path(root) / name)) for name in checkpoint_folders(root)]


MAX_VERSION_ENTRIES = 256  # snapshot files looked at by checkpoint_version: a folder of 200,000 files costs no more


def checkpoint_version(path: str | Path) -> int:
    """A number that changes whenever a file of the checkpoint changes (the newest mtime among the folder, its known
    files and the first MAX_VERSION_ENTRIES entries of snapshots/), so a cache keyed on it reloads a checkpoint that
    finished training. Only lstat: never follows a link, never opens a file, never raises (0 if nothing is there)."""
    path = Path(path)
    candidates = [path, path / SNAPSHOT_DIR] + [path / file for file in
                                                 (CONFIG_FILE, WEIGHTS_FILE, CARD_FILE, SRC_TOKENIZER_FILE,
                                                  TGT_TOKENIZER_FILE, JSON_TOKENIZER_FILE)]
    candidates.append((path / WEIGHTS_FILE).with_suffix(TORCH_WEIGHTS_SUFFIX))
    try:
        with os.scandir(path / SNAPSHOT_DIR) as entries:
            candidates += [Path(entry.path) for entry in itertools.islice(entries, MAX_VERSION_ENTRIES)]
    except OSError:
        pass
    stamps = [0]
    for candidate in candidates:
        try:
            stamps.append(candidate.lstat().st_mtime_ns)
        except OSError:
            continue
    return max(stamps)


# ---------------------------------------------------------------------------------------------- writing safely
# A checkpoint is written whole into a hidden sibling folder (.NAME.training, .NAME.converting) and then renamed into
# place, under a lock that one writer at a time holds: an interrupted or failed write leaves the folder as it was,
# and a folder is replaced (snapshots and all) only when the writer was told to.

def staging_folder(path: Path, purpose: str) -> Path:
    """Where the checkpoint `path` is written before it is put in place: `.NAME.PURPOSE` beside it, which
    checkpoint_folders never lists (a hidden name)."""
    return path.parent / f".{path.name}.{purpose}"


def check_staging(folder: Path) -> None:
    """CheckpointError unless the hidden staging path `folder` holds nothing or a real folder (what an interrupted
    writer leaves): a symlink, a file or anything else there was not written here, and is never followed or
    deleted."""
    if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
        raise CheckpointError(f"{folder}: is {'a symlink' if folder.is_symlink() else 'not a folder'}, not what an "
                              "interrupted run of this command leaves there; nothing was written. Remove it and run "
                              "again")


def remove_staging(folder: Path) -> None:
    """Remove the staging folder an interrupted writer left at `folder`, after check_staging."""
    check_staging(folder)
    if os.path.lexists(folder):
        shutil.rmtree(folder)


def check_replaceable(path: Path, replace: bool, *inputs: Path) -> None:
    """CheckpointError unless writing the checkpoint `path` replaces nothing, or `replace` allows it: nothing there
    and an empty folder are fine; a folder with files in it needs `replace`; anything else (a file, a symlink) is
    never replaced. Whatever `replace` says, `path` may not be, hold or lie inside the folder the command runs in or
    one of the `inputs` the checkpoint is made from (refuse_output_over_inputs): replacing it would delete what is
    read."""
    refuse_output_over_inputs(path, inputs)
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        raise CheckpointError(f"{path}: exists and is not a folder; nothing was written")
    if not replace and any(path.iterdir()):
        raise CheckpointError(f"{path}: a checkpoint (or other files) is already there; nothing was written. Give "
                              "--replace to replace it whole, or another folder")


@contextmanager
def writer_lock(path: Path) -> Iterator[None]:
    """The right to write the checkpoint `path`, held until the block ends; a second writer to the same folder is
    refused at once. An flock on the hidden file .NAME.lock beside it: the kernel releases it when the process ends,
    however it ends, so a killed writer leaves no stale lock. The lock also finishes a replacement that a killed
    writer left halfway (see commit_checkpoint)."""
    lock = path.parent / f".{path.name}.lock"
    try:  # never through a symlink planted as the lock: it would open (and create) a file elsewhere
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as error:  # a file where a parent folder should be, a symlink as the lock, no permission
        raise CheckpointError(f"{error.filename or lock}: cannot be used to write {path} ({error.strerror}); nothing "
                              "was written") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise CheckpointError(f"{path}: another process is writing this checkpoint (it holds {lock}); nothing was "
                              "written") from None
    try:
        replaced = staging_folder(path, "replaced")
        check_staging(replaced)
        if os.path.lexists(replaced):
            if os.path.lexists(path):
                shutil.rmtree(replaced)
            else:  # killed between commit_checkpoint's two renames: the old checkpoint goes back
                os.rename(replaced, path)
        yield
    finally:
        os.close(descriptor)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM received inside the block take effect when it ends (handlers run in the main thread only:
    elsewhere the block runs as it is)."""
    received: list[int] = []
    try:
        previous = {number: signal.signal(number, lambda number, frame: received.append(number))
                    for number in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread, where signals are handled
        previous = {}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for number in received:
            signal.raise_signal(number)


def commit_checkpoint(staging: Path, path: Path) -> None:
    """Put the complete checkpoint folder `staging` in the place of `path` (nothing, an empty folder, or an old
    checkpoint, which goes whole: snapshots too). Call under writer_lock. SIGINT and SIGTERM wait until both renames
    are done, so an interrupt leaves either the old folder or the new one; a process killed outright between them
    leaves the old one as .NAME.replaced, which the next writer_lock puts back."""
    replaced = staging_folder(path, "replaced")
    with signals_deferred():
        if os.path.lexists(path):
            os.rename(path, replaced)
        os.rename(staging, path)
    shutil.rmtree(replaced, ignore_errors=True)


def save_weights(model: torch.nn.Module, path: Path, half: bool = False) -> None:
    """The model's weights as the safetensors file `path`, from the CPU, floats as fp16 where `half`; written beside
    and renamed into place, and the torch zip of the same name, if any, removed (it would be stale). safetensors
    stores no tensor twice: a tied weight is stored once, under its first name (tied_names), and load_weights gives
    it back to each of its names."""
    state = model.state_dict(keep_vars=True)
    tied = tied_names(state)
    stored = {name: (tensor.detach().half() if half and tensor.is_floating_point() else tensor.detach()).cpu()
              for name, tensor in state.items() if name not in tied}
    save_atomically(lambda temporary: safetensors.torch.save_file(stored, temporary), path)
    path.with_suffix(TORCH_WEIGHTS_SUFFIX).unlink(missing_ok=True)


def weights_entry(model: torch.nn.Module) -> str:
    """What a card's `weights` says of the file save_weights writes for `model` (not half), e.g.
    "model.safetensors (safetensors, float32)"."""
    dtypes = sorted({str(tensor.dtype).removeprefix("torch.") for tensor in model.state_dict().values()})
    return f"{WEIGHTS_FILE} (safetensors, {', '.join(dtypes)})"


def save_atomically(write: Callable[[Path], None], path: Path) -> None:
    """write(a temporary path beside `path`), then rename it to `path`: no reader (nor --resume) sees half a file."""
    temporary = path.with_name(f".{path.name}.partial")
    write(temporary)
    os.replace(temporary, path)


def write_source_words(path: str | Path, source_texts: Iterable[str]) -> None:
    """The folder's word list (see read_source_words) from the texts the model was trained to read."""
    word_list = sorted({word for text in source_texts for word in words(normalize(text))})
    (Path(path) / SOURCE_WORDS_FILE).write_text("".join(f"{word}\n" for word in word_list), encoding="utf-8")


def save_checkpoint(
    path: str | Path, model: Transformer, card: ModelCard, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer,
    source_texts: Iterable[str] | None = None,
) -> None:
    """Write a complete checkpoint folder (snapshots are written by the trainer into path/snapshots/); with
    `source_texts` (the training sources) also their word list, for the unseen-word warning."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if source_texts is not None:
        write_source_words(path, source_texts)
    model.config.save(path / CONFIG_FILE)
    save_weights(model, path / WEIGHTS_FILE)
    for tokenizer, file in ((src_tokenizer, SRC_TOKENIZER_FILE), (tgt_tokenizer, TGT_TOKENIZER_FILE)):
        if tokenizer.path.resolve() != (path / file).resolve():
            (path / file).write_bytes(tokenizer.path.read_bytes())
    replace(card, weights=weights_entry(model)).save(path / CARD_FILE)
