"""Word-level attention: sentencepiece pieces merged into words, and row labels that say what each decoder row makes.

A piece starting with "▁" starts a word; any other piece continues the word before it; the special tokens <s>,
</s>, <pad> and <unk> are words of their own (a piece after one starts a new word). Merging a head (q, k) into
words (q_words, k_words):
  keys:    a word's weight is the sum of its pieces' weights, so each row still sums to 1 (what the query gives
           to the word as a whole);
  queries: a word's row is the mean of its pieces' rows (each piece asks on its own; the word asks on average),
           so rows still sum to 1.
A word cell is blocked for a reason only if every piece pair under it is.
"""
import numpy as np
from numpy.typing import ArrayLike

from .conventions import EOS_TOKEN, PAD_TOKEN, Blocked, Tokens, check_blocked

SPECIAL_TOKENS = frozenset({"<s>", EOS_TOKEN, PAD_TOKEN, "<unk>"})
WORD_START = "▁"

PRODUCES_CAPTION = ("Decoder rows read “input → output”: row t holds the piece the decoder has read so far (its "
                    "query) and the piece it produces there, the next one of the output.")


def word_groups(pieces: Tokens) -> list[list[int]]:
    """The piece positions of each word, in order: ["<s>", "▁Il", "▁lis", "ait", "."] -> [[0], [1], [2, 3], [4]].
    "." continues "ait" as it has no "▁"."""
    groups = []
    for position, piece in enumerate(pieces):
        piece = str(piece)
        starts = (not groups or piece in SPECIAL_TOKENS or piece.startswith(WORD_START)
                  or str(pieces[groups[-1][-1]]) in SPECIAL_TOKENS)
        if starts:
            groups.append([position])
        else:
            groups[-1].append(position)
    return groups


def word_labels(pieces: Tokens) -> list[str]:
    """Each word as its pieces joined: ["▁lis", "ait"] -> "▁lisait"."""
    return ["".join(str(pieces[position]) for position in group) for group in word_groups(pieces)]


def _membership(pieces) -> np.ndarray:
    """(pieces, words) one-hot: 1 where the piece belongs to the word."""
    groups = word_groups(pieces)
    membership = np.zeros((len(pieces), len(groups)))
    for word, group in enumerate(groups):
        membership[group, word] = 1.0
    return membership


def merge_words(weights: ArrayLike, q_pieces: Tokens, k_pieces: Tokens) -> tuple[np.ndarray, list[str], list[str]]:
    """Weights (..., q_len, k_len) -> (..., q_words, k_words), with the word labels of both axes.

    Keys are summed over a word's pieces, queries averaged (see the module docstring). Works on one head or on a
    whole stack (layers, heads, q_len, k_len). Returns (merged, q_words, k_words).
    """
    weights = np.asarray(weights, dtype=float)
    if weights.shape[-2:] != (len(q_pieces), len(k_pieces)):
        raise ValueError(f"weights end in {weights.shape[-2:]}, but the pieces give "
                         f"{(len(q_pieces), len(k_pieces))}")
    queries = _membership(q_pieces)
    queries = queries / queries.sum(axis=0, keepdims=True)  # (q_len, q_words): each word's column averages
    merged = np.einsum("qw,...qk,kv->...wv", queries, weights, _membership(k_pieces))  # (..., q_words, k_words)
    return merged, word_labels(q_pieces), word_labels(k_pieces)


def merge_blocked(blocked: Blocked, q_pieces: Tokens, k_pieces: Tokens) -> dict[str, np.ndarray]:
    """`blocked` (reason -> bool (q_len, k_len)) at word level: a word cell is blocked when all its pieces are."""
    blocked = check_blocked(blocked, (len(q_pieces), len(k_pieces)))
    queries, keys = _membership(q_pieces), _membership(k_pieces)
    cells = np.outer(queries.sum(axis=0), keys.sum(axis=0))  # (q_words, k_words): piece pairs under each word cell
    return {reason: queries.T @ mask.astype(float) @ keys == cells for reason, mask in blocked.items()}


def produces_labels(decoder_inputs: Tokens, outputs: Tokens) -> list[str]:
    """Row labels for decoder self- and cross-attention: "<s> → ▁Elle", the piece each row reads and the one it
    produces (row t predicts output t). Rows past the output (padding) keep their input piece alone."""
    return [f"{piece} → {outputs[row]}" if row < len(outputs) else str(piece)
            for row, piece in enumerate(decoder_inputs)]
