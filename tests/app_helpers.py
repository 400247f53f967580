"""What the app tests share: a checkpoints folder as the app finds it on a real machine."""
from __future__ import annotations

import shutil
from pathlib import Path

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
