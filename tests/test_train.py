"""The training command: a few steps end to end, resuming, the schedule, and two DDP processes; a language model of a
corpus's sentences (--task lm): Llama-shaped, held out by sentence, a vocabulary of its side, packed, resumed."""
import gzip
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from helpers import ROOT, TINY_TRAINING
from transformer.data.corpora import read_parallel, split_dev
from transformer.data.tasks import reverse_example
from transformer.inference.translation import load_checkpoint
from transformer.io.checkpoint import expected_state, load_weights, parameter_count, read_config
from transformer.io.text import words
from transformer.io.tokenizer import UNK_ID
from transformer.training.evaluate import (
    chrf,
    continuations,
    evaluation_cases,
    lm_checkpoint_metrics,
    score,
    translate_texts,
)
from transformer.training.evaluate import evaluate as evaluate_checkpoint
from transformer.training.train import (
    PAD_ID,
    Progress,
    collate,
    encode_examples,
    evaluate,
    learning_rate,
    load_pairs,
    main,
    model_config,
    parse_args,
    select_snapshots,
)


def test_few_steps_end_to_end(tiny_checkpoint):
    checkpoint = load_checkpoint(tiny_checkpoint)
    card = checkpoint.card
    assert card.task == "reverse" and card.parameters == checkpoint.model.num_parameters()
    assert [entry["step"] for entry in card.history] == [250, 500]
    assert [s["step"] for s in card.snapshots] == [0, 10, 50, 150]  # 0 %, 2 %, 10 %, 30 % of 500 steps
    for snapshot in checkpoint.snapshot_names():
        state = load_file(tiny_checkpoint / "snapshots" / f"{snapshot}.safetensors")
        assert state["encoder.layers.0.self_attn.W_q.weight"].dtype == torch.float16
        assert checkpoint.load_snapshot(snapshot).encoder.layers[0].self_attn.W_q.weight.dtype == torch.float32
    assert card.training_command.startswith("python -m transformer.train --task reverse")
    assert 0.0 <= card.metrics["dev_exact_match"] <= 1.0
    assert checkpoint.translate("abc").src_tokens == ["a", "b", "c", "</s>"]  # character pieces


def test_dev_loss_is_the_mean_over_target_tokens_whatever_the_batch_size(tiny_checkpoint):
    checkpoint = load_checkpoint(tiny_checkpoint)
    model, config = checkpoint.model, checkpoint.config
    rng = random.Random(0)
    # Four short strings the model reverses well and two long ones it never saw: batches of unequal size and loss.
    pairs = [reverse_example(rng, length) for length in (1, 2, 2, 3, 30, 30)]
    args = SimpleNamespace(task="reverse", max_len=config.max_len)
    examples = encode_examples(args, pairs, checkpoint.src_tokenizer, checkpoint.tgt_tokenizer)
    loss_sum, tokens = 0.0, 0
    with torch.no_grad():
        for example in examples:  # one pair at a time: no batching at all
            src, tgt = collate([example], PAD_ID)
            logits = model(src, tgt[:, :-1])  # (1, tgt_len - 1, vocab)
            loss_sum += F.cross_entropy(logits[0], tgt[0, 1:], reduction="sum").item()
            tokens += tgt.shape[1] - 1
    for max_tokens in (40, 10**6):  # batches of a few pairs each, and one batch of all
        args.max_tokens = max_tokens
        result = evaluate(model, args, examples, pairs, checkpoint.src_tokenizer, checkpoint.tgt_tokenizer, "cpu")
        assert result["dev_loss"] == pytest.approx(loss_sum / tokens, rel=1e-5), max_tokens


@pytest.mark.slow
def test_loss_decreases_and_resume_equals_one_run(tmp_path):
    common = TINY_TRAINING + ["--snapshots", "0", "--eval-every", "10", "--cooldown", "0"]  # cool-down needs the total
    straight = main(common + ["--out", str(tmp_path / "a"), "--steps", "30"])
    main(common + ["--out", str(tmp_path / "b"), "--steps", "20"])
    resumed = main(common + ["--out", str(tmp_path / "b"), "--steps", "30", "--resume"])
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
    history = json.loads((tmp_path / "a" / "card.json").read_text())["history"]
    assert history[-1]["train_loss"] < history[0]["train_loss"]


