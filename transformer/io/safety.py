"""The loading policy: every file of a checkpoint folder is hostile until checked, and every check is cheap.

A file is read only if it is a regular file whose real path stays inside its checkpoint folder (no FIFO, device,
directory, symlink or hard link from outside; opened with O_NONBLOCK so that nothing can block), and no bigger than
its cap, checked before a byte is parsed. JSON is parsed only under a size and nesting cap, with integers of at most
`MAX_INT_DIGITS` digits, finite floats only (no NaN / Infinity); every check is linear in the file's size. Weights
are safetensors, parsed by the safetensors library from bytes read under these rules; a weights pickle (a torch zip)
is let through to torch only if it is a plain state dict of tensors with string keys. The limits
below are the whole policy; checkpoint.py applies them to checkpoints, snapshots and converted folders alike, and
every failure is a `CheckpointError` naming the file and the field.
"""
from __future__ import annotations

import functools
import json
import math
import os
import pickletools
import re
import resource
import stat
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TypeVar

T = TypeVar("T")

# What one model may be. Its size is bounded by memory, not by a count of parameters: before a byte of its weights is
# read, checkpoint.check_model_memory estimates what the model and its longest allowed pass would hold and refuses it
# above memory_limit() (the message gives both numbers). The caps below bound each field of a config, so that a config
# is read, and its model counted, in bounded time.
MAX_PARAMETERS = 100_000_000_000  # what a card may say; no config within the caps below reaches it (about 45 billion)
MAX_VOCAB_SIZE = 512_000
MAX_D_MODEL = 4096
MAX_D_FF = 16_384
MAX_HEADS = 256
MAX_LAYERS = 64  # per stack
MAX_LEN = 2048  # positions a config may ask for (Marian: 512)
MAX_POSITION_OFFSET = 16  # unused rows before a learned position table's first (BART: 2)
MAX_TYPE_VOCAB = 16  # token-type embeddings (BERT: 2)

# What one captured pass may cost. A pass records every layer's and head's attention weights and scores, and the app
# keeps a numpy copy of both: 16 bytes per value, layers x heads x length² values per kind of attention. Inputs are
# cut to the length whose pass fits; a model whose pass over MIN_PASS_TOKENS would not fit is refused when listed.
PASS_BUDGET_BYTES = 512 * 1024 * 1024  # a laptop's share for one click; the 78M-parameter Marian needs 12 MB at 64
BYTES_PER_ATTENTION_VALUE = 16
MIN_PASS_TOKENS = 8  # shorter than this, no sentence fits

# What memory one model may take: its weights as held in memory (float32 whatever the file stores: load_weights),
# their copy while they load, and its longest pass (checkpoint.model_memory), at most MEMORY_FRACTION of what this
# process may use (usable_memory: the machine's memory, its cgroup's limit, the address-space limit), or
# $ATLAS_MODEL_MEMORY_MB. Half leaves the rest to the other checkpoints a server has loaded, the sessions' passes
# (ui/memory.py's budget) and Python's own.
MEMORY_LIMIT_VARIABLE = "ATLAS_MODEL_MEMORY_MB"
MEMORY_FRACTION = 0.5
BYTES_PER_WEIGHT = 4  # float32: a float16 or bfloat16 file's weights are widened when read (docs/pretrained.md)
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))  # v2, v1
MB, GB = 2**20, 2**30

# What one file may be, checked with fstat before it is read.
MAX_CONFIG_BYTES = 64 * 1024
MAX_CARD_BYTES = 1024 * 1024
MAX_TOKENIZER_BYTES = 16 * 1024 * 1024
MAX_INDEX_BYTES = 1024 * 1024  # model.safetensors.index.json: a name and a shard per tensor (~100 bytes each)
MAX_WORD_LIST_BYTES = 8 * 1024 * 1024  # the training sources' words, one a line (eng-fra: about 0.1 MB)
WEIGHTS_OVERHEAD_BYTES = 16 * 1024 * 1024  # a weights file may exceed 4 bytes x the config's tensors by this much
MAX_PICKLE_BYTES = 1024 * 1024  # the pickle inside a torch zip: names and shapes (~200 bytes a tensor), no data
MAX_JSON_DEPTH = 16  # a card is 4 deep
MAX_INT_DIGITS = 18  # |int| < 10**18

