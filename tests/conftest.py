"""Shared fixtures: small random models (fast on CPU), two small trained checkpoints (cached), and the app on them.
Plain helpers live in helpers.py."""
from __future__ import annotations

import fcntl
import functools
import hashlib
import inspect
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from benchmarks.chromium import RUN_S
from helpers import (
    APP,
    LOADABLE,
    ROOT,
    TINY_LENGTHS,
    TINY_STEPS,
    TINY_TRAINING,
    TINY_VARIANTS,
    checkpoints_folder,
    small_model,
)
from transformer import Transformer
from transformer.data.tasks import REVERSE_ALPHABET

# Every figure the tests build is also validated by plotly.py and must give the same JSON (viz.theme.themed_figure);
# the app servers the browser tests start inherit it.
os.environ["ATLAS_VALIDATE_FIGURES"] = "1"
# The corpus summaries the tests compute, and the app servers they start, go to a disk cache of their own: cold at
# the start of every run, and never the user's.
os.environ["ATLAS_CACHE"] = tempfile.mkdtemp(prefix="atlas-test-cache-")
CACHE = Path(tempfile.gettempdir()) / "attention-atlas-test-checkpoints"


@pytest.fixture
def model() -> Transformer:
    return small_model()


def short_reverse_pairs(task: str, n: int, seed: int) -> list[tuple[str, str]]:
    """Stands in for transformer.data.tasks.generate while the test checkpoints train: `n` short strings, reversed."""
    rng = random.Random(seed)
    texts = ["".join(rng.choice(REVERSE_ALPHABET) for _ in range(rng.randint(*TINY_LENGTHS))) for _ in range(n)]
    return [(text, text[::-1]) for text in texts]


@functools.cache  # once per process: the library this run imported, whatever is edited while it runs
def recipe_key(name: str) -> str:
    """What a cached test checkpoint depends on: the recipe, every file of the library (the code that trains, saves
    and loads it, and the schemas its files are checked against), the stand-in data and torch's version."""
    digest = hashlib.sha256(repr((TINY_TRAINING, TINY_STEPS, TINY_LENGTHS, TINY_VARIANTS[name], torch.__version__,
                                  inspect.getsource(short_reverse_pairs))).encode())
    for source in sorted(path for path in (ROOT / "transformer").rglob("*") if path.suffix in (".py", ".json")):
        digest.update(str(source.relative_to(ROOT)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]


def trained_checkpoint(name: str, wait: bool = True) -> Path | None:
    """The test checkpoint `name`, trained once per recipe (about 15 s on a quiet core) and cached under the temporary
    folder. One process at a time trains a recipe, holding a lock file beside it; the others wait for it, or with
    `wait` False get None at once. A folder appears there only complete (trained beside it, then renamed)."""
    folder = CACHE / recipe_key(name) / name
    if (folder / "card.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None
        if not (folder / "card.json").exists():  # not trained while this process waited for the lock
            train_into(folder, name)
    return folder


def train_into(folder: Path, name: str) -> None:
    from transformer.training import train

    staging = Path(tempfile.mkdtemp(prefix="training-", dir=folder.parent))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(train, "generate", short_reverse_pairs)
            train.main(TINY_TRAINING + ["--out", str(staging / name), "--steps", str(TINY_STEPS), "--shared-vocab",
                                        *TINY_VARIANTS[name]])
        (staging / name / train.RESUME_FILE).unlink()
        (staging / name).rename(folder)
    finally:
        shutil.rmtree(staging)


# The fixture each test checkpoint is; a test that needs one has it in its fixture closure.
CHECKPOINT_FIXTURES = {"tiny_checkpoint": LOADABLE[0], "tiny_twin": LOADABLE[1]}
UNTRAINED: dict[str, Exception] = {}  # a test checkpoint whose training failed before the tests: why


def pytest_collection_finish(session: pytest.Session) -> None:
    """Train the test checkpoints the collected tests need before the first test runs: once, and not under
    pytest-timeout's limit for one test (on a busy machine training takes minutes). Under xdist every worker
    collects: each first trains the recipes no other process is training, then waits for the rest."""
    if session.config.option.collectonly:
        return
    needed = sorted({name for item in session.items for fixture, name in CHECKPOINT_FIXTURES.items()
                     if fixture in getattr(item, "fixturenames", ())})
    for wait in (False, True):  # first the recipes no other process is training, then (waiting for them) the rest
        for name in (name for name in needed if name not in UNTRAINED):
            try:
                trained_checkpoint(name, wait)
            except Exception as error:  # its tests fail with it (ready_checkpoint); the others still run
                UNTRAINED[name] = error


def ready_checkpoint(name: str) -> Path:
    if name in UNTRAINED:
        raise RuntimeError(f"the test checkpoint {name} did not train") from UNTRAINED[name]
    return trained_checkpoint(name)


@pytest.fixture(scope="session")
def tiny_checkpoint() -> Path:
    """A 2-layer reverse checkpoint trained by the real training command that really reverses short strings."""
    return ready_checkpoint(LOADABLE[0])


@pytest.fixture(scope="session")
def tiny_twin() -> Path:
    """The same recipe, pre-LN: the same vocabulary, different weights and heads, for comparing checkpoints."""
    return ready_checkpoint(LOADABLE[1])


@pytest.fixture(scope="module")
def app_checkpoints(tiny_checkpoint, tiny_twin, tmp_path_factory) -> Path:
    return checkpoints_folder(tiny_checkpoint, tmp_path_factory.mktemp("app-checkpoints"), tiny_twin)


@pytest.fixture
def app(app_checkpoints, monkeypatch):
    """An AppTest of app.py on the test checkpoints; call it with query parameters, get the first run back."""
    from streamlit.testing.v1 import AppTest  # here: only the app's tests pay for importing streamlit

    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(app_checkpoints))

    def start(**query) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=RUN_S)
        at.query_params.update(query)
        return at.run()

    return start
