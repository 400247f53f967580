"""Where models run: the one place that reads $ATLAS_DEVICE.

    ATLAS_DEVICE=cpu   (the default, and what CI tests)
    ATLAS_DEVICE=cuda  (or cuda:1: a GPU; an error if torch sees none)
    ATLAS_DEVICE=auto  (the first GPU when torch sees one, else the CPU)

Checkpoints load their models onto this device; inputs follow the model (`model_device`), and what the library
hands back for display (captured records, decoding steps, positional tables) is on the CPU.
"""
from __future__ import annotations

import os

import torch
from torch import nn

DEVICE_VARIABLE = "ATLAS_DEVICE"


def atlas_device() -> torch.device:
    """The device $ATLAS_DEVICE names (cpu when unset or empty); ValueError for a value it cannot honour."""
    choice = os.environ.get(DEVICE_VARIABLE, "").strip().lower() or "cpu"
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cpu":
        return torch.device("cpu")
    if choice == "cuda" or choice.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ValueError(f"{DEVICE_VARIABLE}={choice} but torch sees no CUDA device (use cpu or auto)")
        return torch.device(choice)
    raise ValueError(f"{DEVICE_VARIABLE} must be cpu, cuda, cuda:N or auto; got {choice!r}")


def model_device(model: nn.Module) -> torch.device:
    """The device a model's weights are on: where its inputs must be."""
    return next(model.parameters()).device
