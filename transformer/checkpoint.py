"""A checkpoint is a folder: config.json, model.pt, src.model / tgt.model (sentencepiece), card.json, snapshots/,
and for a model trained on a corpus source_words.txt (every word of its training sources, for the unseen-word warning).

Loading never runs code from the folder: weights are read with `torch.load(..., weights_only=True)`, which refuses
any pickle that would build something other than tensors. Every file is read under the loading policy of
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
import re
import shutil
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import BinaryIO, NamedTuple, TypeVar

import torch
from torch.overrides import TorchFunctionMode

from .capture import capture
from .config import TransformerConfig
from .data import MAX_CHARS_PER_TOKEN, InputText, input_ids, normalize, prompt_ids, read_input, target_ids, words
from .decoding import beam_search, check_beam_size, greedy, output_limit
from .device import atlas_device, model_device
from .masks import decoder_lengths
from .model import Transformer
from .recipes import JOINED_PAIRS
from .record import AttentionRecord
from .safety import (
    BYTES_PER_ATTENTION_VALUE,
    MAX_CARD_BYTES,
    MAX_CONFIG_BYTES,
    MAX_EXAMPLE_CHARS,
    MAX_EXAMPLES,
    MAX_HISTORY,
    MAX_HISTORY_KEYS,
    MAX_METRICS,
    MAX_NAME_CHARS,
    MAX_PARAMETERS,
    MAX_SNAPSHOTS,
    MAX_TEXT_CHARS,
    MAX_TOKENIZER_BYTES,
    MAX_WORD_LIST_BYTES,
    MIN_PASS_TOKENS,
    PASS_BUDGET_BYTES,
    WEIGHTS_OVERHEAD_BYTES,
    CheckpointError,
    check_dict,
    check_list,
    check_number,
    check_text,
    check_torch_zip,
    open_regular,
    read_bytes,
    read_json,
)
from .tasks import input_warnings
from .tokenizer import JsonTokenizer, Tokenizer, VocabTokenizer

CONFIG_FILE, WEIGHTS_FILE, CARD_FILE = "config.json", "model.pt", "card.json"
SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE = "src.model", "tgt.model"
CONTINUATION_TOKENS = 20  # a decoder-only model continues its prompt by this many tokens
MASK_PIECES = ("[MASK]", "<mask>")  # what an encoder-only model's tokenizer calls its mask token (BERT, BART/RoBERTa)
JSON_TOKENIZER_FILE = "tokenizer.json"  # converted GPT-2, BERT, BART: one `tokenizers` file for both sides
# A converted model numbers its pieces through a vocabulary next to its sentencepiece model (see VocabTokenizer).
VOCAB_FILES = {SRC_TOKENIZER_FILE: "src.vocab.json", TGT_TOKENIZER_FILE: "tgt.vocab.json"}
SNAPSHOT_DIR = "snapshots"
SOURCE_WORDS_FILE = "source_words.txt"
MAX_UNSEEN_NAMED = 5  # words a warning quotes; it counts the rest
_SNAPSHOT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
T = TypeVar("T")


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
    # --- Converted models (transformer/convert.py): where the weights came from, under which licence, and how.
    source: str = ""  # e.g. "Hugging Face Helsinki-NLP/opus-mt-en-fr" or the folder converted
    licence: str = ""  # the licence the original model was published under, e.g. "apache-2.0"
    conversion_command: str = ""  # the exact command that wrote this folder

    @classmethod
    def from_dict(cls, values: object, source: str = CARD_FILE) -> ModelCard:
        """A card from parsed JSON, every field type- and range-checked (the limits are in safety.py)."""
        values = check_dict(values, source, 64)
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise CheckpointError(f"{source}: unknown field(s) {', '.join(unknown)}")
        missing = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
                   and f.name not in values]
        if missing:
            raise CheckpointError(f"{source}: missing field(s) {', '.join(missing)}")
        where = {name: f"{source}: field {name!r}" for name in values}
        for name in ("name", "task", "machine"):
            if name in values:
                check_text(values[name], where[name], MAX_NAME_CHARS)
        for name in ("description", "data", "training_command"):
            if name in values:
                check_text(values[name], where[name], MAX_TEXT_CHARS)
        if "wall_time_s" in values:
            check_number(values["wall_time_s"], where["wall_time_s"], minimum=0)
        if "parameters" in values:
            check_number(values["parameters"], where["parameters"], integer=True, minimum=0, maximum=MAX_PARAMETERS)
        for key, value in check_dict(values.get("metrics", {}), f"{source}: field 'metrics'", MAX_METRICS).items():
            check_number(value, f"{source}: metric {key!r}")
        for example in check_list(values.get("examples", []), f"{source}: field 'examples'", MAX_EXAMPLES):
            check_text(example, f"{source}: an example", MAX_EXAMPLE_CHARS)
        for index, entry in enumerate(check_list(values.get("history", []), f"{source}: field 'history'", MAX_HISTORY)):
            for key, value in check_dict(entry, f"{source}: history[{index}]", MAX_HISTORY_KEYS).items():
                at = f"{source}: history[{index}][{key!r}]"
                if key == "data":  # what the entry's numbers were measured on, in words
                    check_text(value, at, MAX_NAME_CHARS)
                else:
                    check_number(value, at)
        snapshots = check_list(values.get("snapshots", []), f"{source}: field 'snapshots'", MAX_SNAPSHOTS)
        for index, snapshot in enumerate(snapshots):
            _check_snapshot_entry(snapshot, f"{source}: snapshots[{index}]")
        check_dict(values.get("training", {}), f"{source}: field 'training'", MAX_HISTORY_KEYS * 4)
        decoding = check_dict(values.get("decoding", {}), f"{source}: field 'decoding'", 3)
        if set(decoding) - {"beam_size", "length_penalty", "coverage_penalty"}:
            raise CheckpointError(f"{source}: field 'decoding' takes beam_size, length_penalty and coverage_penalty "
                                  "only")
        check_number(decoding.get("beam_size", 1), f"{source}: decoding['beam_size']", integer=True, minimum=1,
                     maximum=16)
        check_number(decoding.get("length_penalty", 0.6), f"{source}: decoding['length_penalty']", minimum=0, maximum=2)
        check_number(decoding.get("coverage_penalty", 0.0), f"{source}: decoding['coverage_penalty']", minimum=0,
                     maximum=2)
        return cls(**values)

    def save(self, path: Path) -> None:
        """Written beside and renamed into place: a card being updated (evaluate --record) is never half there."""
        text = json.dumps(asdict(self), indent=1, ensure_ascii=False) + "\n"
        save_atomically(lambda temporary: temporary.write_text(text, encoding="utf-8"), path)


# What a snapshot entry may measure besides its step: the dev metric, and a language model's in-context numbers
# (transformer/induction.py).
SNAPSHOT_MEASURES = ("dev_metric", "in_context_loss_drop", "induction_score", "previous_token_score")


def _check_snapshot_entry(snapshot: object, where: str) -> None:
    """{"name": a plain file name, "step": int >= 0, "fraction": in [0, 1]}, and any of SNAPSHOT_MEASURES, each a
    number."""
    snapshot = check_dict(snapshot, where, 8)
    if not _SNAPSHOT_NAME.match(str(snapshot.get("name", ""))) or len(snapshot["name"]) > MAX_NAME_CHARS:
        raise CheckpointError(f"{where}: each snapshot needs a plain 'name' (letters, digits, '.', '_', '-')")
    unknown = sorted(set(snapshot) - {"name", "step", "fraction", *SNAPSHOT_MEASURES})
    if unknown:
        raise CheckpointError(f"{where}: unknown field(s) {', '.join(unknown)}")
    check_number(snapshot.get("step"), f"{where}['step']", integer=True, minimum=0)
    check_number(snapshot.get("fraction"), f"{where}['fraction']", minimum=0, maximum=1)
    for measure in SNAPSHOT_MEASURES:
        if measure in snapshot:
            check_number(snapshot[measure], f"{where}[{measure!r}]")


@dataclass
class Translation:
    """One input translated, with what the views need to explain it."""

    text: str  # the output, detokenised
    src_tokens: list[str]  # pieces fed to the encoder (ending with </s>)
    src_typed: list[str]  # the same pieces as typed: an <unk> of src_tokens shows the text it stands for
    tgt_tokens: list[str]  # decoder input pieces, starting with <s>: the query rows of decoder attention
    output_tokens: list[str]  # the pieces generated, one per decoder input position (ending with </s> if reached)
    output_ids: list[int]  # their ids: the labels the decoder input's positions predict
    probs: list[float]  # probability of each generated piece
    attention: AttentionRecord  # one captured forward pass over (source, decoder input)
    src_ids: list[int]
    tgt_ids: list[int]  # decoder input ids
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Request:
    """One input read, encoded and checked, ready to decode alone or in a batch (Checkpoint.prepare)."""

    read: InputText
    ids: list[int]  # the encoder's ids (ending with </s>)
    warnings: list[str]  # what the user should know about the input
    beam_size: int
    limit: int  # the decoder sequence length (BOS included) to stop at
    default_limit: bool  # the limit is decoding.output_limit's, not the caller's max_len


class _ShapesOnly(TorchFunctionMode):
    """Random initialisation skipped: a meta tensor has no values, and nn.Embedding's normal_ on the meta device runs
    through PyTorch's Python decompositions, whose first use imports torch._dynamo (seconds at a server's cold
    start, before the first visitor's first figure). A torch function mode is per thread: nothing else changes."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.nn.init.normal_, torch.Tensor.normal_):
            return args[0] if args else kwargs["tensor"]  # the tensor it would have filled, as the real call returns
        return func(*args, **kwargs)


