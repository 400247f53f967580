"""Positional encodings: the paper's fixed sinusoids, or one learned vector per position."""
from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_table(max_len: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """The sinusoids sin(pos / 10000^(2i/d_model)) and cos(same), (max_len, d_model).

    "interleaved" (the paper): PE[pos, 2i] = sin, PE[pos, 2i+1] = cos. "halves" (Marian / opus-mt): the sines fill the
    first ceil(d_model / 2) dimensions and the cosines the rest, computed in float64 as transformers does.
    Computed on the CPU whatever the default device (a few KB, moved with the model): on the meta device, where
    checkpoint.expected_state builds a model, these ops would run PyTorch's Python decompositions, whose first use
    imports torch._dynamo (seconds of a server's cold start)."""
    cpu = torch.device("cpu")
    if layout == "halves":
        position = torch.arange(max_len, dtype=torch.float64, device=cpu)[:, None]  # (max_len, 1)
        dims = torch.arange(0, d_model, 2, dtype=torch.float64, device=cpu)  # (ceil(d_model / 2),)
        frequency = 10000.0 ** (-dims / d_model)
        angle = position * frequency  # (max_len, ceil(d_model / 2))
        return torch.cat([angle.sin(), angle[:, : d_model // 2].cos()], dim=1).float()
    position = torch.arange(max_len, dtype=torch.float32, device=cpu)[:, None]  # (max_len, 1)
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32, device=cpu) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model, device=cpu)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table


class SinusoidalPositional(nn.Module):
    def __init__(self, max_len: int, d_model: int, layout: str = "interleaved") -> None:
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(max_len, d_model, layout), persistent=False)  # computed, not saved

    def table(self) -> torch.Tensor:
        """(max_len, d_model): the encoding added at each position."""
        return self.pe


class LearnedPositional(nn.Module):
    """One learned vector per position; `offset` rows before position 0 are stored but never added (BART keeps 2)."""

    def __init__(self, max_len: int, d_model: int, offset: int = 0) -> None:
        super().__init__()
        self.offset = offset
        self.embedding = nn.Embedding(offset + max_len, d_model)

    def table(self) -> torch.Tensor:
        return self.embedding.weight[self.offset:]


def make_positional(
    kind: str, max_len: int, d_model: int, layout: str = "interleaved", offset: int = 0
) -> SinusoidalPositional | LearnedPositional:
    if kind == "sinusoidal":
        return SinusoidalPositional(max_len, d_model, layout)
    return LearnedPositional(max_len, d_model, offset)
