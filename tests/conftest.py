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
TEST_CACHE = os.environ["ATLAS_CACHE"] = tempfile.mkdtemp(prefix="atlas-test-cache-")
CACHE = Path(tempfile.gettempdir()) / "attention-atlas-test-checkpoints"
# Each of xdist's processes takes its share of the cores for torch's intra-op threads: two processes of two threads
# each on two cores spin against each other in OpenMP's barriers (the app servers the tests start keep torch's own).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


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


# The modules with the longest single tests (the browser's fit and label tests, the corpus view on a fresh clone, the
# whole dev split's BLEU, the benchmarks' smoke run), run first: xdist then shares them out while the short tests are
# still to come, and the run does not end on one process finishing a long test while the other waits. Each module
# keeps its tests together (its module fixtures are set up once).
LONGEST_FIRST = ("test_browser.py", "test_corpus_view.py", "test_shipped.py", "test_benchmarks.py",
                 "test_memory_load.py", "test_inside_browser.py", "test_gqa_views.py", "test_load.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first = {name: rank for rank, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: the rest in their own order


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(TEST_CACHE, ignore_errors=True)  # the disk cache this process made (its servers have stopped)


def scan_installed_components_once() -> None:
    """Every new AppTest scans every installed distribution's metadata for Streamlit components (0.5-2.5 s a test,
    most of a short AppTest's time); the installed packages do not change while the tests run, so one scan a process
    serves them all (the app's own components are declared in its code, not found by the scan)."""
    from streamlit.components.v2 import manifest_scanner

    manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Train the test checkpoints the collected tests need before the first test runs: once, and not under
    pytest-timeout's limit for one test (on a busy machine training takes minutes). Under xdist every worker
    collects: each first trains the recipes no other process is training, then waits for the rest."""
    if session.config.option.collectonly:
        return
    scan_installed_components_once()
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


@pytest.fixture(scope="session")
def plotly_js():
    """Kaleido's Chromium, started once a process for the tests that read a figure as Plotly.js fills it in
    (full_figure_for_development): without it kaleido starts a browser for every figure (2-5 s each)."""
    import kaleido

    kaleido.start_sync_server(silence_warnings=True)
    yield
    kaleido.stop_sync_server(silence_warnings=True)


@pytest.fixture(scope="session")
def shipped_server(tmp_path_factory):
    """The app on the shipped checkpoints folder, as `streamlit run app.py` serves it, eng-fra's corpus summary
    written into its disk cache ahead of time (python -m transformer.corpus cache), as a server's admin would. One
    server a test process, started for the first browser test that needs it and kept for the others."""
    from deploy.server import ServerError, streamlit_server
    from transformer.corpus import main as corpus_command
    from ui.state import URL_STATE

    corpus_command(["cache", str(ROOT / "checkpoints" / "eng-fra"), "--count", str(URL_STATE["summary_count"][1])])
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    try:
        with streamlit_server(ROOT / "checkpoints", log) as (url, _):
            yield url
    except ServerError as error:
        pytest.fail(str(error))
