"""Hostile checkpoint folders and hostile library calls: each case is refused with a clear error, in a
process of its own that is forked from this warm one (torch already imported) under an address-space cap, and must
fail within 2 s and grow by less than 1 GB. A blocked child (a FIFO opened for reading) fails the test at 30 s
instead of hanging the suite. Beside each bad folder sits a good one, which `checkpoint_status` must still list as
loadable."""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import resource
import shutil
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from transformer import TransformerConfig, ablate, capture, checkpoint_status, checkpoint_version, load_checkpoint
from transformer.inference.decoding import MAX_BEAM_SIZE, beam_search
from transformer.io.checkpoint import (
    CARD_FILE,
    CONFIG_FILE,
    SNAPSHOT_DIR,
    SOURCE_WORDS_FILE,
    SRC_TOKENIZER_FILE,
    WEIGHTS_FILE,
    WEIGHTS_SUFFIX,
)
from transformer.io.text import MAX_CHARS_PER_TOKEN, bounded

SECONDS, GROWTH_BYTES = 2.0, 1 << 30
TORCH_ZIP = "model.pt"  # a folder's weights as a torch zip, in the place of model.safetensors
pytestmark = pytest.mark.slow  # every case runs in a forked child, bounded in time and memory
ADDRESS_SPACE_CAP = 2 << 30  # on top of what the parent has mapped: a runaway allocation dies, not the machine
CHILD_TIMEOUT_S = 30


@dataclass
class Outcome:
    error: str  # exception class name, "" if the call returned
    message: str
    value: object
    seconds: float  # CPU seconds of the child: what the call costs, whatever else the machine is running
    growth_bytes: int  # peak resident memory of the child minus its resident memory at the start


def _memory_status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


def _child(call: Callable[[], object], send) -> None:
    torch.set_num_threads(1)  # a forked child cannot use the parent's OpenMP threads: a parallel op would hang
    mapped = _memory_status("VmSize")
    resource.setrlimit(resource.RLIMIT_AS, (mapped + ADDRESS_SPACE_CAP, mapped + ADDRESS_SPACE_CAP))
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak, to what is resident now
    before = _memory_status("VmRSS")
    start = time.process_time()
    error = message = ""
    value = None
    try:
        value = call()
    except BaseException as exception:  # reported to the parent, which asserts on it
        error, message = type(exception).__name__, str(exception)
    seconds = time.process_time() - start
    send.send(Outcome(error, message, value, seconds, _memory_status("VmHWM") - before))


def bounded_run(call: Callable[[], object]) -> Outcome:
    """`call()` in a forked child: what it raised or returned, how long it took and how much memory it grew by."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(call, send), daemon=True)
    process.start()
    try:
        if not receive.poll(CHILD_TIMEOUT_S):
            pytest.fail(f"the call blocked for {CHILD_TIMEOUT_S} s")
        return receive.recv()
    finally:
        process.kill()
        process.join()


def assert_bounded(outcome: Outcome) -> None:
    assert outcome.seconds < SECONDS, outcome
    assert outcome.growth_bytes < GROWTH_BYTES, outcome


# ------------------------------------------------------------------------------------------- planting the folders


def edit_json(file: str, change: Callable[[dict], object]) -> Callable[[Path], None]:
    """`change` edits the parsed file in place."""
    def plant(folder: Path) -> None:
        values = json.loads((folder / file).read_text())
        change(values)
        (folder / file).write_text(json.dumps(values))
    return plant


def edit_text(file: str, change: Callable[[str], str]) -> Callable[[Path], None]:
    """`change` rewrites the file's JSON text, compacted by json.dumps (for what JSON values cannot hold)."""
    def plant(folder: Path) -> None:
        (folder / file).write_text(change(json.dumps(json.loads((folder / file).read_text()))))
    return plant


