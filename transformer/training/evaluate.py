"""Quality of a checkpoint on inputs it did not train on: `python -m transformer.evaluate checkpoints/NAME`.

reverse: fresh random strings of every length 1-30; dates: fresh dates in every format; translate: the dev split of
each training corpus, rebuilt from what the card records (the corpora must be at the recorded paths, or pass --data),
scored by BLEU and chrF overall, per corpus, by source length in words, and per corpus and length. Translation can
also be scored on "joined" dev inputs (2-3 dev pairs joined, both sides), bucketed by length up to 40 words, on
"clauses": two dev statements made one sentence by a conjunction ("..., but ...", "... because ..."), where a model
that drops a sentence's second clause loses BLEU, and on "chained" inputs the length a lecturer types (2-4 dev pairs
joined as --concat-chains joins training pairs, 26-40 words). --min-words N scores only the dev pairs of N words or
more (each corpus's "12+ words" row is scored anyway), so a measurement of long inputs takes minutes, not the whole
split. induction (a language model): its in-context numbers on a probe of repeated random characters
(transformer/analysis/induction.py). lm (a language model of a corpus's sentences): its
held-out perplexity and next-token accuracy, and its heads' previous-token and induction scores on held-out sentences
repeated and on random tokens repeated (lm_metrics, which the trainer writes on the card), then its greedy
continuations of the card's prompts, as the app continues them (continuations).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import random
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import sacrebleu
import torch

from ..analysis.induction import PROBE_LENGTH, in_context, probe, random_token_probe, repeat_measures, sentence_probe
from ..data.corpora import (
    Example,
    collate,
    dev_pairs,
    lm_dev_sentences,
    missing_corpus_files,
    packed_examples,
    token_batches,
)
from ..data.recipes import chained_pairs, clause_joined_pairs, joined_pairs
from ..data.tasks import (
    DATE_FORMATS,
    FRESH_SEED,
    LANGUAGE_MODEL_TASKS,
    REVERSE_MAX_LENGTH,
    date_example,
    reverse_example,
)
from ..inference.decoding import beam_search, greedy, output_limit
from ..inference.translation import Checkpoint
from ..io.checkpoint import CARD_FILE
from ..io.text import source_ids
from ..io.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from ..model.config import TransformerConfig
from ..model.device import model_device
from ..model.model import Transformer

METRICS = {"reverse": "exact_match", "dates": "exact_match", "translate": "bleu", "induction": "repeat_accuracy",
           "lm": "next_token_accuracy"}
# The quality each shipped task must reach: synthetic tasks in EVERY case (each length, each format), translation
# as corpus BLEU on the dev split, a corpus language model as next-token accuracy on its held-out sentences.
FLOORS = {"reverse": 0.995, "dates": 0.99, "translate": 35.0, "induction": 0.8, "lm": 0.25}
LM_DEV_SEED = 20261127  # the order a language model's held-out sentences are packed in: fixed, so figures repeat
LM_BATCH_TOKENS = 8192  # tokens a batch of held-out sequences holds (the figures do not depend on it)
# Everyday prompts (not Tatoeba's sentences) for a language model of English: what docs/english-lm.md shows.
EVERYDAY_PROMPTS = ("I would like to", "Where is the", "Tom told Mary that", "It's going to", "My mother",
                    "Can you help me", "I don't think", "We went to the", "This is the best", "Why did you")
LENGTH_BUCKETS = ((1, 5), (6, 10), (11, 15), (16, 25), (26, None))  # source words: translation by length
# Inputs made of dev pairs reach 40 words: what a lecturer types (26-35) and beyond it (36-40) are told apart.
JOINED_BUCKETS = ((1, 5), (6, 10), (11, 15), (16, 25), (26, 35), (36, 40), (41, None))
LONG_SOURCE_WORDS = 12  # a dev pair of this many source words or more also counts in its corpus's "12+ words" row
JOINED_DEV_PAIRS = 1000  # long translation inputs made by joining dev pairs
LONG_INPUT_CASES = ("joined", "clauses", "chained")  # made of dev pairs: scored apart from the dev split's own BLEU


def translate_texts(
    model: Transformer, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, texts: Sequence[str],
    batch_size: int = 256, beam_size: int = 1, length_penalty: float = 0.6, coverage_penalty: float = 0.0,
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
        src = src.to(model_device(model))  # (batch, width) where the model is: a model trained on a GPU decodes there
        limit = output_limit(width)  # as the app decodes one input of this length
        decoded = (greedy(model, src, limit) if beam_size == 1
                   else beam_search(model, src, beam_size, limit, length_penalty, coverage_penalty=coverage_penalty))
        for row, i in enumerate(chunk):
            outputs[i] = tgt_tokenizer.decode(decoded[row].tolist())
    return outputs


def score(task: str, predictions: Sequence[str], references: Sequence[str]) -> float:
    """Exact match (fraction in [0, 1]) for synthetic tasks; corpus BLEU (sacrebleu, 0-100) for translation."""
    if METRICS[task] == "bleu":
        return float(sacrebleu.corpus_bleu(list(predictions), [list(references)]).score)
    return sum(p == r for p, r in zip(predictions, references)) / max(len(references), 1)


def chrf(predictions: Sequence[str], references: Sequence[str]) -> float:
    return float(sacrebleu.corpus_chrf(list(predictions), [list(references)]).score)


def length_bucket(source: str, buckets: Sequence[tuple[int, int | None]] = LENGTH_BUCKETS) -> str:
    """The breakdown's case for a translation input: "1-5 words", ..., "26+ words" (of `buckets`, (low, high) in
    words, the last one's high None: no end)."""
    words = len(source.split())
    low, high = next((low, high) for low, high in buckets if high is None or words <= high)
    return f"{low}-{high} words" if high else f"{low}+ words"


