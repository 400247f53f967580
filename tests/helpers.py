"""What the tests share: small random models, the app's checkpoints folder and threads run together. Imported as a
module; conftest.py holds the fixtures and the tiny checkpoint's training recipe."""
from __future__ import annotations

import ast
import base64
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer import Transformer, TransformerConfig

PAD, BOS, EOS = 0, 2, 3


def small_config(**overrides) -> TransformerConfig:
    values = dict(src_vocab_size=37, tgt_vocab_size=41, d_model=32, num_heads=4, num_encoder_layers=2,
                  num_decoder_layers=2, d_ff=64, dropout=0.0, max_len=40)
    values.update(overrides)
    return TransformerConfig(**values)


def small_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(small_config(**overrides)).eval()


def random_batch(config: TransformerConfig, lengths_src: list[int], lengths_tgt: list[int], seed: int = 1):
    """Right-padded (src, tgt) id batches: tgt starts with BOS; tokens avoid the special ids."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths_src), max(lengths_src)), PAD)
    tgt = torch.full((len(lengths_tgt), max(lengths_tgt)), PAD)
    for row, n in enumerate(lengths_src):
        src[row, :n] = torch.randint(4, config.src_vocab_size, (n,), generator=generator)
    for row, n in enumerate(lengths_tgt):
        tgt[row, :n] = torch.randint(4, config.tgt_vocab_size, (n,), generator=generator)
        tgt[row, 0] = BOS
    return src, tgt


ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"  # the corpora, beside the repository (never copied into it)


def corpus_file(path: Path) -> Path:
    """`path`, a corpus file of ../shared/data (beside the repository, never in it). A test that reads one is skipped
    where it is absent, as in a user's fresh clone, and fails where CI is set: CI has the corpora, and a skip there
    would hide a broken test."""
    if not path.is_file():
        message = f"needs the corpus {path.resolve()} (../shared/data beside the repository)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
APP = str(ROOT / "app.py")

LOADABLE = ("tiny-reverse", "tiny-twin")  # the first one (in name order) is the app's default
TRAINING = "training-now"  # a folder without card.json, as the trainer leaves it while it runs


def checkpoints_folder(tiny_checkpoint: Path, root: Path, twin: Path | None = None) -> Path:
    """`root` with two loadable checkpoints (so checkpoints can be compared) and one that is still training (no
    card.json), which the app must report without losing the others. The second is `twin` (a differently trained
    checkpoint) where given, else a copy of the first."""
    for name, source in zip(LOADABLE, (tiny_checkpoint, twin or tiny_checkpoint)):
        shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("resume.pt"))
    shutil.copytree(tiny_checkpoint, root / TRAINING, ignore=shutil.ignore_patterns("resume.pt", "card.json"))
    return root


# The test checkpoints: the real training command (2 layers each side, 4 heads) on a task small enough to learn in
# seconds, reversing 1-6 letters and digits, so that it really answers: it stops with EOS at every length, its heads
# differ, and its beams swap places. The alphabet is the whole of the reverse task's, so every letter and digit is a
# piece of its own (tests/test_bad_input.py works out its tokens by hand).
TINY_TRAINING = ["--task", "reverse", "--train-size", "4000", "--dev-size", "200", "--dev-eval-size", "100",
                 "--d-model", "32", "--num-heads", "4", "--layers", "2", "--d-ff", "64", "--max-len", "34",
                 "--dropout", "0", "--lr", "3e-3", "--max-tokens", "512", "--warmup", "50", "--cooldown", "0.4",
                 "--eval-every", "250", "--quiet"]
TINY_STEPS = 500
TINY_LENGTHS = (1, 6)  # the lengths of the strings the test checkpoints learn to reverse
# The twin changes one idea, pre-LN instead of post-LN: the same data and vocabulary (so the app can compare the two
# on one sequence), other weights and heads.
TINY_VARIANTS = {LOADABLE[0]: [], LOADABLE[1]: ["--norm-first"]}


WAIT_S = 120  # bound on a wait for what a test's own threads do: generous, for a machine whose cores are busy


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Return as soon as condition() holds; fail the test, saying `what` it waited for, if it has not after
    `timeout_s` (a busy machine gets there late, a broken program never)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s} s for {what}")
        time.sleep(0.002)


def run_together(worker: Callable[[int], object], count: int, timeout_s: float = WAIT_S) -> None:
    """worker(i) for i in range(count), each in a thread of its own, all released at once (so the calls overlap).
    Fails the test if a thread raised (an exception in a thread would otherwise pass unseen) or did not finish."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count, timeout=timeout_s)

    def run(i: int) -> None:
        try:
            barrier.wait()
            worker(i)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    assert not any(thread.is_alive() for thread in threads), "a thread did not finish"
    assert not errors, errors


def outputs(at) -> list[str]:
    """The model outputs an AppTest page shows (ui.widgets.model_output), in page order."""
    from ui.widgets import OUTPUT_HELP

    return [text.value for text in at.text if text.proto.help == OUTPUT_HELP]


def plotly_values(data) -> np.ndarray:
    """A trace's numbers as Plotly's JSON ships them: a list, or a typed array ({"bdata", "dtype", "shape"})."""
    if isinstance(data, dict):
        shape = [int(size) for size in str(data.get("shape", "-1")).split(",")]
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).reshape(shape)
    return np.asarray(data, dtype=float)


def count_calls(monkeypatch, owner: object, name: str) -> list[int]:
    """Count the calls of `owner.name` from now on (monkeypatched for the test): [calls]."""
    calls, original = [0], getattr(owner, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved, and each imported name as if it were a module."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            package = ".".join(path.relative_to(ROOT).parent.parts[: len(path.relative_to(ROOT).parts) - node.level])
            base = ".".join(part for part in (package if node.level else "", node.module or "") if part)
            modules.add(base)
            modules.update(f"{base}.{alias.name}".strip(".") for alias in node.names)
    return modules


def reaches(modules: set[str], forbidden: tuple[str, ...]) -> set[str]:
    return {module for module in modules if module.split(".")[0] in forbidden or module in forbidden}