def test_learning_rate_schedule():
    assert learning_rate(1, 1e-3, 100) == pytest.approx(1e-5)
    assert learning_rate(100, 1e-3, 100) == pytest.approx(1e-3)  # the peak, at the end of warm-up
    assert learning_rate(400, 1e-3, 100) == pytest.approx(5e-4)  # then 1/sqrt(step)


def test_learning_rate_cooldown_falls_linearly_to_zero_at_the_end():
    total, cooldown = 1000, 0.2  # the last 200 steps
    assert learning_rate(800, 1e-3, 100, total, cooldown) == pytest.approx(learning_rate(800, 1e-3, 100))
    assert learning_rate(801, 1e-3, 100, total, cooldown) == pytest.approx(learning_rate(801, 1e-3, 100))
    assert learning_rate(901, 1e-3, 100, total, cooldown) == pytest.approx(learning_rate(901, 1e-3, 100) / 2)
    assert learning_rate(1000, 1e-3, 100, total, cooldown) == pytest.approx(learning_rate(1000, 1e-3, 100) / 200)


@pytest.mark.slow
def test_two_ddp_processes_end_with_identical_weights(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import os, sys, torch\n"
        "from transformer.train import main\n"
        "model = main(sys.argv[1:])\n"
        "out = sys.argv[sys.argv.index('--out') + 1]\n"
        "torch.save(model.state_dict(), os.path.join(out, f\"rank{os.environ['RANK']}.pt\"))\n"
    )
    out = tmp_path / "ddp"
    with socket.socket() as probe:  # a free port on loopback for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
               f"--master_port={port}", str(worker)]
    command += TINY_TRAINING + ["--out", str(out), "--steps", "10", "--snapshots", "0"]
    # torchrun and its workers in a process group of their own: on a timeout the whole group goes, workers too.
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        _, stderr = run.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        _, stderr = run.communicate()
        pytest.fail(f"torchrun took over 240 s; its process group was killed\n{stderr[-3000:]}")
    assert run.returncode == 0, stderr[-3000:]
    expected = expected_state(read_config(out), out)
    rank0, rank1 = (load_weights(out / f"rank{rank}.pt", out, expected) for rank in (0, 1))
    initial = load_weights(out / "snapshots" / "step_000000.safetensors", out, expected)
    assert rank0.keys() == rank1.keys()
    for name in rank0:
        torch.testing.assert_close(rank0[name], rank1[name], rtol=0, atol=0, msg=name)
    assert not torch.allclose(rank0["generator.bias"], initial["generator.bias"])  # they did train
    assert "torchrun --nproc_per_node=2" in json.loads((out / "card.json").read_text())["training_command"]


def test_a_corpus_model_keeps_the_words_of_its_training_sources_only(tmp_path):
    """The unseen-word warning's list: every word of the training split's sources, none only in the dev split's."""
    rng = random.Random(0)
    nouns = ["cat", "dog", "bird", "fish", "horse", "mouse", "frog", "lion"]
    pairs = [(f"the {rng.choice(nouns)} sees {i}", f"le {rng.choice(nouns)} voit {i}") for i in range(300)]
    pairs += [(f"a {word} sleeps", f"un {word} dort") for word in ("zebra", "yak", "gnu", "okapi", "tapir", "koala")]
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{source}\t{target}\n" for source, target in pairs), encoding="utf-8")
    model = TINY_TRAINING[TINY_TRAINING.index("--d-model"):]  # the tiny model and its schedule, not its task
    main(["--task", "translate", "--data", str(data), "--vocab-size", "60", "--dev-fraction", "0.3", "--steps", "2",
          "--snapshots", "0", "--out", str(tmp_path / "model")] + model)
    train_pairs, dev_pairs = split_dev(read_parallel(data), 0.3, 0)
    trained_on = {word for source, _ in train_pairs for word in words(source)}
    only_in_dev = {word for source, _ in dev_pairs for word in words(source)} - trained_on
    assert only_in_dev  # the six rare animals cannot all have fallen in the training split
    checkpoint = load_checkpoint(tmp_path / "model")
    assert checkpoint.source_words == trained_on
    credit = f"The corpus {data.parent.name}={data} (no --data-credit given)."  # not "Generated by ..."
    assert checkpoint.card.data == credit
    animal = sorted(only_in_dev)[0]
    assert checkpoint.unseen_words(f"the {animal} sees") == [animal]


