"""Quality of a checkpoint on inputs it did not train on: `python -m transformer.evaluate checkpoints/NAME`.

reverse: fresh random strings of every length 1-30; dates: fresh dates in every format; translate: the dev split of
the training corpus, rebuilt from what the card records (the corpus must be at the recorded path, or pass --data).
"""
from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence

import sacrebleu
import torch

from .checkpoint import Checkpoint
from .data import read_parallel, source_ids, split_dev
from .decoding import beam_search, greedy
from .model import Transformer
from .tasks import DATE_FORMATS, REVERSE_MAX_LENGTH, date_example, reverse_example
from .tokenizer import Tokenizer

METRICS = {"reverse": "exact_match", "dates": "exact_match", "translate": "bleu"}
FRESH_SEED = 20261122  # fresh test inputs: a seed no training run uses


def translate_texts(
    model: Transformer, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, texts: Sequence[str],
    batch_size: int = 256, beam_size: int = 1,
) -> list[str]:
    """Translate many texts, batched by similar length; outputs in input order."""
    config = model.config
    encoded = [source_ids(src_tokenizer, text, config.max_len)[0] for text in texts]
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    outputs: list[str] = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        width = max(len(encoded[i]) for i in chunk)
        src = torch.full((len(chunk), width), config.pad_id, dtype=torch.long)
        for row, i in enumerate(chunk):
            src[row, : len(encoded[i])] = torch.tensor(encoded[i])
        limit = 2 * width + 10  # outputs are never much longer than inputs: don't let a poor model ramble
        decoded = greedy(model, src, limit) if beam_size == 1 else beam_search(model, src, beam_size, limit)
        for row, i in enumerate(chunk):
            outputs[i] = tgt_tokenizer.decode(decoded[row].tolist())
    return outputs


def score(task: str, predictions: Sequence[str], references: Sequence[str]) -> float:
    """Exact match (fraction in [0, 1]) for synthetic tasks; corpus BLEU (sacrebleu, 0-100) for translation."""
    if METRICS[task] == "bleu":
        return float(sacrebleu.corpus_bleu(list(predictions), [list(references)]).score)
    return sum(p == r for p, r in zip(predictions, references)) / max(len(references), 1)


def fresh_examples(task: str, per_case: int, seed: int = FRESH_SEED) -> list[tuple[str, str]]:
    """Synthetic test pairs covering every case: each length 1-30 (reverse) or each date format (dates)."""
    rng = random.Random(seed)
    if task == "reverse":
        return [reverse_example(rng, length) for length in range(1, REVERSE_MAX_LENGTH + 1) for _ in range(per_case)]
    return [date_example(rng, fmt) for fmt in DATE_FORMATS for _ in range(per_case)]


def evaluation_pairs(checkpoint: Checkpoint, per_case: int, data: str | None = None) -> list[tuple[str, str]]:
    training = checkpoint.card.training
    if checkpoint.card.task != "translate":
        return fresh_examples(checkpoint.card.task, per_case)
    pairs = read_parallel(data or training["data"], training.get("data_target"))
    return split_dev(pairs, training["dev_fraction"], training["split_seed"])[1]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m transformer.evaluate", description=__doc__)
    parser.add_argument("checkpoint", help="checkpoint folder, e.g. checkpoints/reverse")
    parser.add_argument("--per-case", type=int, default=200, help="synthetic inputs per length or per date format")
    parser.add_argument("--data", help="corpus path, if not where the card says (translate only)")
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--show", type=int, default=5, help="print this many errors")
    args = parser.parse_args(argv)

    checkpoint = Checkpoint(args.checkpoint)
    pairs = evaluation_pairs(checkpoint, args.per_case, args.data)
    start = time.perf_counter()
    predictions = translate_texts(
        checkpoint.model, checkpoint.src_tokenizer, checkpoint.tgt_tokenizer, [s for s, _ in pairs],
        beam_size=args.beam_size,
    )
    metric = METRICS[checkpoint.card.task]
    value = score(checkpoint.card.task, predictions, [t for _, t in pairs])
    print(f"{checkpoint.name}: {metric} = {value:.4f} on {len(pairs)} unseen inputs "
          f"({time.perf_counter() - start:.1f} s, beam {args.beam_size})")
    if checkpoint.card.task == "dates":
        for fmt in DATE_FORMATS:
            rows = [i for i in range(len(pairs)) if i // args.per_case == DATE_FORMATS.index(fmt)]
            print(f"  {fmt:<24} {score('dates', [predictions[i] for i in rows], [pairs[i][1] for i in rows]):.4f}")
    errors = [(s, t, p) for (s, t), p in zip(pairs, predictions) if p != t][: args.show]
    for source, target, prediction in errors:
        print(f"  {source!r} -> {prediction!r} (expected {target!r})")


if __name__ == "__main__":
    main()