def replace_with(file: str, make: Callable[[Path], None]) -> Callable[[Path], None]:
    def plant(folder: Path) -> None:
        path = folder / file
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        make(path)
    return plant


def edit_weights(change: Callable[[dict], None], file: str = WEIGHTS_FILE) -> Callable[[Path], None]:
    """`change` edits the tensors of the weights file `file` (safetensors, or a torch zip named .pt) in place."""
    def plant(folder: Path) -> None:
        path = folder / file
        if path.suffix == ".pt":
            state = torch.load(path, weights_only=True)
            change(state)
            torch.save(state, path)
        else:
            state = load_file(path)
            change(state)
            save_file(state, path)
    return plant


def in_torch_zip(plant: Callable[[Path], None]) -> Callable[[Path], None]:
    """`plant` on the folder with its weights as model.pt (torch.save of the loaded model's state dict, as a folder
    written by torch holds them) in the place of model.safetensors."""
    def planted(folder: Path) -> None:
        torch.save(load_checkpoint(folder).model.state_dict(), folder / TORCH_ZIP)
        (folder / WEIGHTS_FILE).unlink()
        plant(folder)
    return planted


def edit_header(change: Callable[[dict], None]) -> Callable[[Path], None]:
    """`change` edits the parsed JSON header of model.safetensors; the tensors' bytes stay as they are."""
    def plant(folder: Path) -> None:
        data = (folder / WEIGHTS_FILE).read_bytes()
        length = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + length])
        change(header)
        text = json.dumps(header).encode()
        (folder / WEIGHTS_FILE).write_bytes(len(text).to_bytes(8, "little") + text + data[8 + length :])
    return plant


def first_snapshot(folder: Path) -> str:
    name = json.loads((folder / CARD_FILE).read_text())["snapshots"][0]["name"]
    return f"{SNAPSHOT_DIR}/{name}{WEIGHTS_SUFFIX}"


def in_snapshot(plant_file: Callable[[str], Callable[[Path], None]]) -> Callable[[Path], None]:
    return lambda folder: plant_file(first_snapshot(folder))(folder)


def set_tensor(name: str, value: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[dict], None]:
    def change(state: dict) -> None:
        state[name] = value(state[name])
    return change


def fifo(path: Path) -> None:
    os.mkfifo(path)


