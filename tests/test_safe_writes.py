"""Writing a checkpoint never loses or mixes one: `train` and `convert` check their flags and inputs before writing,
write beside the folder and rename into place under a lock, and replace a checkpoint only with --replace. Each
interruption runs in a forked child (under a memory and CPU-time cap) that signals itself at a chosen point; the
target folder must then be exactly as it was, or complete and loadable."""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
import resource
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import safetensors.torch
import torch
from test_hostile import _memory_status

from helpers import TINY_TRAINING
from transformer import checkpoint_folders, load_checkpoint
from transformer.io import checkpoint as checkpoint_module
from transformer.io import convert
from transformer.io.checkpoint import CheckpointError, staging_folder, writer_lock
from transformer.training import train

pytestmark = pytest.mark.slow  # trainings and conversions in forked children
CHILD_TIMEOUT_S = 60
ADDRESS_SPACE_CAP = 2 << 30
# A few steps of the tiny recipe on a few pairs: seconds, and every save of a real run (weights, snapshot, card).
QUICK = TINY_TRAINING + ["--train-size", "200", "--dev-size", "20", "--dev-eval-size", "10", "--steps", "4",
                         "--eval-every", "2", "--snapshots", "0,0.5"]


def contents(folder: Path) -> dict[str, str] | None:
    """Every file under `folder` by relative path, with its SHA-256; None when there is no folder."""
    if not folder.exists():
        return None
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def _limited(call: Callable[[], object]) -> None:
    # The signals these tests send act as they do by default, whatever the parent inherited: a shell starts a
    # background job with SIGINT ignored, and Python then installs no KeyboardInterrupt handler for it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    torch.set_num_threads(1)  # a forked child cannot use the parent's OpenMP threads
    cap = _memory_status("VmSize") + ADDRESS_SPACE_CAP  # on top of what the parent has mapped
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CPU, (CHILD_TIMEOUT_S, CHILD_TIMEOUT_S))
    try:
        call()
    except KeyboardInterrupt:
        os._exit(130)
    except SystemExit as error:
        os._exit(error.code if isinstance(error.code, int) else 1)
    os._exit(0)


def run_child(call: Callable[[], object]) -> int:
    """call() in a forked child; its exit code (negative: killed by that signal; 130: KeyboardInterrupt)."""
    process = multiprocessing.get_context("fork").Process(target=_limited, args=(call,), daemon=True)
    process.start()
    process.join(CHILD_TIMEOUT_S)
    if process.is_alive():
        process.kill()
        process.join()
        pytest.fail(f"the child ran for over {CHILD_TIMEOUT_S} s")
    return process.exitcode


