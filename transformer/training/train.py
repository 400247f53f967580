"""Train a checkpoint: `python -m transformer.train --task reverse --out checkpoints/reverse`.

The same command runs data-parallel under `torchrun --nproc_per_node=N -m transformer.train ...` (gloo on CPU,
nccl on CUDA): every rank builds the same data and tokenizers, takes its share of each epoch's batches, and
DistributedDataParallel averages the gradients, so all ranks hold identical weights after every step.

Recipe: Adam (0.9, 0.98, 1e-9); the paper's learning-rate shape, linear warm-up then decay with 1/sqrt(step), written
with an explicit peak rate rather than d_model^-0.5; label smoothing; gradient clipping; token-budget batches of
similar length. The best dev checkpoint is kept, earlier states are saved as snapshots, and `--resume` continues an
interrupted run from its last evaluation.

`--task lm` trains a decoder-only language model on one side of the --data corpora (--text-side): each sentence once,
about --dev-fraction of them held out by sentence, a subword vocabulary trained on the rest, and sentences packed into
sequences of up to --max-len tokens (a share of them with a sentence repeated: --repeat-sentences). Its model
defaults are Llama's parts (rotary positions, RMSNorm, a gated SwiGLU feed-forward network, two query heads per
key/value head, no biases); its card holds the held-out perplexity and the heads' previous-token and induction scores
on held-out sentences repeated and on random tokens repeated (transformer.training.evaluate.lm_metrics).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import platform
import random
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ..analysis.induction import in_context, probe
from ..data.corpora import (
    TEXT_SIDES,
    CorpusSpec,
    Repeat,
    collate,
    corpus_specs,
    corpus_splits,
    packed_examples,
    repeated,
    sentence_splits,
    token_batches,
)
from ..data.recipes import JOINED_PAIRS
from ..data.tasks import CORPUS_TASKS, LANGUAGE_MODEL_TASKS, generate
from ..inference.translation import (
    Checkpoint,
    load_checkpoint,
)
from ..io.checkpoint import (
    CONFIG_FILE,
    SNAPSHOT_DIR,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    WEIGHTS_FILE,
    WEIGHTS_SUFFIX,
    CheckpointError,
    ModelCard,
    check_replaceable,
    check_staging,
    commit_checkpoint,
    expected_state,
    load_weights,
    remove_staging,
    save_atomically,
    save_checkpoint,
    save_weights,
    staging_folder,
    weights_file,
    writer_lock,
)
from ..io.text import (
    source_ids,
    target_ids,
)
from ..io.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from ..model.config import TransformerConfig
from ..model.model import Transformer
from .evaluate import METRICS, lm_dev_examples, lm_loss, lm_metrics, lm_probe_numbers, score, translate_texts

RESUME_FILE = "resume.pt"  # training state for --resume; not part of the shipped checkpoint
IN_CONTEXT_RECORDED = ("in_context_loss_drop", "induction_score", "previous_token_score")  # per evaluation
# A corpus language model's history also records them on held-out sentences repeated (its snapshots, the three above:
# on random tokens repeated, as the card schema's snapshot entries name them).
TEXT_RECORDED = ("text_in_context_loss_drop", "text_induction_score", "text_previous_token_score")

# Per-task defaults for options left unset: small models for the synthetic tasks, a larger one for translation.
TASK_DEFAULTS = {
    "reverse": dict(d_model=128, num_heads=4, layers=2, d_ff=256, max_len=34, vocab_size=64, steps=2000,
                    max_tokens=4096, lr=1e-3, warmup=400, train_size=200_000, dev_size=2000),
    "dates": dict(d_model=128, num_heads=4, layers=2, d_ff=256, max_len=40, vocab_size=96, steps=2000,
                  max_tokens=4096, lr=1e-3, warmup=400, train_size=200_000, dev_size=2000),
    "translate": dict(d_model=256, num_heads=4, layers=3, d_ff=512, max_len=64, vocab_size=4000, steps=2400,
                      max_tokens=4096, lr=1e-3, warmup=400, train_size=0, dev_size=0),
    # Decoder-only: `layers` is the decoder's depth. Two layers are the fewest an induction head needs.
    "induction": dict(d_model=64, num_heads=4, layers=2, d_ff=256, max_len=64, vocab_size=96, steps=3000,
                      max_tokens=4096, lr=1e-3, warmup=200, train_size=100_000, dev_size=1000),
    # Decoder-only, Llama-shaped: rotary positions, RMSNorm before each sublayer, SwiGLU (d_ff about 8/3 d_model),
    # two query heads per key/value head, no biases in attention or feed-forward; about 5 M parameters at 8k pieces.
    "lm": dict(d_model=256, num_heads=4, layers=4, d_ff=704, max_len=128, vocab_size=8000, steps=1500,
               max_tokens=8192, lr=2e-3, warmup=150, train_size=0, dev_size=0, label_smoothing=0.0,
               positional="rotary", norm="rms", feed_forward="gated", activation="silu", num_kv_heads=2,
               attention_bias="none", feed_forward_bias=False, norm_first=True),
}
# Options no task sets: the model of "Attention Is All You Need" (post-LN, sinusoids, ReLU, biases everywhere).
MODEL_DEFAULTS = dict(label_smoothing=0.1, positional="sinusoidal", rope_theta=10000.0, norm="layer",
                      feed_forward="mlp", activation="relu", num_kv_heads=0, attention_bias="all",
                      feed_forward_bias=True, norm_first=False)
DESCRIPTIONS = {
    "reverse": "Reverses a string of lowercase letters and digits (1-30 characters), character by character. "
               "A lecturer can predict its attention: cross-attention should run along the anti-diagonal.",
    "dates": "Turns a date written in one of 12 human formats (3 March 2021, 03/03/2021, Wednesday, March 3, 2021, "
             "...) into ISO YYYY-MM-DD. Watch cross-attention pick the year, month and day out of the input.",
    "translate": "Translates between the two sides of a parallel corpus.",
    "induction": "A two-layer language model over characters, trained on random text with a stretch of it repeated: "
                 "it continues a repeat it has seen begin, by attending back to the first occurrence. Watch a "
                 "previous-token head (layer 0) and an induction head (layer 1) appear in the Training view.",
    "lm": "A small language model: it continues the text it is given, one subword piece at a time (greedy). Trained "
          "from scratch on the sentences of a corpus, packed into paragraphs.",
}


# What an --init-from run takes from the checkpoint it continues (its card records them as they are). max_len is
# not among them: a run may raise it where positions are sinusoids, which have no weights.
INHERITED = ("vocab_size", "shared_vocab", "d_model", "num_heads", "layers", "d_ff", "dropout", "norm_first",
             "positional", "activation", "rope_theta", "norm", "feed_forward", "num_kv_heads", "attention_bias",
             "feed_forward_bias")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m transformer.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, choices=sorted(TASK_DEFAULTS))
    parser.add_argument("--out", required=True, type=Path,
                        help="checkpoint folder to write (written beside it, then renamed into place)")
    parser.add_argument("--replace", action="store_true",
                        help="replace the checkpoint already in --out, whole (without it, an --out with files in it "
                             "is refused; --resume replaces it anyway); never what the run reads: --init-from's "
                             "checkpoint, a corpus")
    data = parser.add_argument_group("data")
    data.add_argument("--data", nargs="+", type=CorpusSpec.parse, metavar="[NAME=]PATH[,TARGET]",
                      help="translate, lm: one or more corpora, each a TSV of source<TAB>target or two aligned files "
                           "(SOURCE,TARGET; .gz allowed), named NAME (default: the folder's name) in the dev scores; "
                           "lm reads the side --text-side names (a file without tabs: one sentence a line)")
    data.add_argument("--dev-data", nargs="+", type=CorpusSpec.parse, default=[], metavar="NAME=PATH[,TARGET]",
                      help="translate: the dev set of the --data corpus called NAME (e.g. Multi30k's val), which "
                           "then trains on all of its pairs; other corpora give --dev-fraction of theirs")
    data.add_argument("--repeat", nargs="+", type=Repeat.parse, default=[], metavar="NAME=TIMES",
                      help="pairs an epoch holds TIMES times: those of the corpus NAME, or with NAME WORDS+words "
                           "those whose source has at least WORDS words (e.g. multi30k=3 10+words=3; the largest "
                           "that applies counts)")
    data.add_argument("--data-credit", default="", help="source and licence of the corpus, for the model card")
    data.add_argument("--text-side", choices=TEXT_SIDES, default="source",
                      help="lm: the side of each --data corpus that is the text: source (a TSV's first column, e.g. "
                           "English in tatoeba's eng-fra.tsv) or target (its second column)")
    data.add_argument("--dev-fraction", type=float, default=0.05,
                      help="translate: share of pairs held out as dev; lm: share of sentences held out")
    data.add_argument("--split-seed", type=int, default=0, help="translate, lm: seed of the dev split")
    data.add_argument("--train-size", type=int, help="synthetic tasks: training pairs to generate")
    data.add_argument("--dev-size", type=int, help="synthetic tasks: dev pairs to generate")
    data.add_argument("--vocab-size", type=int, help="sentencepiece vocabulary size (upper bound for char models)")
    data.add_argument("--shared-vocab", action="store_true", help="one vocabulary and embedding for both sides")
    model = parser.add_argument_group("model")
    model.add_argument("--d-model", type=int)
    model.add_argument("--num-heads", type=int)
    model.add_argument("--layers", type=int, help="encoder and decoder layers each (a language model's decoder)")
    model.add_argument("--d-ff", type=int)
    model.add_argument("--dropout", type=float, default=0.1)
    model.add_argument("--max-len", type=int, help="longest sequence in tokens (--init-from: may be raised, for "
                                                 "sinusoidal positions)")
    model.add_argument("--norm-first", action=argparse.BooleanOptionalAction,
                       help="pre-LN instead of the paper's post-LN (lm's default)")
    model.add_argument("--positional", choices=("sinusoidal", "learned", "rotary"),
                       help="rotary: a decoder-only model's (lm's default)")
    model.add_argument("--rope-theta", type=float, help="rotary positions: the base of the wavelengths (10000)")
    model.add_argument("--norm", choices=("layer", "rms"), help="LayerNorm, or RMSNorm (lm's default)")
    model.add_argument("--feed-forward", choices=("mlp", "gated"),
                       help="mlp: W_2 act(W_1 x); gated: down(act(gate x) * up x), SwiGLU with --activation silu "
                            "(lm's default)")
    model.add_argument("--activation", choices=("relu", "gelu", "silu"))
    model.add_argument("--num-kv-heads", type=int,
                       help="heads of keys and values, each shared by num_heads / this query heads (grouped-query "
                            "attention; 0: one per query head; lm's default 2)")
    model.add_argument("--attention-bias", choices=("all", "qkv", "none"), help="biases of W_q, W_k, W_v, W_o")
    model.add_argument("--feed-forward-bias", action=argparse.BooleanOptionalAction,
                       help="biases in the feed-forward network (lm's default: none)")
    train = parser.add_argument_group("training")
    train.add_argument("--steps", type=int, help="optimizer steps")
    train.add_argument("--max-tokens", type=int, help="tokens per batch and rank (batch size x longest side)")
    train.add_argument("--lr", type=float, help="peak learning rate, reached at the end of warm-up")
    train.add_argument("--warmup", type=int, help="warm-up steps")
    train.add_argument("--cooldown", type=float, default=0.0,
                       help="share of the steps at the end over which the rate falls linearly to 0 (e.g. 0.3)")
    train.add_argument("--label-smoothing", type=float, help="0.1, a language model's 0 (its perplexity is the point)")
    train.add_argument("--clip", type=float, default=1.0, help="max gradient norm")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--eval-every", type=int, default=500, help="steps between dev evaluations")
    train.add_argument("--dev-eval-size", type=int, default=1000,
                       help="dev pairs decoded at each evaluation (lm: held-out sequences scored)")
    train.add_argument("--snapshots", help="fractions of training to keep as snapshots (0,0.02,0.1,0.3); with "
                                           "--snapshot-metrics, also the first evaluation at or after each")
    train.add_argument("--snapshot-metrics", default="",
                       help="instead of --snapshots (unless given too): keep the first state, the first evaluation "
                            "whose dev metric (--snapshot-by) exceeds each of these values (e.g. 5,20) and the last "
                            "evaluation before the final one")
    train.add_argument("--snapshot-by", default="dev_metric",
                       help="the figure --snapshot-metrics compares: the dev metric, or for a language model one of "
                            "its in-context figures, e.g. text_induction_score (--task lm: on held-out sentences "
                            "repeated), so that the snapshots straddle the heads' forming whenever it comes")
    train.add_argument("--keep", choices=("best", "last"), default="best",
                       help="the weights the checkpoint gets: those of the best dev evaluation (the trainer's quick "
                            "one: greedy on --dev-eval-size pairs), or the last state, e.g. after a cool-down to 0")
    train.add_argument("--init-from", type=Path,
                       help="continue from this checkpoint folder: its weights, architecture, tokenizers, history "
                            "and snapshots, with a fresh optimizer, warm-up and cool-down")
    train.add_argument("--concat", type=float, default=0.0,
                       help="translate: add this share of extra training pairs made of 2-3 pairs joined, so the "
                            "model meets inputs longer than the corpus's sentences")
    train.add_argument("--concat-clauses", type=float, default=0.0,
                       help="translate: add this share of extra training pairs made of two statements joined into "
                            "one sentence by a conjunction (', and' / ', et', ' because' / ' parce que', ...), so the "
                            "model meets long single sentences")
    train.add_argument("--concat-phrases", type=float, default=0.0,
                       help="translate: add this share of extra training pairs made of a statement with a place or "
                            "company phrase that the corpus translates one way appended on both sides ('near the "
                            "station' / 'près de la gare'), so the model translates what follows a sentence's object")
    train.add_argument("--concat-long", type=float, default=0.0,
                       help="translate: add this share of extra training pairs made of two statements, each with a "
                            "phrase as --concat-phrases appends, joined by a conjunction as --concat-clauses does: "
                            "single sentences of 12-24 words, the length a class types")
    train.add_argument("--concat-timed", type=float, default=0.0,
                       help="translate: add this share of extra training pairs made of a statement that ends in a "
                            "time phrase ('yesterday' / 'hier') with a phrase as --concat-phrases appends put before "
                            "it on both sides, so the model translates two phrases after a sentence's object")
    train.add_argument("--concat-chains", type=float, default=0.0,
                       help="translate: add this share of extra training pairs made of 2-4 different pairs joined "
                            "the same way on both sides into sources of 26-40 words, the length a lecturer types: "
                            "between two statements a conjunction half the time (as --concat-clauses), else a space "
                            "(as --concat), since joins by full stops alone taught a model to cut a long single "
                            "sentence after its first clause, and conjunctions alone never show it two sentences "
                            "in one input; a joined pair longer than --max-len pieces on either side is left out, "
                            "not cut (its translation would lose its end)")
    train.add_argument("--repeat-sentences", type=float, default=0.0,
                       help="lm: share of the training sequences in which a stretch of its sentences (one or "
                            "several in a row) comes again later in it, so that looking back at an earlier occurrence "
                            "pays, as names, phrases and passages recur in real text (induction heads); the card "
                            "says so")
    train.add_argument("--device", default="cpu", help="cpu or cuda")
    train.add_argument("--resume", action="store_true",
                       help=f"continue from OUT/{RESUME_FILE} (written at each evaluation) if present, "
                            "e.g. with more --steps")
    train.add_argument("--examples", nargs="*", default=None, help="demo inputs for the model card")
    train.add_argument("--description", default=None, help="model card description")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for the card's exact training command
    args.max_len_given = args.max_len is not None  # an --init-from run keeps the earlier max_len unless told
    args.snapshots_given = args.snapshots is not None  # --snapshot-metrics alone keeps no fractions
    args.snapshots = "0,0.02,0.1,0.3" if args.snapshots is None else args.snapshots
    for name, value in {**MODEL_DEFAULTS, **TASK_DEFAULTS[args.task]}.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.task in CORPUS_TASKS and not args.data:
        parser.error(f"--task {args.task} needs --data")
    args.shared_vocab = args.shared_vocab or args.task in LANGUAGE_MODEL_TASKS  # a language model has one vocabulary
    problem = flag_problem(args)
    if problem:
        parser.error(problem)
    return args


def flag_problem(args: argparse.Namespace) -> str:
    """What is wrong with the flags' values ("" if nothing): checked before the run reads or writes anything."""
    def flag(name: str) -> str:
        return f"--{name.replace('_', '-')}"

    at_least = {"steps": 1, "eval_every": 1, "warmup": 1, "max_tokens": 1, "dev_eval_size": 1, "vocab_size": 8,
                "num_kv_heads": 0}
    if args.task not in CORPUS_TASKS:  # a corpus's pairs are counted by its files
        at_least |= {"train_size": 1, "dev_size": 1}
    for name, minimum in at_least.items():
        if getattr(args, name) < minimum:
            return f"{flag(name)} must be at least {minimum}, got {getattr(args, name)}"
    if not 0 < args.lr <= 1:
        return f"--lr must be in (0, 1], got {args.lr}"
    if not 0 < args.clip < math.inf:
        return f"--clip must be a positive number, got {args.clip}"
    if not 0 < args.dev_fraction < 1:
        return f"--dev-fraction must be in (0, 1), got {args.dev_fraction}"
    shares = {"label_smoothing": 1, "cooldown": 1, "repeat_sentences": 1, **{name: 10 for name in JOINED_PAIRS}}
    for name, most in shares.items():  # NaN fails each test
        if not 0 <= getattr(args, name) <= most:
            return f"{flag(name)} must be from 0 to {most}, got {getattr(args, name)}"
    problem = lm_flag_problem(args)
    if problem:
        return problem
    try:
        fractions = [float(f) for f in args.snapshots.split(",") if f.strip()]
        all(math.isfinite(float(t)) for t in args.snapshot_metrics.split(",") if t.strip())
    except ValueError:
        return "--snapshots and --snapshot-metrics take numbers separated by commas"
    if any(not 0 <= f <= 1 for f in fractions):
        return f"--snapshots are fractions of the steps, from 0 to 1, got {args.snapshots}"
    if not args.init_from:  # a continued run's architecture is the earlier one's (continued_config checks max_len)
        try:
            model_config(args, args.vocab_size, args.vocab_size)
        except ValueError as error:
            return f"the model flags describe no model this project builds: {error}"
    return ""


