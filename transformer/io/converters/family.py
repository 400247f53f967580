"""What a converted family provides, and the tensor bookkeeping every family's state mapping shares."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from ...model.config import TransformerConfig
from ..checkpoint import JSON_TOKENIZER_FILE, CheckpointError
from ..safety import MAX_CONFIG_BYTES, MAX_TOKENIZER_BYTES, MIN_PASS_TOKENS, read_bytes, read_json
from ..tokenizer import JsonTokenizer

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu", "gelu_new": "gelu_new",
               "gelu_pytorch_tanh": "gelu_new"}  # transformers' ACT2FN name -> ours
TYPE_NAMES = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}
T = TypeVar("T")


@dataclass(frozen=True)
class ReadTokenizer:
    """A family's tokenizer as read from its folder: the files the checkpoint keeps (their names there -> bytes), the
    tokenizer its config is checked against (`vocab_size`: the pieces the output reads), and for the card the
    languages ("en → fr", "" where unknown) and example inputs in its source language (none: the family's own)."""

    files: dict[str, bytes]
    tokenizer: Any
    languages: str = ""
    examples: tuple[str, ...] = ()


def read_json_object(path: Path, folder: Path) -> dict:
    """A small JSON file of the folder (config.json, tokenizer_config.json) under the loading policy: an object."""
    values = read_json(path, folder, MAX_CONFIG_BYTES)
    if not isinstance(values, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return values


def json_tokenizer(folder: Path) -> ReadTokenizer:
    """tokenizer.json, kept in the checkpoint and read with the `tokenizers` library."""
    files = {JSON_TOKENIZER_FILE: read_bytes(folder / JSON_TOKENIZER_FILE, folder, MAX_TOKENIZER_BYTES)}
    try:
        return ReadTokenizer(files, JsonTokenizer(folder / JSON_TOKENIZER_FILE, files[JSON_TOKENIZER_FILE]))
    except ValueError as error:
        raise CheckpointError(f"{folder / JSON_TOKENIZER_FILE}: {error}") from None


@dataclass(frozen=True)
class Family:
    name: str  # the command's kind, e.g. "gpt2"
    model_types: tuple[str, ...]  # config.json's model_type values it reads
    architecture: str  # the transformers class whose weights it reads, e.g. "GPT2LMHeadModel"
    task: str  # the card's task: "generate", "fill-mask" or "translate"
    # (config.json as a dict, its tokenizer (ReadTokenizer.tokenizer), the path for messages) -> our config;
    # CheckpointError when it differs
    config: Callable[[dict, Any, Path], TransformerConfig]
    state: Callable[[TransformerConfig, Tensors], dict[str, torch.Tensor]]  # their tensors -> our state_dict
    examples: tuple[str, ...] = ()
    tokenizer: Callable[[Path], ReadTokenizer] = json_tokenizer  # its folder -> its tokenizer, read


def refuse(source: Path, family: str, why: str) -> CheckpointError:
    return CheckpointError(f"{source}: {why}; the {family} converter reads only this layout")


class Fields:
    """config.json's fields, each read with the type transformers gives it: `fields("n_embd", 768)` is the value, or
    the default when the field is absent or null; a value of another type (`"resid_pdrop": [1]`) is a CheckpointError
    naming the field, never a TypeError from deep inside the conversion. A float may be written as an integer."""

    def __init__(self, hf: dict, source: Path) -> None:
        self.hf, self.source = hf, source

    def __call__(self, key: str, default: T, kind: type[T] = int) -> T:
        value = self.hf.get(key)
        if value is None:
            return default
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)) or (
                kind is float and not math.isfinite(value)):
            raise CheckpointError(f"{self.source}: {key} is {str(value)[:40]!r}, not {TYPE_NAMES[kind]}")
        return value

    def required(self, key: str, kind: type[T] = int) -> T:
        if self.hf.get(key) is None:
            raise CheckpointError(f"{self.source}: no {key!r} field")
        return self(key, kind(), kind)

    def size(self, key: str, default: int | None = None, minimum: int = 1, what: str = "") -> int:
        """A width, count or length: a whole number of at least `minimum` (`what` says why that many), `default`
        where absent (required where None). Read before any arithmetic on it: no zero divides a width."""
        value = self.required(key) if default is None else self(key, default)
        if value < minimum:
            raise CheckpointError(f"{self.source}: {key} is {value}, not a whole number of at least {minimum}"
                                  f"{what}")
        return value

    def positions(self, key: str, default: int) -> int:
        """The model's longest input (max_position_embeddings, n_positions): room for the shortest sentence."""
        return self.size(key, default, MIN_PASS_TOKENS, " (the positions the shortest sentence needs, with its "
                                                        "start and end tokens)")

    def activation(self, key: str, family: str, names: dict[str, str] = ACTIVATIONS, default: str = "gelu") -> str:
        """Our name for the activation function that `key` names (`default` where it is absent)."""
        name = self(key, default, str)
        if name not in names:
            raise refuse(self.source, family, f"{key} {name!r} is not one of {sorted(names)}")
        return names[name]


