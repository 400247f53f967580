"""A bounded folder of computed results that survives a restart and is shared by every process pointed at it: the
app's sessions, its other workers, and `python -m transformer.corpus cache` run ahead of time.

Each entry is one safetensors file named by its key (a digest of everything the result depends on): arrays, and a
small JSON value in the file's metadata. An entry is written to a temporary file in the folder, flushed and renamed
into place, so a reader sees a whole file or none. It is read under the loading policy (transformer.io.safety): a
regular file inside the folder of at most MAX_ENTRY_BYTES, its arrays parsed by the safetensors library, its JSON
under the caps a card's has, and it must name the key it is read for; the caller then checks its shapes and ranges.
An entry that fails any of this (truncated, planted, written by another version) is deleted and rebuilt, never
trusted. After each write the least recently used entries are removed until the folder holds at most `max_bytes`.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import safetensors
import safetensors.numpy
import torch

from .safety import SAFETENSORS_LENGTH_BYTES, CheckpointError, parse_json, read_bytes

FOLDER_VARIABLE = "ATLAS_CACHE"  # the folder; default $XDG_CACHE_HOME/attention-atlas (~/.cache/attention-atlas)
SIZE_VARIABLE = "ATLAS_CACHE_MB"  # its bound in MiB
DEFAULT_MAX_BYTES = 256 * 2**20  # eng-fra's summary of 1,000 sentences is about 3 MB
MAX_ENTRY_BYTES = 64 * 2**20  # one entry: larger results are computed and not kept
SUFFIX = ".safetensors"

Arrays = dict[str, np.ndarray]


def default_folder(environ: Mapping[str, str] = os.environ) -> Path:
    if environ.get(FOLDER_VARIABLE):
        return Path(environ[FOLDER_VARIABLE])
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attention-atlas"


def default_max_bytes(environ: Mapping[str, str] = os.environ) -> int:
    text = environ.get(SIZE_VARIABLE, "")
    return int(float(text) * 2**20) if text else DEFAULT_MAX_BYTES


def key_of(*parts: object) -> str:
    """A key for a result that depends on `parts` (JSON-able values): their digest, in hex."""
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=20).hexdigest()


def model_digest(model: torch.nn.Module) -> str:
    """A digest of a model's weights (names, dtypes, shapes and values): what a cached result of the model keys on,
    so that it is rebuilt when the weights change, whatever file they came from."""
    digest = hashlib.blake2b(digest_size=20)
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


class DiskCache:
    """Entries under `folder` (default_folder()), at most `max_bytes` in all (default_max_bytes())."""

    def __init__(self, folder: str | Path | None = None, max_bytes: int | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_folder()
        self.max_bytes = default_max_bytes() if max_bytes is None else max_bytes

    def path(self, key: str) -> Path:
        if not (key and all(c in "0123456789abcdef" for c in key)):
            raise ValueError(f"a cache key is a hex digest (key_of), got {key!r}")
        return self.folder / f"{key}{SUFFIX}"

    def read(self, key: str) -> tuple[Arrays, object] | None:
        """The entry's arrays and JSON value; None if there is none or it cannot be trusted (then it is deleted)."""
        path = self.path(key)
        if not os.path.lexists(path):
            return None
        try:
            data = read_bytes(path, self.folder, MAX_ENTRY_BYTES)
            header_length = int.from_bytes(data[:SAFETENSORS_LENGTH_BYTES], "little")
            header = parse_json(data[SAFETENSORS_LENGTH_BYTES:SAFETENSORS_LENGTH_BYTES + header_length]
                                .decode("utf-8"), path)
            metadata = header.get("__metadata__") if isinstance(header, dict) else None
            if not isinstance(metadata, dict) or metadata.get("key") != key:
                raise CheckpointError(f"{path}: not the entry for its key")
            arrays = safetensors.numpy.load(data)
            value = parse_json(metadata.get("value", "null"), path)
        except (CheckpointError, UnicodeDecodeError, safetensors.SafetensorError, ValueError):
            self.discard(key)
            return None
        os.utime(path)  # used now: trimmed last
        return arrays, value

    def write(self, key: str, arrays: Arrays, value: object) -> bool:
        """Keep an entry (atomically, replacing any of that key), then trim the folder; False if it is larger than
        MAX_ENTRY_BYTES or the folder cannot be written (the result is then simply not kept)."""
        data = safetensors.numpy.save({name: np.ascontiguousarray(array) for name, array in arrays.items()},
                                      metadata={"key": key, "value": json.dumps(value)})
        if len(data) > MAX_ENTRY_BYTES or len(data) > self.max_bytes:
            return False
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".partial")
            try:
                with os.fdopen(descriptor, "wb") as file:
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temporary, self.path(key))
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except OSError:
            return False
        self.trim()
        return True

    def discard(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def entries(self) -> list[Path]:
        """The folder's entries, least recently used first."""
        if not self.folder.is_dir():
            return []
        found = []
        for path in self.folder.glob(f"*{SUFFIX}"):
            try:
                found.append((path.lstat().st_mtime_ns, path))
            except FileNotFoundError:  # removed by another process meanwhile
                continue
        return [path for _, path in sorted(found)]

    def size(self) -> int:
        return sum(path.lstat().st_size for path in self.entries() if path.exists())

    def trim(self) -> None:
        """Remove the least recently used entries until the folder holds at most max_bytes."""
        entries = self.entries()
        sizes = {path: path.lstat().st_size for path in entries if path.exists()}
        total = sum(sizes.values())
        for path in entries:
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= sizes.get(path, 0)

    def get(self, key: str, build: Callable[[], tuple[Arrays, object]],
            check: Callable[[Arrays, object], None] = lambda arrays, value: None) -> tuple[Arrays, object]:
        """The entry of `key`, or build() kept under it. `check(arrays, value)` raises ValueError on an entry that does
        not hold what the caller expects (shapes, ranges): such an entry is rebuilt."""
        cached = self.read(key)
        if cached is not None:
            try:
                check(*cached)
                return cached
            except (ValueError, KeyError, TypeError, IndexError):
                self.discard(key)
        built = build()
        self.write(key, *built)
        return built
