"""A checkpoint is a folder: config.json, model.pt, src.model / tgt.model (sentencepiece), card.json, snapshots/.

Loading never runs code from the folder: weights are read with `torch.load(..., weights_only=True)`, which refuses
any pickle that would build something other than tensors. Every problem with a file raises `CheckpointError`
naming that file. A folder of checkpoints is listed with `checkpoint_folders`, and a name from a user (a link, a
picker) becomes a path only through `resolve_checkpoint`, which never leads outside that folder.
"""
from __future__ import annotations

import json
import pickle
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from .capture import capture
from .config import TransformerConfig
from .data import normalize, source_ids, target_ids
from .decoding import beam_search, greedy
from .device import atlas_device, model_device
from .model import Transformer
from .record import AttentionRecord
from .tokenizer import UNK_ID, Tokenizer

CONFIG_FILE, WEIGHTS_FILE, CARD_FILE = "config.json", "model.pt", "card.json"
SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE = "src.model", "tgt.model"
SNAPSHOT_DIR = "snapshots"
_SNAPSHOT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class CheckpointError(Exception):
    """A checkpoint folder or one of its files is missing, broken or unsafe; the message names the file."""


@dataclass
class ModelCard:
    """What a user should know about a checkpoint; saved as card.json."""

    name: str  # folder name, e.g. "eng-fra"
    task: str  # "reverse", "dates" or "translate"
    description: str  # one paragraph for the app's sidebar
    data: str  # where the training data came from, with its licence and credit
    metrics: dict[str, float] = field(default_factory=dict)  # e.g. {"exact_match": 0.998} or {"bleu": 41.2}
    examples: list[str] = field(default_factory=list)  # inputs that demo well
    training_command: str = ""  # the exact command that trained it
    wall_time_s: float = 0.0  # how long training took
    machine: str = ""  # what it was trained on
    parameters: int = 0  # number of trainable parameters
    history: list[dict] = field(default_factory=list)  # loss curve: {"step", "train_loss", "dev_loss", "dev_metric", ...}
    snapshots: list[dict] = field(default_factory=list)  # earlier states: {"name", "step", "fraction", "dev_metric"}
    training: dict = field(default_factory=dict)  # options needed to rebuild the data and its dev split

    @classmethod
    def from_dict(cls, values: object, source: str = CARD_FILE) -> ModelCard:
        if not isinstance(values, dict):
            raise CheckpointError(f"{source}: expected a JSON object")
        expected = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(values) - set(expected))
        if unknown:
            raise CheckpointError(f"{source}: unknown field(s) {', '.join(unknown)}")
        types = {"str": str, "float": (int, float), "int": int, "dict": dict, "list": list}
        for name, value in values.items():
            wanted = types[expected[name].split("[")[0]]
            if not isinstance(value, wanted) or isinstance(value, bool):
                raise CheckpointError(f"{source}: field {name!r} should be {expected[name]}, got {type(value).__name__}")
        card = cls(**values)
        if not all(isinstance(v, (int, float)) for v in card.metrics.values()):
            raise CheckpointError(f"{source}: every metric must be a number")
        if not all(isinstance(v, str) for v in card.examples):
            raise CheckpointError(f"{source}: examples must be strings")
        if not all(isinstance(s, dict) and _SNAPSHOT_NAME.match(str(s.get("name", ""))) for s in card.snapshots):
            raise CheckpointError(f"{source}: each snapshot needs a plain 'name' (letters, digits, '.', '_', '-')")
        return card

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