def interrupted_at(owner: object, name: str, signum: int, *, after: bool = False) -> Callable[[], None]:
    """Patch owner.name (in the child only) to send `signum` to its own process on its first call, before the
    original runs (or right after it, with `after`)."""
    original, calls = getattr(owner, name), []

    def interrupting(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1 and not after:
            os.kill(os.getpid(), signum)
        result = original(*args, **kwargs)
        if len(calls) == 1 and after:
            os.kill(os.getpid(), signum)
        return result

    return lambda: setattr(owner, name, interrupting)


def half_written_save(signum: int) -> Callable[[], None]:
    """safetensors' save_file that writes the first half of the file, then signals (a save interrupted halfway)."""
    original = safetensors.torch.save_file

    def save(tensors, path, *args, **kwargs):
        original(tensors, path, *args, **kwargs)
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[: len(data) // 2])
        os.kill(os.getpid(), signum)

    return lambda: setattr(safetensors.torch, "save_file", save)


def assert_as_before_or_complete(target: Path, before: dict[str, str] | None, exit_code: int) -> None:
    after = contents(target)
    if after != before:
        load_checkpoint(target)  # a new folder: it must be whole
        assert (target / "card.json").exists()
    assert checkpoint_folders(target.parent) == ([target.name] if before or after else []), exit_code


# ------------------------------------------------------------------------------------------------------- training


def train_into(out: Path, *extra: str) -> Callable[[], object]:
    def run():
        from conftest import short_reverse_pairs

        train.generate = short_reverse_pairs
        return train.main(QUICK + ["--out", str(out), *extra])
    return run


TRAIN_POINTS = {  # before, during and after the final save
    "half-way-through-the-first-weights": half_written_save,  # a snapshot, at step 0
    "keeping-the-best-weights": lambda signum: interrupted_at(train.Trainer, "keep_weights", signum),
    "before-the-card": lambda signum: interrupted_at(train, "write_card", signum),
    "between-the-renames": lambda signum: interrupted_at(os, "rename", signum, after=True),
}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("point", TRAIN_POINTS)
def test_interrupted_training_leaves_the_checkpoint_as_it_was_or_complete(tiny_checkpoint, tmp_path, point, signum):
    target = shutil.copytree(tiny_checkpoint, tmp_path / "root" / "model")
    before = contents(target)
    patch = TRAIN_POINTS[point](signum)
    exit_code = run_child(lambda: (patch(), train_into(target, "--replace")()))
    assert exit_code in (-signum, 130), exit_code  # killed by SIGTERM, KeyboardInterrupt for SIGINT
    assert_as_before_or_complete(target, before, exit_code)
    if point == "between-the-renames":  # the signal waited for both: the new checkpoint is in place
        assert contents(target) != before


def test_an_interrupted_run_resumes_from_where_it_was_and_replaces_the_folder_once(tiny_checkpoint, tmp_path):
    target = shutil.copytree(tiny_checkpoint, tmp_path / "root" / "model")
    before = contents(target)
    patch = interrupted_at(train, "write_card", signal.SIGTERM)
    assert run_child(lambda: (patch(), train_into(target, "--replace")())) == -signal.SIGTERM
    assert contents(target) == before and (staging_folder(target, "training") / train.RESUME_FILE).exists()
    assert run_child(train_into(target, "--resume")) == 0
    checkpoint = load_checkpoint(target)
    assert [entry["step"] for entry in checkpoint.card.history] == [2, 4]
    assert not (target / "snapshots" / "step_000150.safetensors").exists()  # the old run's snapshots went with it
    assert not staging_folder(target, "training").exists()


def test_training_into_a_checkpoint_without_replace_refuses_and_changes_nothing(tiny_checkpoint, tmp_path, capsys):
    target = shutil.copytree(tiny_checkpoint, tmp_path / "model")
    before = contents(target)
    with pytest.raises(SystemExit, match=r"model: a checkpoint \(or other files\) is already there.*--replace"):
        train_into(target)()
    assert contents(target) == before and sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_two_trainings_into_one_folder_one_refuses(tmp_path):
    target = tmp_path / "model"
    with writer_lock(target):  # a run in progress holds the folder
        assert run_child(train_into(target)) == 1
    assert not target.exists() and not staging_folder(target, "training").exists()
    with pytest.raises(SystemExit, match="another process is writing this checkpoint"):
        with writer_lock(target):
            train_into(target)()  # in one process, a second lock on the same file is refused too


@pytest.mark.parametrize("flags, message", [
    (["--steps", "0"], "--steps must be at least 1"),
    (["--eval-every", "0"], "--eval-every must be at least 1"),
    (["--warmup", "0"], "--warmup must be at least 1"),
    (["--lr", "-1"], r"--lr must be in \(0, 1\]"),
    (["--lr", "nan"], r"--lr must be in \(0, 1\]"),
    (["--vocab-size", "0"], "--vocab-size must be at least 8"),
    (["--max-tokens", "0"], "--max-tokens must be at least 1"),
    (["--label-smoothing", "1.5"], "--label-smoothing must be from 0 to 1"),
    (["--snapshots", "0,2"], "--snapshots are fractions"),
    (["--snapshots", "half"], "--snapshots and --snapshot-metrics take numbers"),
    (["--num-heads", "5"], "d_model .* must be divisible by num_heads"),
    (["--d-model", "0"], "d_model must be an integer from 1 to 4,096, got 0"),
    (["--layers", "100"], "num_encoder_layers must be an integer from 0 to 64, got 100"),
    (["--dropout", "1"], r"dropout must be a number in \[0, 1\), got 1"),
])
def test_a_flag_out_of_range_is_a_message_before_anything_is_written(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit):
        train_into(tmp_path / "model", *flags)()
    assert re.search(message, capsys.readouterr().err.splitlines()[-1])
    assert list(tmp_path.iterdir()) == []


def test_a_truncated_resume_file_is_a_message(tiny_checkpoint, tmp_path):
    target = shutil.copytree(tiny_checkpoint, tmp_path / "model")
    torch.save({"model": {}}, target / train.RESUME_FILE)
    data = (target / train.RESUME_FILE).read_bytes()
    (target / train.RESUME_FILE).write_bytes(data[: len(data) // 2])
    before = contents(target)
    with pytest.raises(SystemExit, match=r"--resume: .*resume.pt cannot be read .*cut short"):
        train_into(target, "--resume")()
    assert contents(target) == before


# ----------------------------------------------------------------------------------------------------- conversion


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    pytest.importorskip("transformers", reason="a Marian folder is made with transformers (requirements-dev)")
    from test_convert import make_marian_folder

    folder = tmp_path_factory.mktemp("marian") / "hf"
    make_marian_folder(folder, "shared")
    return folder


def convert_into(source: Path, out: Path, *flags: str) -> Callable[[], None]:
    return lambda: convert.main(["marian", str(source), str(out), *flags])


CONVERT_POINTS = {
    "before-the-save": lambda signum: interrupted_at(convert, "write_folder", signum),
    "half-way-through-the-weights": half_written_save,
    "while-checking-the-new-folder": lambda signum: interrupted_at(convert, "LoadedCheckpoint", signum),
    "between-the-renames": lambda signum: interrupted_at(os, "rename", signum, after=True),
}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("point", CONVERT_POINTS)
def test_interrupted_conversion_leaves_the_checkpoint_as_it_was_or_complete(tiny_checkpoint, marian_folder, tmp_path,
                                                                          point, signum):
    target = shutil.copytree(tiny_checkpoint, tmp_path / "root" / "reverse")
    before = contents(target)
    patch = CONVERT_POINTS[point](signum)
    exit_code = run_child(lambda: (patch(), convert_into(marian_folder, target, "--replace")()))
    assert exit_code in (-signum, 130), exit_code
    assert_as_before_or_complete(target, before, exit_code)
    if point == "between-the-renames":
        assert load_checkpoint(target).card.source  # the converted model, whole
        assert not (target / "snapshots").exists()  # the trained model's snapshots went with it


def test_converting_onto_a_checkpoint_refuses_without_replace_and_replaces_it_whole_with_it(tiny_checkpoint,
                                                                                          marian_folder, tmp_path):
    target = shutil.copytree(tiny_checkpoint, tmp_path / "reverse")
    before = contents(target)
    with pytest.raises(SystemExit, match=r"reverse: a checkpoint \(or other files\) is already there"):
        convert_into(marian_folder, target)()
    assert contents(target) == before
    convert_into(marian_folder, target, "--replace")()
    assert load_checkpoint(target).card.source and not (target / "snapshots").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["reverse"]


def test_a_conversion_that_fails_after_writing_changes_nothing(tiny_checkpoint, marian_folder, tmp_path, monkeypatch):
    target = shutil.copytree(tiny_checkpoint, tmp_path / "reverse")
    before = contents(target)

    def fails(path):
        raise CheckpointError(f"{path}: planted failure")

    monkeypatch.setattr(convert, "LoadedCheckpoint", fails)
    with pytest.raises(SystemExit, match="planted failure"):
        convert_into(marian_folder, target, "--replace")()
    assert contents(target) == before
    assert not staging_folder(target, "converting").exists()


def test_pytorch_model_bin_converts_to_the_same_checkpoint(marian_folder, tmp_path):
    from safetensors.torch import load_file

    folder = shutil.copytree(marian_folder, tmp_path / "hf")
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    convert.convert("marian", marian_folder, tmp_path / "from-safetensors", log=lambda line: None)
    convert.convert("marian", folder, tmp_path / "from-bin", log=lambda line: None)
    ours, theirs = (load_checkpoint(tmp_path / name).model.state_dict() for name in ("from-bin", "from-safetensors"))
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=0, msg=name)


def test_a_pytorch_model_bin_with_a_payload_is_refused(marian_folder, tmp_path):
    folder = shutil.copytree(marian_folder, tmp_path / "hf")
    (folder / "model.safetensors").unlink()
    torch.save({"weights": torch.zeros(2), "extra": [1, 2]}, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"pytorch_model.bin: refused to load"):
        convert.convert("marian", folder, tmp_path / "out", log=lambda line: None)


def _planted(marian_folder: Path, tmp_path: Path, plant: Callable[[Path], None]) -> Path:
    folder = shutil.copytree(marian_folder, tmp_path / "hf")
    plant(folder)
    return folder


def _config_to_dev_zero(folder: Path) -> None:
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to("/dev/zero")


def _config_fifo(folder: Path) -> None:
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")


def _huge_config(folder: Path) -> None:
    import json

    config = json.loads((folder / "config.json").read_text())
    config.update(encoder_layers=64, decoder_layers=64, d_model=4096, encoder_ffn_dim=16384, decoder_ffn_dim=16384,
                  encoder_attention_heads=8, decoder_attention_heads=8)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("plant, message", [
    (_config_to_dev_zero, "config.json: points outside"),
    (_config_fifo, r"config.json: not a regular file \(a FIFO"),
    (_huge_config, r"config.json: the model would have [\d,]+ parameters, more than"),
])
def test_the_converter_reads_through_the_loading_policy(marian_folder, tmp_path, plant, message):
    """Each case in a child capped at 2 GB of address space beyond the parent's: a config that asks for gigabytes
    is refused before anything is built; a FIFO does not block."""
    from test_hostile import assert_bounded, bounded_run

    folder = _planted(marian_folder, tmp_path, plant)
    outcome = bounded_run(lambda: convert.convert("marian", folder, tmp_path / "out", log=lambda line: None))
    assert outcome.error == "CheckpointError" and re.search(message, outcome.message), outcome
    assert_bounded(outcome)
    assert not (tmp_path / "out").exists()


def test_commit_puts_back_a_checkpoint_a_killed_writer_left_aside(tiny_checkpoint, tmp_path):
    """A writer killed outright (SIGKILL) between the two renames leaves the old folder as .NAME.replaced: the next
    writer's lock puts it back before anything else."""
    target = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, checkpoint_module.staging_folder(target, "replaced"))
    with writer_lock(target):
        pass
    load_checkpoint(target)
