"""Train a checkpoint: `python -m transformer.train --task reverse --out checkpoints/reverse`.

The same command runs data-parallel under `torchrun --nproc_per_node=N -m transformer.train ...` (gloo on CPU,
nccl on CUDA): every rank builds the same data and tokenizers, takes its share of each epoch's batches, and
DistributedDataParallel averages the gradients, so all ranks hold identical weights after every step.

Recipe: Adam (0.9, 0.98, 1e-9); the paper's learning-rate shape, linear warm-up then decay with 1/sqrt(step), written
with an explicit peak rate rather than d_model^-0.5; label smoothing; gradient clipping; token-budget batches of
similar length. The best dev checkpoint is kept, earlier states are saved as snapshots, and `--resume` continues an
interrupted run from its last evaluation.
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

from .checkpoint import (
    CONFIG_FILE,
    SNAPSHOT_DIR,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    WEIGHTS_FILE,
    Checkpoint,
    CheckpointError,
    ModelCard,
    check_replaceable,
    commit_checkpoint,
    load_checkpoint,
    save_atomically,
    save_checkpoint,
    staging_folder,
    writer_lock,
)
from .config import TransformerConfig
from .data import (
    CorpusSpec,
    Repeat,
    collate,
    corpus_specs,
    corpus_splits,
    repeated,
    source_ids,
    target_ids,
    token_batches,
)
from .evaluate import METRICS, score, translate_texts
from .induction import in_context, probe
from .model import Transformer
from .recipes import JOINED_PAIRS
from .tasks import LANGUAGE_MODEL_TASKS, generate
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer

RESUME_FILE = "resume.pt"  # training state for --resume; not part of the shipped checkpoint
IN_CONTEXT_RECORDED = ("in_context_loss_drop", "induction_score", "previous_token_score")  # per evaluation

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
}
DESCRIPTIONS = {
    "reverse": "Reverses a string of lowercase letters and digits (1-30 characters), character by character. "
               "A lecturer can predict its attention: cross-attention should run along the anti-diagonal.",
    "dates": "Turns a date written in one of 12 human formats (3 March 2021, 03/03/2021, Wednesday, March 3, 2021, "
             "...) into ISO YYYY-MM-DD. Watch cross-attention pick the year, month and day out of the input.",
    "translate": "Translates between the two sides of a parallel corpus.",
    "induction": "A two-layer language model over characters, trained on random text with a stretch of it repeated: "
                 "it continues a repeat it has seen begin, by attending back to the first occurrence. Watch a "
                 "previous-token head (layer 0) and an induction head (layer 1) appear in the Training view.",
}


# What an --init-from run takes from the checkpoint it continues (its card records them as they are). max_len is
# not among them: a run may raise it where positions are sinusoids, which have no weights.
INHERITED = ("vocab_size", "shared_vocab", "d_model", "num_heads", "layers", "d_ff", "dropout", "norm_first",
             "positional", "activation")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m transformer.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, choices=sorted(TASK_DEFAULTS))
    parser.add_argument("--out", required=True, type=Path,
                        help="checkpoint folder to write (written beside it, then renamed into place)")
    parser.add_argument("--replace", action="store_true",
                        help="replace the checkpoint already in --out, whole (without it, an --out with files in it "
                             "is refused; --resume and --init-from OUT replace it anyway)")
    data = parser.add_argument_group("data")
    data.add_argument("--data", nargs="+", type=CorpusSpec.parse, metavar="[NAME=]PATH[,TARGET]",
                      help="translate: one or more corpora, each a TSV of source<TAB>target or two aligned files "
                           "(SOURCE,TARGET; .gz allowed), named NAME (default: the folder's name) in the dev scores")
    data.add_argument("--dev-data", nargs="+", type=CorpusSpec.parse, default=[], metavar="NAME=PATH[,TARGET]",
                      help="translate: the dev set of the --data corpus called NAME (e.g. Multi30k's val), which "
                           "then trains on all of its pairs; other corpora give --dev-fraction of theirs")
    data.add_argument("--repeat", nargs="+", type=Repeat.parse, default=[], metavar="NAME=TIMES",
                      help="pairs an epoch holds TIMES times: those of the corpus NAME, or with NAME WORDS+words "
                           "those whose source has at least WORDS words (e.g. multi30k=3 10+words=3; the largest "
                           "that applies counts)")
    data.add_argument("--data-credit", default="", help="source and licence of the corpus, for the model card")
    data.add_argument("--dev-fraction", type=float, default=0.05, help="translate: share of pairs held out as dev")
    data.add_argument("--split-seed", type=int, default=0, help="translate: seed of the dev split")
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
    model.add_argument("--norm-first", action="store_true", help="pre-LN instead of the paper's post-LN")
    model.add_argument("--positional", choices=("sinusoidal", "learned"), default="sinusoidal")
    model.add_argument("--activation", choices=("relu", "gelu"), default="relu")
    train = parser.add_argument_group("training")
    train.add_argument("--steps", type=int, help="optimizer steps")
    train.add_argument("--max-tokens", type=int, help="tokens per batch and rank (batch size x longest side)")
    train.add_argument("--lr", type=float, help="peak learning rate, reached at the end of warm-up")
    train.add_argument("--warmup", type=int, help="warm-up steps")
    train.add_argument("--cooldown", type=float, default=0.0,
                       help="share of the steps at the end over which the rate falls linearly to 0 (e.g. 0.3)")
    train.add_argument("--label-smoothing", type=float, default=0.1)
    train.add_argument("--clip", type=float, default=1.0, help="max gradient norm")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--eval-every", type=int, default=500, help="steps between dev evaluations")
    train.add_argument("--dev-eval-size", type=int, default=1000, help="dev pairs decoded at each evaluation")
    train.add_argument("--snapshots", default="0,0.02,0.1,0.3", help="fractions of training to keep as snapshots")
    train.add_argument("--snapshot-metrics", default="",
                       help="instead of --snapshots: keep the first state, the first evaluation whose dev metric "
                            "exceeds each of these values (e.g. 5,20) and the last evaluation before the final one")
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
    for name, value in TASK_DEFAULTS[args.task].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.task == "translate" and not args.data:
        parser.error("--task translate needs --data")
    args.shared_vocab = args.shared_vocab or args.task in LANGUAGE_MODEL_TASKS  # a language model has one vocabulary
    problem = flag_problem(args)
    if problem:
        parser.error(problem)
    return args


def flag_problem(args: argparse.Namespace) -> str:
    """What is wrong with the flags' values ("" if nothing): checked before the run reads or writes anything."""
    def flag(name: str) -> str:
        return f"--{name.replace('_', '-')}"

    at_least = {"steps": 1, "eval_every": 1, "warmup": 1, "max_tokens": 1, "dev_eval_size": 1, "vocab_size": 8}
    if args.task != "translate":  # a corpus's pairs are counted by its files
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
    shares = {"label_smoothing": 1, "cooldown": 1, **{name: 10 for name in JOINED_PAIRS}}  # NaN fails each test
    for name, most in shares.items():
        if not 0 <= getattr(args, name) <= most:
            return f"{flag(name)} must be from 0 to {most}, got {getattr(args, name)}"
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
    if args.task == "translate":
        train, dev = corpus_splits(args.data, {spec.name: spec for spec in args.dev_data}, args.dev_fraction,
                                   args.split_seed)
    else:
        train = {args.task: generate(args.task, args.train_size, args.seed)}
        dev = {args.task: generate(args.task, args.dev_size, args.seed + 1)}
    unknown = {r.selector for r in args.repeat if not r.selector.endswith("+words")} - set(train)
    if unknown:
        raise ValueError(f"--repeat names corpora not trained on: {', '.join(sorted(unknown))}")
    return [pair for pairs in train.values() for pair in pairs], repeated(train, args.repeat), dev


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
        if args.task != "translate":  # characters are the natural units of the synthetic tasks
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
    language model's metric is its repeat accuracy on the in-context probe, whose other numbers come with it."""
    model.eval()
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


