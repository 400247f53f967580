"""What the sessions type (--inputs).

letters (the default): random lowercase letters and digits, what the `reverse` task reads; on a translation
checkpoint the worst case, as the output of such noise runs on to max_len and every pass is as long as it gets.
typed: what people type, the checkpoint's own evaluation inputs (a translation corpus's dev split, fresh examples of
a synthetic task), shuffled, each typed by one session only.
"""
from __future__ import annotations

import random
import string
from pathlib import Path

from transformer import load_checkpoint
from transformer.training.evaluate import evaluation_cases

INPUT_KINDS = ("letters", "typed")
INPUT_CHARACTERS = string.ascii_lowercase + string.digits
INPUT_LENGTHS = range(10, 25)
# At 10 characters or more, no page holds a given input by chance, so finding another session's there is a leak.
MIN_INPUT_CHARS = INPUT_LENGTHS.start
TYPED_POOL = 3000  # typed inputs drawn for one load: more than 20 sessions type in a few minutes


def random_input(rng: random.Random) -> str:
    return "".join(rng.choices(INPUT_CHARACTERS, k=rng.choice(INPUT_LENGTHS)))


def typed_inputs(checkpoint_path: Path, seed: int) -> list[str]:
    """TYPED_POOL of the checkpoint's evaluation inputs, shuffled: at least MIN_INPUT_CHARS long, none inside
    another (so that finding one in a page says which session typed it)."""
    sources = sorted({source for _, source, _ in evaluation_cases(load_checkpoint(checkpoint_path), per_case=200)
                      if len(source) >= MIN_INPUT_CHARS})
    random.Random(seed).shuffle(sources)
    return none_inside_another(sources[:TYPED_POOL])


def none_inside_another(texts: list[str]) -> list[str]:
    """`texts` without those found inside another one (in order)."""
    return [text for text in texts if not any(text in other for other in texts if other != text)]


class Inputs:
    """What every client types next: random letters, or the typed pool, each of its inputs handed out once."""

    def __init__(self, kind: str, checkpoint_path: Path | None = None, seed: int = 0):
        if kind not in INPUT_KINDS:
            raise ValueError(f"inputs must be one of {INPUT_KINDS}, got {kind!r}")
        self.kind = kind
        self.pool = typed_inputs(checkpoint_path, seed) if kind == "typed" else []

    def next(self, rng: random.Random) -> str:
        if self.kind == "letters":
            return random_input(rng)
        if not self.pool:
            raise RuntimeError(f"the load typed all {TYPED_POOL} inputs of its pool: run it shorter")
        return self.pool.pop()