def rezipped_weights(folder: Path, compression: int, replace: dict[str, bytes] | None = None,
                     extra: tuple[str, bytes] | None = None) -> None:
    """model.pt written again with `compression`, members whose names end in a key of `replace` replaced by its
    value, and `extra` (a name under the archive's top folder, its content) added."""
    path = folder / TORCH_ZIP
    with zipfile.ZipFile(path) as source:
        members = [(info.filename, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, content in members:
            archive.writestr(name, next((new for end, new in (replace or {}).items() if name.endswith(end)), content))
        if extra:
            archive.writestr(f"{members[0][0].split('/')[0]}/{extra[0]}", extra[1])


def zip_bomb(folder: Path) -> None:
    """The real weights re-zipped with every member deflated, plus 256 MB of zeros that deflate to 250 KB."""
    rezipped_weights(folder, zipfile.ZIP_DEFLATED, extra=("data/bomb", bytes(256 << 20)))


def snapshot_fifo(folder: Path) -> None:
    path = folder / first_snapshot(folder)
    path.unlink()
    os.mkfifo(path)


def snapshot_link_out(folder: Path) -> None:
    path = folder / first_snapshot(folder)
    outside = folder.parent / f"outside{WEIGHTS_SUFFIX}"
    shutil.copy(path, outside)
    path.unlink()
    path.symlink_to(outside)


def link_out(file: str) -> Callable[[Path], None]:
    def plant(folder: Path) -> None:
        outside = folder.parent / f"outside-{file}"
        shutil.copy(folder / file, outside)
        (folder / file).unlink()
        (folder / file).symlink_to(outside)
    return plant


def symlink_loop(folder: Path) -> None:
    (folder / CARD_FILE).unlink()
    (folder / "loop").symlink_to(folder / CARD_FILE)
    (folder / CARD_FILE).symlink_to(folder / "loop")


def deep_json(depth: int) -> Callable[[Path], None]:
    return lambda folder: (folder / CARD_FILE).write_text("[" * depth + "]" * depth)


def quoted_quotes(file: str, size: int) -> Callable[[Path], None]:
    """`size` bytes of '"' and '\\"': every quote opens a string that never closes, which a regular expression
    matching strings scans to the end from each one (quadratic)."""
    return lambda folder: (folder / file).write_text(('"\\"' * size)[:size])


def pickle_replaced(data: bytes) -> Callable[[Path], None]:
    """model.pt with its data.pkl member replaced by `data`, every member stored as torch stores them."""
    def plant(folder: Path) -> None:
        rezipped_weights(folder, zipfile.ZIP_STORED, replace={"/data.pkl": data})
    return plant


def tuple_key_pickle(depth: int) -> bytes:
    """A dict whose one key is a tuple of two references to a tuple of two references to ... a string: `depth`
    levels, 2 ** depth steps to hash, a few bytes per level in the pickle (each level is read from the memo)."""
    data = bytearray(b"\x80\x02}q\x00(X\x01\x00\x00\x00ar\x01\x00\x00\x00")  # {, MARK, 'a' in memo 1
    for level in range(1, depth + 1):  # the level below is on the stack: LONG_BINGET it, TUPLE2, LONG_BINPUT
        data += b"j" + level.to_bytes(4, "little") + b"\x86" + b"r" + (level + 1).to_bytes(4, "little")
    return bytes(data + b"K\x01u.")  # value 1, SETITEMS, STOP


def global_pickle(module: str, name: str) -> bytes:
    return b"\x80\x02}q\x00(X\x01\x00\x00\x00ac" + f"{module}\n{name}\n".encode() + b"u."


def hard_link_out(file: str) -> Callable[[Path], None]:
    def plant(folder: Path) -> None:
        outside = folder.parent / f"outside-{file}"
        shutil.copy(folder / file, outside)
        (folder / file).unlink()
        os.link(outside, folder / file)
    return plant


def sparse_file(file: str, size: int) -> Callable[[Path], None]:
    def plant(folder: Path) -> None:
        with open(folder / file, "wb") as f:
            f.truncate(size)
    return plant


@dataclass(frozen=True)
class Case:
    plant: Callable[[Path], None]
    match: str  # regex the CheckpointError's message must match
    listed: bool = True  # whether checkpoint_status already finds it (False: only reading the tensors does)
    snapshot: bool = False  # whether the damage is in a training snapshot (the checkpoint itself loads)


HUGE_CONFIG = dict(d_model=4096, d_ff=16384, num_heads=8, num_encoder_layers=64, num_decoder_layers=64)  # ~226 GB
CASES = {
    # card.json
    "card-empty-object": Case(lambda f: (f / CARD_FILE).write_text("{}"), r"card.json: missing field\(s\) 'name'"),
    "card-without-name": Case(edit_json(CARD_FILE, lambda c: c.pop("name")), r"card.json: missing field\(s\) 'name'"),
    "card-200000-deep": Case(deep_json(200_000), r"card.json: JSON nested more than 16 deep"),
    "card-17-deep": Case(deep_json(17), r"card.json: JSON nested 17 deep, more than the 16 allowed"),
    "card-1-mb-of-quoted-quotes": Case(quoted_quotes(CARD_FILE, 1 << 20), r"card.json: not valid JSON"),
    "card-hard-link-out": Case(hard_link_out(CARD_FILE), r"card.json: has 2 names \(a hard link\)"),
    "card-5000-digit-number": Case(edit_text(CARD_FILE, lambda t: t[:-1] + ', "parameters": 1'
                                                                 + "0" * 5000 + "}"),
                                     r"card.json.*integer of 5001 digits"),
    "card-is-a-directory": Case(replace_with(CARD_FILE, Path.mkdir), r"card.json: not a regular file \(a directory"),
    "card-is-a-fifo": Case(replace_with(CARD_FILE, fifo), r"card.json: not a regular file \(a FIFO"),
    "card-symlink-loop": Case(symlink_loop, r"card.json: cannot be opened"),
    "card-to-dev-zero": Case(replace_with(CARD_FILE, lambda p: p.symlink_to("/dev/zero")),
                             r"card.json: points outside its checkpoint folder"),
    "card-symlink-out": Case(link_out(CARD_FILE), r"card.json: points outside its checkpoint folder"),
    "card-50-mb-description": Case(edit_json(CARD_FILE, lambda c: c.update(description="x" * (50 << 20))),
                                   r"card.json: [\d,]+ bytes, more than the 1,048,576 allowed"),
    "card-long-description": Case(edit_json(CARD_FILE, lambda c: c.update(description="x" * 100_000)),
                                  r"card.json: description must be a string of at most 20,000 characters, "
                                  r"got .*\(100,000 characters\)"),
    "card-snapshot-fraction-lots": Case(edit_json(CARD_FILE, lambda c: c["snapshots"][0].update(fraction="lots")),
                                        r"snapshots\[0\]\['fraction'\] must be a number from 0 to 1, got 'lots'"),
    "card-history-not-numbers": Case(edit_json(CARD_FILE, lambda c: c.update(history=[1, "a", None])),
                                     r"history\[\d\] must be an object"),
    "card-history-string-value": Case(edit_json(CARD_FILE, lambda c: c.update(history=[{"step": 1, "loss": "a"}])),
                                      r"history\[0\]\['loss'\] must be a number, got 'a'"),
    "card-nan": Case(edit_text(CARD_FILE, lambda t: t[:-1] + ', "wall_time_s": NaN}'),
                     r"card.json: not valid JSON \(NaN is not a number JSON allows"),
    "card-1e999": Case(edit_text(CARD_FILE, lambda t: t[:-1] + ', "wall_time_s": 1e999}'),
                       r"card.json: not valid JSON \(1e999 is out of range"),
    "card-not-utf8": Case(lambda f: (f / CARD_FILE).write_bytes(b"\xff\xfe{}"), r"card.json: not UTF-8"),
    # config.json
    "config-is-a-directory": Case(replace_with(CONFIG_FILE, Path.mkdir), r"config.json: not a regular file"),
    "config-d-model-1e9": Case(edit_json(CONFIG_FILE, lambda c: c.update(d_model=10**9)),
                               r"config.json: d_model must be an integer from 1 to 4,096, got 1,000,000,000"),
    "config-4096-wide": Case(edit_json(CONFIG_FILE, lambda c: c.update(HUGE_CONFIG)),
                             r"config.json: the model would have [\d,]+ parameters, more than this server's "
                             r"memory allows"),
    "config-20000-layers": Case(edit_json(CONFIG_FILE, lambda c: c.update(num_encoder_layers=20_000)),
                                r"num_encoder_layers must be an integer from 0 to 64, got 20,000"),
    "config-eps-tiny": Case(edit_json(CONFIG_FILE, lambda c: c.update(layer_norm_eps="tiny")),
                            r"layer_norm_eps must be a number in \(0, 1\), got 'tiny'"),
    "config-eps-negative": Case(edit_json(CONFIG_FILE, lambda c: c.update(layer_norm_eps=-1e-5)),
                                r"layer_norm_eps must be a number in \(0, 1\), got -1e-05"),
    "config-eps-nan": Case(edit_text(CONFIG_FILE, lambda t: t.replace('"layer_norm_eps": 1e-05',
                                                                           '"layer_norm_eps": NaN')),
                           r"config.json: not valid JSON \(NaN"),
    "config-pad-id-false": Case(edit_json(CONFIG_FILE, lambda c: c.update(pad_id=False)),
                                r"pad_id must be an integer from 0 to 511,999, got False"),
    "config-5000-digits": Case(edit_text(CONFIG_FILE, lambda t: t.replace('"max_len": 34',
                                                                               '"max_len": ' + "9" * 5000)),
                               r"config.json: not valid JSON \(an integer of 5000 digits"),
    "config-64-kb-of-quoted-quotes": Case(quoted_quotes(CONFIG_FILE, 64 << 10), r"config.json: not valid JSON"),
    "config-fifo": Case(replace_with(CONFIG_FILE, fifo), r"config.json: not a regular file \(a FIFO"),
    # tokenizers
    "tokenizer-fifo": Case(replace_with(SRC_TOKENIZER_FILE, fifo), r"src.model: not a regular file \(a FIFO"),
    "tokenizer-17-mb": Case(sparse_file(SRC_TOKENIZER_FILE, 17 << 20), r"src.model: 17,825,792 bytes, more than"),
    # source_words.txt (absent from the tiny checkpoint: each case plants one)
    "words-fifo": Case(lambda f: fifo(f / SOURCE_WORDS_FILE), r"source_words.txt: not a regular file \(a FIFO"),
    "words-9-mb": Case(sparse_file(SOURCE_WORDS_FILE, 9 << 20), r"source_words.txt: 9,437,184 bytes, more than"),
    "words-symlink-out": Case(lambda f: ((f.parent / "words.txt").write_text("ab\n"),
                                         (f / SOURCE_WORDS_FILE).symlink_to(f.parent / "words.txt")),
                              r"source_words.txt: points outside"),
    "words-markup": Case(lambda f: (f / SOURCE_WORDS_FILE).write_text("ab\n<script>\n"),
                         r"source_words.txt, line 2: not one lower-case word"),
    # model.safetensors
    "weights-fifo": Case(replace_with(WEIGHTS_FILE, fifo), r"model.safetensors: not a regular file \(a FIFO"),
    "weights-symlink-out": Case(link_out(WEIGHTS_FILE), r"model.safetensors: points outside"),
    "weights-10-gb-sparse": Case(sparse_file(WEIGHTS_FILE, 10 << 30),
                                 r"model.safetensors: 10,737,418,240 bytes, more than"),
    "weights-pickle-not-safetensors": Case(lambda f: (f / WEIGHTS_FILE).write_bytes(global_pickle("os", "system")),
                                           r"model.safetensors: not a (readable )?safetensors file"),
    "weights-header-longer-than-the-file": Case(
        lambda f: (f / WEIGHTS_FILE).write_bytes((1 << 40).to_bytes(8, "little") + b"{}"),
        r"model.safetensors: not a (readable )?safetensors file"),
    "weights-header-says-40000-squared": Case(edit_header(lambda h: h["generator.bias"].update(shape=[40_000, 40_000])),
                                              r"model.safetensors: not a readable safetensors file", listed=False),
    "weights-header-says-int32": Case(edit_header(lambda h: h["generator.bias"].update(dtype="I32")),
                                      r"model.safetensors: generator.bias is torch.int32, expected a float tensor",
                                      listed=False),
    "weights-nan": Case(edit_weights(set_tensor("generator.bias", lambda t: torch.full_like(t, float("nan")))),
                        r"model.safetensors: generator.bias holds NaN or infinite values", listed=False),
    "weights-inf-fp16": Case(edit_weights(set_tensor("generator.bias",
                                                     lambda t: torch.full_like(t, float("inf")).half())),
                             r"model.safetensors: generator.bias holds NaN", listed=False),
    "weights-integer": Case(edit_weights(set_tensor("generator.bias", lambda t: t.long())),
                            r"model.safetensors: generator.bias is torch.int64, expected a float tensor", listed=False),
    "weights-missing-and-extra": Case(edit_weights(lambda s: s.update({"x" * 10_000: s.pop("generator.bias")})),
                                      r"model.safetensors does not match config.json: missing \['generator.bias'\]",
                                      listed=False),
    # A tied weight is stored once: a second copy, which could differ from the first, is an extra tensor.
    "weights-tied-copy-stored-apart": Case(edit_weights(lambda s: s.update({
        "generator.weight": torch.zeros_like(s["encoder.embed.token.weight"])})),
        r"model.safetensors does not match config.json: missing \[\], unexpected \['generator.weight'\]",
        listed=False),
    # model.pt (a torch zip in its place)
    "torch-zip-tuple-key-of-2-to-the-80-hash-steps": Case(
        in_torch_zip(pickle_replaced(tuple_key_pickle(80))),
        r"model.pt: refused to load.*a dict key that is not a string"),
    "torch-zip-global-os-system": Case(in_torch_zip(pickle_replaced(global_pickle("os", "system"))),
                                       r"model.pt: refused to load.*global 'os system'"),
    "torch-zip-bomb": Case(in_torch_zip(zip_bomb), r"model.pt: .*(compressed|more than the)"),
    "torch-zip-sparse-10-gb": Case(in_torch_zip(sparse_file(TORCH_ZIP, 10 << 30)),
                                   r"model.pt: 10,737,418,240 bytes, more than"),
    "torch-zip-fp16-element-as-40000-squared": Case(in_torch_zip(edit_weights(set_tensor(
        "generator.bias", lambda t: torch.zeros(1, dtype=torch.float16).expand(40_000, 40_000)), TORCH_ZIP)),
        r"model.pt does not match config.json: generator.bias has shape \(40000, 40000\)", listed=False),
    "torch-zip-fp16-element-viewed-as-the-right-shape": Case(in_torch_zip(edit_weights(set_tensor(
        "generator.bias", lambda t: torch.zeros(1, dtype=torch.float16).expand(t.shape)), TORCH_ZIP)),
        r"model.pt: generator.bias is not a plain tensor over its own storage", listed=False),
    "torch-zip-nan": Case(in_torch_zip(edit_weights(set_tensor(
        "generator.bias", lambda t: torch.full_like(t, float("nan"))), TORCH_ZIP)),
        r"model.pt: generator.bias holds NaN or infinite values", listed=False),
    # snapshots
    "snapshot-fifo": Case(snapshot_fifo, r"step_\d+.safetensors: not a regular file \(a FIFO", listed=False,
                          snapshot=True),
    "snapshot-symlink-out": Case(snapshot_link_out, r"step_\d+.safetensors: points outside", listed=False,
                                 snapshot=True),
    "snapshot-nan": Case(in_snapshot(lambda file: edit_weights(set_tensor(
        "generator.bias", lambda t: torch.full_like(t, float("nan"))), file)),
        r"step_\d+.safetensors: generator.bias holds NaN", listed=False, snapshot=True),
    "snapshot-missing": Case(lambda f: (f / first_snapshot(f)).unlink(), r"step_\d+.safetensors: file is missing",
                             listed=False, snapshot=True),
}


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint):
    """The tiny checkpoint, loaded here once: the children are forked from a process that has loaded one (torch's
    meta device, which the loader builds shapes on, imports torch._dynamo on first use: seconds, once)."""
    return load_checkpoint(tiny_checkpoint)


@pytest.fixture
def root(tiny_checkpoint, tmp_path, checkpoint) -> Path:
    """A checkpoints folder with a good checkpoint and a copy of it, "bad", for a case to damage."""
    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoint, root / "good")
    shutil.copytree(tiny_checkpoint, root / "bad")
    return root


