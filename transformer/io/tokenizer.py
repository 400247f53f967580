"""A thin wrapper over a sentencepiece model: train one, load one, encode and decode.

Every model trained here reserves the same four ids, so the rest of the code can use the module
constants (PAD_ID, BOS_ID, ...) without asking the tokenizer.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from .backtracking import SECTIONS, tokenizer_problem
from .safety import PASSED_THROUGH, native

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3  # fixed ids in every model we train
MODEL_TYPES = ("bpe", "unigram", "char")


class Tokenizer:
    """A loaded sentencepiece model; `path` is the .model file it came from."""

    def __init__(self, model_path: str | Path, model_bytes: bytes | None = None):
        """`model_bytes`: the file's content, already read (under the loading policy) by the caller."""
        self.path = Path(model_path)
        if model_bytes is None and not self.path.is_file():
            raise FileNotFoundError(f"no tokenizer model at {self.path}")
        self._sp = spm.SentencePieceProcessor()
        try:
            if model_bytes is None:
                self._sp.load(str(self.path))
            else:
                self._sp.LoadFromSerializedProto(model_bytes)
        except RuntimeError as error:  # sentencepiece reports a corrupt file as a bare RuntimeError
            raise ValueError(f"could not load tokenizer model {self.path}: {error}") from error

    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        model_path: str | Path,
        vocab_size: int,
        *,
        model_type: str = "bpe",
        character_coverage: float = 1.0,
        add_dummy_prefix: bool = True,
        seed: int = 0,
        num_threads: int = 1,
    ) -> Tokenizer:
        """Train a model on `sentences`, write it to exactly `model_path`, and return it loaded.

        `vocab_size` is an upper bound: a corpus too small for it (always the case for a "char"
        model asked for more pieces than it has characters) gets a smaller vocabulary instead of
        an error. Training is deterministic for the same sentences, settings and seed.
        Pass add_dummy_prefix=False for character tasks, so that "abc" becomes exactly a, b, c
        rather than ▁a, b, c.
        """
        if model_type not in MODEL_TYPES:
            raise ValueError(f"unknown model_type {model_type!r}; expected one of {MODEL_TYPES}")
        spm.set_random_generator_seed(seed)
        model_bytes = io.BytesIO()  # written in memory, so no .vocab file ever lands on disk
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model_bytes,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            add_dummy_prefix=add_dummy_prefix,
            hard_vocab_limit=False,
            pad_id=PAD_ID, pad_piece="<pad>",
            unk_id=UNK_ID, unk_piece="<unk>",
            bos_id=BOS_ID, bos_piece="<s>",
            eos_id=EOS_ID, eos_piece="</s>",
            num_threads=num_threads,  # the machines we share have few cores
            minloglevel=2,  # warnings and errors only: training otherwise logs hundreds of lines
        )
        model_path = Path(model_path)
        model_path.parent.mkdir(parents=True, exist_ok=True)
        model_path.write_bytes(model_bytes.getvalue())
        return cls(model_path)

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def unk_id(self) -> int:
        return self._sp.unk_id()

    @native
    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without BOS/EOS; unknown characters become UNK_ID."""
        return self._sp.encode(text)

    @native
    def encode_pieces(self, text: str) -> list[str]:
        """The pieces `encode` would produce (unknown characters show as themselves, not <unk>)."""
        return self._sp.encode_as_pieces(text)

    @native
    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; pad, bos and eos ids are dropped."""
        return self._sp.decode([int(i) for i in ids])

    @native
    def id_to_piece(self, i: int) -> str:
        """The piece of one id: "<pad>", "<unk>", "<s>", "</s>" for the four special ids."""
        return self._sp.id_to_piece(int(i))

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The piece of each id, e.g. to label the axes of an attention map."""
        return [self.id_to_piece(i) for i in ids]

    def __repr__(self) -> str:
        return f"Tokenizer({str(self.path)!r}, vocab_size={self.vocab_size})"


class VocabTokenizer(Tokenizer):
    """A sentencepiece model whose pieces are numbered by a separate piece -> id vocabulary (a JSON object), as in
    Marian / opus-mt models: their model ids are not the sentencepiece ids. Encoding and decoding follow transformers'
    MarianTokenizer: pieces missing from the vocabulary become <unk>, a leading language code such as ">>fra<<" is one
    token, and text goes to sentencepiece as it is (sentencepiece normalises it itself)."""

    SPECIAL_PIECES = ("<unk>", "</s>", "<pad>")  # left out of decoded text, as MarianTokenizer's skip_special_tokens

    def __init__(self, model_path: str | Path, vocab_path: str | Path, model_bytes: bytes | None = None,
                 vocab: object = None):
        """`model_bytes`, `vocab`: the two files' content, already read (under the loading policy) by the caller."""
        super().__init__(model_path, model_bytes)
        self.vocab_path = Path(vocab_path)
        if vocab is None:
            try:
                vocab = json.loads(self.vocab_path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise ValueError(f"{self.vocab_path}: not valid JSON ({error})") from None
        if not isinstance(vocab, dict) or not all(type(i) is int for i in vocab.values()):
            raise ValueError(f"{self.vocab_path}: expected a JSON object of piece -> integer id")
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError(f"{self.vocab_path}: ids must be 0, 1, ... {len(vocab) - 1}, each once")
        if "<unk>" not in vocab:
            raise ValueError(f"{self.vocab_path}: the vocabulary has no <unk> piece")
        self._ids = vocab
        self._pieces = {i: piece for piece, i in vocab.items()}
        self._special = {vocab[piece] for piece in self.SPECIAL_PIECES if piece in vocab}

    @property
    def vocab_size(self) -> int:
        return len(self._ids)

    @property
    def unk_id(self) -> int:
        return self._ids["<unk>"]

    @native
    def encode_pieces(self, text: str) -> list[str]:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")  # lone surrogates -> U+FFFD
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:  # a target-language code, e.g. ">>fra<< ..."
            code, text = [text[: end + 2]], text[end + 2:]
        return code + self._sp.encode(text, out_type=str)

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(piece, self.unk_id) for piece in self.encode_pieces(text)]

    @native
    def decode(self, ids: Sequence[int]) -> str:
        pieces = [self.id_to_piece(i) for i in ids if int(i) not in self._special]
        return self._sp.decode_pieces(pieces).replace("\u2581", " ").strip()

    def id_to_piece(self, i: int) -> str:
        return self._pieces.get(int(i), "<unk>")

    def __repr__(self) -> str:
        return f"VocabTokenizer({str(self.path)!r}, {str(self.vocab_path)!r}, vocab_size={self.vocab_size})"


