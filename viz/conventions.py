"""The data conventions viz shares with the app and the model, and the checks that enforce them.

One head's attention is a float array (q_len, k_len): rows are queries, columns keys. A stack for one attention
kind is (layers, heads, q_len, k_len). Masks reach viz as `blocked`: a dict from a reason name to a bool
(q_len, k_len) array, True where the cell is blocked for that reason (see masks.mask_reasons).
"""
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

# The attention kinds: the model's name of each (its sites' names less the layer, transformer.model.sites), the name
# figures and controls give it, and its marker in maps of heads. The one table of them that viz and the app read.
KIND_TABLE = {"encoder.self_attn": ("encoder self", "circle"),
              "decoder.self_attn": ("decoder self", "square"),
              "decoder.cross_attn": ("cross", "diamond")}
KIND_LABELS = {kind: label for kind, (label, _) in KIND_TABLE.items()}
KIND_SYMBOLS = {kind: symbol for kind, (_, symbol) in KIND_TABLE.items()}
KINDS = tuple(KIND_LABELS.values())  # the keys of viz's tables of several kinds (each_kind)

PAD_TOKEN = "<pad>"
EOS_TOKEN = "</s>"

PADDING = "padding"
CAUSAL = "causal"
SLIDING_WINDOW = "sliding window"  # Mistral's: keys more than the window before the query
PADDED_QUERY = "padded query"
# Reasons that are drawn but are not masks of the model: a padded query's row is computed like any other (its
# weights are not 0); the loss ignores its output, so the figures shade it to say "don't read this row".
INFORMATIONAL = frozenset({PADDED_QUERY})

Tokens = Sequence[str]  # one label per position: tokens, pieces, words
Blocked = Mapping[str, ArrayLike]  # reason -> bool (q_len, k_len) mask, True = blocked (see masks.mask_reasons)


def check_matrix(matrix: ArrayLike, q_tokens: Tokens, k_tokens: Tokens, name: str = "weights") -> np.ndarray:
    """Return `matrix` as a float array after checking it is (len(q_tokens), len(k_tokens))."""
    matrix = np.asarray(matrix, dtype=float)
    expected = (len(q_tokens), len(k_tokens))
    if matrix.shape != expected:
        raise ValueError(f"{name} has shape {matrix.shape}, but the tokens give (queries, keys) = {expected}")
    return matrix


def check_stack(stack: ArrayLike, q_tokens: Tokens, k_tokens: Tokens, name: str = "stack") -> np.ndarray:
    """Return `stack` as a float array after checking it is (layers, heads, len(q_tokens), len(k_tokens))."""
    stack = np.asarray(stack, dtype=float)
    if stack.ndim != 4:
        raise ValueError(f"{name} must be (layers, heads, queries, keys); got shape {stack.shape}")
    check_matrix(stack[0, 0], q_tokens, k_tokens, name=f"{name}[layer, head]")
    return stack


def check_blocked(blocked: Blocked | None, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Return `blocked` (None allowed: nothing blocked) as bool arrays after checking each has `shape`."""
    checked = {}
    for reason, mask in (blocked or {}).items():
        mask = np.asarray(mask)
        if mask.shape != tuple(shape) or mask.dtype != bool:
            raise ValueError(f"blocked[{reason!r}] must be a bool array of shape {tuple(shape)}; "
                             f"got {mask.dtype} {mask.shape}")
        checked[reason] = mask
    return checked


def union(masks: Iterable[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """Cells blocked by any of `masks` (all False when there are none)."""
    combined = np.zeros(shape, dtype=bool)
    for mask in masks:
        combined |= mask
    return combined


def model_mask(blocked: Blocked | None, shape: tuple[int, ...]) -> np.ndarray:
    """Cells the model masks (their weights are exactly 0): every reason except the informational ones."""
    blocked = check_blocked(blocked, shape)
    return union((mask for reason, mask in blocked.items() if reason not in INFORMATIONAL), shape)


def each_kind(stacks: Mapping[str, ArrayLike], q_tokens_by_kind: Mapping[str, Tokens],
              k_tokens_by_kind: Mapping[str, Tokens], blocked_by_kind: Mapping[str, Blocked] | None = None,
              ) -> Iterator[tuple[str, np.ndarray, Tokens, Tokens, np.ndarray]]:
    """Yield (kind, stack, q_tokens, k_tokens, model_mask) for every kind of `stacks`, each checked.

    A key that is not one of KINDS raises ValueError: a typo would otherwise pass silently.
    """
    unknown = sorted(set(stacks) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown attention kinds {unknown}; expected some of {list(KINDS)}")
    for kind, stack in stacks.items():
        q_tokens, k_tokens = q_tokens_by_kind[kind], k_tokens_by_kind[kind]
        stack = check_stack(stack, q_tokens, k_tokens, name=kind)
        yield kind, stack, q_tokens, k_tokens, model_mask((blocked_by_kind or {}).get(kind), stack.shape[2:])