def list_and_load(root: Path, snapshot: bool) -> dict:
    statuses = dict(checkpoint_status(root))
    checkpoint = load_checkpoint(root / "bad")
    if snapshot:
        checkpoint.load_snapshot(checkpoint.snapshot_names()[0])
    return statuses


@pytest.mark.parametrize("name", CASES)
def test_hostile_folder_is_refused_quickly_and_cheaply(root, name):
    case = CASES[name]
    case.plant(root / "bad")
    outcome = bounded_run(lambda: list_and_load(root, case.snapshot))
    assert outcome.error == "CheckpointError", outcome
    assert re.search(case.match, outcome.message), outcome.message
    assert_bounded(outcome)
    statuses = bounded_run(lambda: dict(checkpoint_status(root))).value
    assert statuses["good"] == ""
    if case.listed:
        assert re.search(case.match, statuses["bad"]), statuses["bad"]
    else:
        assert statuses["bad"] == ""


def test_the_status_of_every_case_at_once_beside_a_good_checkpoint(tiny_checkpoint, tmp_path, checkpoint):
    """All the listed cases in one folder: one call lists each with its reason, within the bounds."""
    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoint, root / "good")
    listed = {name: case for name, case in CASES.items() if case.listed}
    for name, case in listed.items():
        shutil.copytree(tiny_checkpoint, root / name)
        case.plant(root / name)
    outcome = bounded_run(lambda: dict(checkpoint_status(root)))
    assert outcome.error == "", outcome
    assert outcome.value.pop("good") == ""
    assert outcome.value.keys() == listed.keys()
    for name, reason in outcome.value.items():
        assert re.search(listed[name].match, reason), (name, reason)
    assert_bounded(outcome)
    version = bounded_run(lambda: [checkpoint_version(root / name) for name in listed])
    assert version.error == "" and all(isinstance(v, int) for v in version.value)


