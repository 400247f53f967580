"""App latency under AppTest: a session's first run, then a new head, a new input and the model view."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from deploy.server import ROOT
from transformer import load_checkpoint

from .chromium import RUN_S
from .common import Setup, result, side_by_side
from .fixtures import app_folder, distinct_texts, wide_checkpoints

FIGURE = "app latency"
INPUT_TOKENS = 20
HEAD_AT_MOST, INPUT_AT_MOST = 0.3, 1.0


@contextlib.contextmanager
def serving(folder: Path) -> Iterator[None]:
    """The app reads its checkpoints folder from the environment on every run."""
    before = os.environ.get("ATLAS_CHECKPOINTS")
    os.environ["ATLAS_CHECKPOINTS"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            del os.environ["ATLAS_CHECKPOINTS"]
        else:
            os.environ["ATLAS_CHECKPOINTS"] = before


def checked(app):
    if app.exception:
        raise RuntimeError(f"the app failed: {[e.value for e in app.exception]}")
    return app


def new_session(checkpoint_name: str, text: str):
    """A session that has not run yet, opened on a link to `text`, with every cache cleared (Streamlit's and
    ui.shared's): its first run loads the checkpoint and translates, as the first visitor after a start does."""
    from streamlit.logger import set_log_level
    from streamlit.testing.v1 import AppTest

    import ui.shared

    set_log_level("error")  # clearing the caches outside a script run warns that there is no runtime: expected
    ui.shared.clear()  # the passes, figures and lookups every session shares
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=RUN_S)
    app.query_params.update(checkpoint=checkpoint_name, text=text)
    return app


def session_seconds(checkpoint: Path, tokens: int, repeats: int) -> dict[str, float]:
    """Median seconds of each interaction with inputs of `tokens` tokens, over `repeats` fresh sessions (after one
    to warm up)."""
    texts = distinct_texts(load_checkpoint(checkpoint).src_tokenizer, tokens)
    session = {}

    def open_session():
        session["app"] = new_session(checkpoint.name, next(texts))

    interactions = {
        "first run": lambda: checked(session["app"].run()),
        "head change": lambda: checked(session["app"].segmented_control(key="head").set_value(1).run()),
        "new input": lambda: checked(session["app"].text_input(key="text").set_value(next(texts)).run()),
        "model view": lambda: checked(session["app"].segmented_control(key="view").set_value("model").run()),
    }
    with serving(checkpoint.parent):  # a folder holding this checkpoint alone
        return side_by_side(interactions, repeats, prepare={"first run": open_session})


def measure(setup: Setup) -> list[dict]:
    checkpoint = app_folder(setup, setup.checkpoint) / setup.checkpoint.name
    seconds = session_seconds(checkpoint, INPUT_TOKENS, setup.repeats)
    limits = {"head change": HEAD_AT_MOST, "new input": INPUT_AT_MOST}
    rows = [result(FIGURE, f"{name}, {INPUT_TOKENS}-token input, {setup.checkpoint.name}", seconds[name], "s",
                   at_most=limits.get(name)) for name in seconds]
    for tokens, wide in wide_checkpoints(setup).items():
        seconds = session_seconds(wide, tokens, max(1, setup.repeats - 2))
        rows += [result(FIGURE, f"{name}, {tokens} tokens in and out, {wide.name} (random weights)", seconds[name],
                        "s", tokens=tokens, series=f"app {name} (s)") for name in seconds]
    return rows
