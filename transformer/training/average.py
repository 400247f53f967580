"""`python -m transformer.average LATER EARLIER --share S --out FOLDER`: a checkpoint whose weights are S x LATER's
+ (1 - S) x EARLIER's, everything else LATER's (config, tokenizers, word list, snapshots, card), its card saying so.

Why: a continuation on new data (eng-fra's chained long pairs) can lose a little of what the weights it started
from did well (short sentences). The two are one line of training, so the straight line between their weights stays
a working model, and a point on it keeps most of each (weight-space interpolation, as WiSE-FT). The card's dev
scores are the LATER's until `transformer.evaluate --record` measures the average: they are left out meanwhile."""
from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from ..inference.translation import Checkpoint
from ..io.checkpoint import (
    CARD_FILE,
    CONFIG_FILE,
    SNAPSHOT_DIR,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    WEIGHTS_FILE,
    WEIGHTS_SUFFIX,
    check_replaceable,
    commit_checkpoint,
    remove_staging,
    save_weights,
    staging_folder,
    weights_entry,
    write_source_words,
    writer_lock,
)
from ..io.safety import CheckpointError


def averaged(later: torch.nn.Module, earlier: torch.nn.Module, share: float) -> dict[str, torch.Tensor]:
    """share x later's floating-point weights + (1 - share) x earlier's, in float32; other tensors are later's."""
    mine, theirs = later.state_dict(), earlier.state_dict()
    if mine.keys() != theirs.keys() or any(mine[name].shape != theirs[name].shape for name in mine):
        raise CheckpointError("the two checkpoints' weights differ in names or shapes: only weights of one model "
                              "can be averaged")
    return {name: share * tensor.float() + (1 - share) * theirs[name].float() if tensor.is_floating_point() else tensor
            for name, tensor in mine.items()}


def average_checkpoints(later_path: Path, earlier_path: Path, share: float, out: Path, half: bool = False,
                        replace_out: bool = False, description: str = "", command: str = "") -> None:
    """Write the averaged checkpoint (see the module's doc) to `out`, whole or not at all; `description` replaces
    the later card's, if given."""
    if not 0 <= share <= 1:
        raise CheckpointError(f"--share {share}: a share of the later weights, from 0 to 1")
    check_replaceable(out, replace_out, later_path, earlier_path)
    later, earlier = Checkpoint(later_path), Checkpoint(earlier_path)
    if later.config != earlier.config:
        raise CheckpointError(f"{later_path} and {earlier_path}: their config.json differ: only one model's weights "
                              "can be averaged")
    for side in ("src_tokenizer", "tgt_tokenizer"):
        if getattr(later, side).path.read_bytes() != getattr(earlier, side).path.read_bytes():
            raise CheckpointError(f"{later_path} and {earlier_path}: their tokenizers differ")
    model = later.model
    model.load_state_dict(averaged(later.model, earlier.model, share))
    with writer_lock(out):
        staging = staging_folder(out, "averaging")
        remove_staging(staging)
        (staging / SNAPSHOT_DIR).mkdir(parents=True)
        for name in later.snapshot_names():  # read under the loading policy, written as they were
            save_weights(later.load_snapshot(name), staging / SNAPSHOT_DIR / f"{name}{WEIGHTS_SUFFIX}", half=half)
        if later.source_words is not None:  # the unseen-word warning's list, as save_checkpoint writes it
            write_source_words(staging, later.source_words)
        later.config.save(staging / CONFIG_FILE)
        for side, file in (("src_tokenizer", SRC_TOKENIZER_FILE), ("tgt_tokenizer", TGT_TOKENIZER_FILE)):
            (staging / file).write_bytes(getattr(later, side).path.read_bytes())
        save_weights(model, staging / WEIGHTS_FILE, half=half)
        metrics = {name: value for name, value in later.card.metrics.items()  # scores of the later weights: dropped
                   if not name.startswith("dev_") or name == "dev_pairs"}
        training = {**later.card.training, "averaged": {"share_of_later": share, "later": str(later_path),
                                                        "earlier": str(earlier_path), "command": command}}
        card = replace(later.card, name=out.name, description=description or later.card.description,
                       metrics=metrics, training=training,
                       weights=weights_entry(model.half() if half else model))
        card.save(staging / CARD_FILE)
        commit_checkpoint(staging, out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m transformer.average", description=__doc__.split("\n\n")[0])
    parser.add_argument("later", type=Path, help="the checkpoint continued from EARLIER (its card and files are kept)")
    parser.add_argument("earlier", type=Path, help="the checkpoint LATER was continued from")
    parser.add_argument("--share", type=float, required=True, help="LATER's share of each weight, 0 to 1")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write")
    parser.add_argument("--half", action="store_true", help="store the weights and snapshots in float16")
    parser.add_argument("--replace", action="store_true", help="replace a checkpoint already at --out")
    parser.add_argument("--description", default="", help="the card's description (default: LATER's)")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    try:
        average_checkpoints(args.later, args.earlier, args.share, args.out, args.half, args.replace,
                            args.description, shlex.join(["python", "-m", "transformer.average", *given]))
    except CheckpointError as error:
        parser.exit(2, f"error: {error}\n")
    print(f"{args.out}: {args.share} x {args.later} + {1 - args.share:g} x {args.earlier}; measure it with "
          f"python -m transformer.evaluate {args.out} --record")