def test_two_corpora_train_together_and_are_scored_apart(tmp_path):
    """`--data` takes several corpora: a TSV split by --dev-fraction and two aligned gzip files with a dev set of their
    own (`--dev-data`). No training pair has a dev sentence of either corpus, the card scores each corpus, and the
    evaluation breaks BLEU down by corpus, by length and by both."""
    rng = random.Random(1)
    nouns = ["cat", "dog", "bird", "fish"]
    short = [(f"the {rng.choice(nouns)} sees {i}", f"le {rng.choice(nouns)} voit {i}") for i in range(200)]
    tsv = tmp_path / "short" / "pairs.tsv"
    tsv.parent.mkdir()
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in short), encoding="utf-8")
    scenes = [(f"a {rng.choice(nouns)} runs near the {rng.choice(nouns)} in a park {i}",
               f"un {rng.choice(nouns)} court près du {rng.choice(nouns)} dans un parc {i}") for i in range(120)]
    shared_dev = short[0]  # a dev sentence of the scenes corpus that the short corpus also holds
    scene_files = {}
    for split, pairs in (("train", scenes[:100]), ("val", scenes[100:] + [shared_dev])):
        for side, column in (("en", 0), ("fr", 1)):
            path = scene_files[split, side] = tmp_path / "scenes" / f"{split}.{side}.gz"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(gzip.compress("".join(f"{pair[column]}\n" for pair in pairs).encode()))
    model = TINY_TRAINING[TINY_TRAINING.index("--d-model"):]
    main(["--task", "translate", "--vocab-size", "60", "--dev-fraction", "0.2", "--steps", "2", "--snapshots", "0",
          "--data", f"short={tsv}", f"scenes={scene_files['train', 'en']},{scene_files['train', 'fr']}",
          "--dev-data", f"scenes={scene_files['val', 'en']},{scene_files['val', 'fr']}",
          "--out", str(tmp_path / "model")] + model)
    checkpoint = load_checkpoint(tmp_path / "model")
    short_train, short_dev = split_dev(short, 0.2, 0)
    dev_sources = {s for s, _ in short_dev + scenes[100:] + [shared_dev]}
    assert checkpoint.card.metrics["train_pairs"] == len([p for p in short_train + scenes[:100]
                                                          if p[0] not in dev_sources])
    assert checkpoint.card.metrics["dev_pairs"] == len(short_dev) + 21
    assert {"dev_bleu_short", "dev_bleu_scenes"} <= set(checkpoint.card.metrics)
    cases = evaluation_cases(checkpoint, 0)
    assert [source for _, source, _ in cases] == [s for s, _ in short_dev] + [s for s, _ in scenes[100:] + [shared_dev]]
    assert {case for case, _, _ in cases} == {"short, 1-5 words", "scenes, 1-5 words", "scenes, 6-10 words"}
    result = evaluate_checkpoint(checkpoint, cases)
    predicted = translate_texts(checkpoint.model, checkpoint.src_tokenizer, checkpoint.tgt_tokenizer,
                                [source for _, source, _ in cases])  # decoded together, as evaluate does
    assert result["chrf_per_case"]["short"] > 0
    for group in ("short", "scenes", "1-5 words", "6-10 words", "scenes, 1-5 words"):
        members = [(p, t) for (case, _, t), p in zip(cases, predicted) if group in case.split(", ") or case == group]
        # chrF too: two training steps score BLEU 0 everywhere, which would prove nothing about the grouping.
        assert result["chrf_per_case"][group] == chrf(*zip(*members)), group
        assert result["per_case"][group] == score("translate", *zip(*members)), group
    assert set(result["chrf_per_case"]) == set(result["per_case"]) == {
        "short", "scenes", "1-5 words", "6-10 words", "short, 1-5 words", "scenes, 1-5 words", "scenes, 6-10 words"}


