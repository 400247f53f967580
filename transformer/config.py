"""TransformerConfig: every hyper-parameter of the model, validated, and saved as plain JSON."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .record import ATTENTION_KINDS

POSITIONAL_KINDS = ("sinusoidal", "learned")
ACTIVATIONS = ("relu", "gelu")


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
    activation: str = "relu"  # non-linearity of the feed-forward network: "relu" (paper) or "gelu"
    pad_id: int = 0  # token id of padding: keys holding it are masked out
    bos_id: int = 2  # token id the decoder input starts with
    eos_id: int = 3  # token id that ends a sequence; decoding stops on it
    tie_output_embedding: bool = True  # share the target embedding with the output projection (fewer parameters)
    share_embeddings: bool = False  # one embedding for source and target: only for a shared vocabulary
    layer_norm_eps: float = 1e-5  # LayerNorm epsilon, as in torch.nn.Transformer

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("num_encoder_layers", "num_decoder_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be at least 1, got {value!r}")
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
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < min(self.src_vocab_size, self.tgt_vocab_size):
                raise ValueError(f"{name} ({value!r}) must be a token id inside both vocabularies")
        if len({self.pad_id, self.bos_id, self.eos_id}) != 3:
            raise ValueError("pad_id, bos_id and eos_id must be three different ids")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size (one shared vocabulary)")

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    def layers_of(self, kind: str) -> int:
        """How many layers have attention of `kind` ('encoder.self', 'decoder.self' or 'decoder.cross')."""
        if kind not in ATTENTION_KINDS:
            raise KeyError(f"unknown attention kind {kind!r}; kinds are {ATTENTION_KINDS}")
        return self.num_encoder_layers if kind == "encoder.self" else self.num_decoder_layers

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