# What a card may hold (the app shows every string of it).
MAX_NAME_CHARS = 200  # name, task, machine, metric and history keys
MAX_TEXT_CHARS = 20_000  # description, data credit, training command
MAX_EXAMPLES, MAX_EXAMPLE_CHARS = 100, 1000
MAX_METRICS = 100
MAX_HISTORY, MAX_HISTORY_KEYS = 10_000, 32
MAX_SNAPSHOTS = 64


def usable_memory() -> tuple[int, str]:
    """The bytes this process may use at most, and what sets them (for a message): the least of the machine's memory
    ("this machine has"), the memory limit of its cgroup v2 or v1 ("its cgroup allows": a container's), and the
    address-space limit ("its address-space limit allows": ulimit -v)."""
    limits = [(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine has")]
    for path in CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:  # no such cgroup version here
            continue
        if text.isdigit():  # "max" (v2) is no limit; v1 writes a number near 2**63 for none, which min() passes by
            limits.append((int(text), "its cgroup allows"))
    address_space = resource.getrlimit(resource.RLIMIT_AS)[0]
    if address_space != resource.RLIM_INFINITY:
        limits.append((address_space, "its address-space limit allows"))
    return min(limits, key=lambda limit: limit[0])


def memory_limit(environ: Mapping[str, str] = os.environ) -> tuple[int, str]:
    """The most one model and its longest pass may take (bytes), and how that was set, for a message:
    $ATLAS_MODEL_MEMORY_MB (MB of 2**20 bytes), or else MEMORY_FRACTION of usable_memory(). ValueError for a setting
    that is not a whole number of at least 1."""
    setting = environ.get(MEMORY_LIMIT_VARIABLE, "").strip()
    if setting:
        if not re.fullmatch(r"[0-9]{1,15}", setting) or int(setting) < 1:
            raise ValueError(f"{MEMORY_LIMIT_VARIABLE} must be a whole number of MB, at least 1, got {setting!r:.40}")
        return int(setting) * MB, f"{MEMORY_LIMIT_VARIABLE}={int(setting)}"
    usable, source = usable_memory()
    return int(usable * MEMORY_FRACTION), (f"{MEMORY_FRACTION:.0%} of the {size_text(usable)} {source}; "
                                           f"{MEMORY_LIMIT_VARIABLE} sets another limit")


def size_text(size: int) -> str:
    """Bytes for a person: "3.2 GB" (GB of 2**30 bytes), or "480 MB" below 1 GB."""
    return f"{size / GB:.1f} GB" if size >= GB else f"{max(size / MB, 0.1):.{0 if size >= 10 * MB else 1}f} MB"


class CheckpointError(Exception):
    """A checkpoint folder or one of its files is missing, broken or unsafe; the message names the file."""


class OutputOverInput(CheckpointError):
    """A command was told to write where it would overwrite or delete what it reads; the message names both."""


def refuse_output_over_inputs(out: str | Path, inputs: Iterable[str | Path]) -> None:
    """OutputOverInput unless writing (or replacing, whole) `out` leaves every one of `inputs` and the folder the
    command runs in as they are: `out` may not be an input (by its real path, or the same file under another name: a
    symlink or hard link), hold one (a folder that would be replaced with what is in it), or lie inside one (a file
    written into the folder being read). The command's own folder may hold `out`, never be or lie inside it. Every
    command that writes calls this before it reads or writes anything, with or without --replace."""
    target = Path(out).resolve()
    if Path.cwd().is_relative_to(target):
        raise OutputOverInput(f"{out}: is the folder this command runs in, or holds it; nothing was written. Name a "
                              "new place for the output")
    for source in inputs:
        origin = Path(source).resolve()
        relation = ("is" if target == origin or _same_file(target, origin)
                    else "lies inside" if target.is_relative_to(origin)
                    else "holds" if origin.is_relative_to(target) else "")
        if relation:
            raise OutputOverInput(f"{out}: {relation} {source}, which this command reads; nothing was written. Name "
                                  "another place for the output")


def _same_file(first: Path, second: Path) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


PASSED_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError)  # never a file's fault


@contextmanager
def native_errors(path: Path, message: str) -> Iterator[None]:
    """A failure inside a native library's call (tokenizers, sentencepiece, safetensors) as the CheckpointError
    "PATH: MESSAGE (the error)": the library's own exception types, and the BaseException a Rust panic
    raises (pyo3's PanicException), which `except Exception` misses and which would end the session's thread
    mid-page. Interrupts, exits and running out of memory pass as they are."""
    try:
        yield
    except PASSED_THROUGH:
        raise
    except BaseException as error:
        raise CheckpointError(f"{path}: {message} ({type(error).__name__}: {str(error)[:200]})") from None


def native(method: Callable[..., T]) -> Callable[..., T]:
    """A tokenizer's `method` under native_errors (the tokenizer's `path` named)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with native_errors(self.path, f"the tokenizer's {method.__name__} failed"):
            return method(self, *args, **kwargs)
    return call


def open_regular(path: Path, folder: Path, max_bytes: int) -> BinaryIO:
    """`path` opened for reading, if it is a regular file of at most `max_bytes` whose real path lies inside
    `folder`. Never blocks: the file is opened with O_NONBLOCK and checked with fstat before anything is read."""
    real, inside = os.path.realpath(path), os.path.realpath(folder)
    if os.path.commonpath([real, inside]) != inside:
        raise CheckpointError(f"{path}: points outside its checkpoint folder (a symlink to {real})")
    try:
        descriptor = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file is missing") from None
    except OSError as error:  # a symlink loop (ELOOP), no permission, ...
        raise CheckpointError(f"{path}: cannot be opened ({error.strerror})") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(f"{path}: not a regular file ({_kind(info.st_mode)})")
        if info.st_nlink > 1:  # a hard link has no outside path to see: its other names may lie anywhere
            raise CheckpointError(f"{path}: has {info.st_nlink} names (a hard link), so it may be a file from outside "
                                  "its checkpoint folder")
        if info.st_size > max_bytes:
            raise CheckpointError(f"{path}: {info.st_size:,} bytes, more than the {max_bytes:,} allowed")
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def read_bytes(path: Path, folder: Path, max_bytes: int) -> bytes:
    """The content of a file that passes `open_regular`; a file that grew past its cap while read is refused too."""
    with open_regular(path, folder, max_bytes) as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise CheckpointError(f"{path}: more than the {max_bytes:,} bytes allowed")
    return data


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS} allowed)")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > 64:
        raise ValueError(f"a number written with {len(text)} characters (at most 64 allowed)")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def read_json(path: Path, folder: Path, max_bytes: int) -> object:
    """The JSON value in `path`, read under `open_regular`'s policy and parsed by parse_json."""
    try:
        text = read_bytes(path, folder, max_bytes).decode("utf-8")
    except UnicodeDecodeError as error:
        raise CheckpointError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    return parse_json(text, path)


def parse_json(text: str, where: object) -> object:
    """The JSON value of `text` (read from `where`, named in errors), at most MAX_JSON_DEPTH deep. Linear in the
    text's size: the C parser refuses nesting deeper than the interpreter's recursion limit itself (RecursionError),
    and the depth of what it returns is then measured by one walk over the parsed values."""
    try:
        value = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_refuse_constant)
    except RecursionError:
        raise CheckpointError(f"{where}: JSON nested more than {MAX_JSON_DEPTH} deep") from None
    except ValueError as error:  # json.JSONDecodeError is a ValueError
        raise CheckpointError(f"{where}: not valid JSON ({error})") from None
    depth = json_depth(value)
    if depth > MAX_JSON_DEPTH:
        raise CheckpointError(f"{where}: JSON nested {depth} deep, more than the {MAX_JSON_DEPTH} allowed")
    return value