def special_tokens(processor: dict) -> list[tuple[str, int | None]]:
    """(token, id) of every special token a tokenizer.json's post-processor adds: a template's (None as the id of one
    it names but does not define, which the library panics on), BERT's and RoBERTa's cls and sep, a sequence's
    processors' in turn."""
    kind = processor.get("type")
    if kind == "Sequence":
        return [pair for inner in processor.get("processors", []) for pair in special_tokens(inner)]
    if kind in ("BertProcessing", "RobertaProcessing"):
        return [(str(processor[side][0]), processor[side][1]) for side in ("cls", "sep")]
    if kind != "TemplateProcessing":
        return []
    defined = processor.get("special_tokens", {})
    pairs = [(token, token_id) for entry in defined.values()
             for token, token_id in zip(entry.get("tokens", []), entry.get("ids", []), strict=False)]
    named = {piece["SpecialToken"]["id"] for template in ("single", "pair") for piece in processor.get(template, [])
             if "SpecialToken" in piece}
    return pairs + [(name, None) for name in sorted(named - set(defined))]


class JsonTokenizer:
    """A tokenizer.json of the `tokenizers` library (what `save_pretrained` writes for GPT-2's and BART's byte-level
    BPE and BERT's WordPiece), with the interface of Tokenizer. `encode` leaves special tokens out, as Tokenizer's
    does; `encode_with_specials` adds what the model expects around a text ([CLS] ... [SEP], <s> ... </s>, nothing
    for GPT-2), from the file's own post-processor. Loading a tokenizer.json runs no code: it is data."""

    def __init__(self, path: str | Path, content: bytes) -> None:
        from tokenizers import Tokenizer as Backend  # the tokenizers package, imported only for these folders
        from tokenizers import decoders

        self.path = Path(path)
        try:  # a malformed file: the library's own exception type, or a panic (a BaseException)
            self._backend = Backend.from_str(content.decode("utf-8"))
            processor = self._backend.post_processor
            specials = special_tokens(json.loads(processor.__getstate__())) if processor is not None else []
            parts = {key: json.loads(part.__getstate__()) for key in SECTIONS
                     if (part := getattr(self._backend, key)) is not None}
        except PASSED_THROUGH:
            raise
        except BaseException as error:
            raise ValueError(f"not a tokenizer the tokenizers library reads ({error})") from None
        if problem := tokenizer_problem(parts):
            raise ValueError(problem)
        size = self.vocab_size
        for token, token_id in specials:  # what the post-processor adds must be tokens of this vocabulary
            found = self._backend.token_to_id(token)
            if token_id is None:
                raise ValueError(f"the post-processor's template adds {token!r} but does not define it")
            if not isinstance(token_id, int) or not 0 <= token_id < size:
                raise ValueError(f"the post-processor adds {token!r} as id {token_id!r:.20}, outside the "
                                 f"vocabulary's {size:,} tokens")
            if found != token_id:
                raise ValueError(f"the post-processor adds {token!r} as id {token_id}, which is " + (
                    "not in the vocabulary" if found is None else f"id {found} in the vocabulary"))
        self._byte_level = isinstance(self._backend.decoder, decoders.ByteLevel)
        self._added = set(self._backend.get_added_tokens_decoder())  # special tokens: shown as they are

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def unk_id(self) -> int | None:
        unknown = getattr(self._backend.model, "unk_token", None)
        return None if unknown is None else self._backend.token_to_id(unknown)

    def _encoding(self, text: str, add_special_tokens: bool):
        """The library's encoding of `text`. encode_batch, not encode: it lets go of the interpreter's lock while its
        native code runs, so a long encode (a regex at the bound backtracking.py allows) holds up no other session."""
        return self._backend.encode_batch([text], add_special_tokens=add_special_tokens)[0]

    @native
    def encode(self, text: str) -> list[int]:
        return self._encoding(text, add_special_tokens=False).ids

    @native
    def encode_with_specials(self, text: str) -> list[int]:
        return self._encoding(text, add_special_tokens=True).ids

    @native
    def encode_pieces(self, text: str) -> list[str]:
        return self._encoding(text, add_special_tokens=False).tokens

    @native
    def decode(self, ids: Sequence[int]) -> str:
        return self._backend.decode([int(i) for i in ids], skip_special_tokens=True)

    @native
    def id_to_piece(self, i: int) -> str:
        """The token as text: a byte-level BPE token's bytes decoded (GPT-2's "Ġis" is "▁is", a leading space shown
        as sentencepiece shows it; a part of a character is "�"); other tokens ([CLS], "##ing") as they are. Only
        for showing: `token_id` takes the tokenizer's own token."""
        token = self._backend.id_to_token(int(i)) or ""
        if self._byte_level and int(i) not in self._added:
            text = self._backend.decoder.decode([token]).replace(" ", "\u2581")
            return text if text.isprintable() else token  # a newline or tab stays "Ċ", "ĉ": a label on one line
        return token

    @native
    def token_id(self, piece: str) -> int | None:
        return self._backend.token_to_id(piece)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.id_to_piece(i) for i in ids]

    def __repr__(self) -> str:
        return f"JsonTokenizer({str(self.path)!r}, vocab_size={self.vocab_size})"