def test_shipped_format_round_trips_and_status_is_cheap(root):
    assert dict(checkpoint_status(root)) == {"good": "", "bad": ""}
    before = checkpoint_version(root / "good")
    time.sleep(0.01)
    (root / "good" / CARD_FILE).write_text((root / "good" / CARD_FILE).read_text())
    assert checkpoint_version(root / "good") > before
    assert checkpoint_version(root / "missing") == 0


# -------------------------------------------------------------------------------------------- hostile library calls


CALLS = {
    "beam-size-10000": (lambda c: c.translate("abc", beam_size=10_000), "ValueError", "beam_size must be an integer"),
    "beam-size-1e6": (lambda c: c.translate("abc", beam_size=10**6), "ValueError", f"from 1 to {MAX_BEAM_SIZE}"),
    "beam-size-2.5": (lambda c: c.translate("abc", beam_size=2.5), "ValueError", "beam_size must be an integer"),
    "beam-size-str": (lambda c: c.translate("abc", beam_size="3"), "ValueError", "got '3'"),
    "beam-size-true": (lambda c: c.translate("abc", beam_size=True), "ValueError", "got True"),
    "beam-search-0": (lambda c: beam_search(c.model, torch.tensor([[4, 3]]), 0), "ValueError", "beam_size"),
    "max-len-0": (lambda c: c.translate("abc", max_len=0), "ValueError", "max_len must be an integer of at least 2"),
    "max-len-minus-5": (lambda c: c.translate("abc", max_len=-5), "ValueError", "got -5"),
    "max-len-float": (lambda c: c.translate("abc", max_len=5.0), "ValueError", "got 5.0"),
    "capture-5": (lambda c: capture(c.model, 5).__enter__(), "TypeError", "capture's names must be"),
    "capture-not-a-model": (lambda c: capture(5).__enter__(), "TypeError", "expects a Transformer"),
    "ablate-half-head": (lambda c: ablate(c.model, {"decoder.layers.0.cross_attn": [0.5]}).__enter__(), "TypeError",
                         r"must be a list of head numbers \(integers\), got \[0.5\]"),
    "ablate-bool-head": (lambda c: ablate(c.model, {"decoder.layers.0.cross_attn": [True]}).__enter__(), "TypeError",
                         r"got \[True\]"),
    "ablate-bare-int": (lambda c: ablate(c.model, {"decoder.layers.0.cross_attn": 0}).__enter__(), "TypeError",
                        "got 0"),
    "ablate-list": (lambda c: ablate(c.model, [0]).__enter__(), "TypeError", "heads must be a mapping"),
    "ablate-mode": (lambda c: ablate(c.model, {}, mode=["zero"]).__enter__(), "ValueError", "mode must be one of"),
    "text-not-str": (lambda c: c.translate(b"abc"), "TypeError", "text must be a string"),
}