def build_config(source: Path, **values) -> TransformerConfig:
    try:
        return TransformerConfig(**values)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{source}: {error}") from None


class Tensors:
    """Their tensors by name, each taken at most once; what is left over at the end is an error (a part our model
    would silently drop). Names matching `ignored` (buffers older files store, such as causal-mask tables) are
    skipped."""

    def __init__(self, tensors: dict[str, torch.Tensor], source: Path, ignored: tuple[str, ...] = ()) -> None:
        self._tensors = {name: tensor for name, tensor in tensors.items() if not name.endswith(ignored)}
        self.source = source
        self._used: set[str] = set()

    def has(self, name: str) -> bool:
        return name in self._tensors

    def take(self, *names: str) -> torch.Tensor:
        """The first of `names` present (files written with tied weights keep one copy under either name)."""
        for name in names:
            if name in self._tensors:
                self._used.add(name)
                return self._tensors[name]
        raise CheckpointError(f"{self.source}: no tensor {' or '.join(names)}")

    def linear(self, ours: str, theirs: str, transpose: bool = False, bias: bool = True) -> dict[str, torch.Tensor]:
        """ours.weight / ours.bias from theirs.*; `transpose` for GPT-2's Conv1D, which stores (in, out); the weight
        alone where there is no `bias` (Llama's projections, an RMSNorm)."""
        weight = self.take(f"{theirs}.weight")
        out = {f"{ours}.weight": weight.t().contiguous() if transpose else weight}
        return out | {f"{ours}.bias": self.take(f"{theirs}.bias")} if bias else out

    def finish(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`state`, once every tensor of theirs has found a place."""
        left_over = sorted(set(self._tensors) - self._used)
        if left_over:
            raise CheckpointError(f"{self.source}: tensors our model has no place for: {', '.join(left_over[:5])}"
                                  f"{' ...' if len(left_over) > 5 else ''}")
        return state


def seq2seq_layer_names(side: str, i: int) -> dict[str, str]:
    """Our parameter name -> transformers' for layer i of the 'encoder' or 'decoder' stack of Marian and BART (the
    same layer layout)."""
    ours, theirs = f"{side}.layers.{i}.", f"model.{side}.layers.{i}."
    names = {"self_attn.W_q": "self_attn.q_proj", "self_attn.W_k": "self_attn.k_proj",
             "self_attn.W_v": "self_attn.v_proj", "self_attn.W_o": "self_attn.out_proj",
             "feed_forward.linear1": "fc1", "feed_forward.linear2": "fc2", "ff_residual.norm": "final_layer_norm"}
    if side == "encoder":
        names["attn_residual.norm"] = "self_attn_layer_norm"
    else:
        names |= {"cross_attn.W_q": "encoder_attn.q_proj", "cross_attn.W_k": "encoder_attn.k_proj",
                  "cross_attn.W_v": "encoder_attn.v_proj", "cross_attn.W_o": "encoder_attn.out_proj",
                  "self_attn_residual.norm": "self_attn_layer_norm",
                  "cross_attn_residual.norm": "encoder_attn_layer_norm"}
    return {ours + mine + kind: theirs + hf + kind for mine, hf in names.items() for kind in (".weight", ".bias")}


def seq2seq_state(config: TransformerConfig, tensors: Tensors) -> dict[str, torch.Tensor]:
    """What Marian and BART store alike: both stacks' layers (seq2seq_layer_names) and token embeddings, and the
    output: lm_head.weight, or the decoder's embedding where the output is tied to it, and final_logits_bias (zeros
    where there is none). Their positions are each family's own."""
    out = {}
    for side, layers in (("encoder", config.num_encoder_layers), ("decoder", config.num_decoder_layers)):
        for i in range(layers):
            out |= {ours: tensors.take(theirs) for ours, theirs in seq2seq_layer_names(side, i).items()}
        out[f"{side}.embed.token.weight"] = tensors.take(f"model.{side}.embed_tokens.weight", "model.shared.weight")
    if tensors.has("model.shared.weight"):
        tensors.take("model.shared.weight")
    if not tensors.has("lm_head.weight") and not config.tie_output_embedding:
        raise CheckpointError(f"{tensors.source}: no tensor lm_head.weight (and tie_word_embeddings is off)")
    out["generator.weight"] = (tensors.take("lm_head.weight") if tensors.has("lm_head.weight")
                               else out["decoder.embed.token.weight"])
    bias = (tensors.take("final_logits_bias") if tensors.has("final_logits_bias")
            else torch.zeros(1, config.tgt_vocab_size))
    out["generator.bias"] = bias.reshape(-1)  # (1, tgt_vocab) -> (tgt_vocab,)
    return out