def fresh_examples(task: str, per_case: int, seed: int = FRESH_SEED) -> list[tuple[str, str, str]]:
    """Synthetic test triples (case, source, target) covering every case: each length 1-30 (reverse) or each
    date format (dates), `per_case` of each."""
    rng = random.Random(seed)
    if task == "reverse":
        return [(f"length {length}", *reverse_example(rng, length))
                for length in range(1, REVERSE_MAX_LENGTH + 1) for _ in range(per_case)]
    return [(fmt, *date_example(rng, fmt)) for fmt in DATE_FORMATS for _ in range(per_case)]


def evaluation_cases(checkpoint: Checkpoint, per_case: int, data: str | Sequence[str] | None = None,
                     dev_data: Sequence[str] | None = None) -> list[tuple[str, str, str]]:
    """(case, source, target): fresh synthetic inputs, or the translation corpora's dev splits, cased by corpus and
    source length ("multi30k, 11-15 words")."""
    if checkpoint.card.task != "translate":
        return fresh_examples(checkpoint.card.task, per_case)
    return [(f"{corpus}, {length_bucket(source)}", source, target)
            for corpus, (source, target) in dev_pairs(checkpoint.card.training, data, dev_data)]


def case_groups(case: str, source: str = "") -> list[str]:
    """The breakdowns an input counts in: its case, and for a dev input cased "corpus, length" its corpus and its
    length too, and for one of LONG_SOURCE_WORDS words or more "corpus, 12+ words" and "12+ words" (inputs made of
    dev pairs stand apart, in their own case only)."""
    if case.startswith(LONG_INPUT_CASES) or ", " not in case:
        return [case]
    corpus, length = case.split(", ", 1)
    long = f"{LONG_SOURCE_WORDS}+ words"
    return [case, corpus, length, *((f"{corpus}, {long}", long) if len(source.split()) >= LONG_SOURCE_WORDS else ())]


def joined_cases(cases: list[tuple[str, str, str]], count: int = JOINED_DEV_PAIRS) -> list[tuple[str, str, str]]:
    """Long translation inputs the corpus lacks, made of the dev pairs of `cases`: 2-3 pairs joined, cased "joined, N
    words", and two statements joined by a conjunction into one sentence, cased "clauses"."""
    pairs = [(source, target) for _, source, target in cases]
    joined = joined_pairs(pairs, count, random.Random(FRESH_SEED))
    clauses = clause_joined_pairs(pairs, count, random.Random(FRESH_SEED))
    return ([(f"joined, {length_bucket(source, JOINED_BUCKETS)}", source, target) for source, target in joined]
            + [("clauses", source, target) for source, target in clauses])