def test_repeat_weighs_corpora_and_long_pairs_without_dropping_any(tmp_path):
    """`--repeat scenes=3 6+words=2`: an epoch holds each scenes pair three times, each other pair of 6+ source words
    twice (the largest repeat that applies, not the product), every other pair once; a continued run on other corpora
    scores the inherited weights on its own data, and its curve names the data of each entry."""
    short = [(f"the cat sees {i}", f"le chat voit {i}") for i in range(60)]
    short += [(f"the big black dog sees the cat {i}", f"le gros chien noir voit le chat {i}") for i in range(30)]
    tsv = tmp_path / "short" / "pairs.tsv"
    tsv.parent.mkdir()
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in short), encoding="utf-8")
    scenes = tmp_path / "scenes" / "pairs.tsv"
    scenes.parent.mkdir()
    scenes.write_text("".join(f"a dog runs {i}\tun chien court {i}\n" for i in range(20))
                      + "".join(f"a dog runs in the big park {i}\tun chien court dans le grand parc {i}\n"
                                for i in range(20)), encoding="utf-8")
    flags = ["--task", "translate", "--data", f"short={tsv}", f"scenes={scenes}", "--dev-fraction", "0.2",
             "--repeat", "scenes=3", "6+words=2", "--out", str(tmp_path / "model")]
    pairs, copies, _ = load_pairs(parse_args(flags))
    expected = [3 if source.startswith("a dog") else 2 if len(source.split()) >= 6 else 1 for source, _ in pairs]
    assert copies == expected and {1, 2, 3} == set(copies)
    with pytest.raises(SystemExit, match="not trained on: parks"):
        main(flags[:-2] + ["--repeat", "parks=2", "--out", str(tmp_path / "bad")])
    model = TINY_TRAINING[TINY_TRAINING.index("--d-model"):]
    main(["--task", "translate", "--data", f"short={tsv}", "--dev-fraction", "0.2", "--vocab-size", "60", "--steps",
          "2", "--eval-every", "2", "--snapshots", "0", "--out", str(tmp_path / "first")] + model)
    first = load_checkpoint(tmp_path / "first").card
    assert [entry["data"] for entry in first.history] == ["short"]
    main(flags[:-2] + ["--init-from", str(tmp_path / "first"), "--steps", "2", "--eval-every", "2", "--snapshots",
                       "0", "--out", str(tmp_path / "continued")] + model)
    card = load_checkpoint(tmp_path / "continued").card
    assert card.training["repeat"] == ["scenes=3", "6+words=2"]
    assert [(entry["step"], entry["data"]) for entry in card.history] == [
        (2, "short"), (2, "short + scenes"), (4, "short + scenes")]  # the inherited weights scored on both


def test_a_continued_model_may_raise_max_len_where_positions_are_sinusoids(tiny_checkpoint, tmp_path):
    model = TINY_TRAINING[TINY_TRAINING.index("--d-model"):]
    main(["--task", "reverse", "--init-from", str(tiny_checkpoint), "--steps", "1", "--train-size", "50",
          "--dev-size", "10", "--keep", "last", "--out", str(tmp_path / "longer"), *model, "--max-len", "48"])
    longer = load_checkpoint(tmp_path / "longer")
    assert longer.config.max_len == 48 and longer.card.training["max_len"] == 48
    assert load_checkpoint(tiny_checkpoint).config.max_len < 48
    with pytest.raises(SystemExit, match="keeps max_len"):
        main(["--task", "reverse", "--init-from", str(tiny_checkpoint), "--steps", "1", "--out",
              str(tmp_path / "shorter"), *model, "--max-len", "8"])


def test_a_run_says_what_it_does_before_its_progress_bar_and_prints_each_evaluation_as_text(tmp_path, capsys):
    settings = [arg for arg in TINY_TRAINING if arg != "--quiet"]
    main([*settings, "--train-size", "50", "--dev-size", "10", "--steps", "2", "--eval-every", "1", "--snapshots",
          "0", "--out", str(tmp_path / "run")])
    captured = capsys.readouterr()
    assert captured.out.splitlines()[:3] == ["reading the data", "50 training pairs, 10 dev pairs",
                                             "preparing the tokenizers and the model"]
    lines = [line.split("\r")[-1] for line in captured.out.splitlines() if "step 1 (" in line or "step 2 (" in line]
    assert len(lines) == 2, captured.out
    for line in lines:
        assert re.fullmatch(r"step [12] \(reverse\): dev exact_match \d\.\d{4}, dev loss \d+\.\d{4}, "
                            r"train loss \d+\.\d{4}", line.strip()), line


