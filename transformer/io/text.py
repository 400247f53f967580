"""Text as a model reads it: normalised once where it enters, bounded in length, split into words (the
unseen-word warning), and turned into the ids of an encoder input, a prompt or a target."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from .tokenizer import BOS_ID, EOS_ID, JsonTokenizer, Tokenizer, VocabTokenizer

# Input beyond this many characters per token of max_len is never read: NFKC is quadratic in a run of combining
# marks (1,000,000 of them: over a minute). No piece of our vocabularies is near 32 characters long, and the app's
# 1,000 characters always fit.
MAX_CHARS_PER_TOKEN = 32
_WHITESPACE_RUN = re.compile(r"\s+")

# Apostrophe look-alikes, so that "don’t" and "don't" are one word to the tokenizer.
_APOSTROPHES = str.maketrans({c: "'" for c in "\u2019\u2018\u02bc\u2032`"})  # ’ ‘ ʼ ′ `


def normalize(text: str) -> str:
    """NFKC, apostrophe variants folded to ', runs of whitespace collapsed to one space, stripped.

    NFKC also turns the narrow no-break spaces before French punctuation into plain spaces,
    and ligatures such as "ﬁ" into "fi". A lone surrogate (half of a UTF-16 pair: not valid
    Unicode, and sentencepiece cannot take it) becomes U+FFFD, as a browser would send it.
    """
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)
    return " ".join(text.split())


# A word, for telling which words of an input the training data never had: a run of letters ("didn't" is "didn" and
# "t"), so that the word list cannot hold anything but letters and a warning quoting it cannot carry markup.
_WORD = re.compile(r"[^\W\d_]+")


def words(text: str) -> list[str]:
    """The lower-cased runs of letters in normalised `text` (see normalize), in order, repeats included."""
    return _WORD.findall(text.lower())


def bounded(text: str, max_len: int) -> tuple[str, bool]:
    """The part of `text` that can fill `max_len` tokens, so that no input costs more than that to normalise:
    whitespace runs collapsed to one space (in the first 64 x the limit), then at most max_len * MAX_CHARS_PER_TOKEN
    characters. Also returns whether anything but whitespace was left out."""
    limit = max_len * MAX_CHARS_PER_TOKEN
    window = text[: 64 * limit]
    collapsed = _WHITESPACE_RUN.sub(" ", window).strip()
    return collapsed[:limit], len(collapsed) > limit or len(window) < len(text)


@dataclass(frozen=True)
class InputText:
    """A text as a model of some max_len reads it, made once where the text enters (read_input): what the rest of
    the way to the model takes instead of the text. `read` is what the tokenizer reads: the part `bounded` keeps,
    normalised as our models were trained; a converted model's tokenizer reads it as its own library does (see
    VocabTokenizer)."""

    read: str
    normalized: str  # the part `bounded` keeps, normalised (`read` itself for our models): its words, its emptiness
    cut_off: bool  # whether characters past max_len * MAX_CHARS_PER_TOKEN were left out


def read_input(tokenizer: Tokenizer, text: str, max_len: int) -> InputText:
    """`text` as `tokenizer` reads it for a model of `max_len` tokens, bounded and normalised once."""
    kept, cut_off = bounded(text, max_len)
    normalized = normalize(kept)
    # Marian's and converted models' tokenizers normalise the text themselves, as in transformers.
    return InputText(kept if isinstance(tokenizer, (VocabTokenizer, JsonTokenizer)) else normalized, normalized,
                     cut_off)


def input_ids(tokenizer: Tokenizer, text: InputText, max_len: int, eos_id: int = EOS_ID) -> tuple[list[int], int]:
    """The encoder's input for a read text: its pieces + EOS, at most `max_len` ids.
    Returns (ids, how many pieces were cut off the end to fit, counted in the part `bounded` keeps)."""
    ids = tokenizer.encode(text.read)
    kept = ids[: max_len - 1]
    return kept + [eos_id], len(ids) - len(kept)


def prompt_ids(tokenizer: Tokenizer, text: InputText, max_len: int, bos_id: int = BOS_ID) -> tuple[list[int], int]:
    """A language model's prompt for a read text: BOS + its pieces, at most `max_len` - 1 ids so that one token at
    least can follow. Returns (ids, how many pieces were cut off the end to fit)."""
    ids = tokenizer.encode(text.read)
    kept = ids[: max_len - 2]
    return [bos_id] + kept, len(ids) - len(kept)


def source_ids(tokenizer: Tokenizer, text: str, max_len: int, eos_id: int = EOS_ID) -> tuple[list[int], int]:
    """The encoder's input for `text`: normalised pieces + EOS, at most `max_len` ids (see input_ids)."""
    return input_ids(tokenizer, read_input(tokenizer, text, max_len), max_len, eos_id)


def target_ids(tokenizer: Tokenizer, text: str, max_len: int, bos_id: int = BOS_ID, eos_id: int = EOS_ID
               ) -> list[int]:
    """The full decoder sequence for `text`: BOS + pieces + EOS, at most `max_len` ids.

    Decoder input = [:-1], labels = [1:]."""
    return [bos_id] + tokenizer.encode(read_input(tokenizer, text, max_len).read)[: max_len - 2] + [eos_id]
