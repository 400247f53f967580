"""Peak resident memory, each figure in a fresh process so that one cannot inflate another.

    python -m benchmarks.memory pass CHECKPOINT TOKENS all|none    # one teacher-forced pass, attention captured or not
    python -m benchmarks.memory app CHECKPOINT TEXT                # one app session: first run, then the model view
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import torch

from deploy.server import ROOT
from transformer import capture, load_checkpoint

from .common import Setup, peak_rss_mb, result
from .fixtures import app_folder, random_ids, text_of, widened

FIGURE = "memory"


def one_pass(checkpoint: Path, tokens: int, captured: bool) -> dict:
    model = widened(load_checkpoint(checkpoint).model, tokens)
    src, tgt = random_ids(model.config, 1, tokens)
    loaded_mb = peak_rss_mb()
    with torch.no_grad(), capture(model) if captured else contextlib.nullcontext():
        model(src, tgt)
    return {"loaded_mb": loaded_mb, "peak_mb": peak_rss_mb()}


def one_session(checkpoint: Path, text: str) -> dict:
    from .app_latency import checked, new_session, serving

    with serving(checkpoint.parent):
        app = checked(new_session(checkpoint.name, text).run())
        checked(app.segmented_control(key="view").set_value("model").run())
    return {"peak_mb": peak_rss_mb()}


def in_fresh_process(*args: object) -> dict:
    command = [sys.executable, "-m", "benchmarks.memory", *map(str, args)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def measure(setup: Setup) -> list[dict]:
    tokens = 64 if setup.smoke else 512
    plain = in_fresh_process("pass", setup.checkpoint, tokens, "none")
    captured = in_fresh_process("pass", setup.checkpoint, tokens, "all")
    app_checkpoint = app_folder(setup, setup.checkpoint) / setup.checkpoint.name
    text = text_of(load_checkpoint(app_checkpoint).src_tokenizer, 20)
    session = in_fresh_process("app", app_checkpoint, text)
    return [
        result(FIGURE, f"peak RSS of a pass with all attention captured, {tokens} tokens, batch 1", captured["peak_mb"],
               "MB", plain_peak_mb=plain["peak_mb"], loaded_mb=captured["loaded_mb"]),
        result(FIGURE, f"of which capture adds (over the same pass uncaptured), {tokens} tokens",
               captured["peak_mb"] - plain["peak_mb"], "MB", signed=True),  # two processes' peaks: noise either way
        result(FIGURE, f"peak RSS of one app session (AppTest: first run and model view, 20 tokens, "
               f"{setup.checkpoint.name})", session["peak_mb"], "MB"),
    ]


if __name__ == "__main__":
    kind, checkpoint, argument, *rest = sys.argv[1:]
    if kind == "pass":
        print(json.dumps(one_pass(Path(checkpoint), int(argument), rest == ["all"])))
    else:
        print(json.dumps(one_session(Path(checkpoint), argument)))