def lm_flag_problem(args: argparse.Namespace) -> str:
    """What flag_problem finds wrong with the flags of (or only for) a corpus language model ("" if nothing)."""
    for name in JOINED_PAIRS if args.task == "lm" else ():
        if getattr(args, name):
            return (f"--{name.replace('_', '-')} joins translation pairs: a language model packs sentences "
                    "(--repeat-sentences)")
    if args.repeat_sentences and args.task != "lm":
        return "--repeat-sentences packs a corpus's sentences: it is for --task lm"
    if not 0 < args.rope_theta < math.inf:
        return f"--rope-theta must be a positive number, got {args.rope_theta}"
    figures = ("dev_metric", *(IN_CONTEXT_RECORDED if args.task in LANGUAGE_MODEL_TASKS else ()),
               *(TEXT_RECORDED if args.task == "lm" else ()))
    if args.snapshot_by not in figures:
        return f"--snapshot-by must be one of {', '.join(figures)} for --task {args.task}, got {args.snapshot_by!r}"
    return ""


@dataclass
class Progress:
    """What --resume restores besides the weights and optimizer."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_metric: float = -math.inf
    elapsed_s: float = 0.0
    history: list[dict] = field(default_factory=list)
    snapshots: list[dict] = field(default_factory=list)
    step_offset: int = 0  # steps of the run this one continues (--init-from): history and snapshots count them


def learning_rate(step: int, peak: float, warmup: int, total: int = 0, cooldown: float = 0.0) -> float:
    """Linear warm-up to `peak` at `warmup` steps, then peak * sqrt(warmup / step): the paper's schedule shape.

    cooldown: over the last `cooldown` share of the `total` steps the rate falls linearly towards 0. The paper's
    rate never comes down, and its updates keep shaking the weights: annealing at the end settles them (Hägele et
    al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"), which is what exact
    match on long inputs needs."""
    step = max(step, 1)
    rate = peak * min(step / warmup, math.sqrt(warmup / step))
    cooldown_steps = round(cooldown * total)
    if cooldown_steps:
        rate *= min(1.0, (total - step + 1) / cooldown_steps)
    return rate


def load_pairs(args: argparse.Namespace
               ) -> tuple[list[tuple[str, str]], list[int], dict[str, list[tuple[str, str]]]]:
    """(training pairs, how many times an epoch holds each (--repeat), dev pairs by corpus name: the task's name for a
    synthetic task)."""
    if args.task == "lm":  # a language model's text: ("", sentence), as the induction task's examples are
        sentences, held_out = sentence_splits(args.data, {spec.name: spec for spec in args.dev_data}, args.text_side,
                                              args.dev_fraction, args.split_seed)
        train = {name: [("", sentence) for sentence in texts] for name, texts in sentences.items()}
        dev = {name: [("", sentence) for sentence in texts] for name, texts in held_out.items()}
    elif args.task == "translate":
        train, dev = corpus_splits(args.data, {spec.name: spec for spec in args.dev_data}, args.dev_fraction,
                                   args.split_seed)
    else:
        train = {args.task: generate(args.task, args.train_size, args.seed)}
        dev = {args.task: generate(args.task, args.dev_size, args.seed + 1)}
    unknown = {r.selector for r in args.repeat if not r.selector.endswith("+words")} - set(train)
    if unknown:
        raise ValueError(f"--repeat names corpora not trained on: {', '.join(sorted(unknown))}")
    # (A sentence's words are counted for WORDS+words: a language model's pairs hold it as their target.)
    by_text = {name: [(t, t) for _, t in pairs] for name, pairs in train.items()} if args.task == "lm" else train
    return [pair for pairs in train.values() for pair in pairs], repeated(by_text, args.repeat), dev


def interleaved(dev: dict[str, list[tuple[str, str]]], count: int) -> list[tuple[str, str]]:
    """The first `count` dev pairs taken from each corpus in turn, so the trainer's quick evaluation weighs them
    alike."""
    rows = zip_longest(*dev.values())
    return [pair for row in rows for pair in row if pair is not None][:count]


def continued_config(args: argparse.Namespace, config: TransformerConfig) -> TransformerConfig:
    """An --init-from run's architecture: the earlier run's, with max_len raised if --max-len asks (sinusoidal
    positions have no weights, so a longer table changes nothing the model learnt)."""
    if not args.max_len_given or args.max_len == config.max_len:
        return config
    if args.max_len < config.max_len or config.positional != "sinusoidal":
        raise SystemExit(f"--max-len {args.max_len}: a continued model keeps max_len {config.max_len}, or raises it "
                         "when its positions are sinusoidal")
    return dataclasses.replace(config, max_len=args.max_len)


def build_tokenizers(args: argparse.Namespace, folder: Path, train_pairs: list[tuple[str, str]], rank: int
                     ) -> tuple[Tokenizer, Tokenizer]:
    """Rank 0 trains the sentencepiece models into the run's folder (or copies those of --init-from); every rank
    then loads them."""
    src_path, tgt_path = folder / SRC_TOKENIZER_FILE, folder / TGT_TOKENIZER_FILE
    if rank == 0 and args.init_from:
        for path in (src_path, tgt_path):
            shutil.copyfile(args.init_from / path.name, path)
    elif rank == 0 and not (args.resume and src_path.exists() and tgt_path.exists()):
        options = dict(vocab_size=args.vocab_size, seed=args.seed)
        if args.task not in CORPUS_TASKS:  # characters are the natural units of the synthetic tasks
            options.update(model_type="char", add_dummy_prefix=False)
        if args.shared_vocab:  # (a language model's example has no input: its "" is left out)
            Tokenizer.train((s for pair in train_pairs for s in pair if s), src_path, **options)
            tgt_path.write_bytes(src_path.read_bytes())
        else:
            Tokenizer.train((s for s, _ in train_pairs), src_path, **options)
            Tokenizer.train((t for _, t in train_pairs), tgt_path, **options)
    if dist.is_initialized():
        dist.barrier()
    return Tokenizer(src_path), Tokenizer(tgt_path)


def batch_loss(model: torch.nn.Module, src: torch.Tensor, tgt: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """Label-smoothed cross-entropy of predicting tgt[:, 1:] from tgt[:, :-1], padding ignored."""
    logits = model(src, tgt[:, :-1])  # (batch, tgt_len - 1, vocab)
    return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD_ID,
                           label_smoothing=label_smoothing)


@torch.no_grad()
def evaluate(model: Transformer, args, examples, pairs, src_tok, tgt_tok, device) -> dict[str, float]:
    """Dev loss (teacher-forced, no smoothing, per target token) and the task's metric on greedy decoding; a
    language model's metric is its repeat accuracy on the in-context probe, whose other numbers come with it; a
    corpus language model's (lm) its next-token accuracy on the held-out sequences `examples`, with the probes'
    numbers (evaluate.lm_probe_numbers) on random tokens and on the held-out sentences `pairs` repeated."""
    model.eval()
    if args.task == "lm":  # its pairs are ("", sentence): the held-out sentences, some repeated as a probe
        loss, accuracy, _ = lm_loss(model, examples, args.max_tokens)
        measured = lm_probe_numbers(model, tgt_tok, [t for _, t in pairs])
        model.train()
        return {"dev_loss": loss, "dev_metric": accuracy, **measured}
    loss_sum, tokens = 0.0, 0
    for batch in token_batches(examples, args.max_tokens, None):
        src, tgt = (t.to(device) for t in collate([examples[i] for i in batch], PAD_ID))
        batch_tokens = int((tgt[:, 1:] != PAD_ID).sum())
        # Weighted by tokens: batches differ in size, and a mean of their means would depend on --max-tokens.
        loss_sum += batch_loss(model, src, tgt, 0.0).item() * batch_tokens
        tokens += batch_tokens
    if args.task in LANGUAGE_MODEL_TASKS:
        measured = in_context(model, probe(tgt_tok, BOS_ID).to(device))
        model.train()
        return {"dev_loss": loss_sum / tokens, "dev_metric": measured["repeat_accuracy"], **measured}
    predictions = translate_texts(model, src_tok, tgt_tok, [s for s, _ in pairs])
    model.train()
    return {"dev_loss": loss_sum / tokens, "dev_metric": score(args.task, predictions, [t for _, t in pairs])}


def setup_distributed(args: argparse.Namespace) -> tuple[int, int, torch.device]:
    """(world size, rank, device): one process, or one rank of a torchrun launch."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = torch.device(args.device)
    if world > 1:
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return world, rank, device


def model_config(args: argparse.Namespace, src_vocab_size: int, tgt_vocab_size: int) -> TransformerConfig:
    """The architecture the options describe: an encoder-decoder, or a decoder-only model for a language-model
    task."""
    language_model = args.task in LANGUAGE_MODEL_TASKS
    return TransformerConfig(
        src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, d_model=args.d_model,
        num_heads=args.num_heads, num_encoder_layers=0 if language_model else args.layers,
        num_decoder_layers=args.layers, d_ff=args.d_ff, dropout=args.dropout, max_len=args.max_len,
        norm_first=args.norm_first, positional=args.positional, activation=args.activation, pad_id=PAD_ID,
        bos_id=BOS_ID, eos_id=EOS_ID, share_embeddings=args.shared_vocab,
        stacks="decoder-only" if language_model else "encoder-decoder", rope_theta=args.rope_theta, norm=args.norm,
        feed_forward=args.feed_forward, feed_forward_bias=args.feed_forward_bias, attention_bias=args.attention_bias,
        num_kv_heads=args.num_kv_heads,
    )


def continued_progress(initial: Checkpoint, folder: Path) -> Progress:
    """What an --init-from run inherits: the earlier run's curve and snapshots (each read under the loading policy and
    written into the run's folder as fp16 safetensors, as the trainer writes its own), its steps counted before
    ours."""
    card = initial.card
    earlier_steps = max([entry["step"] for entry in card.history] + [int(card.training.get("steps", 0))])
    for name in initial.snapshot_names():
        save_weights(initial.load_snapshot(name), folder / SNAPSHOT_DIR / f"{name}{WEIGHTS_SUFFIX}", half=True)
    # A curve written before entries named their data was measured on the earlier run's corpora.
    earlier_data = data_name([spec.name for spec in corpus_specs(card.training)[0]] if card.task == "translate"
                             else [card.task])
    return Progress(step_offset=earlier_steps, history=[{"data": earlier_data, **entry} for entry in card.history],
                    snapshots=list(card.snapshots), elapsed_s=card.wall_time_s)


def data_name(corpora: list[str]) -> str:
    """What a history entry's numbers were measured on: the corpora (their dev splits, and for the train loss their
    training pairs), or a synthetic task's name ("tatoeba + multi30k", "reverse")."""
    return " + ".join(corpora)


def encode_examples(args, pairs: list[tuple[str, str]], src_tok: Tokenizer, tgt_tok: Tokenizer) -> list:
    return [(source_ids(src_tok, s, args.max_len)[0], target_ids(tgt_tok, t, args.max_len)) for s, t in pairs]


def select_snapshots(progress: Progress, thresholds: list[float], folder: Path, final_step: int,
                     by: str = "dev_metric", keep_from: list[int] | tuple[int, ...] = ()) -> None:
    """Keep the snapshots that show the model forming: the first state, the first whose dev metric (or the figure
    `by` of its step's history entry, e.g. a language model's text_induction_score) exceeds each threshold, the first
    at or after each step of `keep_from`, and the last one before the final weights (those of `final_step`); delete
    the files of the others."""
    snapshots = sorted(progress.snapshots, key=lambda s: s["step"])
    earlier = [s for s in snapshots if s["step"] < final_step]
    recorded = {entry["step"]: entry[by] for entry in progress.history if by in entry}
    keep = {id(earlier[0]), id(earlier[-1])} if earlier else set()
    for step in keep_from:
        at_or_after = [s for s in earlier if s["step"] >= step]
        keep |= {id(at_or_after[0])} if at_or_after else set()
    for threshold in thresholds:
        above = [s for s in earlier if s.get(by, recorded.get(s["step"], -math.inf)) > threshold]
        keep |= {id(above[0])} if above else set()
    for snapshot in snapshots:
        if id(snapshot) not in keep:
            weights_file(folder / f"{snapshot['name']}{WEIGHTS_SUFFIX}").unlink(missing_ok=True)
    progress.snapshots = [s for s in snapshots if id(s) in keep]


def main(argv: list[str] | None = None) -> Transformer:
    """Train as the command line says; returns this rank's trained model (the last state, not the best).

    Every flag and input is checked before anything is written; the run writes into a hidden folder beside --out
    (kept by an interrupted run, for --resume) that replaces --out whole at the end, under a lock that a second
    run into the same folder is refused by."""
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    say = print if rank == 0 and not args.quiet else lambda *_, **__: None  # what the run does before its bar
    try:  # everything the run reads, checked before anything is written
        check_replaceable(args.out, args.replace or args.resume, *run_inputs(args))
        say(f"reading {args.init_from}" if args.init_from else "reading the data", flush=True)
        initial = load_checkpoint(args.init_from) if args.init_from else None  # its architecture and weights
        config = continued_config(args, initial.config) if initial else None
        saved = read_resume(args)
        train_pairs, copies, dev_by_corpus = load_pairs(args)
        unit = "sentences" if args.task == "lm" else "pairs"
        say(f"{len(train_pairs):,} training {unit}, {sum(map(len, dev_by_corpus.values())):,} dev {unit}", flush=True)
    except (CheckpointError, ValueError, OSError) as error:
        raise SystemExit(f"error: {error}") from None
    try:
        with writer_lock(args.out) if rank == 0 else contextlib.nullcontext():
            folder = prepare_folder(args, rank)
            world, rank, device = setup_distributed(args)
            torch.manual_seed(args.seed)
            say("preparing the tokenizers and the model", flush=True)
            src_tok, tgt_tok = build_tokenizers(args, folder, train_pairs, rank)
            config = config or model_config(args, src_tok.vocab_size, tgt_tok.vocab_size)
            args.max_len = config.max_len
            trainer = Trainer(args, folder, config, world, rank, device, src_tok, tgt_tok, train_pairs, copies,
                              dev_by_corpus, initial, saved)
            trainer.run()
            if rank == 0:
                trainer.finish()
                commit_checkpoint(folder, args.out)
    except CheckpointError as error:  # another run holds the folder
        raise SystemExit(f"error: {error}") from None
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return trainer.model


def run_inputs(args: argparse.Namespace) -> list[Path]:
    """What a run reads and its --out may therefore not be, hold or lie inside: the checkpoint --init-from
    continues and the corpus files of --data and --dev-data. (--resume reads the run's own earlier state.)"""
    corpora = [*(args.data or []), *args.dev_data]
    return [*([args.init_from] if args.init_from else []),
            *(Path(path) for spec in corpora for path in (spec.source, spec.target) if path)]


def resume_source(args: argparse.Namespace) -> Path | None:
    """The --resume file to continue from: that of an interrupted run (in its hidden folder), else that of the
    finished checkpoint; None when there is neither (the run starts afresh)."""
    for folder in (staging_folder(args.out, "training"), args.out):
        if args.resume and (folder / RESUME_FILE).is_file():
            return folder / RESUME_FILE
    return None


def read_resume(args: argparse.Namespace) -> dict | None:
    """The training state --resume continues, read before anything is written; a clear error for a file that was
    cut short or is not one."""
    path = resume_source(args)
    if path is None:
        return None
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        return {"model": saved["model"], "optimizer": saved["optimizer"], "progress": dict(saved["progress"]),
                "rng": saved["rng"]}
    except Exception as error:  # truncated, foreign or missing a part: all one message
        raise SystemExit(f"error: --resume: {path} cannot be read ({type(error).__name__}); it was cut short or is "
                         "not a resume file. Train without --resume, or continue the checkpoint with --init-from."
                         ) from None


def prepare_folder(args: argparse.Namespace, rank: int) -> Path:
    """The hidden folder the run writes in (see main): an interrupted run's, when --resume continues it; else a
    fresh one, holding a copy of --out when --resume continues a finished checkpoint."""
    folder = staging_folder(args.out, "training")
    check_staging(folder)
    if rank == 0 and not (args.resume and (folder / RESUME_FILE).is_file()):
        remove_staging(folder)
        if args.resume and (args.out / RESUME_FILE).is_file():
            shutil.copytree(args.out, folder, symlinks=True)
        (folder / SNAPSHOT_DIR).mkdir(parents=True, exist_ok=True)
    return folder


def extra_pairs(args: argparse.Namespace, train_pairs: list[tuple[str, str]], src_tok: Tokenizer,
                tgt_tok: Tokenizer) -> list[tuple[str, str]]:
    """The joined pairs the --concat... flags ask for, made from `train_pairs`, less those that do not fit --max-len
    pieces on either side (a target cut short would teach the model to stop early); how many of each were kept and
    left out goes to args.extra_pairs, so the card's training record says how the data was made."""
    rng = random.Random(args.seed)
    extra: list[tuple[str, str]] = []
    args.extra_pairs = {}
    for setting, join in JOINED_PAIRS.items():  # always in this order: a seed makes the same pairs again
        made = join(train_pairs, round(getattr(args, setting) * len(train_pairs)), rng)
        kept = [(source, target) for source, target in made
                if len(source_ids(src_tok, source, 10**9)[0]) <= args.max_len
                and len(target_ids(tgt_tok, target, 10**9)) <= args.max_len]
        if made:
            args.extra_pairs[setting] = {"kept": len(kept), "longer_than_max_len": len(made) - len(kept)}
        extra += kept
    return extra


class Trainer:
    """One training run in `folder`: the model, its optimizer and progress, and the steps that train, evaluate and
    save it."""

    def __init__(self, args, folder: Path, config: TransformerConfig, world: int, rank: int, device: torch.device,
                 src_tok: Tokenizer, tgt_tok: Tokenizer, train_pairs, copies: list[int], dev_by_corpus,
                 initial: Checkpoint | None, saved: dict | None) -> None:
        self.args, self.folder, self.config = args, folder, config
        self.world, self.rank, self.device = world, rank, device
        self.src_tok, self.tgt_tok, self.initial = src_tok, tgt_tok, initial
        self.train_pairs, self.dev_by_corpus = train_pairs, dev_by_corpus
        if args.task == "lm":  # sentences, packed into sequences afresh each epoch (run)
            encoded = [tgt_tok.encode(text) for _, text in train_pairs]
            self.train_sentences = [ids for ids, times in zip(encoded, copies) for _ in range(times)]
            self.train_examples = []
            # Every held-out sentence for the repeated-text probe; the first --dev-eval-size held-out sequences
            # (of an order shuffled once) for the loss.
            self.dev_eval_pairs = interleaved(dev_by_corpus, sum(map(len, dev_by_corpus.values())))
            self.dev_eval_examples = lm_dev_examples(tgt_tok, [t for _, t in self.dev_eval_pairs],
                                                     args.max_len)[: args.dev_eval_size]
        else:
            extra = extra_pairs(args, train_pairs, src_tok, tgt_tok)
            encoded = encode_examples(args, train_pairs + extra, src_tok, tgt_tok)
            # An epoch holds a repeated pair as many times as --repeat says (the joined pairs once each).
            self.train_examples = [example for example, times in zip_longest(encoded, copies, fillvalue=1)
                                   for _ in range(times)]
            self.dev_eval_pairs = interleaved(dev_by_corpus, args.dev_eval_size)
            self.dev_eval_examples = encode_examples(args, self.dev_eval_pairs, src_tok, tgt_tok)
        self.model = Transformer(config).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
        self.progress = Progress()
        if saved:
            self.model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
            self.progress = Progress(**saved["progress"])
            torch.set_rng_state(saved["rng"])
        elif initial:
            self.model.load_state_dict(initial.model.state_dict())
            self.progress = continued_progress(initial, folder) if rank == 0 else Progress()
        self.trained = DistributedDataParallel(self.model) if world > 1 else self.model
        self.thresholds = [float(t) for t in args.snapshot_metrics.split(",") if t.strip()]
        fractions = "0" if self.thresholds else args.snapshots
        self.snapshot_at = {round(float(f) * args.steps) for f in fractions.split(",") if f.strip() and float(f) < 1}
        # With --snapshot-metrics, given --snapshots keep the first evaluation at or after each of their steps.
        self.keep_from = sorted(self.progress.step_offset + round(float(f) * args.steps)
                                for f in args.snapshots.split(",") if f.strip()) \
            if self.thresholds and args.snapshots_given else []
        self.total_steps = self.progress.step_offset + args.steps
        self.bar = None

    def evaluate(self, size: int | None = None) -> dict[str, float]:
        """The dev evaluation, on the first `size` dev examples (a language model's probe: all its sentences)."""
        pairs = self.dev_eval_pairs if self.args.task == "lm" else self.dev_eval_pairs[:size]
        return evaluate(self.model, self.args, self.dev_eval_examples[:size], pairs, self.src_tok, self.tgt_tok,
                        self.device)

    def pack(self, epoch: int) -> list:
        """A language model's training sequences for `epoch`: its sentences shuffled and packed (--repeat-sentences
        of them with a sentence repeated), the same on every rank and again on --resume."""
        return packed_examples(self.train_sentences, self.args.max_len, BOS_ID, EOS_ID,
                               random.Random(self.args.seed * 100_003 + epoch + 7_919), self.args.repeat_sentences)

    def save_snapshot(self, metrics: dict[str, float]) -> None:
        """The weights now, as a snapshot; its card entry holds the dev metric (and a language model's in-context
        numbers)."""
        step = self.progress.step_offset + self.progress.step
        name = f"step_{step:06d}"
        if any(s["name"] == name for s in self.progress.snapshots):
            return
        save_weights(self.model, self.folder / SNAPSHOT_DIR / f"{name}{WEIGHTS_SUFFIX}", half=True)
        self.progress.snapshots.append({"name": name, "step": step, "fraction": round(step / self.total_steps, 4),
                                        **in_context_entry(metrics), "dev_metric": round(metrics["dev_metric"], 4)})

    def keep_weights(self) -> None:
        """The current weights become the checkpoint's (--keep)."""
        save_weights(self.model, self.folder / WEIGHTS_FILE)
        self.config.save(self.folder / CONFIG_FILE)

    def record_eval(self, train_loss: float | None) -> None:
        """A dev evaluation in the curve; the weights kept if best, a snapshot if chosen, and the state for
        --resume."""
        metrics, progress = self.evaluate(), self.progress
        entry = {"step": progress.step_offset + progress.step, "data": data_name(list(self.dev_by_corpus)),
                 "dev_loss": round(metrics["dev_loss"], 4), "dev_metric": round(metrics["dev_metric"], 4),
                 **in_context_entry(metrics, TEXT_RECORDED)}
        if train_loss is not None:
            entry["train_loss"] = round(train_loss, 4)
        # An --init-from run on other corpora scores the inherited weights on its own data: a second entry there.
        if not any(e["step"] == entry["step"] and e.get("data") == entry["data"] for e in progress.history):
            progress.history.append(entry)
        if self.args.keep == "best" and metrics["dev_metric"] >= progress.best_metric:
            progress.best_metric = metrics["dev_metric"]
            self.keep_weights()
        if self.thresholds:
            self.save_snapshot(metrics)
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "progress": vars(progress),
                 "rng": torch.get_rng_state()}
        save_atomically(lambda temporary: torch.save(state, temporary), self.folder / RESUME_FILE)
        if self.bar is not None:
            self.bar.write(progress_line(entry, METRICS[self.args.task]))

    def step(self, batch: list[int]) -> float:
        """One optimizer step on the examples `batch`; its loss."""
        args, progress = self.args, self.progress
        if self.rank == 0 and progress.step in self.snapshot_at:
            self.save_snapshot(self.evaluate(None if self.thresholds else 200))  # fixed: a quick figure
        src, tgt = (t.to(self.device) for t in collate([self.train_examples[i] for i in batch], PAD_ID))
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(progress.step + 1, args.lr, args.warmup, args.steps, args.cooldown)
        loss = batch_loss(self.trained, src, tgt, args.label_smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), args.clip)
        self.optimizer.step()
        progress.step += 1
        progress.batch_in_epoch += 1
        self.tokens_seen += int((tgt[:, 1:] != PAD_ID).sum()) * self.world
        return loss.item()

    def run(self) -> None:
        """Train for --steps, evaluating every --eval-every steps (rank 0 records; every rank waits for it)."""
        args, progress = self.args, self.progress
        if self.rank == 0 and not args.quiet:
            self.bar = tqdm(total=args.steps, initial=progress.step, unit="step", file=sys.stderr)
        if self.rank == 0 and args.init_from and progress.step == 0:
            self.record_eval(None)  # the inherited weights: the curve's link between the two runs, a snapshot candidate
        start, self.tokens_seen, window_loss, window_steps = time.perf_counter(), 0, 0.0, 0
        self.model.train()
        while progress.step < args.steps:
            if args.task == "lm":
                self.train_examples = self.pack(progress.epoch)
            batches = token_batches(self.train_examples, args.max_tokens,
                                    random.Random(args.seed * 100_003 + progress.epoch))
            mine = batches[self.rank : len(batches) - len(batches) % self.world : self.world]  # equal count per rank
            for batch in mine[progress.batch_in_epoch :]:
                loss = self.step(batch)
                window_loss, window_steps = window_loss + loss, window_steps + 1
                if self.bar is not None:
                    self.bar.update(1)
                    self.bar.set_postfix(loss=f"{loss:.3f}",
                                         tok_s=f"{self.tokens_seen / (time.perf_counter() - start):.0f}")
                if progress.step % args.eval_every == 0 or progress.step == args.steps:
                    if self.rank == 0:
                        progress.elapsed_s += time.perf_counter() - start
                        start, self.tokens_seen = time.perf_counter(), 0
                        self.record_eval(window_loss / window_steps)
                    window_loss, window_steps = 0.0, 0
                    if self.world > 1:
                        dist.barrier()
                if progress.step >= args.steps:
                    break
            else:
                progress.epoch, progress.batch_in_epoch = progress.epoch + 1, 0
        if self.bar is not None:
            self.bar.close()

    def finish(self) -> None:
        """Rank 0: the weights --keep asks for, the snapshots that show the model forming, and the card."""
        progress = self.progress
        if self.args.keep == "last":
            self.keep_weights()
            final_step = progress.step_offset + progress.step
        else:
            # (record_eval keeps the later of two equal evaluations)
            final_step = max(progress.history, key=lambda entry: (entry["dev_metric"], entry["step"]))["step"]
        if self.thresholds:
            select_snapshots(progress, self.thresholds, self.folder / SNAPSHOT_DIR, final_step, self.args.snapshot_by,
                             self.keep_from)
        write_card(self.args, self.folder, self.world, self.device, progress, self.train_pairs, self.dev_by_corpus,
                   self.src_tok, self.tgt_tok, self.initial)