@dataclass
class Translation:
    """One input translated, with what the views need to explain it."""

    text: str  # the output, detokenised
    src_tokens: list[str]  # pieces fed to the encoder (ending with </s>)
    tgt_tokens: list[str]  # decoder input pieces, starting with <s>: the query rows of decoder attention
    output_tokens: list[str]  # the pieces generated, one per decoder input position (ending with </s> if reached)
    output_ids: list[int]  # their ids: the labels the decoder input's positions predict
    probs: list[float]  # probability of each generated piece
    attention: AttentionRecord  # one captured forward pass over (source, decoder input)
    src_ids: list[int]
    tgt_ids: list[int]  # decoder input ids
    warnings: list[str] = field(default_factory=list)


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """A state_dict of tensors from `path`, converted to fp32; pickles that would build anything else are refused."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file is missing") from None
    except pickle.UnpicklingError as error:
        raise CheckpointError(f"{path}: refused to load, it holds more than tensors ({error})") from None
    except Exception as error:  # truncated or not a torch file at all
        raise CheckpointError(f"{path}: not a readable weights file ({type(error).__name__}: {error})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: expected a state_dict (a dict of tensors)")
    return {name: tensor.float() if tensor.is_floating_point() else tensor for name, tensor in state.items()}


def build_model(config: TransformerConfig, state: dict[str, torch.Tensor], source: Path) -> Transformer:
    model = Transformer(config)
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        first_line = str(error).splitlines()[1:2] or [str(error)]
        raise CheckpointError(f"{source} does not match {CONFIG_FILE}: {first_line[0].strip()}") from None
    return model.eval().to(atlas_device())


class Checkpoint:
    """A loaded checkpoint folder: `.model` (eval mode; never mutated), `.config`, `.card`, the two tokenizers."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise CheckpointError(f"{self.path}: no such checkpoint folder")
        self.config = self._read_config()
        self.card = self._read_card()
        self.src_tokenizer = self._read_tokenizer(SRC_TOKENIZER_FILE, self.config.src_vocab_size)
        self.tgt_tokenizer = self._read_tokenizer(TGT_TOKENIZER_FILE, self.config.tgt_vocab_size)
        self.model = build_model(self.config, load_weights(self.path / WEIGHTS_FILE), self.path / WEIGHTS_FILE)

    @property
    def name(self) -> str:
        return self.path.name

    def _read_json(self, file: str) -> object:
        path = self.path / file
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckpointError(f"{path}: file is missing") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointError(f"{path}: not valid JSON ({error})") from None

    def _read_config(self) -> TransformerConfig:
        try:
            return TransformerConfig.from_dict(self._read_json(CONFIG_FILE))
        except (TypeError, ValueError) as error:
            raise CheckpointError(f"{self.path / CONFIG_FILE}: {error}") from None

    def _read_card(self) -> ModelCard:
        return ModelCard.from_dict(self._read_json(CARD_FILE), str(self.path / CARD_FILE))

    def _read_tokenizer(self, file: str, vocab_size: int) -> Tokenizer:
        try:
            tokenizer = Tokenizer(self.path / file)
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{self.path / file}: {error}") from None
        if tokenizer.vocab_size != vocab_size:
            raise CheckpointError(
                f"{self.path / file}: vocabulary of {tokenizer.vocab_size} pieces, but {CONFIG_FILE} says {vocab_size}"
            )
        return tokenizer

    def snapshot_names(self) -> list[str]:
        return [snapshot["name"] for snapshot in self.card.snapshots]

    def load_snapshot(self, name: str) -> Transformer:
        """The model as it was at an earlier point of training (a name from `snapshot_names()`), in eval mode."""
        if name not in self.snapshot_names():
            raise CheckpointError(f"{self.path / CARD_FILE}: no snapshot named {name!r}")
        path = self.path / SNAPSHOT_DIR / f"{name}.pt"
        return build_model(self.config, load_weights(path), path)

    def _source(self, text: str) -> tuple[list[int], int]:
        """The encoder's ids for `text` and how many pieces were cut off to fit max_len; ValueError (a message for
        the user) when nothing of it is left to read."""
        ids, cut = source_ids(self.src_tokenizer, _checked(text), self.config.max_len)
        if len(ids) == 1:  # EOS alone: the tokenizer dropped every character (zero-width, byte-order mark, U+FFFD)
            raise ValueError("The input has no characters this model reads, only invisible or formatting ones: "
                             "type a sentence.")
        return ids, cut

    def encode(self, text: str, side: str = "src") -> list[int]:
        """Ids exactly as the model sees them: source = pieces + EOS; target = BOS + pieces + EOS."""
        if side == "src":
            return self._source(text)[0]
        if side == "tgt":
            return target_ids(self.tgt_tokenizer, _checked(text), self.config.max_len)
        raise ValueError(f"side must be 'src' or 'tgt', got {side!r}")

    def translate(self, text: str, beam_size: int = 1, max_len: int | None = None, model: Transformer | None = None) -> Translation:
        """Decode `text` (greedy when beam_size is 1), then capture one forward pass over the result.

        `model` runs another set of weights with this checkpoint's tokenizers (e.g. a training snapshot)."""
        model = model or self.model
        ids, cut = self._source(text)
        warnings = []
        if cut:
            warnings.append(
                f"The input is {len(ids) - 1 + cut} tokens long but this model reads at most {len(ids) - 1}: "
                f"the last {cut} were cut off."
            )
        unknown = ids.count(UNK_ID)
        if unknown:
            warnings.append(f"{unknown} piece(s) of the input are unknown to this model's vocabulary and shown as <unk>.")
        src = torch.tensor([ids], device=model_device(model))
        decoded = greedy(model, src, max_len) if beam_size == 1 else beam_search(model, src, beam_size, max_len)
        sequence = [int(i) for i in decoded[0] if i != self.config.pad_id]
        decoder_input = sequence[:-1]  # the last token (EOS, or where max_len stopped) is never fed back
        with torch.no_grad(), capture(model) as record:
            probs = model(src, src.new_tensor([decoder_input])).softmax(dim=-1)[0].cpu()  # (tgt_len, tgt_vocab)
        generated = sequence[1:]
        src_pieces = self.src_tokenizer.pieces(ids)
        return Translation(
            text=self.tgt_tokenizer.decode(generated),
            src_tokens=src_pieces,
            tgt_tokens=self.tgt_tokenizer.pieces(decoder_input),
            output_tokens=self.tgt_tokenizer.pieces(generated),
            output_ids=generated,
            probs=[float(probs[i, token]) for i, token in enumerate(generated)],
            attention=record.cpu(),
            src_ids=ids,
            tgt_ids=decoder_input,
            warnings=warnings,
        )


def _checked(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if not normalize(text):
        raise ValueError("The input is empty: type a sentence (spaces alone are not enough).")
    return text


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


def save_checkpoint(
    path: str | Path, model: Transformer, card: ModelCard, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer
) -> None:
    """Write a complete checkpoint folder (snapshots are written by the trainer into path/snapshots/)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.config.save(path / CONFIG_FILE)
    torch.save(model.state_dict(), path / WEIGHTS_FILE)
    for tokenizer, file in ((src_tokenizer, SRC_TOKENIZER_FILE), (tgt_tokenizer, TGT_TOKENIZER_FILE)):
        if tokenizer.path.resolve() != (path / file).resolve():
            (path / file).write_bytes(tokenizer.path.read_bytes())
    card.save(path / CARD_FILE)