def expected_state(config: TransformerConfig, source: Path) -> dict[str, torch.Tensor]:
    """The names, shapes and dtypes of the state_dict `config` needs, from a model built on the meta device (no
    memory); CheckpointError if the model would have more than MAX_PARAMETERS parameters."""
    with torch.device("meta"), _ShapesOnly():
        model = Transformer(config)
    if model.num_parameters() > MAX_PARAMETERS:
        raise CheckpointError(f"{source}: the model would have {model.num_parameters():,} parameters, "
                              f"more than the {MAX_PARAMETERS:,} allowed")
    return model.state_dict()


def attention_values(config: TransformerConfig, src_len: int, tgt_len: int) -> int:
    """How many attention values one captured pass over (src_len, tgt_len) tokens records: every layer and head of
    the encoder's self-attention (src x src), the decoder's (tgt x tgt) and its cross-attention (tgt x src)."""
    return config.num_heads * (config.num_encoder_layers * src_len ** 2
                               + config.num_decoder_layers * tgt_len ** 2
                               + config.layers_of("decoder.cross") * tgt_len * src_len)


def decoding_bytes(config: TransformerConfig, requests: list[Request]) -> int:
    """About how many bytes decoding these requests together holds at its longest: per hypothesis (input x beam,
    padded to the longest source and limit), the encoder's memory and every decoder layer's cached keys and values
    (self-attention over the output, cross-attention over the source), and a few rows of scores over the
    vocabulary."""
    rows = len(requests) * max(request.beam_size for request in requests)
    src_len = max(len(request.ids) for request in requests)
    tgt_len = max(request.limit for request in requests)
    cached = config.d_model * (src_len + 2 * config.num_decoder_layers * (src_len + tgt_len))
    return 4 * rows * (cached + 3 * config.tgt_vocab_size)  # float32


