"""Any target through the decoder: its attention and how likely the model finds each of its pieces; and a foil.

A forced target is teacher-forced: the decoder reads <s> and the target's pieces (not its own choices), and at each
position we read the probability of the target's next piece and its rank among every piece of the vocabulary (1 =
the model's own choice there). Forcing the model's own output gives exactly the pass `Checkpoint.translate`
captures.

A foil is an alternative output (one word changed, say). Its contrastive score at position t is
log p(target_t) - log p(foil piece aligned with t), both read after the target's prefix (Yin & Neubig 2022,
"Interpreting Language Models with Contrastive Explanations": why the model prefers target_t to the foil's piece
*here*): 0 wherever the two agree, positive where the model prefers the target. A foil of another length aligns where
it can (`aligned_foil`: before the first difference and after the last one), and the two whole sequences compare by
log p(target) - log p(foil), each teacher-forced after its own prefix (`sequence_log_prob`).
`transformer.analysis.attribution.contrastive` attributes the per-position difference.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..model.capture import capture
from ..model.device import model_device
from ..model.hooks import NameFilter
from ..model.model import Transformer
from ..model.record import AttentionRecord


@dataclass(frozen=True)
class ForcedTarget:
    """One teacher-forced pass over a given target."""

    src_ids: list[int]  # encoder input, ending with </s>
    tgt_ids: list[int]  # decoder input: <s> and the target's pieces (its last piece, </s>, is never fed)
    output_ids: list[int]  # the piece each decoder position is made to predict: the target's pieces and </s>
    probs: list[float]  # p(output_ids[t]) at each position t
    ranks: list[int]  # 1 + how many pieces the model finds more likely than output_ids[t] at t
    log_probs: torch.Tensor  # (tgt_len, tgt_vocab) log-softmax of the logits at every position, on the CPU
    attention: AttentionRecord  # the captured pass, on the CPU


def force(model: Transformer, src_ids: list[int], output_ids: list[int], names: NameFilter = None,
          ) -> ForcedTarget:
    """Teacher-force `output_ids` (the pieces to predict, </s> last; no <s>) after source `src_ids`, capturing
    the hook points `names` selects (see `capture`)."""
    if not output_ids:
        raise ValueError("the target has no pieces: it needs at least </s>")
    tgt_ids = [model.config.bos_id, *output_ids[:-1]]
    device = model_device(model)
    with torch.no_grad(), capture(model, names) as record:
        logits = model(torch.tensor([src_ids], device=device), torch.tensor([tgt_ids], device=device))
    logits = logits[0].cpu()  # (tgt_len, tgt_vocab)
    probs = logits.softmax(dim=-1)  # as Checkpoint.translate reads its output's probabilities
    positions, targets = torch.arange(len(output_ids)), torch.tensor(output_ids)
    chosen = logits[positions, targets]  # (tgt_len,)
    ranks = 1 + (logits > chosen[:, None]).sum(dim=-1)
    return ForcedTarget(list(src_ids), tgt_ids, list(output_ids), probs[positions, targets].tolist(), ranks.tolist(),
                        logits.log_softmax(dim=-1), record.cpu())


def forced_target(checkpoint, text: str, target: str, names: NameFilter = None) -> ForcedTarget:
    """`target` (text in the target language) teacher-forced through the decoder of a loaded Checkpoint after the
    input `text`."""
    return force(checkpoint.model, checkpoint.encode(text), checkpoint.encode(target, "tgt")[1:], names)


def aligned_foil(output_ids: list[int], foil_ids: list[int]) -> list[int | None]:
    """For each target position, the foil piece compared with it, or None. Pieces before the first difference align
    position by position, and pieces after the last one from the end; between those, a stretch as long in both aligns
    position by position, and otherwise only its first pieces align (both follow the same prefix). Two sequences of
    one length align position by position throughout."""
    length, foil_length = len(output_ids), len(foil_ids)
    prefix = 0
    while prefix < min(length, foil_length) and output_ids[prefix] == foil_ids[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(length, foil_length) - prefix and output_ids[-1 - suffix] == foil_ids[-1 - suffix]:
        suffix += 1
    aligned: list[int | None] = [None] * length
    aligned[:prefix] = foil_ids[:prefix]
    for back in range(1, suffix + 1):
        aligned[-back] = foil_ids[-back]
    middle, foil_middle = length - prefix - suffix, foil_length - prefix - suffix
    if middle == foil_middle:
        aligned[prefix:length - suffix] = foil_ids[prefix:foil_length - suffix]
    elif middle and foil_middle:
        aligned[prefix] = foil_ids[prefix]
    return aligned


def contrast(forced: ForcedTarget, foil_ids: list[int]) -> np.ndarray:
    """log p(target_t) - log p(the foil's piece aligned with t) at each position t, both after the target's prefix;
    NaN where no foil piece aligns (aligned_foil): (tgt_len,). foil_ids: the foil's pieces, </s> last."""
    scores = np.full(len(forced.output_ids), np.nan)
    for position, (target, foil) in enumerate(zip(forced.output_ids, aligned_foil(forced.output_ids, foil_ids),
                                                  strict=True)):
        if foil is not None:
            scores[position] = float(forced.log_probs[position, target] - forced.log_probs[position, foil])
    return scores


def sequence_log_prob(forced: ForcedTarget) -> float:
    """log p of the whole forced output: the sum of its pieces' log-probabilities, each after its own prefix."""
    positions = torch.arange(len(forced.output_ids))
    return float(forced.log_probs[positions, forced.output_ids].sum())


def contrastive_scores(checkpoint, text: str, target: str, foil: str) -> np.ndarray:
    """Per position log p(target_t) - log p(the aligned foil piece) for the input `text` (see `contrast`)."""
    return contrast(forced_target(checkpoint, text, target, names=[]), checkpoint.encode(foil, "tgt")[1:])