def chained_cases(cases: list[tuple[str, str, str]], count: int) -> list[tuple[str, str, str]]:
    """`count` inputs of a lecturer's length made of the dev pairs of `cases` as --concat-chains makes training
    pairs (2-4 pairs, 26-40 words, statements joined by a conjunction or as sentences), cased "chained, 26-35
    words" or "chained, 36-40 words"."""
    pairs = [(source, target) for _, source, target in cases]
    return [(f"chained, {length_bucket(source, JOINED_BUCKETS)}", source, target)
            for source, target in chained_pairs(pairs, count, random.Random(FRESH_SEED))]


def evaluate(checkpoint: Checkpoint, cases: list[tuple[str, str, str]], beam_size: int = 1,
             length_penalty: float = 0.6, coverage_penalty: float = 0.0, model: Transformer | None = None) -> dict:
    """The task's metric overall and per case, the worst case, whether the floor is met, and the errors.
    Translation: overall BLEU and chrF over the cases not named as LONG_INPUT_CASES, whose scores stand apart in
    per_case. `model`: the checkpoint's weights in another model (with_max_len's), if not its own."""
    task = checkpoint.card.task
    predictions = translate_texts(model or checkpoint.model, checkpoint.src_tokenizer, checkpoint.tgt_tokenizer,
                                  [source for _, source, _ in cases], beam_size=beam_size,
                                  length_penalty=length_penalty, coverage_penalty=coverage_penalty)
    by_case: dict[str, tuple[list[str], list[str]]] = {}
    for (case, source, target), prediction in zip(cases, predictions):
        for group in case_groups(case, source) if task == "translate" else [case]:
            by_case.setdefault(group, ([], []))[0].append(prediction)
            by_case[group][1].append(target)
    per_case = {case: score(task, predicted, targets) for case, (predicted, targets) in sorted(by_case.items())}
    counts = {case: len(targets) for case, (_, targets) in sorted(by_case.items())}
    main = [(p, target) for (case, _, target), p in zip(cases, predictions) if not case.startswith(LONG_INPUT_CASES)]
    overall = score(task, [p for p, _ in main], [target for _, target in main])
    # Translation's floor is on corpus BLEU; the synthetic tasks' is on every case.
    worst = overall if task == "translate" else min(per_case.values())
    result = {"metric": METRICS[task], "overall": overall, "per_case": per_case, "worst": worst, "floor": FLOORS[task],
              "meets_floor": worst >= FLOORS[task], "inputs": len(main), "beam_size": beam_size,
              "length_penalty": length_penalty, "coverage_penalty": coverage_penalty, "count_per_case": counts,
              "errors": [(source, target, p) for (_, source, target), p in zip(cases, predictions) if p != target]}
    if task == "translate":
        result["chrf"] = chrf([p for p, _ in main], [target for _, target in main])
        result["chrf_per_case"] = {case: chrf(*pair) for case, pair in sorted(by_case.items())}
    return result


def with_max_len(model: Transformer, max_len: int) -> Transformer:
    """`model`'s weights in a model of longest sequence `max_len`: sinusoidal positions have no weights, so a model
    trained at 128 and shipped at 64 (what the app's views hold) decodes a long input whole, uncut."""
    if model.config.positional != "sinusoidal":
        raise ValueError(f"max_len {max_len}: only a model with sinusoidal positions may change it")
    longer = Transformer(dataclasses.replace(model.config, max_len=max_len))
    longer.load_state_dict(model.state_dict())
    return longer.to(model_device(model)).eval()


def metric_suffix(case: str) -> str:
    return case.replace(", ", "_").replace(" ", "_")


