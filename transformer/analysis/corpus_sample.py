"""A checkpoint's own sample of its corpus, shipped in its folder, so that a corpus view works where the corpus is not
on the machine (a fresh clone has no ../shared/data).

    python -m transformer.corpus sample checkpoints/eng-fra          # the first 1,000 pairs of its dev split
    pairs = read_sample(checkpoint)                                  # those pairs, if they are for these weights

SAMPLE_FILE (JSON) holds the first pairs of what corpus_heads.corpus_pairs reads from the card's corpus (a translation
checkpoint's dev split, a language model's held-out sentences: never a sentence it trained on), the card's credit for
that corpus, and the SHA-256 of the weights file it was written for. A sample is used only with those weights: other
weights may have trained on another split, so a sample of theirs is refused (and `sample` writes it anew). Where the
corpus is on the machine it is read instead, and the sample is its first pairs: the same summary either way. A
synthetic task needs no sample: its generator makes fresh inputs.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..io.checkpoint import WEIGHTS_FILE, LoadedCheckpoint, weights_file
from ..io.safety import CheckpointError, open_regular, read_json

SAMPLE_FILE = "corpus_sample.json"
MAX_SAMPLE_PAIRS = 1000  # the most a corpus view reads; a few tens of KB of short sentences
MAX_SAMPLE_BYTES = 1024 * 1024
MAX_TEXT_CHARS = 2000  # one side of a pair
HASH_CHUNK_BYTES = 2**20


def weights_sha256(checkpoint: LoadedCheckpoint) -> str:
    """The SHA-256 of the checkpoint's weights file, as `sha256sum` prints it: what a sample is written for."""
    path = weights_file(checkpoint.path / WEIGHTS_FILE)
    digest = hashlib.sha256()
    with open_regular(path, checkpoint.path, path.lstat().st_size) as file:
        while chunk := file.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def sample_path(checkpoint: LoadedCheckpoint) -> Path:
    return checkpoint.path / SAMPLE_FILE


def read_sample(checkpoint: LoadedCheckpoint) -> list[tuple[str, str]] | None:
    """The sample's pairs; None if the folder has none. CheckpointError, naming the file, if it cannot be read under
    the loading policy, is malformed, or was written for other weights."""
    path = sample_path(checkpoint)
    if not os.path.lexists(path):
        return None
    document = read_json(path, checkpoint.path, MAX_SAMPLE_BYTES)
    pairs = document.get("pairs") if isinstance(document, dict) else None
    if not (isinstance(pairs, list) and 0 < len(pairs) <= MAX_SAMPLE_PAIRS and all(
            isinstance(pair, list) and len(pair) == 2
            and all(isinstance(text, str) and len(text) <= MAX_TEXT_CHARS for text in pair) for pair in pairs)):
        raise CheckpointError(f"{path}: not a list of 1 to {MAX_SAMPLE_PAIRS} pairs of texts")
    if document.get("weights_sha256") != weights_sha256(checkpoint):
        raise CheckpointError(f"{path}: written for other weights than this folder's (python -m transformer.corpus "
                              f"sample {checkpoint.path} writes it anew where the corpus is)")
    return [(source, target) for source, target in pairs]


def write_sample(checkpoint: LoadedCheckpoint, pairs: Sequence[tuple[str, str]], what: str) -> Path:
    """Write `pairs` (at most MAX_SAMPLE_PAIRS, the first of the checkpoint's corpus) as its sample, with `what` they
    are, the card's data credit and the weights' SHA-256; atomically (a temporary file renamed into place), replacing
    only an earlier sample."""
    pairs = [list(pair) for pair in pairs[:MAX_SAMPLE_PAIRS]]
    if not pairs:
        raise ValueError(f"{checkpoint.name}: no pairs to keep as a sample")
    document = {"about": f"The first {len(pairs)} {what}, for the corpus views where the corpus is not on the machine; "
                         "written by python -m transformer.corpus sample.",
                "credit": checkpoint.card.data, "weights_sha256": weights_sha256(checkpoint), "pairs": pairs}
    head = json.dumps({key: value for key, value in document.items() if key != "pairs"}, ensure_ascii=False,
                      indent=1)[:-2]  # without its closing brace: the pairs follow, one a line
    text = head + ',\n "pairs": [\n' + ",\n".join(json.dumps(pair, ensure_ascii=False) for pair in pairs) + "\n]}\n"
    path = sample_path(checkpoint)
    descriptor, temporary = tempfile.mkstemp(dir=checkpoint.path, prefix=".", suffix=".partial")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, 0o644)  # as the folder's other files: mkstemp's file is its owner's alone
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
