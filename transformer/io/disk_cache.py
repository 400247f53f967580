"""A bounded folder of computed results that survives a restart and is shared by every process pointed at it: the
app's sessions, its other workers, and `python -m transformer.corpus cache` run ahead of time.

Each entry is one safetensors file named by its key (a digest of everything the result depends on): arrays, and a
small JSON value in the file's metadata. An entry is written to a temporary file in the folder, flushed and renamed
into place, so a reader sees a whole file or none. It is read under the loading policy (transformer.io.safety): a
regular file inside the folder of at most MAX_ENTRY_BYTES, its arrays parsed by the safetensors library, its JSON
under the caps a card's has, and it must name the key it is read for; the caller then checks its shapes and ranges.
An entry that fails any of this (truncated, planted, written by another version) is deleted and rebuilt, never
trusted; so is an entry whose arrays are of a dtype numpy has no type for (BF16, F8_*: never one this cache writes).

The folder may hold files of others (a user may name any folder): the cache deletes only its own entries, those its
manifest (MANIFEST, in the folder) lists, each written by this cache or proven its own by a read (a file named by a
key whose header names that key). After each write the least recently used of them are removed until they hold at
most `max_bytes`; nothing else in the folder is ever counted or removed.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
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
MANIFEST = ".attention-atlas-cache.json"  # the keys of the entries this cache keeps: the only files a trim removes
LOCK = ".attention-atlas-cache.lock"  # held while the manifest is read, changed and written (processes share it)
MAX_MANIFEST_BYTES = 4 * 2**20  # about 90,000 keys: far more entries than a bounded folder holds
# The safetensors dtypes numpy has a type for (safetensors.numpy reads them): an entry of any other is not ours.
NUMPY_DTYPES = frozenset({"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "F32", "F64", "C64"})

Arrays = dict[str, np.ndarray]


def default_folder(environ: Mapping[str, str] = os.environ) -> Path:
    if environ.get(FOLDER_VARIABLE):
        return Path(environ[FOLDER_VARIABLE])
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attention-atlas"


def default_max_bytes(environ: Mapping[str, str] = os.environ) -> int:
    """$ATLAS_CACHE_MB in bytes (MiB, a fraction allowed; 0 keeps nothing), else DEFAULT_MAX_BYTES. A ValueError
    naming the variable for anything but a finite number of at least 0."""
    text = environ.get(SIZE_VARIABLE, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        size = float(text)
    except ValueError:
        size = math.nan
    if not 0 <= size <= 2**40:  # NaN fails both
        raise ValueError(f"{SIZE_VARIABLE} must be a number of MB, at least 0, got {text!r:.40}")
    return int(size * 2**20)


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


def _is_key(key: object) -> bool:
    return isinstance(key, str) and bool(key) and len(key) <= 128 and all(c in "0123456789abcdef" for c in key)


class DiskCache:
    """Entries under `folder` (default_folder()), at most `max_bytes` in all (default_max_bytes())."""

    def __init__(self, folder: str | Path | None = None, max_bytes: int | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_folder()
        self.max_bytes = default_max_bytes() if max_bytes is None else max_bytes

    def path(self, key: str) -> Path:
        if not _is_key(key):
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
            dtypes = {str(tensor.get("dtype")) for name, tensor in header.items()
                      if name != "__metadata__" and isinstance(tensor, dict)}
            if dtypes - NUMPY_DTYPES:
                raise CheckpointError(f"{path}: arrays of dtype {', '.join(sorted(dtypes - NUMPY_DTYPES))}, which "
                                      "numpy cannot hold and this cache never writes")
            arrays = safetensors.numpy.load(data)
            value = parse_json(metadata.get("value", "null"), path)
        except (CheckpointError, UnicodeDecodeError, safetensors.SafetensorError, ValueError, KeyError, TypeError):
            self.discard(key)
            return None
        os.utime(path)  # used now: trimmed last
        self._adopt(key)
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
                with self._manifest() as keys:
                    os.replace(temporary, self.path(key))
                    keys.add(key)
                    self._trim(keys)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except OSError:
            return False
        return True

    def discard(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)  # the manifest's line goes at the next trim

    def writable(self) -> str:
        """Why entries cannot be written here ("" if they can): the folder is made if missing, and a file written
        into it and removed, as a write would."""
        if os.path.lexists(self.folder) and not self.folder.is_dir():
            return f"{self.folder}: not a folder (a cache is a folder of its own)"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.folder, prefix=".", suffix=".partial"):
                pass
        except OSError as error:
            return f"{self.folder}: cannot be written ({error.strerror or error})"
        return ""

    @contextmanager
    def _manifest(self) -> Iterator[set[str]]:
        """The manifest's keys, under the folder's lock; whatever the caller leaves in the set is written back
        (atomically). A manifest that cannot be trusted reads as empty: the entries it listed are then never
        removed (rather than removing what might not be ours)."""
        descriptor = os.open(self.folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            keys = set(self._listed())
            before = set(keys)
            yield keys
            if keys != before:
                data = json.dumps(sorted(keys)).encode()
                handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".partial")
                try:
                    with os.fdopen(handle, "wb") as file:
                        file.write(data)
                    os.replace(temporary, self.folder / MANIFEST)
                except BaseException:
                    Path(temporary).unlink(missing_ok=True)
                    raise
        finally:
            os.close(descriptor)

    def _listed(self) -> list[str]:
        path = self.folder / MANIFEST
        if not os.path.lexists(path):
            return []
        try:
            keys = parse_json(read_bytes(path, self.folder, MAX_MANIFEST_BYTES).decode("utf-8"), path)
        except (CheckpointError, UnicodeDecodeError):
            return []
        return [key for key in keys if _is_key(key)] if isinstance(keys, list) else []

    def _adopt(self, key: str) -> None:
        """An entry proven this cache's own by a read joins the manifest (one kept before there was a manifest)."""
        try:
            if key not in self._listed():
                with self._manifest() as keys:
                    keys.add(key)
        except OSError:  # a folder that is read-only to this process: the entry is read, not kept track of
            pass

    def entries(self) -> list[Path]:
        """The manifest's entries in the folder (regular files), least recently used first."""
        return [path for _, path in self._sized(self._listed())]

    def _sized(self, keys) -> list[tuple[int, Path]]:
        found = []
        for key in keys:
            try:
                status = self.path(key).lstat()
            except FileNotFoundError:  # removed by another process meanwhile
                continue
            if stat.S_ISREG(status.st_mode):
                found.append((status.st_mtime_ns, status.st_size, self.path(key)))
        return [(size, path) for _, size, path in sorted(found)]

    def size(self) -> int:
        return sum(size for size, _ in self._sized(self._listed()))

    def trim(self) -> None:
        """Remove the least recently used of the manifest's entries until they hold at most max_bytes."""
        with self._manifest() as keys:
            self._trim(keys)

    def _trim(self, keys: set[str]) -> None:
        sized = self._sized(keys)
        total = sum(size for size, _ in sized)
        keys.intersection_update(path.name.removesuffix(SUFFIX) for _, path in sized)  # the ones gone: off the list
        for size, path in sized:
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            keys.discard(path.name.removesuffix(SUFFIX))
            total -= size

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
