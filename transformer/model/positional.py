"""Positional encodings: the paper's fixed sinusoids, or one learned vector per position, added to the embeddings; or
rotary positions, which turn each query and key instead (Llama's)."""
from __future__ import annotations

import math

import torch
from torch import nn

from .config import TransformerConfig

CPU = torch.device("cpu")


def sinusoidal_table(max_len: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """The sinusoids sin(pos / 10000^(2i/d_model)) and cos(same), (max_len, d_model).

    "interleaved" (the paper): PE[pos, 2i] = sin, PE[pos, 2i+1] = cos. "halves" (Marian / opus-mt): the sines fill the
    first ceil(d_model / 2) dimensions and the cosines the rest, computed in float64 as transformers does.
    Computed on the CPU whatever the default device (a few KB, moved with the model): on the meta device, where
    checkpoint.expected_state builds a model, these ops would run PyTorch's Python decompositions, whose first use
    imports torch._dynamo (seconds of a server's cold start)."""
    cpu = CPU
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


def rotary_frequencies(config: TransformerConfig) -> torch.Tensor:
    """How far each pair of a head's dimensions turns per position, (d_head / 2,): rope_theta^(-2i/d_head) for pair i,
    stretched as config.rope_scaling says; float32 arithmetic as transformers' "default", "linear" and "llama3" rope
    types do it. On the CPU, as sinusoidal_table is."""
    d_head = config.d_head
    frequency = 1.0 / config.rope_theta ** (torch.arange(0, d_head, 2, dtype=torch.float32, device=CPU) / d_head)
    if config.rope_scaling == "linear":
        return frequency / config.rope_factor
    if config.rope_scaling == "llama3":
        return llama3_frequencies(frequency, config)
    return frequency


def llama3_frequencies(frequency: torch.Tensor, config: TransformerConfig) -> torch.Tensor:
    """Llama 3.1's stretch for a longer context than it was pretrained at: wavelengths longer than
    rope_original_max_len / rope_low_freq_factor are divided by rope_factor (positions far apart stay apart), those
    shorter than rope_original_max_len / rope_high_freq_factor are kept (nearby order stays sharp), and those between
    are blended in proportion to rope_original_max_len / wavelength."""
    low, high, factor = config.rope_low_freq_factor, config.rope_high_freq_factor, config.rope_factor
    wavelength = 2 * math.pi / frequency
    longest, shortest = config.rope_original_max_len / low, config.rope_original_max_len / high
    stretched = torch.where(wavelength > longest, frequency / factor, frequency)
    smooth = (config.rope_original_max_len / wavelength - low) / (high - low)
    blended = (1 - smooth) * stretched / factor + smooth * stretched
    return torch.where((wavelength >= shortest) & (wavelength <= longest), blended, stretched)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (batch, heads, length, d_head) turned by each position's angles (cos, sin: (length, d_head)). Dimension i of
    the first half and dimension i + d_head / 2 form one pair, turned as a point (a, b) -> (a cos - b sin, b cos + a
    sin): the layout of Llama's weights as transformers stores them."""
    first, second = x.chunk(2, dim=-1)  # (batch, heads, length, d_head / 2) each
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class RotaryPositional(nn.Module):
    """Rotary positions (RoPE, Su et al. 2021): nothing is added to the embeddings; every query and key is turned,
    pair by pair of its dimensions, by angles proportional to its position, so that q·k depends only on how far apart
    the two are. The angles of every position up to max_len, computed once (not saved)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        positions = torch.arange(config.max_len, dtype=torch.float32, device=CPU)[:, None]  # (max_len, 1)
        angles = positions * rotary_frequencies(config)  # (max_len, d_head / 2)
        angles = torch.cat([angles, angles], dim=1)  # (max_len, d_head): a pair's two dimensions turn alike
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def rotation(self, offset: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), each (length, d_head), of positions offset, offset + 1, ...: what `rotate` takes."""
        return self.cos[offset:offset + length], self.sin[offset:offset + length]

    def table(self) -> torch.Tensor:
        """(max_len, d_head): each position's sines (first half) and cosines (second half) of its angles, the
        rotation it gives queries and keys, laid out as Marian's sinusoids are ("halves")."""
        half = self.cos.size(1) // 2
        return torch.cat([self.sin[:, :half], self.cos[:, :half]], dim=1)
