"""Shared fixtures: small random models (fast on CPU), two small trained checkpoints (cached), and the app on them."""
from __future__ import annotations

import hashlib
import inspect
import random
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from app_helpers import LOADABLE, checkpoints_folder
from transformer import Transformer, TransformerConfig
from transformer.tasks import REVERSE_ALPHABET

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"  # the corpora, beside the repository (never copied into it)
CACHE = Path(tempfile.gettempdir()) / "attention-atlas-test-checkpoints"

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


def short_reverse_pairs(task: str, n: int, seed: int) -> list[tuple[str, str]]:
    """Stands in for transformer.tasks.generate while the test checkpoints train: `n` short strings, reversed."""
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
        from transformer import train

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


APP = str(ROOT / "app.py")


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