# ----------------------------------------------------------------------------- a language model (--task lm)

def english_corpus(path, lines: int = 1500):
    """A TSV whose English side is short everyday sentences and whose other side is a script English lacks (ß)."""
    rng = random.Random(0)
    names, verbs = ["Tom", "Mary", "John", "Alice", "My mother"], ["likes", "sees", "wants", "has", "paints"]
    things = ["a red car", "the cat", "some tea", "a book", "the garden", "two dogs"]
    rows = [f"{rng.choice(names)} {rng.choice(verbs)} {rng.choice(things)} {rng.randint(1, 60)} times.\tßß {i} ßß"
            for i in range(lines)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


TINY_LM = ["--task", "lm", "--vocab-size", "120", "--d-model", "32", "--num-heads", "4", "--num-kv-heads", "2",
           "--layers", "2", "--d-ff", "64", "--max-len", "40", "--max-tokens", "640", "--dropout", "0", "--warmup", "5",
           "--repeat-sentences", "0.3", "--dev-fraction", "0.1", "--quiet"]


def test_the_language_models_defaults_are_llama_shaped_and_under_ten_million_parameters():
    args = parse_args(["--task", "lm", "--data", "corpus.tsv", "--out", "x"])
    config = model_config(args, args.vocab_size, args.vocab_size)
    assert (config.stacks, config.positional, config.norm, config.norm_first, config.feed_forward,
            config.activation, config.attention_bias, config.feed_forward_bias) == (
        "decoder-only", "rotary", "rms", True, "gated", "silu", "none", False)
    assert config.num_heads == 2 * config.kv_heads and config.tie_output_embedding and args.label_smoothing == 0
    assert 4_000_000 < parameter_count(config) <= 10_000_000
    translate = parse_args(["--task", "translate", "--data", "corpus.tsv", "--out", "x"])
    assert (translate.positional, translate.norm, translate.norm_first, translate.label_smoothing) == (
        "sinusoidal", "layer", False, 0.1)  # the other tasks' models as they were


@pytest.mark.parametrize(("flags", "message"), [
    (["--task", "lm", "--out", "x"], "needs --data"),
    (["--task", "lm", "--data", "c.tsv", "--out", "x", "--concat", "0.1"], "packs sentences"),
    (["--task", "translate", "--data", "c.tsv", "--out", "x", "--repeat-sentences", "0.2"], "for --task lm"),
    (["--task", "lm", "--data", "c.tsv", "--out", "x", "--repeat-sentences", "1.5"], "from 0 to 1"),
    (["--task", "lm", "--data", "c.tsv", "--out", "x", "--num-kv-heads", "3"], "num_kv_heads"),
    (["--task", "translate", "--data", "c.tsv", "--out", "x", "--positional", "rotary"], "decoder-only"),
    (["--task", "translate", "--data", "c.tsv", "--out", "x", "--snapshot-by", "text_induction_score"],
     "--snapshot-by must be one of dev_metric for --task translate"),
])
def test_language_model_flags_are_checked_before_anything_runs(flags, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(flags)
    assert message in capsys.readouterr().err


def test_a_language_model_trains_on_one_side_of_a_corpus_and_its_card_holds_what_its_weights_give(tmp_path):
    corpus = english_corpus(tmp_path / "eng-xx.tsv")
    out = tmp_path / "lm"
    main(TINY_LM + ["--data", str(corpus), "--out", str(out), "--steps", "12", "--eval-every", "6",
                    "--snapshots", "0,0.5", "--examples", "Tom likes", "My mother"])
    checkpoint = load_checkpoint(out)
    config, card = checkpoint.config, checkpoint.card
    assert (card.task, config.stacks, config.positional, config.norm, config.num_kv_heads) == (
        "lm", "decoder-only", "rotary", "rms", 2)
    assert (out / "src.model").read_bytes() == (out / "tgt.model").read_bytes()  # one vocabulary
    tokenizer = checkpoint.tgt_tokenizer
    assert UNK_ID in tokenizer.encode("ß") and UNK_ID not in tokenizer.encode("Tom paints two dogs.")  # English's
    dev = load_pairs(parse_args(TINY_LM + ["--data", str(corpus), "--out", "x"]))[2]
    held_out = {text for pairs in dev.values() for _, text in pairs}
    assert card.metrics["dev_sentences"] == len(held_out) > 0 and card.metrics["train_sentences"] > 5 * len(held_out)
    # The figures on the card are those the folder's weights give, measured again from the corpus (as the test of
    # the shipped english-lm does).
    measured = lm_checkpoint_metrics(checkpoint)
    for name, value in measured.items():
        assert card.metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-4), name
    assert {"dev_perplexity", "dev_perplexity_per_word", "text_induction_score", "text_previous_token_score",
            "induction_score", "previous_token_score"} <= set(measured)
    assert card.metrics["dev_perplexity"] < config.tgt_vocab_size  # it learnt something in 12 steps
    for entry in card.history:
        assert {"text_induction_score", "text_previous_token_score", "induction_score"} <= set(entry)
    assert [s["step"] for s in card.snapshots] == [0, 6]
    assert "--repeat-sentences" in card.description and "packed into up to 40 tokens" in card.description
    assert card.training["longest_source_tokens"] == 38 and card.examples == ["Tom likes", "My mother"]
    assert [prompt for prompt, _ in continuations(checkpoint, card.examples)] == card.examples
    assert not checkpoint.translate("Tom likes the cat. Tom likes").warnings  # sentences as it read them: no caveat


def test_a_language_model_of_the_other_side_reads_its_script(tmp_path):
    corpus = english_corpus(tmp_path / "eng-xx.tsv", lines=300)
    out = tmp_path / "lm"
    main(TINY_LM + ["--data", str(corpus), "--text-side", "target", "--out", str(out), "--steps", "2",
                    "--eval-every", "2", "--snapshots", "0"])
    checkpoint = load_checkpoint(out)
    assert UNK_ID not in checkpoint.tgt_tokenizer.encode("ßß 12 ßß")
    assert "target side" in checkpoint.card.description


@pytest.mark.slow
def test_a_language_model_resumed_across_epochs_equals_one_run(tmp_path):
    """Its sequences are packed afresh each epoch, from the seed and the epoch: a resumed run packs the same."""
    corpus = english_corpus(tmp_path / "eng-xx.tsv", lines=600)
    common = TINY_LM + ["--data", str(corpus), "--snapshots", "0", "--eval-every", "4", "--dropout", "0.1"]
    straight = main(common + ["--out", str(tmp_path / "a"), "--steps", "24"])
    main(common + ["--out", str(tmp_path / "b"), "--steps", "12"])
    resumed = main(common + ["--out", str(tmp_path / "b"), "--steps", "24", "--resume"])
    epochs = [torch.load(tmp_path / run / "resume.pt", weights_only=True)["progress"]["epoch"] for run in "ab"]
    assert epochs[0] == epochs[1] >= 2  # the first run stopped in another epoch than the one the second ended in
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)


def test_snapshots_follow_a_figure_of_the_curve_and_given_fractions(tmp_path):
    """--snapshot-metrics 0.15,0.3 --snapshot-by text_induction_score --snapshots 0,0.1: the first state, the first
    evaluation at or after 10 % of the steps, the first whose text_induction_score passes each threshold, the last
    before the final weights; the files of the others deleted."""
    scores = {0: 0.05, 100: 0.06, 200: 0.07, 300: 0.2, 400: 0.5, 500: 0.6, 600: 0.6}
    progress = Progress(history=[{"step": step, "dev_metric": 0.3, "text_induction_score": score}
                                 for step, score in scores.items() if step],
                        snapshots=[{"name": f"step_{step:06d}", "step": step, "fraction": step / 600,
                                    "dev_metric": 0.3} for step in scores])
    for step in scores:
        (tmp_path / f"step_{step:06d}.safetensors").write_bytes(b"")
    select_snapshots(progress, [0.15, 0.3], tmp_path, 600, "text_induction_score", [0, 60])
    assert [s["step"] for s in progress.snapshots] == [0, 100, 300, 400, 500]
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"step_{step:06d}.safetensors"
                                                                for step in (0, 100, 300, 400, 500)]