def record(checkpoint: Checkpoint, result: dict, command: str) -> None:
    """Write the evaluation into the checkpoint's card.json (its metrics, shown by the app)."""
    card = checkpoint.card
    name = "fresh_exact_match" if result["metric"] == "exact_match" else "dev_bleu"
    card.metrics[name] = round(result["overall"], 4)
    if "chrf" in result:
        card.metrics["dev_chrf"] = round(result["chrf"], 4)
        for case, value in result["per_case"].items():  # "multi30k, 1-5 words" -> dev_bleu_multi30k_1-5_words
            card.metrics[f"dev_bleu_{metric_suffix(case)}"] = round(value, 4)
        for case, value in result.get("chrf_per_case", {}).items():
            card.metrics[f"dev_chrf_{metric_suffix(case)}"] = round(value, 4)
        card.decoding = {key: result[key] for key in ("beam_size", "length_penalty", "coverage_penalty")}
    elif len(result["per_case"]) > 1:
        card.metrics[f"{name}_worst_case"] = round(result["worst"], 4)
    card.metrics["evaluated_inputs"] = result["inputs"]
    card.training["evaluated_by"] = command
    card.save(Path(checkpoint.path) / CARD_FILE)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m transformer.evaluate", description=__doc__)
    parser.add_argument("checkpoint", help="checkpoint folder, e.g. checkpoints/reverse")
    parser.add_argument("--per-case", type=int, default=200, help="synthetic inputs per length or per date format")
    parser.add_argument("--data", nargs="+", metavar="[NAME=]PATH[,TARGET]",
                        help="translate, lm: the corpora, if not where the card says, or others (scored on their dev "
                             "splits, made as training makes them)")
    parser.add_argument("--dev-data", nargs="+", metavar="NAME=PATH[,TARGET]",
                        help="translate: the dev set of the --data corpus called NAME, if not the card's (as "
                             "training takes it: another checkpoint's corpora score this one on the same inputs)")
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--length-penalty", type=float, default=0.6, help="beam search: GNMT length penalty alpha")
    parser.add_argument("--coverage-penalty", type=float, default=0.0, help="beam search: GNMT coverage penalty beta")
    parser.add_argument("--joined", action="store_true",
                        help="translate: also score long inputs of 2-3 joined dev pairs, and of two dev statements "
                             "joined by a conjunction")
    parser.add_argument("--chained", type=int, default=0, metavar="N",
                        help="translate: also score N inputs of 26-40 words, 2-4 dev pairs joined as --concat-chains "
                             "joins training pairs, by length (26-35, 36-40 words)")
    parser.add_argument("--min-words", type=int, default=0, metavar="N",
                        help="translate: score only the dev pairs whose source has N words or more (with --chained: "
                             "the long inputs in minutes); a subset's figures are not the card's, so no --record")
    parser.add_argument("--max-len", type=int,
                        help="translate: decode with this longest sequence instead of the config's (sinusoidal "
                             "positions: a model trained at 128 decodes a 40-word input uncut where the app's 64 "
                             "cuts its translation); no --record")
    parser.add_argument("--show", type=int, default=5, help="print this many errors")
    parser.add_argument("--prompts", nargs="+", help="lm: prompts to continue (default: the card's examples)")
    parser.add_argument("--record", action="store_true", help="write the figures into the checkpoint's card.json")
    args = parser.parse_args(argv)
    if args.record and (args.min_words or args.max_len):
        parser.error("--record writes the card's figures: those of the whole dev split as the app decodes, without "
                     "--min-words or --max-len")

    checkpoint = Checkpoint(args.checkpoint)
    given = sys.argv[1:] if argv is None else argv
    if checkpoint.card.task == "lm":
        lm_main(checkpoint, args, shlex.join(["python", "-m", "transformer.evaluate", *given]))
        return
    if checkpoint.card.task in LANGUAGE_MODEL_TASKS:
        measured = in_context(checkpoint.model, probe(checkpoint.tgt_tokenizer, checkpoint.config.bos_id))
        print(f"{checkpoint.name}: " + ", ".join(f"{name} = {value:.4f}" for name, value in measured.items()))
        verdict = "meets" if measured["repeat_accuracy"] >= FLOORS[checkpoint.card.task] else "MISSES"
        print(f"repeat accuracy {verdict} the floor of {FLOORS[checkpoint.card.task]}")
        return
    start = time.perf_counter()
    whole = evaluation_cases(checkpoint, args.per_case, args.data, args.dev_data)
    cases = [case for case in whole if len(case[1].split()) >= args.min_words]
    if args.joined:
        cases += joined_cases(cases)
    if args.chained:  # made of the whole dev split, whatever --min-words keeps of it
        cases += chained_cases(whole, args.chained)
    model = with_max_len(checkpoint.model, args.max_len) if args.max_len else None
    result = evaluate(checkpoint, cases, args.beam_size, args.length_penalty, args.coverage_penalty, model)
    chrf_text = f", chrF {result['chrf']:.2f}" if "chrf" in result else ""
    subset = f" of {args.min_words}+ words" if args.min_words else ""
    max_len = f", max_len {args.max_len or checkpoint.config.max_len}" if checkpoint.card.task == "translate" else ""
    print(f"{checkpoint.name}: {result['metric']} = {result['overall']:.4f}{chrf_text} on {result['inputs']} unseen "
          f"inputs{subset} ({time.perf_counter() - start:.1f} s, beam {args.beam_size}, length penalty "
          f"{args.length_penalty}, coverage penalty {args.coverage_penalty}{max_len})")
    if len(result["per_case"]) > 1:
        for case, value in result["per_case"].items():
            chrf_case = f"  chrF {result['chrf_per_case'][case]:.2f}" if "chrf_per_case" in result else ""
            print(f"  {case:<28} {value:.4f}{chrf_case}  ({result['count_per_case'][case]} inputs)")
    verdict = "meets" if result["meets_floor"] else "MISSES"
    print(f"worst case {result['worst']:.4f}: {verdict} the floor of {result['floor']}")
    for source, target, prediction in result["errors"][: args.show]:
        print(f"  {source!r} -> {prediction!r} (expected {target!r})")
    if args.record:
        record(checkpoint, result, shlex.join(["python", "-m", "transformer.evaluate", *given]))



