"""Shared fixtures: small random models (fast on CPU), two small trained checkpoints (cached), and the app on them.
Plain helpers live in helpers.py."""
from __future__ import annotations

import hashlib
import inspect
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

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


def recipe_key(name: str) -> str:
    """What a cached test checkpoint depends on: the recipe, the library's code and torch's version."""
    digest = hashlib.sha256(repr((TINY_TRAINING, TINY_STEPS, TINY_LENGTHS, TINY_VARIANTS[name], torch.__version__,
                                  inspect.getsource(short_reverse_pairs))).encode())
    for source in sorted((ROOT / "transformer").glob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def trained_checkpoint(name: str) -> Path:
    """The test checkpoint `name`, trained once per recipe (about 15 s on one core) and cached under the temporary
    folder; a folder appears there only complete (trained beside it, then renamed)."""
    folder = CACHE / recipe_key(name) / name
    if not (folder / "card.json").exists():
        from transformer.training import train

        CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="training-", dir=CACHE)) / name
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(train, "generate", short_reverse_pairs)
            train.main(TINY_TRAINING + ["--out", str(staging), "--steps", str(TINY_STEPS), "--shared-vocab",
                                        *TINY_VARIANTS[name]])
        (staging / train.RESUME_FILE).unlink()
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            staging.rename(folder)
        except OSError:  # another test run finished the same recipe first: its copy is as good
            shutil.rmtree(staging.parent)
    return folder


@pytest.fixture(scope="session")
def tiny_checkpoint() -> Path:
    """A 2-layer reverse checkpoint trained by the real training command that really reverses short strings."""
    return trained_checkpoint(LOADABLE[0])


@pytest.fixture(scope="session")
def tiny_twin() -> Path:
    """The same recipe, pre-LN: the same vocabulary, different weights and heads, for comparing checkpoints."""
    return trained_checkpoint(LOADABLE[1])



@pytest.fixture(scope="module")
def app_checkpoints(tiny_checkpoint, tiny_twin, tmp_path_factory) -> Path:
    return checkpoints_folder(tiny_checkpoint, tmp_path_factory.mktemp("app-checkpoints"), tiny_twin)


@pytest.fixture
def app(app_checkpoints, monkeypatch):
    """An AppTest of app.py on the test checkpoints; call it with query parameters, get the first run back."""
    from streamlit.testing.v1 import AppTest  # here: only the app's tests pay for importing streamlit

    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(app_checkpoints))

    def start(**query) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params.update(query)
        return at.run()

    return start
