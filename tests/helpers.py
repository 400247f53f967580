"""What the tests share: small random models and the app's checkpoints folder. Imported as a module; conftest.py
holds the fixtures and the tiny checkpoint's training recipe."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

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


APP = str(Path(__file__).parents[1] / "app.py")

LOADABLE = ("tiny-reverse", "tiny-twin")  # the first one (in name order) is the app's default
TRAINING = "training-now"  # a folder without card.json, as the trainer leaves it while it runs


def checkpoints_folder(tiny_checkpoint: Path, root: Path) -> Path:
    """`root` with two loadable copies of the tiny checkpoint (so checkpoints can be compared) and one that is
    still training (no card.json), which the app must report without losing the others."""
    for name in LOADABLE:
        shutil.copytree(tiny_checkpoint, root / name, ignore=shutil.ignore_patterns("resume.pt"))
    shutil.copytree(tiny_checkpoint, root / TRAINING, ignore=shutil.ignore_patterns("resume.pt", "card.json"))
    return root
