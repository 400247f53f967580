"""Shared fixtures: small random models (fast on CPU), a tiny trained checkpoint folder, and the app on it."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from app_helpers import checkpoints_folder
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


APP = str(Path(__file__).parents[1] / "app.py")


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