def pass_length(config: TransformerConfig) -> int:
    """The longest source and decoder sequence (tokens) whose captured pass fits PASS_BUDGET_BYTES; at most max_len."""
    length = config.max_len
    while length > 1 and attention_values(config, length, length) * BYTES_PER_ATTENTION_VALUE > PASS_BUDGET_BYTES:
        length -= 1
    return length


def check_pass_budget(config: TransformerConfig, source: Path) -> int:
    """pass_length(config); CheckpointError when not even MIN_PASS_TOKENS fit (nothing useful could be shown)."""
    length = pass_length(config)
    if length < min(MIN_PASS_TOKENS, config.max_len):
        shortest = min(MIN_PASS_TOKENS, config.max_len)
        need = attention_values(config, shortest, shortest) * BYTES_PER_ATTENTION_VALUE
        raise CheckpointError(f"{source}: one pass over {shortest} tokens would record {need:,} bytes of attention "
                              f"({config.num_encoder_layers} + {config.num_decoder_layers} layers x "
                              f"{config.num_heads} heads x length²), more than the {PASS_BUDGET_BYTES:,} allowed")
    return length


def load_weights(path: Path, folder: Path, expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state_dict in `path`, checked against `expected` (names, shapes, dtypes, storage sizes, finite values)
    before any tensor is converted, then converted to fp32. Only tensors are unpickled (weights_only), the file must
    be a torch zip with nothing compressed, and no bigger than 4 bytes per expected value plus a little."""
    max_bytes = 4 * sum(tensor.numel() for tensor in expected.values()) + WEIGHTS_OVERHEAD_BYTES
    with open_regular(path, folder, max_bytes) as file:
        check_torch_zip(file, path, max_members=2 * len(expected) + 16)
        state = torch_load(file, path)
    check_state(state, expected, path)
    return {name: tensor.float() if tensor.is_floating_point() else tensor for name, tensor in state.items()}


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


class Checkpoint:
    """A loaded checkpoint folder: `.model` (eval mode; never mutated), `.config`, `.card`, the two tokenizers.

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
        self.model = self._build(self.path / WEIGHTS_FILE)
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
        return self._build(self.path / SNAPSHOT_DIR / f"{name}.pt")

    def read(self, text: str) -> InputText:
        """`text` as this model reads it, bounded and normalised once, where it enters: what encoding, the warnings
        and decoding take. TypeError if it is not a string; ValueError (a message for the user) if it is empty."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        read = read_input(self.src_tokenizer, text, self.config.max_len)
        if not read.normalized:
            raise ValueError("The input is empty: type a sentence (spaces alone are not enough).")
        return read

    def _source(self, text: InputText) -> tuple[list[int], int]:
        """The encoder's ids for a read text and how many pieces were cut off to fit max_len; ValueError (a message
        for the user) when nothing of it is left to read."""
        if isinstance(self.src_tokenizer, JsonTokenizer):
            ids, cut = self._with_specials(text)
            readable = len(self.src_tokenizer.encode(text.read)) > 0  # a GPT-2 prompt may be one piece
        elif self.config.stacks == "decoder-only":  # a language model of ours: its prompt starts with <s>
            ids, cut = prompt_ids(self.src_tokenizer, text, self.pass_len, self.config.bos_id)
            readable = len(ids) > 1
        else:
            ids, cut = input_ids(self.src_tokenizer, text, self.pass_len, self.config.eos_id)
            readable = len(ids) > 1  # EOS alone: every character was dropped (zero-width, byte-order mark, U+FFFD)
        if not readable:
            raise ValueError("The input has no characters this model reads, only invisible or formatting ones: "
                             "type a sentence.")
        return ids, cut

    def _with_specials(self, text: InputText) -> tuple[list[int], int]:
        """A converted model's input as its own tokenizer builds it ([CLS] ... [SEP], <s> ... </s>, or the bare
        pieces of a GPT-2 prompt), cut to fit (its closing token kept), and how many pieces were cut."""
        ids = self.src_tokenizer.encode_with_specials(text.read)
        pieces = len(self.src_tokenizer.encode(text.read))
        closing = ids[-1:] if len(ids) > pieces else []
        room = self.pass_len - (1 if self.config.stacks == "decoder-only" else 0)  # a prompt leaves room to continue
        kept = ids if len(ids) <= room else ids[: room - len(closing)] + closing
        return kept, len(ids) - len(kept)

    def input_room(self) -> tuple[int, str]:
        """The most pieces of an input this model reads (max_len allowing), and what the tokens around them are: an
        encoder's </s>; a language model's <s> (ours) and one token at least to continue; a converted tokenizer's own
        special tokens."""
        max_len = self.config.max_len
        if self.config.stacks == "decoder-only":
            if isinstance(self.src_tokenizer, JsonTokenizer):
                return max_len - 1, "with one to continue"
            return max_len - 2, "with <s> and one to continue"
        if isinstance(self.src_tokenizer, JsonTokenizer):  # [CLS] ... [SEP], <s> ... </s>
            specials = len(self.src_tokenizer.encode_with_specials("a")) - len(self.src_tokenizer.encode("a"))
            return max_len - specials, "with its special tokens"
        return max_len - 1, "with </s>"

    def unseen_words(self, text: str | InputText) -> list[str]:
        """The words of `text` (as this model reads it) that its training sources never contain, each once, in
        order; [] when the checkpoint has no word list."""
        if self.source_words is None:
            return []
        read = text if isinstance(text, InputText) else self.read(text)
        return list(dict.fromkeys(word for word in words(read.normalized) if word not in self.source_words))

    def encode(self, text: str, side: str = "src") -> list[int]:
        """Ids exactly as the model sees them: source = pieces + EOS; target = BOS + pieces + EOS."""
        if side == "src":
            return self._source(self.read(text))[0]
        if side == "tgt":
            self.read(text)  # the same checks as a source
            return target_ids(self.tgt_tokenizer, text, self.pass_len, self.config.bos_id, self.config.eos_id)
        raise ValueError(f"side must be 'src' or 'tgt', got {side!r}")

    def translate(self, text: str, beam_size: int | None = None, max_len: int | None = None,
                  model: Transformer | None = None) -> Translation:
        """Decode `text` (greedy when beam_size is 1; None: as the card's `decoding` says, greedy if it is silent),
        then capture one forward pass over the result.

        `max_len`: the decoder sequence length (BOS included) to stop at; None: decoding.output_limit of the input,
        as `python -m transformer.evaluate` decodes. `model` runs another set of weights with this checkpoint's
        tokenizers (e.g. a training snapshot)."""
        return self.translate_batch([self.prepare(text, beam_size, max_len)], model)[0]

    def prepare(self, text: str, beam_size: int | None = None, max_len: int | None = None) -> Request:
        """`text` read, encoded and checked as translate() takes it, without running the model: what is wrong with
        an input (TypeError, ValueError) is raised here, before it joins anyone else's in a batch."""
        beam_size = self.card.decoding.get("beam_size", 1) if beam_size is None else beam_size
        check_beam_size(beam_size)
        if not self.config.cross_attention:
            beam_size = 1  # beam search translates; a language model's continuation here is greedy
        read = self.read(text)
        ids, cut = self._source(read)
        limit = self.output_limit(len(ids)) if max_len is None else max_len
        if type(limit) is int:  # anything else: greedy and beam_search refuse it with a message
            limit = min(limit, self.pass_len)
        return Request(read, ids, self._input_warnings(read, ids, cut), beam_size, limit, max_len is None)

    def translate_batch(self, requests: list[Request], model: Transformer | None = None) -> list[Translation]:
        """The Translation of each request (all of one beam size), as translate() gives it alone: decode_batch, then
        each input's own explain()."""
        model = model or self.model
        if self.config.stacks == "encoder-only":  # nothing to decode: one captured pass per input
            return [self._filled(model, self._padded([request.ids], model_device(model)), request.read,
                                 list(request.warnings)) for request in requests]
        return [self.explain(request, sequence, model)
                for request, sequence in zip(requests, self.decode_batch(requests, model))]

    def decode_batch(self, requests: list[Request], model: Transformer | None = None) -> list[list[int]]:
        """The decoded sequence (BOS first) of each request (all of one beam size), as translate() decodes it
        alone: the inputs padded into one batch, each stopping at its own limit. Decoding is where batching pays:
        every step reads all the weights, for one row or for forty alike. One input that fails fails the call: run
        each alone to tell whose it is. A language model's prompts of different lengths do not pad (its decoding
        continues each from its last token): they run one by one."""
        model = model or self.model
        if len({request.beam_size for request in requests}) != 1:
            raise ValueError("a batch of translations runs one beam size")
        if len(requests) > 1 and not self.config.cross_attention:
            return [sequence for request in requests for sequence in self.decode_batch([request], model)]
        src = self._padded([request.ids for request in requests], model_device(model))
        return self._decode(model, src, requests[0].beam_size, [request.limit for request in requests])

    def explain(self, request: Request, sequence: list[int], model: Transformer | None = None) -> Translation:
        """The Translation of a request decoded as `sequence` (decode_batch): its warnings, and one captured pass
        over (source, decoder input) of this input alone.

        The captured pass is run per input, exactly the pass translate() runs, so the attention is the same bit for
        bit however the decoding was batched: one pass over a padded batch, cut back to each input, differs from it
        by float32 rounding (a sum over more keys, a product over more rows: up to 1.3e-6 on the weights over 200 of
        eng-fra's dev sentences), and would save little (the capture's cost is writing what it records, per input
        either way)."""
        warnings = list(request.warnings)
        if sequence[-1] != self.config.eos_id and self.config.cross_attention:  # a language model may go on
            warnings.append(self._unended_warning(len(request.ids), len(sequence), request.limit,
                                                  request.default_limit))
        return self._explained(model or self.model, request, sequence, warnings)

    def batch_fits(self, requests: list[Request]) -> bool:
        """Whether decoding these requests together stays within the memory one captured pass may take
        (PASS_BUDGET_BYTES); one request alone always runs, as translate() does."""
        return len(requests) == 1 or decoding_bytes(self.config, requests) <= PASS_BUDGET_BYTES

    def _padded(self, rows: list[list[int]], device: torch.device) -> torch.Tensor:
        """(batch, longest) ids, each row followed by padding."""
        longest = max(len(row) for row in rows)
        return torch.tensor([row + [self.config.pad_id] * (longest - len(row)) for row in rows], device=device)

    def output_limit(self, src_len: int) -> int:
        """The sequence length decoding stops at by default: decoding.output_limit of the input's length; a
        decoder-only model's prompt continued by CONTINUATION_TOKENS."""
        if self.config.stacks == "decoder-only":
            return src_len + CONTINUATION_TOKENS
        return output_limit(src_len)

    def _input_warnings(self, read: InputText, ids: list[int], cut: int) -> list[str]:
        """What the user should know about the input before trusting the output: cut off, longer than anything
        trained on, years outside the training range, words never seen, pieces the vocabulary lacks."""
        warnings = []
        # Lengths in pieces, as typed; max_len counts tokens, the pieces and the </s> after them (the source axis).
        pieces, around = self.input_room()
        reads = f"at most {pieces} pieces (max_len {self.config.max_len} tokens {around})"
        if self.pass_len < self.config.max_len:  # the memory budget, not the model, sets the limit
            reads = (f"at most {self.pass_len - 1} pieces here: a pass over more would record more attention "
                     f"({self.config.num_encoder_layers} + {self.config.num_decoder_layers} layers x "
                     f"{self.config.num_heads} heads x length²) than this server allows")
        if read.cut_off:
            limit = self.config.max_len * MAX_CHARS_PER_TOKEN
            warnings.append(f"The input is longer than this model reads ({reads}): the characters after the first "
                            f"{limit:,} were cut off.")
        elif cut:
            warnings.append(f"The input is {len(ids) - 1 + cut} pieces long but this model reads {reads}: the last "
                            f"{cut} were cut off.")
        longest = self.card.training.get("longest_source_tokens")
        if type(longest) is int and len(ids) - 1 > longest:
            seen = (f"than any sentence of its training corpus (at most {longest} pieces; its longer training inputs "
                    "were those sentences joined)" if any(self.card.training.get(setting) for setting in JOINED_PAIRS)
                    else f"than anything this model trained on (at most {longest} pieces)")
            warnings.append(f"The input is {len(ids) - 1} pieces long, longer {seen}: expect dropped or invented "
                            "words.")
        warnings += input_warnings(self.card.task, read.normalized)
        unseen = self.unseen_words(read)
        if unseen:
            named = ", ".join(f"“{word}”" for word in unseen[:MAX_UNSEEN_NAMED])
            more = f" and {len(unseen) - MAX_UNSEEN_NAMED} more" if len(unseen) > MAX_UNSEEN_NAMED else ""
            warnings.append(f"Never in this model's training data: {named}{more}. It can only guess "
                            f"{'this word' if len(unseen) == 1 else 'these words'} from the pieces, so expect an "
                            "invented or missing word there.")
        unknown = ids.count(self.src_tokenizer.unk_id)
        if unknown:
            warnings.append(
                f"{unknown} piece(s) of the input are unknown to this model's vocabulary and shown as <unk>.")
        return warnings

    def _decode(self, model: Transformer, src: torch.Tensor, beam_size: int, limits: list[int]) -> list[list[int]]:
        """The decoded sequence (BOS first) of each row of src (batch, src_len), as the card's decoding settings say,
        each stopped at its own limit, without trailing padding."""
        decoding = self.card.decoding
        decoded = within_memory(lambda: greedy(model, src, limits) if beam_size == 1 else beam_search(
            model, src, beam_size, limits, decoding.get("length_penalty", 0.6),
            coverage_penalty=decoding.get("coverage_penalty", 0.0)))
        lengths = decoder_lengths(decoded, self.config.pad_id).tolist()
        return [row[:length] for row, length in zip(decoded.tolist(), lengths)]

    def _unended_warning(self, src_len: int, sequence_len: int, limit: int, default_limit: bool) -> str:
        """Why the output has no </s>: where decoding stopped it."""
        where = (f"twice the input's length plus 10 tokens (the input: {src_len} tokens with </s>)"
                 if default_limit and limit < self.pass_len else
                 f"max_len ({min(limit, self.config.max_len)} tokens with <s>)")
        return f"The model did not end its output: decoding stopped it after {sequence_len - 1} pieces, at {where}."

    def _explained(self, model: Transformer, request: Request, sequence: list[int], warnings: list[str]
                   ) -> Translation:
        """The Translation of a decoded sequence: one captured forward pass over (source, decoder input), the
        probability of each generated piece, and every token list the views label."""
        decoder_input = sequence[:-1]  # the last token (EOS, or where max_len stopped) is never fed back
        ids = request.ids
        src = torch.tensor([ids], device=model_device(model))

        def captured() -> tuple[torch.Tensor, AttentionRecord]:
            with torch.no_grad(), capture(model) as record:
                return model(src, src.new_tensor([decoder_input])).softmax(dim=-1)[0].cpu(), record  # (tgt_len, vocab)

        probs, record = within_memory(captured)
        if not bool(torch.isfinite(probs).all()):
            first = next((key for key in record if not bool(torch.isfinite(record[key]).all())), None)
            raise ValueError("This model's output is not a number (NaN or infinity) on this input: its weights are "
                             "finite, but what the layers compute from them overflows"
                             + (f" (first in {first})" if first else "") + ". The checkpoint itself is broken.")
        generated = sequence[1:]
        src_pieces = self.src_tokenizer.pieces(ids)
        # A decoder-only model's output is its continuation of the prompt (`generated` also holds, at each prompt
        # position, the prompt's next token: the next-token prediction the views show).
        continuation = sequence[len(ids):] if self.config.stacks == "decoder-only" else generated
        return Translation(
            text=self.tgt_tokenizer.decode(continuation),
            src_tokens=src_pieces,
            src_typed=self._typed(request.read, ids, src_pieces),
            tgt_tokens=self.tgt_tokenizer.pieces(decoder_input),
            output_tokens=self.tgt_tokenizer.pieces(generated),
            output_ids=generated,
            probs=[float(probs[i, token]) for i, token in enumerate(generated)],
            attention=record.cpu(),
            src_ids=ids,
            tgt_ids=decoder_input,
            warnings=warnings,
        )

    def _typed(self, read: InputText, ids: list[int], src_pieces: list[str]) -> list[str]:
        """The source pieces as typed (an <unk> shows its text); a converted tokenizer's pieces are its own."""
        if isinstance(self.src_tokenizer, JsonTokenizer):
            return src_pieces
        typed = self.src_tokenizer.encode_pieces(read.read)
        return typed[: len(ids) - 1] + src_pieces[-1:]

    def _filled(self, model: Transformer, src: torch.Tensor, read: InputText, warnings: list[str]) -> Translation:
        """An encoder-only model's masked-token prediction: one captured pass, the most likely token at every
        position, and the input with each mask token replaced by its prediction."""
        def captured() -> tuple[torch.Tensor, AttentionRecord]:
            with torch.no_grad(), capture(model) as record:
                return model(src).softmax(dim=-1)[0].cpu(), record  # (src_len, vocab)

        probs, record = within_memory(captured)
        ids = src[0].tolist()
        best = probs.argmax(dim=-1).tolist()
        masks = {self.src_tokenizer.token_id(piece) for piece in MASK_PIECES} - {None}
        if not masks & set(ids):
            warnings.append("This model predicts masked tokens: put a mask token (such as [MASK]) where a word is "
                            "missing, e.g. “Paris is the [MASK] of France.”")
        src_pieces = self.src_tokenizer.pieces(ids)
        return Translation(
            text=self.src_tokenizer.decode([b if i in masks else i for i, b in zip(ids, best)]),
            src_tokens=src_pieces, src_typed=self._typed(read, ids, src_pieces), tgt_tokens=[],
            output_tokens=self.src_tokenizer.pieces(best), output_ids=best,
            probs=[float(probs[i, token]) for i, token in enumerate(best)], attention=record.cpu(), src_ids=ids,
            tgt_ids=[], warnings=warnings)


class OutOfMemory(ValueError):
    """The model ran out of memory on an input; the message is for the user."""

    def __init__(self, failed: str) -> None:
        super().__init__(f"This server ran out of memory running the model on this input ({failed}): try a shorter "
                         "input.")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is running out of memory: MemoryError, torch.OutOfMemoryError, or the CPU allocator's
    RuntimeError."""
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "allocate" in str(error))


def within_memory(call: Callable[[], T]) -> T:
    """call(), with running out of memory turned into OutOfMemory. It is raised once the failed call's exception is
    gone (no __context__), so that the tensors its frames held are freed at once."""
    try:
        return call()
    except (MemoryError, RuntimeError) as error:  # torch.OutOfMemoryError is a RuntimeError
        if not is_out_of_memory(error):
            raise
        failed = type(error).__name__
    raise OutOfMemory(failed)


def load_checkpoint(path: str | Path) -> Checkpoint:
    return Checkpoint(path)


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
    """Every check `Checkpoint` makes except reading the tensors: config, card, tokenizers, word list, and the weights
    file's kind, size and zip structure. Cheap (no weights are read); CheckpointError naming what is wrong."""
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
    max_bytes = 4 * sum(tensor.numel() for tensor in expected.values()) + WEIGHTS_OVERHEAD_BYTES
    with open_regular(path / WEIGHTS_FILE, path, max_bytes) as file:
        check_torch_zip(file, path / WEIGHTS_FILE, max_members=2 * len(expected) + 16)


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


def check_replaceable(path: Path, replace: bool, source: Path | None = None) -> None:
    """CheckpointError unless writing the checkpoint `path` replaces nothing, or `replace` allows it: nothing there
    and an empty folder are fine; a folder with files in it needs `replace`; anything else (a file, a symlink) is
    never replaced. Whatever `replace` says, `path` may not be the folder the command runs in or hold it, nor be,
    hold or lie inside the folder `source` the checkpoint is made from: replacing it would delete what is read."""
    target = Path(path).resolve()
    if Path.cwd().is_relative_to(target):
        raise CheckpointError(f"{path}: is the folder this command runs in, or holds it; nothing was written. Name a "
                              "new folder for the checkpoint")
    if source is not None:
        origin = Path(source).resolve()
        relation = ("is" if target == origin else "lies inside" if target.is_relative_to(origin)
                    else "holds" if origin.is_relative_to(target) else "")
        if relation:
            raise CheckpointError(f"{path}: {relation} the folder {source} it would be made from; nothing was "
                                  "written. Name another folder for the checkpoint")
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
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f".{path.name}.lock"
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise CheckpointError(f"{path}: another process is writing this checkpoint (it holds {lock}); nothing was "
                              "written") from None
    try:
        replaced = staging_folder(path, "replaced")
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
    save_atomically(lambda temporary: torch.save(model.state_dict(), temporary), path / WEIGHTS_FILE)
    for tokenizer, file in ((src_tokenizer, SRC_TOKENIZER_FILE), (tgt_tokenizer, TGT_TOKENIZER_FILE)):
        if tokenizer.path.resolve() != (path / file).resolve():
            (path / file).write_bytes(tokenizer.path.read_bytes())
    card.save(path / CARD_FILE)