def save_state_dict(model: Transformer, path: Path, half: bool = False) -> None:
    """Save the weights on CPU, optionally as fp16; tied weights stay one tensor (stored once)."""
    converted: dict[int, torch.Tensor] = {}  # by storage address, so a tied weight is converted once
    state = {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in converted:
            converted[tensor.data_ptr()] = (tensor.half() if half and tensor.is_floating_point() else tensor).cpu()
        state[name] = converted[tensor.data_ptr()]
    save_atomically(lambda temporary: torch.save(state, temporary), path)


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
        stacks="decoder-only" if language_model else "encoder-decoder",
    )


def continued_progress(card: ModelCard, init_from: Path, folder: Path) -> Progress:
    """What an --init-from run inherits: the earlier run's curve and snapshots (copied into the run's folder), its
    steps counted before ours."""
    earlier_steps = max([entry["step"] for entry in card.history] + [int(card.training.get("steps", 0))])
    for snapshot in card.snapshots:
        file = f"{snapshot['name']}.pt"
        shutil.copyfile(init_from / SNAPSHOT_DIR / file, folder / SNAPSHOT_DIR / file)
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


def select_snapshots(progress: Progress, thresholds: list[float], folder: Path, final_step: int) -> None:
    """Keep the snapshots that show the model forming: the first state, the first whose dev metric exceeds each
    threshold, and the last one before the final weights (those of `final_step`); delete the files of the others."""
    snapshots = sorted(progress.snapshots, key=lambda s: s["step"])
    earlier = [s for s in snapshots if s["step"] < final_step]
    keep = {id(earlier[0]), id(earlier[-1])} if earlier else set()
    for threshold in thresholds:
        above = [s for s in earlier if s["dev_metric"] > threshold]
        keep |= {id(above[0])} if above else set()
    for snapshot in snapshots:
        if id(snapshot) not in keep:
            (folder / f"{snapshot['name']}.pt").unlink(missing_ok=True)
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
        check_replaceable(args.out, args.replace or args.resume or same_folder(args.init_from, args.out))
        say(f"reading {args.init_from}" if args.init_from else "reading the data", flush=True)
        initial = load_checkpoint(args.init_from) if args.init_from else None  # its architecture and weights
        config = continued_config(args, initial.config) if initial else None
        saved = read_resume(args)
        train_pairs, copies, dev_by_corpus = load_pairs(args)
        say(f"{len(train_pairs):,} training pairs, {sum(map(len, dev_by_corpus.values())):,} dev pairs", flush=True)
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


