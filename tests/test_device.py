"""$ATLAS_DEVICE: read in one place, CPU by default; CI has no GPU, so only the CPU outcomes run here."""
from pathlib import Path

import pytest
import torch

from transformer import atlas_device, load_checkpoint, model_device

REVERSE = Path(__file__).parents[1] / "checkpoints" / "reverse"


@pytest.mark.parametrize("value", [None, "", "cpu", " CPU "])
def test_cpu_is_the_default(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("ATLAS_DEVICE", raising=False)
    else:
        monkeypatch.setenv("ATLAS_DEVICE", value)
    assert atlas_device() == torch.device("cpu")


def test_auto_picks_the_gpu_only_when_there_is_one(monkeypatch):
    monkeypatch.setenv("ATLAS_DEVICE", "auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert atlas_device() == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert atlas_device() == torch.device("cuda")


def test_cuda_without_a_gpu_and_unknown_values_are_errors(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for value in ("cuda", "cuda:1"):
        monkeypatch.setenv("ATLAS_DEVICE", value)
        with pytest.raises(ValueError, match="no CUDA device"):
            atlas_device()
    monkeypatch.setenv("ATLAS_DEVICE", "tpu")
    with pytest.raises(ValueError, match="cpu, cuda, cuda:N or auto"):
        atlas_device()


def test_checkpoints_load_onto_the_device_and_hand_back_cpu_tensors(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("ATLAS_DEVICE", "auto")
    checkpoint = load_checkpoint(REVERSE)
    assert model_device(checkpoint.model) == torch.device("cpu")
    result = checkpoint.translate("attention42")
    assert result.text == "24noitnetta"
    assert all(tensor.device.type == "cpu" for tensor in result.attention.hooks.values())
    monkeypatch.setenv("ATLAS_DEVICE", "cuda")
    with pytest.raises(ValueError, match="no CUDA device"):
        load_checkpoint(REVERSE)
