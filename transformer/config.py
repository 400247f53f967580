"""TransformerConfig: every hyper-parameter of the model, validated, and saved as plain JSON."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .record import ATTENTION_KINDS
from .safety import (
    MAX_D_FF,
    MAX_D_MODEL,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_LEN,
    MAX_POSITION_OFFSET,
    MAX_TYPE_VOCAB,
    MAX_VOCAB_SIZE,
)

POSITIONAL_KINDS = ("sinusoidal", "learned")
ACTIVATIONS = ("relu", "gelu", "silu", "gelu_new")  # gelu_new: GELU's tanh approximation (GPT-2)
STACKS = ("encoder-decoder", "decoder-only", "encoder-only")
POSITIONAL_LAYOUTS = ("interleaved", "halves")


@dataclass(frozen=True)
class TransformerConfig:
    src_vocab_size: int  # rows of the source embedding (sentencepiece vocabulary of the input side)
    tgt_vocab_size: int  # rows of the target embedding and columns of the output projection
    d_model: int = 256  # width of the residual stream; the paper's base model uses 512
    num_heads: int = 4  # heads per attention block; d_model must split evenly between them
    num_encoder_layers: int = 3  # depth of the encoder stack
    num_decoder_layers: int = 3  # depth of the decoder stack
    d_ff: int = 1024  # hidden width of the position-wise feed-forward network (4 x d_model is the paper's ratio)
    dropout: float = 0.1  # on embeddings, sublayer outputs and attention weights; only active in training
    max_len: int = 128  # longest sequence (in tokens, BOS/EOS included) either side can have
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN with a final LayerNorm per stack
    positional: str = "sinusoidal"  # "sinusoidal" (fixed, the paper) or "learned" (an embedding per position)
    activation: str = "relu"  # non-linearity of the feed-forward network: "relu" (paper), "gelu" or "silu" (Marian)
    pad_id: int = 0  # token id of padding: keys holding it are masked out
    bos_id: int = 2  # token id the decoder input starts with; may be pad_id (Marian starts decoding with pad)
    eos_id: int = 3  # token id that ends a sequence; decoding stops on it
    tie_output_embedding: bool = True  # share the target embedding with the output projection (fewer parameters)
    share_embeddings: bool = False  # one embedding for source and target: only for a shared vocabulary
    layer_norm_eps: float = 1e-5  # LayerNorm epsilon, as in torch.nn.Transformer
    # --- What converted models (transformer/convert.py: Marian / opus-mt) need; the defaults are this project's own.
    scale_embedding: bool = True  # multiply token embeddings by sqrt(d_model) (the paper; Marian's scale_embedding)
    positional_layout: str = "interleaved"  # sinusoids: "interleaved" sin/cos (the paper) or "halves" (Marian)
    # --- What the other converted families need (GPT-2, BERT, BART); the defaults are this project's own.
    # Which stacks exist: "encoder-decoder" (translation; cross-attention joins them), "decoder-only" (a causal language
    # model: no encoder, no cross-attention) or "encoder-only" (a masked language model with its prediction head).
    stacks: str = "encoder-decoder"
    position_offset: int = 0  # learned positions: table rows before position 0 (BART keeps 2 unused rows there)
    type_vocab_size: int = 0  # token-type (segment) embeddings, every token of type 0 (BERT: 2); 0 = none
    embedding_norm: bool = False  # a LayerNorm on the summed embeddings, before dropout (BERT, BART)

    def __post_init__(self) -> None:
        _check_types_and_bounds(self)
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.stacks not in STACKS:
            raise ValueError(f"stacks must be one of {STACKS}, got {self.stacks!r}")
        for name, absent in (("num_encoder_layers", "decoder-only"), ("num_decoder_layers", "encoder-only")):
            value = getattr(self, name)
            if self.stacks == absent and value != 0:
                raise ValueError(f"{name} must be 0 in a {absent} model, got {value!r}")
            if self.stacks != absent and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value!r}")
        if self.stacks != "encoder-decoder" and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(f"a {self.stacks} model has one vocabulary: src_vocab_size must equal tgt_vocab_size")
        if self.position_offset < 0 or (self.position_offset and self.positional != "learned"):
            raise ValueError(f"position_offset ({self.position_offset}) must be 0, or positive with learned positions")
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be 0 (none) or more, got {self.type_vocab_size}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}) "
                "so that every head gets d_model / num_heads dimensions"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {self.positional!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.positional_layout not in POSITIONAL_LAYOUTS:
            raise ValueError(f"positional_layout must be one of {POSITIONAL_LAYOUTS}, got {self.positional_layout!r}")
        if not isinstance(self.scale_embedding, bool):
            raise ValueError(f"scale_embedding must be true or false, got {self.scale_embedding!r}")
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < min(self.src_vocab_size, self.tgt_vocab_size):
                raise ValueError(f"{name} ({value!r}) must be a token id inside both vocabularies")
        if self.eos_id == self.pad_id and self.stacks == "encoder-decoder":
            # A decoder-only model may pad with its end token (GPT-2 has no other); a translation's padding follows it.
            raise ValueError("eos_id must differ from pad_id (bos_id may equal either: Marian starts with pad, "
                             "BART with eos)")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size (one shared vocabulary)")

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    @property
    def cross_attention(self) -> bool:
        """Whether the decoder attends to an encoder: only when both stacks exist."""
        return self.stacks == "encoder-decoder"

    @property
    def kinds(self) -> tuple[str, ...]:
        """The attention kinds this model has, in ATTENTION_KINDS order."""
        return tuple(kind for kind in ATTENTION_KINDS if self.layers_of(kind))

    def layers_of(self, kind: str) -> int:
        """How many layers have attention of `kind` ('encoder.self', 'decoder.self' or 'decoder.cross'); 0 when the
        model has no such part."""
        if kind not in ATTENTION_KINDS:
            raise KeyError(f"unknown attention kind {kind!r}; kinds are {ATTENTION_KINDS}")
        if kind == "encoder.self":
            return self.num_encoder_layers
        return self.num_decoder_layers if kind == "decoder.self" or self.cross_attention else 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_dict(cls, values: dict) -> TransformerConfig:
        if not isinstance(values, dict):
            raise ValueError(f"a config must be a JSON object, got {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config field(s): {', '.join(unknown)}")
        return cls(**values)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> TransformerConfig:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


# Upper bounds of the sizes (from transformer/safety.py, the loading policy): a config from a hostile file is
# refused before anything is built from it.
_SIZE_BOUNDS = {"src_vocab_size": MAX_VOCAB_SIZE, "tgt_vocab_size": MAX_VOCAB_SIZE, "d_model": MAX_D_MODEL,
                "num_heads": MAX_HEADS, "num_encoder_layers": MAX_LAYERS, "num_decoder_layers": MAX_LAYERS,
                "d_ff": MAX_D_FF, "max_len": MAX_LEN, "position_offset": MAX_POSITION_OFFSET,
                "type_vocab_size": MAX_TYPE_VOCAB}


def _check_types_and_bounds(config: TransformerConfig) -> None:
    """Every field of its declared type (an int is never a bool, a float is finite), sizes within their bounds."""
    for field in fields(config):
        value = getattr(config, field.name)
        kind = field.type if isinstance(field.type, str) else field.type.__name__
        if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{field.name} must be an integer, got {value!r:.40}")
        if kind == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                or not math.isfinite(value)):
            raise ValueError(f"{field.name} must be a finite number, got {value!r:.40}")
        if kind == "bool" and not isinstance(value, bool):
            raise ValueError(f"{field.name} must be true or false, got {value!r:.40}")
        if kind == "str" and not isinstance(value, str):
            raise ValueError(f"{field.name} must be a string, got {value!r:.40}")
    for name, bound in _SIZE_BOUNDS.items():
        if getattr(config, name) > bound:
            raise ValueError(f"{name} is {getattr(config, name):,}, more than the {bound:,} allowed")
    if not 0.0 < config.layer_norm_eps < 1.0:
        raise ValueError(f"layer_norm_eps must be in (0, 1), got {config.layer_norm_eps!r}")