def same_folder(first: Path | None, second: Path) -> bool:
    return first is not None and first.resolve() == second.resolve()


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
    if rank == 0 and not (args.resume and (folder / RESUME_FILE).is_file()):
        shutil.rmtree(folder, ignore_errors=True)
        if args.resume and (args.out / RESUME_FILE).is_file():
            shutil.copytree(args.out, folder, symlinks=True)
        (folder / SNAPSHOT_DIR).mkdir(parents=True, exist_ok=True)
    return folder


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
        rng = random.Random(args.seed)
        extra = []
        for setting, join in JOINED_PAIRS.items():  # always in this order, so that a seed makes the same pairs again
            extra += join(train_pairs, round(getattr(args, setting) * len(train_pairs)), rng)
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
            self.progress = continued_progress(initial.card, args.init_from, folder) if rank == 0 else Progress()
        self.trained = DistributedDataParallel(self.model) if world > 1 else self.model
        self.thresholds = [float(t) for t in args.snapshot_metrics.split(",") if t.strip()]
        fractions = "0" if self.thresholds else args.snapshots
        self.snapshot_at = {round(float(f) * args.steps) for f in fractions.split(",") if f.strip() and float(f) < 1}
        self.total_steps = self.progress.step_offset + args.steps
        self.bar = None

    def evaluate(self, size: int | None = None) -> dict[str, float]:
        return evaluate(self.model, self.args, self.dev_eval_examples[:size], self.dev_eval_pairs[:size], self.src_tok,
                        self.tgt_tok, self.device)

    def save_snapshot(self, metrics: dict[str, float]) -> None:
        """The weights now, as a snapshot; its card entry holds the dev metric (and a language model's in-context
        numbers)."""
        step = self.progress.step_offset + self.progress.step
        name = f"step_{step:06d}"
        if any(s["name"] == name for s in self.progress.snapshots):
            return
        save_state_dict(self.model, self.folder / SNAPSHOT_DIR / f"{name}.pt", half=True)
        self.progress.snapshots.append({"name": name, "step": step, "fraction": round(step / self.total_steps, 4),
                                        **in_context_entry(metrics), "dev_metric": round(metrics["dev_metric"], 4)})

    def keep_weights(self) -> None:
        """The current weights become the checkpoint's (--keep)."""
        save_state_dict(self.model, self.folder / WEIGHTS_FILE)
        self.config.save(self.folder / CONFIG_FILE)

    def record_eval(self, train_loss: float | None) -> None:
        """A dev evaluation in the curve; the weights kept if best, a snapshot if chosen, and the state for
        --resume."""
        metrics, progress = self.evaluate(), self.progress
        entry = {"step": progress.step_offset + progress.step, "data": data_name(list(self.dev_by_corpus)),
                 "dev_loss": round(metrics["dev_loss"], 4), "dev_metric": round(metrics["dev_metric"], 4),
                 **in_context_entry(metrics)}
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
            final_step = max(progress.history, key=lambda entry: entry["dev_metric"])["step"]
        if self.thresholds:
            select_snapshots(progress, self.thresholds, self.folder / SNAPSHOT_DIR, final_step)
        write_card(self.args, self.folder, self.world, self.device, progress, self.train_pairs, self.dev_by_corpus,
                   self.src_tok, self.tgt_tok, self.initial)