@pytest.mark.parametrize("name", CALLS)
def test_hostile_call_is_a_clear_error(checkpoint, name):
    call, error, match = CALLS[name]
    outcome = bounded_run(lambda: call(checkpoint))
    assert outcome.error == error, outcome
    assert re.search(match, outcome.message), outcome.message
    assert_bounded(outcome)


@pytest.mark.parametrize("text", [
    "\u0301\u0316" * 500_000,  # a million alternating combining marks: NFKC reorders them, quadratic in the run
    "a" * 10_000_000,  # 10 MB of letters
    "ab " * 3_000_000,  # 3 million words: splitting them all would cost hundreds of MB
])
def test_huge_inputs_are_cut_before_normalising(checkpoint, text):
    outcome = bounded_run(lambda: checkpoint.translate(text).warnings)
    assert outcome.error in ("", "ValueError"), outcome  # the marks alone leave nothing to read: a clear message
    if outcome.error == "":
        assert any(warning.code == "cut_off_chars" for warning in outcome.value)
    assert_bounded(outcome)


def test_bounded_keeps_what_max_len_tokens_can_hold():
    limit = 34 * MAX_CHARS_PER_TOKEN
    assert bounded(" " * 5000 + "ab" + " " * 5000, 34) == ("ab", False)
    assert bounded("x" * limit, 34) == ("x" * limit, False)
    assert bounded("x" * (limit + 1), 34) == ("x" * limit, True)
    assert bounded("a \t\n b", 34) == ("a b", False)


