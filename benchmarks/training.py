"""Training speed: our model's optimizer steps per second ÷ torch.nn.Transformer's, same config, data and optimizer."""
from __future__ import annotations

import torch
from torch import nn

from transformer import Transformer, TransformerConfig
from transformer.io.checkpoint import CONFIG_FILE
from transformer.model.model import Embedding
from transformer.training.train import batch_loss

from .common import Setup, result, side_by_side

FIGURE = "training speed"
AT_LEAST = 0.95
MAX_TOKENS = 4096  # the eng-fra recipe's batch: sentences x longest side


class TorchTransformer(nn.Module):
    """torch.nn.Transformer between the same embeddings and output projection as ours (tied the same way)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.src_embed = Embedding(config.src_vocab_size, config)
        self.tgt_embed = Embedding(config.tgt_vocab_size, config)
        self.transformer = nn.Transformer(
            d_model=config.d_model, nhead=config.num_heads, num_encoder_layers=config.num_encoder_layers,
            num_decoder_layers=config.num_decoder_layers, dim_feedforward=config.d_ff, dropout=config.dropout,
            activation=config.activation, batch_first=True, norm_first=config.norm_first,
            layer_norm_eps=config.layer_norm_eps,
        )
        if not config.norm_first:  # nn.Transformer always ends its stacks with a LayerNorm; post-LN ours has none
            self.transformer.encoder.norm = self.transformer.decoder.norm = None
        self.generator = nn.Linear(config.d_model, config.tgt_vocab_size)
        if config.share_embeddings:
            self.tgt_embed.token.weight = self.src_embed.token.weight
        if config.tie_output_embedding:
            self.generator.weight = self.tgt_embed.token.weight

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        pad = self.config.pad_id
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), dtype=torch.bool)  # True = blocked
        hidden = self.transformer(self.src_embed(src), self.tgt_embed(tgt), tgt_mask=causal, tgt_is_causal=True,
                                  src_key_padding_mask=src == pad, tgt_key_padding_mask=tgt == pad,
                                  memory_key_padding_mask=src == pad)
        return self.generator(hidden)


def training_batch(config: TransformerConfig, sentences: int, longest: int, seed: int = 0):
    """(src, tgt) of `sentences` rows with lengths spread over [longest / 2, longest], right-padded, as a
    token-budget batch of similar lengths is."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.full((sentences, longest), config.pad_id)
    tgt = torch.full((sentences, longest + 1), config.pad_id)
    for row in range(sentences):
        for ids, vocab in ((src, config.src_vocab_size), (tgt, config.tgt_vocab_size)):
            length = int(torch.randint(longest // 2, longest + 1, (1,), generator=generator))
            ids[row, :length] = torch.randint(4, vocab, (length,), generator=generator)
    tgt[:, 0] = config.bos_id
    return src, tgt


def trainer(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor):
    """One optimizer step of transformer.training.train's recipe (Adam, label smoothing, clipping) as a function."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    model.train()

    def step() -> None:
        loss = batch_loss(model, src, tgt, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def measure(setup: Setup) -> list[dict]:
    config = TransformerConfig.load(setup.checkpoint / CONFIG_FILE)
    longest = 8 if setup.smoke else 24
    sentences = 8 if setup.smoke else MAX_TOKENS // longest
    src, tgt = training_batch(config, sentences, longest)
    torch.manual_seed(0)
    steps = {"ours": trainer(Transformer(config), src, tgt), "torch.nn": trainer(TorchTransformer(config), src, tgt)}
    seconds = side_by_side(steps, repeats=2 * setup.repeats)
    return [result(FIGURE, f"steps/s ÷ torch.nn.Transformer's, batch {sentences}×{longest}",
                   seconds["torch.nn"] / seconds["ours"], "×", at_least=AT_LEAST,
                   ours_s=seconds["ours"], torch_s=seconds["torch.nn"])]
