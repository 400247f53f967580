"""In-context learning in a decoder-only model, measured on a probe of repeated random tokens (Olsson et al. 2022,
"In-context Learning and Induction Heads"): <s>, then `length` pieces of random text, then the same pieces again.

Nothing predicts random text the first time; the second time, a model that looks back at the first occurrence
(a previous-token head in one layer, an induction head in the next) predicts it. So:
- in_context_loss_drop: the mean loss on the first occurrence minus that on the second (nats per token);
- repeat_accuracy: how often the most likely next token is right on the second occurrence;
- induction_score: the largest, over heads, mean attention from a token of the second occurrence to the token after
  its first occurrence (where an induction head looks);
- previous_token_score: the largest, over heads, mean attention from each token to the one before it.
In each occurrence the first token is left out of the losses and the accuracy: nothing foretells where a repeat
starts.
"""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from .capture import capture
from .model import Transformer
from .tasks import random_text
from .tokenizer import Tokenizer

PROBE_LENGTH = 20  # random tokens in each occurrence
PROBE_SIZE = 200  # sequences of the probe
PROBE_SEED = 20261126  # a probe of its own: the training texts are drawn from another generator


def probe(tokenizer: Tokenizer, bos_id: int, size: int = PROBE_SIZE, length: int = PROBE_LENGTH,
          seed: int = PROBE_SEED) -> torch.Tensor:
    """(size, 1 + 2 * length) ids: <s>, the first `length` pieces of a random text such as the induction task's
    (random words: tasks.random_text), the same pieces again."""
    rng = random.Random(seed)
    rows = []
    while len(rows) < size:
        segment = tokenizer.encode(random_text(rng, 2 * length))[:length]
        if len(segment) == length:  # (a text of 2 * length characters has as many pieces in a character model)
            rows.append([bos_id, *segment, *segment])
    return torch.tensor(rows)


def head_scores(model: Transformer, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(induction, previous-token) scores of every decoder self-attention head on `ids` from `probe`, each
    (layers, heads)."""
    length = (ids.size(1) - 1) // 2
    with torch.no_grad(), capture(model, lambda name: name.endswith("self_attn.hook_pattern")) as record:
        model(None, ids)
    pattern = torch.stack([record[key] for key in record.keys_of("decoder.self")])  # (layers, batch, heads, q, k)
    second = torch.arange(length + 1, 2 * length + 1)  # positions of the second occurrence
    positions = torch.arange(1, 2 * length + 1)
    induction = pattern[..., second, second - length + 1].mean(dim=(1, 3))  # (layers, heads)
    previous = pattern[..., positions, positions - 1].mean(dim=(1, 3))
    return induction, previous


@torch.no_grad()
def in_context(model: Transformer, ids: torch.Tensor) -> dict[str, float]:
    """The module docstring's four numbers for a decoder-only `model` on `ids` from `probe`."""
    if model.encoder is not None or model.decoder is None:
        raise ValueError("in-context learning is measured on decoder-only models")
    was_training = model.training
    model.eval()
    length = (ids.size(1) - 1) // 2
    logits = model(None, ids[:, :-1])  # (batch, 2 * length, vocab): logits[:, i] predicts ids[:, i + 1]
    losses = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (batch, 2 * length)
    first, second = slice(1, length), slice(length + 1, 2 * length)  # each occurrence but its first token
    correct = logits[:, second].argmax(dim=-1) == ids[:, 1:][:, second]
    induction, previous = head_scores(model, ids)
    model.train(was_training)
    return {"in_context_loss_drop": float(losses[:, first].mean() - losses[:, second].mean()),
            "repeat_accuracy": float(correct.float().mean()),
            "induction_score": float(induction.max()),
            "previous_token_score": float(previous.max())}