def test_config_values_refused_in_code_too():
    with pytest.raises(ValueError, match="tie_output_embedding must be true or false"):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, tie_output_embedding=1)
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\), got nan"):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, dropout=float("nan"))


def test_duplicate_ablated_heads_are_removed_once(checkpoint):
    src, tgt = torch.tensor([checkpoint.encode("abc")]), torch.tensor([[2, 4, 5]])
    with torch.no_grad():
        with ablate(checkpoint.model, {"decoder.layers.0.cross_attn": [1, 1, 0]}):
            twice = checkpoint.model(src, tgt)
        with ablate(checkpoint.model, {"decoder.layers.0.cross_attn": [0, 1]}):
            once = checkpoint.model(src, tgt)
    torch.testing.assert_close(twice, once)



def test_a_folder_whose_checks_take_too_long_is_listed_as_broken_and_holds_up_nothing(root, monkeypatch):
    """The watchdog of checkpoint_status (and the app's listing): a check that has not ended after INSPECTION_S is
    reported, and the other folders are listed meanwhile."""
    import transformer.io.checkpoint as checkpoint_module

    real, release = checkpoint_module.inspect_checkpoint, __import__("threading").Event()

    def stuck_on_bad(path):
        if Path(path).name == "bad":
            release.wait(30)
        return real(path)

    monkeypatch.setattr(checkpoint_module, "inspect_checkpoint", stuck_on_bad)
    monkeypatch.setattr(checkpoint_module, "INSPECTION_S", 0.5)
    try:
        statuses = dict(checkpoint_status(root))
    finally:
        release.set()
    assert statuses["good"] == ""
    assert re.search(r"bad: checking it took longer than 0.5 s", statuses["bad"]), statuses
