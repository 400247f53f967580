"""The encoder-decoder Transformer of "Attention Is All You Need", with named hook points; by its config also a
decoder-only causal language model (GPT-2's shape) or an encoder-only masked language model (BERT's)."""
from __future__ import annotations

import math

import torch
from torch import nn

from .cache import DecoderCache
from .config import TransformerConfig
from .hooks import HookPoint, name_hook_points
from .layers import ACTIVATION_FUNCTIONS, DecoderLayer, EncoderLayer, make_norm
from .masks import decoder_mask, padding_mask
from .positional import RotaryPositional, make_positional


class Embedding(nn.Module):
    """Token embedding scaled by sqrt(d_model) (unless config.scale_embedding is off), plus the positional encoding
    (none with rotary positions: they turn queries and keys instead), plus the token-type embedding of type 0 (when
    the config has them), through a norm when config.embedding_norm asks for one, then dropout."""

    def __init__(self, vocab_size: int, config: TransformerConfig) -> None:
        super().__init__()
        self.max_len = config.max_len
        self.token = nn.Embedding(vocab_size, config.d_model)
        self.positional = None if config.positional == "rotary" else make_positional(
            config.positional, config.max_len, config.d_model, config.positional_layout, config.position_offset)
        # Inputs here are one segment, so every token is of type 0 (BERT's single-sentence input).
        self.token_type = nn.Embedding(config.type_vocab_size, config.d_model) if config.type_vocab_size else None
        self.norm = make_norm(config) if config.embedding_norm else nn.Identity()
        self.dropout = nn.Dropout(config.dropout)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(batch, length) ids at positions offset, offset + 1, ... -> (batch, length, d_model)."""
        end = offset + ids.size(1)
        if end > self.max_len:
            raise ValueError(f"sequence of {end} tokens is longer than the model's max_len ({self.max_len})")
        x = self.token(ids) * self.scale  # (batch, length, d_model)
        if self.positional is not None:
            x = x + self.positional.table()[offset:end]
        if self.token_type is not None:
            x = x + self.token_type.weight[0]
        return self.dropout(self.norm(x))


class Encoder(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.embed = Embedding(config.src_vocab_size, config)
        self.hook_embed = HookPoint()  # (batch, src_len, d_model) token + positional embedding
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_encoder_layers))
        # Pre-LN leaves the residual stream un-normalised, so its stack ends with one norm.
        self.norm = make_norm(config) if config.norm_first else nn.Identity()
        self.hook_memory = HookPoint()  # (batch, src_len, d_model) encoder output that cross-attention reads

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        x = self.hook_embed(self.embed(src))
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.hook_memory(self.norm(x))


class Decoder(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.embed = Embedding(config.tgt_vocab_size, config)
        self.hook_embed = HookPoint()  # (batch, tgt_len, d_model) token + positional embedding
        self.rotary = RotaryPositional(config) if config.positional == "rotary" else None
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_decoder_layers))
        self.norm = make_norm(config) if config.norm_first else nn.Identity()
        self.hook_out = HookPoint()  # (batch, tgt_len, d_model) final hidden state fed to the output projection

    def forward(
        self, tgt: torch.Tensor, memory: torch.Tensor | None, tgt_mask: torch.Tensor, src_mask: torch.Tensor | None,
        cache: DecoderCache | None = None,
    ) -> torch.Tensor:
        """`tgt` holds the new tokens only when a cache holds the earlier ones; `memory` is None in a decoder-only
        model."""
        offset = 0 if cache is None else cache.length - tgt.size(1)
        x = self.hook_embed(self.embed(tgt, offset))
        rotation = None if self.rotary is None else self.rotary.rotation(offset, tgt.size(1))
        for i, layer in enumerate(self.layers):
            caches = (None, None) if cache is None else (cache.self_attn[i], cache.cross_attn[i])
            x = layer(x, memory, tgt_mask, src_mask, *caches, rotation)
        return self.hook_out(self.norm(x))


class MaskedLMHead(nn.Module):
    """An encoder-only model's transform before the output projection: dense, activation, LayerNorm (BERT's)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.activation = ACTIVATION_FUNCTIONS[config.activation]
        self.norm = make_norm(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.activation(self.dense(x)))


class Transformer(nn.Module):
    """`encoder` and `decoder` are None where config.stacks leaves them out."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config) if config.num_encoder_layers else None
        self.decoder = Decoder(config) if config.num_decoder_layers else None
        self.head = MaskedLMHead(config) if config.stacks == "encoder-only" else nn.Identity()
        self.generator = nn.Linear(config.d_model, config.tgt_vocab_size)  # hidden state -> next-token logits
        self._init_weights()
        if config.share_embeddings and config.cross_attention:
            self.decoder.embed.token.weight = self.encoder.embed.token.weight
        if config.tie_output_embedding:
            self.generator.weight = (self.decoder or self.encoder).embed.token.weight
        name_hook_points(self)

    def _init_weights(self) -> None:
        """Xavier-uniform for every matrix (as the Annotated Transformer does), zero biases."""
        for name, parameter in self.named_parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)
            elif name.endswith("bias"):
                nn.init.zeros_(parameter)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """(batch, src_len) ids -> memory (batch, src_len, d_model)."""
        return self.encoder(src, padding_mask(src, self.config.pad_id))

    def decode(
        self, tgt: torch.Tensor, memory: torch.Tensor | None = None, src: torch.Tensor | None = None,
        cache: DecoderCache | None = None, positions: slice = slice(None),
    ) -> torch.Tensor:
        """Decoder input ids (batch, tgt_len), starting with BOS -> logits (batch, tgt_len, tgt_vocab).

        `src` (batch, src_len) gives the padding mask over `memory`; both are None in a decoder-only model. With a
        `cache` (incremental decoding), `tgt` is only the tokens not fed before, and the logits are theirs.
        `positions` picks the decoder positions whose logits are wanted: only they go through the output projection."""
        pad, window = self.config.pad_id, self.config.sliding_window
        if cache is None:
            tgt_mask = decoder_mask(tgt, pad, window=window)
        else:
            tgt_mask = decoder_mask(cache.append(tgt), pad, tgt.size(1), window)  # (batch, 1, new_len, all_len)
        src_mask = None if src is None else padding_mask(src, pad)
        hidden = self.decoder(tgt, memory, tgt_mask, src_mask, cache)  # (batch, tgt_len, d_model)
        return self.generator(hidden[:, positions])

    def predict_masked(self, src: torch.Tensor) -> torch.Tensor:
        """Encoder-only: ids (batch, src_len) -> logits (batch, src_len, vocab) of the token at every position."""
        return self.generator(self.head(self.encode(src)))

    def forward(self, src: torch.Tensor | None, tgt: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced pass: logits (batch, tgt_len, tgt_vocab) for each next token. A decoder-only model reads
        `tgt` alone (`src` is None); an encoder-only one `src` alone, giving each position's masked-token logits."""
        if self.decoder is None:
            return self.predict_masked(src)
        return self.decode(tgt) if self.encoder is None else self.decode(tgt, self.encode(src), src)

    def positional_table(self, side: str = "src") -> torch.Tensor:
        """The positional encoding (max_len, d_model) the encoder ('src') or decoder ('tgt') adds; with rotary
        positions, the rotation of each position (max_len, d_head) (RotaryPositional.table)."""
        stack = {"src": self.encoder, "tgt": self.decoder}[side]
        if stack is None:
            raise ValueError(f"a {self.config.stacks} model has no {'encoder' if side == 'src' else 'decoder'}")
        return (stack.embed.positional or stack.rotary).table().detach().cpu()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
