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

The same four numbers on other probes: random token ids repeated (random_token_probe: a subword vocabulary's
random pieces, where random characters would be few long pieces), and real text repeated (sentence_probe: held-out
sentences, each typed twice), whose rows differ in length (repeat_measures).
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..data.tasks import random_text
from ..io.tokenizer import Tokenizer
from ..model.capture import capture
from ..model.model import Transformer

PROBE_LENGTH = 20  # random tokens in each occurrence
PROBE_SIZE = 200  # sequences of the probe
PROBE_SEED = 20261126  # a probe of its own: the training texts are drawn from another generator
TEXT_PROBE_SIZE = 500  # sentences of a text probe
TEXT_PROBE_MIN_PIECES = 4  # a shorter sentence has too few positions to tell a repeat by


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
    sites = record.keys_of("decoder.self_attn")
    pattern = torch.stack([record[site] for site in sites])  # (layers, batch, heads, q, k)
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


def random_token_probe(vocab_size: int, bos_id: int, first_id: int = 4, size: int = PROBE_SIZE,
                       length: int = PROBE_LENGTH, seed: int = PROBE_SEED) -> torch.Tensor:
    """(size, 1 + 2 * length) ids: <s>, `length` token ids drawn uniformly from first_id .. vocab_size - 1 (the
    special ids below first_id left out: padding, unknown, <s>, </s>), the same ids again (Olsson et al.'s probe)."""
    generator = torch.Generator().manual_seed(seed)
    segment = torch.randint(first_id, vocab_size, (size, length), generator=generator)
    return torch.cat([torch.full((size, 1), bos_id), segment, segment], dim=1)


def sentence_probe(tokenizer: Tokenizer, sentences: Sequence[str], bos_id: int, max_len: int,
                   size: int = TEXT_PROBE_SIZE, seed: int = PROBE_SEED) -> list[list[int]]:
    """Real text repeated: rows of <s>, a sentence's pieces, the same pieces again (as the sentence typed twice,
    joined by a space, is encoded), for `size` of `sentences` drawn with `seed` from those of TEXT_PROBE_MIN_PIECES
    pieces or more that fit twice in max_len. The same sentences in the same order give the same rows."""
    encoded = (tokenizer.encode(sentence) for sentence in sentences)
    fitting = [ids for ids in encoded if TEXT_PROBE_MIN_PIECES <= len(ids) and 1 + 2 * len(ids) <= max_len]
    chosen = random.Random(seed).sample(fitting, min(size, len(fitting)))
    return [[bos_id, *ids, *ids] for ids in chosen]


@dataclass(frozen=True)
class RepeatMeasures:
    """in_context's numbers over a probe, with every head's scores: induction and previous_token (layers, heads)."""

    in_context_loss_drop: float
    repeat_accuracy: float
    induction: torch.Tensor
    previous_token: torch.Tensor

    def numbers(self) -> dict[str, float]:
        """in_context's four numbers (the scores of the strongest head)."""
        return {"in_context_loss_drop": self.in_context_loss_drop, "repeat_accuracy": self.repeat_accuracy,
                "induction_score": float(self.induction.max()),
                "previous_token_score": float(self.previous_token.max())}

    def strongest(self, scores: torch.Tensor) -> tuple[int, int]:
        """(layer, head) of the largest of `scores` (self.induction or self.previous_token)."""
        layer, head = divmod(int(scores.argmax()), scores.size(1))
        return layer, head


@torch.no_grad()
def repeat_measures(model: Transformer, rows: Sequence[Sequence[int]] | torch.Tensor) -> RepeatMeasures:
    """in_context's numbers on rows that may differ in length, each <s>, a stretch, the same stretch again
    (sentence_probe): rows of one length run as one batch, and every position of every row weighs alike in each
    mean, as in in_context, whose numbers these are on a probe of one length."""
    if model.encoder is not None or model.decoder is None:
        raise ValueError("in-context learning is measured on decoder-only models")
    device = next(model.parameters()).device
    groups: dict[int, list[list[int]]] = {}
    for row in rows:
        groups.setdefault(len(row), []).append([int(token) for token in row])
    was_training = model.training
    model.eval()
    first_loss = second_loss = correct = 0.0
    first_count = second_count = 0
    induction = previous = None
    for width in sorted(groups):
        ids = torch.tensor(groups[width], device=device)
        batch, length = ids.size(0), (width - 1) // 2
        logits = model(None, ids[:, :-1])  # logits[:, i] predicts ids[:, i + 1]
        losses = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (batch, 2 * length)
        first, second = slice(1, length), slice(length + 1, 2 * length)  # each occurrence but its first token
        first_loss += float(losses[:, first].sum())
        second_loss += float(losses[:, second].sum())
        correct += float((logits[:, second].argmax(dim=-1) == ids[:, 1:][:, second]).sum())
        first_count += batch * (length - 1)
        second_count += batch * (length - 1)
        group_induction, group_previous = head_scores(model, ids)  # means over this group's positions
        induction = (0 if induction is None else induction) + group_induction.cpu() * batch * length
        previous = (0 if previous is None else previous) + group_previous.cpu() * batch * 2 * length
    model.train(was_training)
    if induction is None or not first_count:
        raise ValueError("a probe needs rows of <s> and a stretch of two tokens or more, twice")
    positions = sum(len(group) * ((width - 1) // 2) for width, group in groups.items())
    return RepeatMeasures(first_loss / first_count - second_loss / second_count, correct / second_count,
                          induction / positions, previous / (2 * positions))