# ----------------------------------------------------------------------------- a corpus language model (lm)

def lm_dev_examples(tokenizer: Tokenizer, sentences: Sequence[str], max_len: int) -> list[Example]:
    """The sequences a language model's held-out figures are measured on: the held-out sentences packed as training
    packs its own (transformer.data.corpora.packed_examples: whole sentences, up to max_len with <s> and </s>), in
    an order shuffled by a fixed seed, none repeated."""
    return packed_examples([tokenizer.encode(sentence) for sentence in sentences], max_len, BOS_ID, EOS_ID,
                           random.Random(LM_DEV_SEED))


@torch.no_grad()
def lm_loss(model: Transformer, examples: Sequence[Example], max_tokens: int = LM_BATCH_TOKENS
            ) -> tuple[float, float, int]:
    """(mean cross-entropy per predicted token in nats, top-1 next-token accuracy, predicted tokens) of a decoder-only
    `model` on `examples` (([], ids) each), teacher-forced: every token after <s>, the closing </s> included, is
    predicted from those before it in its sequence."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    loss_sum, correct, tokens = 0.0, 0, 0
    for batch in token_batches(examples, max_tokens, None):
        _, tgt = collate([examples[i] for i in batch], PAD_ID)
        tgt = tgt.to(device)
        logits = model(None, tgt[:, :-1])
        labels = tgt[:, 1:]
        kept = labels != PAD_ID
        loss_sum += float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                                                            ignore_index=PAD_ID, reduction="sum"))
        correct += int(((logits.argmax(dim=-1) == labels) & kept).sum())
        tokens += int(kept.sum())
    model.train(was_training)
    return loss_sum / max(tokens, 1), correct / max(tokens, 1), tokens


def lm_random_numbers(model: Transformer) -> dict[str, float]:
    """in_context's four numbers on random token ids repeated (analysis.induction.random_token_probe; stretches of
    PROBE_LENGTH ids, or fewer where twice that does not fit max_len): no corpus needed."""
    return repeat_measures(model, lm_random_probe(model.config)).numbers()


def lm_random_probe(config: TransformerConfig) -> torch.Tensor:
    """The random-token probe of a language model of `config`, its stretches cut to fit max_len twice."""
    return random_token_probe(config.tgt_vocab_size, config.bos_id, length=min(PROBE_LENGTH, (config.max_len - 1) // 2))


def lm_text_numbers(model: Transformer, tokenizer: Tokenizer, sentences: Sequence[str]) -> dict[str, float]:
    """in_context's four numbers on held-out sentences each repeated (analysis.induction.sentence_probe), named
    text_*."""
    rows = sentence_probe(tokenizer, sentences, model.config.bos_id, model.config.max_len)
    return {f"text_{name}": value for name, value in repeat_measures(model, rows).numbers().items()}


def lm_probe_numbers(model: Transformer, tokenizer: Tokenizer, sentences: Sequence[str]) -> dict[str, float]:
    """Both probes' numbers: on random tokens repeated (in_context's names) and on `sentences` repeated (text_*)."""
    return {**lm_random_numbers(model), **lm_text_numbers(model, tokenizer, sentences)}


def lm_metrics(model: Transformer, tokenizer: Tokenizer, sentences: Sequence[str],
               max_tokens: int = LM_BATCH_TOKENS) -> dict[str, float]:
    """What a language model's card records, measured on its held-out `sentences` (the split training made), with
    its own tokenizer's pieces as the tokens:
    - dev_next_token_accuracy, dev_perplexity: on the held-out sentences packed as training packs (lm_dev_examples),
      exp of the mean loss per predicted piece (the closing </s> of each sequence included); dev_perplexity_per_word
      exp of the same total loss over the sentences' words (runs between spaces, punctuation attached), comparable
      across tokenizers; dev_tokens and dev_words, what they are counted on;
    - in_context_loss_drop, repeat_accuracy, induction_score, previous_token_score: on random token ids repeated;
      the same four named text_* on held-out sentences repeated, each typed twice (analysis/induction.py)."""
    examples = lm_dev_examples(tokenizer, sentences, model.config.max_len)
    loss, accuracy, tokens = lm_loss(model, examples, max_tokens)
    capacity = model.config.max_len - 2
    words = sum(len(sentence.split()) for sentence in sentences if 0 < len(tokenizer.encode(sentence)) <= capacity)
    return {"dev_next_token_accuracy": accuracy, "dev_perplexity": math.exp(loss),
            "dev_perplexity_per_word": math.exp(loss * tokens / max(words, 1)), "dev_tokens": tokens,
            "dev_words": words, **lm_probe_numbers(model, tokenizer, sentences)}


def lm_checkpoint_metrics(checkpoint: Checkpoint, data: str | Sequence[str] | None = None,
                          dev_data: Sequence[str] | None = None) -> dict[str, float]:
    """lm_metrics of a language model's checkpoint, its held-out sentences rebuilt from the corpora its card names
    (or those `data` and `dev_data` name: see corpora.corpus_specs), as training split them: the figures its card
    was written with."""
    held_out = lm_dev_sentences(checkpoint.card.training, data, dev_data)
    sentences = [sentence for texts in held_out.values() for sentence in texts]
    return lm_metrics(checkpoint.model, checkpoint.tgt_tokenizer, sentences)


def continuations(checkpoint: Checkpoint, prompts: Sequence[str]) -> list[tuple[str, str]]:
    """(prompt, continuation) for each prompt, as the app continues a language model's prompt: greedy, for
    CONTINUATION_TOKENS pieces or to </s> (Checkpoint.translate)."""
    return [(prompt, checkpoint.translate(prompt, beam_size=1).text) for prompt in prompts]


def lm_main(checkpoint: Checkpoint, args: argparse.Namespace, command: str) -> None:
    """evaluate's report on a corpus language model: its card's figures recomputed (those on held-out text where the
    corpus is on this machine), its strongest heads, and its continuations as a Markdown table."""
    model, card = checkpoint.model, checkpoint.card
    measured = lm_random_numbers(model)
    heads = {"random tokens": repeat_measures(model, lm_random_probe(model.config))}
    missing = [] if args.data else missing_corpus_files(card.training)
    if missing:
        print(f"{checkpoint.name}: the held-out figures need {', '.join(missing)}; random tokens only")
    else:
        measured = lm_checkpoint_metrics(checkpoint, args.data, args.dev_data)
        sentences = [s for texts in lm_dev_sentences(card.training, args.data, args.dev_data).values() for s in texts]
        heads["held-out sentences"] = repeat_measures(
            model, sentence_probe(checkpoint.tgt_tokenizer, sentences, model.config.bos_id, model.config.max_len))
    for name, value in measured.items():
        recorded = card.metrics.get(name)
        on_card = "" if recorded is None else f"  (card: {recorded})"
        print(f"  {name:<32} {value:.4f}{on_card}")
    for probe_name, result in heads.items():
        induction, previous = result.strongest(result.induction), result.strongest(result.previous_token)
        print(f"  strongest heads on {probe_name} repeated: induction layer {induction[0]} head {induction[1]}, "
              f"previous-token layer {previous[0]} head {previous[1]}")
    print("\n| prompt | continuation (greedy) |\n| --- | --- |")
    for prompt, text in continuations(checkpoint, args.prompts or card.examples or EVERYDAY_PROMPTS):
        print("| " + " | ".join(cell.replace("|", "\\|") for cell in (prompt, text)) + " |")
    if args.record and not missing:
        card.metrics.update({name: round(value, 4) for name, value in measured.items()})
        card.training["evaluated_by"] = command
        card.save(Path(checkpoint.path) / CARD_FILE)