def progress_line(entry: dict, metric: str) -> str:
    """A curve entry as the run prints it: "step 250 (reverse): dev exact_match 0.4120, dev loss 1.2034, train loss
    1.4051", with a language model's in-context numbers after."""
    named = {f"dev {metric}": entry["dev_metric"], "dev loss": entry["dev_loss"], "train loss": entry.get("train_loss"),
             **{name.replace("_", " "): entry[name] for name in IN_CONTEXT_RECORDED + TEXT_RECORDED if name in entry}}
    return f"step {entry['step']} ({entry['data']}): " + ", ".join(
        f"{name} {value:.4f}" for name, value in named.items() if value is not None)


def in_context_entry(metrics: dict[str, float], also: tuple[str, ...] = ()) -> dict[str, float]:
    """What a language model's history and snapshot entries record besides the dev metric: the in-context loss drop
    and the heads' induction and previous-token scores (none for other tasks), and those named in `also` (a history
    entry's: TEXT_RECORDED)."""
    return {name: round(metrics[name], 4) for name in IN_CONTEXT_RECORDED + also if name in metrics}


def write_card(args, folder: Path, world, device, progress: Progress, train_pairs, dev_by_corpus, src_tok, tgt_tok,
               initial: Checkpoint | None) -> None:
    """Final metric of the kept weights on the whole dev set (and on each corpus's, when there are several), and
    everything the app and a reader need."""
    dev_pairs = [pair for pairs in dev_by_corpus.values() for pair in pairs]
    config = TransformerConfig.load(folder / CONFIG_FILE)
    model = Transformer(config)
    # weights_file: model.pt where --resume continued a folder of torch zips and this run has kept no weights yet
    model.load_state_dict(load_weights(weights_file(folder / WEIGHTS_FILE), folder,
                                       expected_state(config, folder / CONFIG_FILE)))
    model.to(device).eval()  # decode the dev split where training ran, then save from the CPU
    if args.task == "lm":  # held-out perplexity and the heads' scores, as a test recomputes them from the folder
        measured = lm_metrics(model, tgt_tok, [t for _, t in dev_pairs])
        metric = measured.pop(f"dev_{METRICS[args.task]}")
        metrics = {name: round(value, 4) for name, value in measured.items()}
    elif args.task in LANGUAGE_MODEL_TASKS:
        measured = in_context(model, probe(tgt_tok, BOS_ID).to(device))
        metric, metrics = measured["repeat_accuracy"], in_context_entry(measured)
    else:
        predictions = translate_texts(model, src_tok, tgt_tok, [s for s, _ in dev_pairs])
        metric, metrics = score(args.task, predictions, [t for _, t in dev_pairs]), {}
    model.cpu()
    counted = ("train_sentences", "dev_sentences") if args.task == "lm" else ("train_pairs", "dev_pairs")
    metrics = {f"dev_{METRICS[args.task]}": round(metric, 4), **metrics, counted[0]: len(train_pairs),
               counted[1]: len(dev_pairs)}
    if len(dev_by_corpus) > 1:  # (translation only: synthetic tasks have one dev set)
        start = 0
        for name, pairs in dev_by_corpus.items():
            metrics[f"dev_{METRICS[args.task]}_{name}"] = round(
                score(args.task, predictions[start : start + len(pairs)], [t for _, t in pairs]), 4)
            start += len(pairs)
    launcher = f"torchrun --nproc_per_node={world} -m transformer.train" if world > 1 else "python -m transformer.train"
    machine = f"{platform.machine()}, {os.cpu_count()} CPU cores, {world} process(es), torch {torch.__version__}"
    if device.type == "cuda":
        machine += f", {torch.cuda.get_device_name(device)}"
    command = f"{launcher} {shlex.join(args.argv)}"
    training = {key: ([str(spec) for spec in value] if key in ("data", "dev_data", "repeat") and value
                      else str(value) if isinstance(value, Path) else value)
                for key, value in vars(args).items()
                if key not in ("argv", "max_len_given", "snapshots_given", "replace")}
    inputs = [t if args.task in LANGUAGE_MODEL_TASKS else s for s, t in train_pairs]  # a language model's: its text
    # A corpus language model reads sequences of several sentences, up to max_len with its <s> and </s>.
    training["longest_source_tokens"] = (args.max_len - 2 if args.task == "lm" else
                                         max(len(source_ids(src_tok, text, 10**9)[0]) - 1 for text in inputs))
    if initial:
        command = f"{initial.card.training_command}\n{command}"
        # The architecture and vocabularies are the earlier run's, whatever this run's defaults for them say.
        training.update({key: initial.card.training[key] for key in INHERITED if key in initial.card.training})
    generated = f"Generated by transformer/data/tasks.py (train seed {args.seed}, dev seed {args.seed + 1})."
    card = ModelCard(
        name=args.out.name,
        task=args.task,
        # A continued model keeps the words of its card, which only a flag given again replaces.
        description=(args.description or (initial.card.description if initial else DESCRIPTIONS[args.task]))
        + (" " + sequences_note(args) if args.task == "lm" and not initial else ""),
        data=args.data_credit or (initial.card.data if initial else None)
        or (f"The corpus {' '.join(map(str, args.data))} (no --data-credit given)." if args.task in CORPUS_TASKS
            else generated),
        metrics=metrics,
        examples=args.examples or (initial.card.examples if initial else default_examples(args.task, dev_pairs)),
        training_command=command,
        wall_time_s=round(progress.elapsed_s, 1),
        machine=machine,
        parameters=model.num_parameters(),
        history=progress.history,
        snapshots=progress.snapshots,
        training=training,
        decoding=dict(initial.card.decoding) if initial else {},  # the app's default, until evaluate --record
    )
    # The words of a corpus model's training text: the app warns of a word it never read.
    texts = {"translate": [s for s, _ in train_pairs], "lm": [t for _, t in train_pairs]}.get(args.task)
    save_checkpoint(folder, model, card, src_tok, tgt_tok, texts)
    perplexity = f", perplexity {metrics['dev_perplexity']:.2f}" if "dev_perplexity" in metrics else ""
    print(f"{args.out}: dev {METRICS[args.task]} {metric:.4f}{perplexity} on {len(dev_pairs)} "
          f"{'sentences' if args.task == 'lm' else 'pairs'}, {model.num_parameters():,} parameters, "
          f"{progress.elapsed_s:.0f} s")


