"""Shared fixtures: small random models (fast on CPU), a tiny trained checkpoint folder, and the app on it."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import APP, checkpoints_folder, small_model
from transformer import Transformer


@pytest.fixture
def model() -> Transformer:
    return small_model()


TINY_TRAINING = ["--task", "reverse", "--train-size", "400", "--dev-size", "40", "--dev-eval-size", "20",
                 "--d-model", "32", "--num-heads", "4", "--layers", "1", "--d-ff", "64", "--max-len", "34",
                 "--max-tokens", "512", "--warmup", "5", "--eval-every", "10", "--quiet"]


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A reverse checkpoint trained for 20 steps by the real training command (seconds on a CPU)."""
    from transformer.train import main

    out = tmp_path_factory.mktemp("checkpoints") / "tiny-reverse"
    main(TINY_TRAINING + ["--out", str(out), "--steps", "20", "--shared-vocab"])
    return out


@pytest.fixture(scope="module")
def app_checkpoints(tiny_checkpoint, tmp_path_factory) -> Path:
    return checkpoints_folder(tiny_checkpoint, tmp_path_factory.mktemp("app-checkpoints"))


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