def progress_line(entry: dict, metric: str) -> str:
    """A curve entry as the run prints it: "step 250 (reverse): dev exact_match 0.4120, dev loss 1.2034, train loss
    1.4051", with a language model's in-context numbers after."""
    named = {f"dev {metric}": entry["dev_metric"], "dev loss": entry["dev_loss"], "train loss": entry.get("train_loss"),
             **{name.replace("_", " "): entry[name] for name in IN_CONTEXT_RECORDED if name in entry}}
    return f"step {entry['step']} ({entry['data']}): " + ", ".join(
        f"{name} {value:.4f}" for name, value in named.items() if value is not None)


def in_context_entry(metrics: dict[str, float]) -> dict[str, float]:
    """What a language model's history and snapshot entries record besides the dev metric: the in-context loss drop
    and the heads' induction and previous-token scores (none for other tasks)."""
    return {name: round(metrics[name], 4) for name in IN_CONTEXT_RECORDED if name in metrics}


def write_card(args, folder: Path, world, device, progress: Progress, train_pairs, dev_by_corpus, src_tok, tgt_tok,
               initial: Checkpoint | None) -> None:
    """Final metric of the kept weights on the whole dev set (and on each corpus's, when there are several), and
    everything the app and a reader need."""
    dev_pairs = [pair for pairs in dev_by_corpus.values() for pair in pairs]
    config = TransformerConfig.load(folder / CONFIG_FILE)
    model = Transformer(config)
    model.load_state_dict(torch.load(folder / WEIGHTS_FILE, weights_only=True))
    model.to(device).eval()  # decode the dev split where training ran, then save from the CPU
    if args.task in LANGUAGE_MODEL_TASKS:
        measured = in_context(model, probe(tgt_tok, BOS_ID).to(device))
        metric, metrics = measured["repeat_accuracy"], in_context_entry(measured)
    else:
        predictions = translate_texts(model, src_tok, tgt_tok, [s for s, _ in dev_pairs])
        metric, metrics = score(args.task, predictions, [t for _, t in dev_pairs]), {}
    model.cpu()
    metrics = {f"dev_{METRICS[args.task]}": round(metric, 4), **metrics, "train_pairs": len(train_pairs),
               "dev_pairs": len(dev_pairs)}
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
                for key, value in vars(args).items() if key not in ("argv", "max_len_given", "replace")}
    inputs = [t if args.task in LANGUAGE_MODEL_TASKS else s for s, t in train_pairs]  # a language model's: its text
    training["longest_source_tokens"] = max(len(source_ids(src_tok, text, 10**9)[0]) - 1 for text in inputs)
    if initial:
        command = f"{initial.card.training_command}\n{command}"
        # The architecture and vocabularies are the earlier run's, whatever this run's defaults for them say.
        training.update({key: initial.card.training[key] for key in INHERITED if key in initial.card.training})
    generated = f"Generated by transformer/tasks.py (train seed {args.seed}, dev seed {args.seed + 1})."
    card = ModelCard(
        name=args.out.name,
        task=args.task,
        # A continued model keeps the words of its card, which only a flag given again replaces.
        description=args.description or (initial.card.description if initial else DESCRIPTIONS[args.task]),
        data=args.data_credit or (initial.card.data if initial else None)
        or (f"The corpus {' '.join(map(str, args.data))} (no --data-credit given)." if args.task == "translate"
            else generated),
        metrics=metrics,
        examples=args.examples or (initial.card.examples if initial else [t if args.task in LANGUAGE_MODEL_TASKS
                                                                             else s for s, t in dev_pairs[:8]]),
        training_command=command,
        wall_time_s=round(progress.elapsed_s, 1),
        machine=machine,
        parameters=model.num_parameters(),
        history=progress.history,
        snapshots=progress.snapshots,
        training=training,
        decoding=dict(initial.card.decoding) if initial else {},  # the app's default, until evaluate --record
    )
    save_checkpoint(folder, model, card, src_tok, tgt_tok,
                    [s for s, _ in train_pairs] if args.task == "translate" else None)
    print(f"{args.out}: dev {METRICS[args.task]} {metric:.4f} on {len(dev_pairs)} pairs, "
          f"{model.num_parameters():,} parameters, {progress.elapsed_s:.0f} s")


if __name__ == "__main__":
    main()