def sequences_note(args: argparse.Namespace) -> str:
    """How a corpus language model's training sequences were made, for its card."""
    note = (f"Its training sequences are whole sentences of the {args.text_side} side of the corpus, each sentence "
            f"once, shuffled afresh each epoch and packed into up to {args.max_len} tokens (<s> and </s> included); "
            f"{args.dev_fraction:.0%} of the distinct sentences are held out, by sentence, for the figures.")
    if args.repeat_sentences:
        share = "every sequence" if args.repeat_sentences == 1 else f"{args.repeat_sentences:.0%} of the sequences"
        note += (f" In {share} one stretch of its sentences (one or several in a row, at most half of it) comes a "
                 "second time, copied to a later place in the same sequence (--repeat-sentences), so that looking "
                 "back at an earlier occurrence pays: real text repeats names, phrases and passages, this corpus's "
                 "short unrelated sentences almost never do, and the induction scores owe something to it. The "
                 "held-out figures are measured on sequences without repeats.")
    return note


def default_examples(task: str, dev_pairs: list[tuple[str, str]]) -> list[str]:
    """A card's inputs when --examples gives none: the first dev inputs (a language model's: its texts; a corpus
    language model's: the first three words of its held-out sentences, to continue)."""
    if task == "lm":
        return [" ".join(t.split()[:3]) for _, t in dev_pairs[:8]]
    return [t if task in LANGUAGE_MODEL_TASKS else s for s, t in dev_pairs[:8]]

