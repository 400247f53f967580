"""TransformerConfig: every hyper-parameter of the model, validated (schemas/config.schema.json documents each),
and saved as plain JSON."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .schema import schema_problem
from .sites import ATTENTION_KINDS


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
    positional: str = "sinusoidal"  # "sinusoidal" (fixed, the paper), "learned" (a vector per position), "rotary"
    activation: str = "relu"  # non-linearity of the feed-forward network: "relu" (paper), "gelu" or "silu" (Marian)
    pad_id: int = 0  # token id of padding: keys holding it are masked out
    bos_id: int = 2  # token id the decoder input starts with; may be pad_id (Marian starts decoding with pad)
    eos_id: int = 3  # token id that ends a sequence; decoding stops on it
    tie_output_embedding: bool = True  # share the target embedding with the output projection (fewer parameters)
    share_embeddings: bool = False  # one embedding for source and target: only for a shared vocabulary
    layer_norm_eps: float = 1e-5  # LayerNorm (or RMSNorm) epsilon, as in torch.nn.Transformer
    # --- What converted models (transformer/io/convert.py: Marian / opus-mt) need; the defaults are this project's own.
    scale_embedding: bool = True  # multiply token embeddings by sqrt(d_model) (the paper; Marian's scale_embedding)
    positional_layout: str = "interleaved"  # sinusoids: "interleaved" sin/cos (the paper) or "halves" (Marian)
    # --- What the other converted families need (GPT-2, BERT, BART); the defaults are this project's own.
    # Which stacks exist: "encoder-decoder" (translation; cross-attention joins them), "decoder-only" (a causal language
    # model: no encoder, no cross-attention) or "encoder-only" (a masked language model with its prediction head).
    stacks: str = "encoder-decoder"
    position_offset: int = 0  # learned positions: table rows before position 0 (BART keeps 2 unused rows there)
    type_vocab_size: int = 0  # token-type (segment) embeddings, every token of type 0 (BERT: 2); 0 = none
    embedding_norm: bool = False  # a LayerNorm on the summed embeddings, before dropout (BERT, BART)
    # --- What the Llama family needs (Llama, Qwen2, Mistral); the defaults are this project's own.
    rope_theta: float = 10000.0  # rotary positions: the base of the rotation angles' wavelengths (Llama 3: 500,000)
    rope_scaling: str = "none"  # rotary frequencies as trained ("none"), divided by rope_factor ("linear"), "llama3"
    rope_factor: float = 1.0  # how far "linear" and "llama3" stretch the rotary wavelengths (Llama 3.1: 8)
    rope_low_freq_factor: float = 1.0  # "llama3": wavelengths above original_max_len / this are all stretched
    rope_high_freq_factor: float = 4.0  # "llama3": wavelengths below original_max_len / this are kept as they are
    rope_original_max_len: int = 8192  # "llama3": the context length the model was pretrained at
    norm: str = "layer"  # every normalisation: "layer" (LayerNorm, the paper) or "rms" (RMSNorm, Llama's; no bias)
    feed_forward: str = "mlp"  # "mlp": W_2 act(W_1 x); "gated": down(act(gate x) * up x) (SwiGLU with silu, Llama)
    feed_forward_bias: bool = True  # biases in the feed-forward network's projections (Llama's mlp_bias: none)
    attention_bias: str = "all"  # biases of W_q, W_k, W_v, W_o: "all" (the paper), "qkv" (Qwen2) or "none" (Llama)
    num_kv_heads: int = 0  # grouped-query attention: heads of keys and values, each shared by a group of query heads
    sliding_window: int = 0  # a decoder query attends to itself and the sliding_window - 1 keys before it; 0 = all

    def __post_init__(self) -> None:
        _refuse_schema_problem(vars(self))
        for name, absent in (("num_encoder_layers", "decoder-only"), ("num_decoder_layers", "encoder-only")):
            value = getattr(self, name)
            if self.stacks == absent and value != 0:
                raise ValueError(f"{name} must be 0 in a {absent} model, got {value!r}")
            if self.stacks != absent and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value!r}")
        if self.stacks != "encoder-decoder" and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(f"a {self.stacks} model has one vocabulary: src_vocab_size must equal tgt_vocab_size")
        if self.position_offset and self.positional != "learned":
            raise ValueError(f"position_offset ({self.position_offset}) must be 0, or positive with learned positions")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}) "
                "so that every head gets d_model / num_heads dimensions"
            )
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if value >= min(self.src_vocab_size, self.tgt_vocab_size):
                raise ValueError(f"{name} ({value!r}) must be a token id inside both vocabularies")
        if self.eos_id == self.pad_id and self.stacks == "encoder-decoder":
            # A decoder-only model may pad with its end token (GPT-2 has no other); a translation's padding follows it.
            raise ValueError("eos_id must differ from pad_id (bos_id may equal either: Marian starts with pad, "
                             "BART with eos)")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size (one shared vocabulary)")
        self._check_llama_parts()

    def _check_llama_parts(self) -> None:
        """What the fields the Llama family brought cannot say one by one."""
        if self.num_heads % self.kv_heads:
            raise ValueError(f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads}): each "
                             "key/value head serves a group of query heads")
        if self.positional == "rotary" and (self.stacks != "decoder-only" or self.d_head % 2):
            raise ValueError(f"rotary positions need a decoder-only model (stacks is {self.stacks!r}) and an even "
                             f"d_head (each pair of a head's dimensions turns together; it is {self.d_head})")
        if self.rope_scaling != "none" and self.positional != "rotary":
            raise ValueError(f"rope_scaling {self.rope_scaling!r} needs rotary positions")
        if self.rope_scaling == "llama3" and self.rope_high_freq_factor <= self.rope_low_freq_factor:
            raise ValueError(f"rope_high_freq_factor ({self.rope_high_freq_factor}) must be above "
                             f"rope_low_freq_factor ({self.rope_low_freq_factor}): between them wavelengths blend")
        if self.sliding_window and self.stacks == "encoder-only":
            raise ValueError("sliding_window limits a decoder's causal attention: an encoder-only model has none")

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        """Heads of keys and values: num_kv_heads, or one per query head where it is 0 (multi-head attention)."""
        return self.num_kv_heads or self.num_heads

    @property
    def cross_attention(self) -> bool:
        """Whether the decoder attends to an encoder: only when both stacks exist."""
        return self.stacks == "encoder-decoder"

    @property
    def kinds(self) -> tuple[str, ...]:
        """The attention kinds this model has, in ATTENTION_KINDS order."""
        return tuple(kind for kind in ATTENTION_KINDS if self.layers_of(kind))

    def layers_of(self, kind: str) -> int:
        """How many layers have attention of `kind` ('encoder.self_attn', 'decoder.self_attn' or 'decoder.cross_attn');
        0 when the model has no such part."""
        if kind not in ATTENTION_KINDS:
            raise KeyError(f"unknown attention kind {kind!r}; kinds are {ATTENTION_KINDS}")
        if kind == "encoder.self_attn":
            return self.num_encoder_layers
        return self.num_decoder_layers if kind == "decoder.self_attn" or self.cross_attention else 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_dict(cls, values: object) -> TransformerConfig:
        """A config from parsed JSON (config.json), checked against schemas/config.schema.json once: __post_init__
        checks every field, and what stops the construction itself (not an object, a missing vocabulary size, an
        unknown field) is named from the schema too."""
        try:
            return cls(**values)
        except TypeError:
            _refuse_schema_problem(values)
            raise

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> TransformerConfig:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _refuse_schema_problem(values: object) -> None:
    """ValueError naming the field if `values` does not match schemas/config.schema.json: the type and bounds of
    every field one by one. Its bounds are io/safety.py's MAX_*, written out in the schema so that the schema
    documents the format on its own (tests/test_schemas.py asserts that the two agree)."""
    problem = schema_problem(values, "config")
    if problem:
        raise ValueError(problem)