def json_depth(value: object) -> int:
    """How deeply lists and objects nest in a parsed JSON value (a scalar: 0), walked without recursion."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_torch_zip(file: BinaryIO, path: Path, max_members: int) -> None:
    """Refuse a weights file that is not a torch zip whose members are all stored uncompressed (so that no member
    can unpack to more than the file's own size: no zip bomb) and whose pickle is small and holds a state dict only
    (`check_state_pickle`)."""
    size = os.fstat(file.fileno()).st_size
    try:
        archive = zipfile.ZipFile(file)
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as error:
        raise CheckpointError(f"{path}: not a torch weights file (a zip archive) ({error})") from None
    if len(members) > max_members:
        raise CheckpointError(f"{path}: {len(members)} archive members, more than the {max_members} expected")
    for member in members:
        if member.compress_type != zipfile.ZIP_STORED or member.file_size != member.compress_size:
            raise CheckpointError(f"{path}: member {member.filename!r} is compressed; torch stores tensors as is")
        if member.filename.endswith(".pkl") and member.file_size > MAX_PICKLE_BYTES:
            raise CheckpointError(f"{path}: pickle {member.filename!r} of {member.file_size:,} bytes, "
                                  f"more than the {MAX_PICKLE_BYTES:,} allowed")
    if sum(member.file_size for member in members) > size:
        raise CheckpointError(f"{path}: its members add up to more than the file itself (overlapping entries)")
    pickles = [member for member in members if member.filename.endswith("/data.pkl")]
    if len(pickles) != 1:
        raise CheckpointError(f"{path}: {len(pickles)} data.pkl members, a torch weights file has one")
    try:
        data = archive.read(pickles[0])
    except (zipfile.BadZipFile, ValueError, OSError) as error:
        raise CheckpointError(f"{path}: its pickle cannot be read ({error})") from None
    check_state_pickle(data, path)
    file.seek(0)


SAFETENSORS_LENGTH_BYTES = 8  # a safetensors file starts with its JSON header's length, little-endian


def check_safetensors_start(file: BinaryIO, path: Path) -> None:
    """Refuse a weights file that does not start as a safetensors file does: the length of its JSON header, then the
    header's opening brace, the header ending inside the file. The header in full and the tensors are checked by the
    safetensors library when the weights are read."""
    size = os.fstat(file.fileno()).st_size
    start = file.read(SAFETENSORS_LENGTH_BYTES + 1)
    if len(start) <= SAFETENSORS_LENGTH_BYTES or start[SAFETENSORS_LENGTH_BYTES:] != b"{" \
            or SAFETENSORS_LENGTH_BYTES + int.from_bytes(start[:SAFETENSORS_LENGTH_BYTES], "little") > size:
        raise CheckpointError(f"{path}: not a safetensors file (it does not start with the length of a JSON header "
                              "that fits in it)")


# The pickle of a state dict, as torch.save writes it: a dict or OrderedDict of string keys whose values are tensors
# rebuilt from storages. Nothing else is let through to torch's unpickler: no other callable, no list, no set, and
# no key but a string (a key of shared nested tuples costs 2^depth steps to hash: a file that hangs the loader).
_STATE_GLOBALS = {"collections OrderedDict", "torch._utils _rebuild_tensor_v2"} | {
    f"torch {kind}Storage" for kind in ("Float", "Half", "BFloat16", "Double", "Long", "Int", "Short", "Char", "Byte",
                                        "Bool")}
_STORAGE_KINDS = {("global", name) for name in _STATE_GLOBALS if name.endswith("Storage")}
_SCALARS = {"BININT": "int", "BININT1": "int", "BININT2": "int", "LONG1": "int", "BINFLOAT": "float",
            "NEWTRUE": "bool", "NEWFALSE": "bool", "NONE": "none", "BINUNICODE": "str", "SHORT_BINUNICODE": "str",
            "EMPTY_TUPLE": ("tuple",), "EMPTY_DICT": "dict"}
_TUPLE_SIZES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_MEMO_PUT, _MEMO_GET = {"BINPUT", "LONG_BINPUT", "MEMOIZE"}, {"BINGET", "LONG_BINGET"}


class _StatePickle:
    """The stack of check_state_pickle: the kind of each value ("str", "int", ("tuple", kinds...), "dict", "tensor",
    ...), where the open MARKs stand, and the memo; each handler below takes one opcode (its name and argument)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stack: list = []
        self.marks: list[int] = []
        self.memo: dict[int, object] = {}

    def refuse(self, why: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: refused to load, its pickle is not a plain state dict of tensors ({why})")

    def pop(self, count: int = 1) -> list:
        if len(self.stack) - (self.marks[-1] if self.marks else 0) < count:
            raise self.refuse("a value taken from an empty stack")
        taken = self.stack[len(self.stack) - count:]
        del self.stack[len(self.stack) - count:]
        return taken

    def pop_mark(self) -> list:
        if not self.marks:
            raise self.refuse("no MARK before a sequence")
        start = self.marks.pop()
        taken = self.stack[start:]
        del self.stack[start:]
        return taken

    def set_items(self, items: list) -> None:
        if not self.stack or self.stack[-1] != "dict" or len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise self.refuse("items set on something other than a dict")
        if any(key != "str" for key in items[::2]) or len(items) % 2:
            raise self.refuse("a dict key that is not a string")

    def stop(self) -> None:
        if self.stack != ["dict"] or self.marks:
            raise self.refuse("it does not end with one dict")

    def framing(self, name: str, argument: object) -> None:
        """PROTO and FRAME say how the pickle is laid out, and put nothing on the stack."""

    def scalar(self, name: str, argument: object) -> None:
        self.stack.append(_SCALARS[name])

    def global_name(self, name: str, argument: object) -> None:
        if argument not in _STATE_GLOBALS:
            raise self.refuse(f"global {argument!r}")
        self.stack.append(("global", argument))

    def mark(self, name: str, argument: object) -> None:
        self.marks.append(len(self.stack))

    def marked_tuple(self, name: str, argument: object) -> None:
        self.stack.append(("tuple", *self.pop_mark()))

    def sized_tuple(self, name: str, argument: object) -> None:
        self.stack.append(("tuple", *self.pop(_TUPLE_SIZES[name])))

    def memo_put(self, name: str, argument: object) -> None:
        if not self.stack:
            raise self.refuse("a memo entry of nothing")
        self.memo[len(self.memo) if name == "MEMOIZE" else argument] = self.stack[-1]

    def memo_get(self, name: str, argument: object) -> None:
        if argument not in self.memo:
            raise self.refuse(f"memo entry {argument} read before it is written")
        self.stack.append(self.memo[argument])

    def set_item(self, name: str, argument: object) -> None:
        self.set_items(self.pop(2))

    def set_marked_items(self, name: str, argument: object) -> None:
        self.set_items(self.pop_mark())

    def storage(self, name: str, argument: object) -> None:
        (saved,) = self.pop()
        if saved[:2] != ("tuple", "str") or len(saved) != 6 or saved[2] not in _STORAGE_KINDS \
                or saved[3:] != ("str", "str", "int"):
            raise self.refuse("a storage reference other than ('storage', type, key, location, size)")
        self.stack.append("storage")

    def call(self, name: str, argument: object) -> None:
        function, arguments = self.pop(2)
        if function == ("global", "collections OrderedDict") and arguments == ("tuple",):
            self.stack.append("dict")
        elif function == ("global", "torch._utils _rebuild_tensor_v2") and arguments[:3] == (
                "tuple", "storage", "int"):
            self.stack.append("tensor")
        else:
            raise self.refuse(f"a call of {function!r:.80}")

    def build(self, name: str, argument: object) -> None:
        (state,) = self.pop()
        if state != "dict" or not self.stack or self.stack[-1] != "dict":
            raise self.refuse("an object built from something other than a dict")


# The opcodes a state dict's pickle is made of, each with its handler; any other is refused.
_OPCODE_HANDLERS: dict[str, Callable[[_StatePickle, str, object], None]] = {
    "PROTO": _StatePickle.framing, "FRAME": _StatePickle.framing,
    **dict.fromkeys(_SCALARS, _StatePickle.scalar),
    "GLOBAL": _StatePickle.global_name, "MARK": _StatePickle.mark, "TUPLE": _StatePickle.marked_tuple,
    **dict.fromkeys(_TUPLE_SIZES, _StatePickle.sized_tuple),
    **dict.fromkeys(_MEMO_PUT, _StatePickle.memo_put), **dict.fromkeys(_MEMO_GET, _StatePickle.memo_get),
    "SETITEM": _StatePickle.set_item, "SETITEMS": _StatePickle.set_marked_items,
    "BINPERSID": _StatePickle.storage, "REDUCE": _StatePickle.call, "BUILD": _StatePickle.build,
}


def check_state_pickle(data: bytes, path: Path) -> None:
    """CheckpointError unless `data` is the pickle of a state dict (see _STATE_GLOBALS). One pass over the opcodes
    that follows only the kind of each value on the stack (_StatePickle): linear in the pickle's size, whatever it
    holds."""
    pickle = _StatePickle(path)
    try:
        for opcode, argument, position in pickletools.genops(data):
            if opcode.name == "STOP":
                pickle.stop()
                return
            handler = _OPCODE_HANDLERS.get(opcode.name)
            if handler is None:
                raise pickle.refuse(f"opcode {opcode.name} at byte {position}")
            handler(pickle, opcode.name, argument)
    except ValueError as error:  # pickletools on a truncated or malformed opcode
        raise pickle.refuse(str(error)) from None
    raise pickle.refuse("no STOP")
