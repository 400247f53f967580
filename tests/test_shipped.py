"""The shipped checkpoints as users get them: each folder loads with a valid card and config, fresh inputs meet the
floors the README promises, and the card's examples translate to what was checked by hand."""
from __future__ import annotations

import hashlib
import json
import math
import platform
import sys
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from helpers import ROOT, corpus_file
from transformer import TransformerConfig, load_checkpoint
from transformer.analysis.head_map import head_statistics
from transformer.analysis.induction import head_scores, in_context, probe
from transformer.data.corpora import CorpusSpec, corpus_specs, corpus_splits
from transformer.inference.decoding import beam_search, greedy
from transformer.io.checkpoint import CARD_FILE, CONFIG_FILE
from transformer.io.text import words
from transformer.model.capture import capture
from transformer.model.device import atlas_device
from transformer.training.evaluate import (
    FLOORS,
    METRICS,
    evaluate,
    evaluation_cases,
    fresh_examples,
    joined_cases,
    score,
    translate_texts,
)

SHIPPED = ("dates", "eng-fra", "english-lm", "induction", "reverse", "reverse-1layer")
# Shipped to be compared with a partner (the app's Compare -> two checkpoints): the same vocabulary and data, one idea
# changed, and below the task's floor on purpose (what the changed idea costs is the lesson).
COMPARISONS = {"reverse-1layer": ("reverse", {"num_encoder_layers": 1, "num_decoder_layers": 1})}
UNSEEN_WORD = "grandnephews"  # in neither of eng-fra's corpora ("grandparents" is in Multi30k's)
OUTPUTS_FILE = ROOT / "tests" / "shipped_outputs.json"  # digests of shipped_outputs, recorded by `--record` below
CHECK_SEED = 4242  # fresh inputs of neither training nor the recorded evaluation (transformer.data.tasks.FRESH_SEED)
# Each card's examples, with the outputs a person checked (decoded as the card says: eng-fra uses beam 4): reverse is
# known; dates and French read by hand; the language model's continuation begins with the rest of the repeat.
INDUCTION_EXPECTED = {"attention is all you need. attention is": "all you need.",
                      "one two three four five, one two": "three four five,",
                      "Paris London Rome Berlin. Paris London": "Rome Berlin.",
                      # a stretch of 27 characters, longer than it trained on (8-24): it stops short
                      "lorem ipsum dolor sit amet. lorem ipsum": "dolor sit",
                      "Alice met Bob at noon. Alice met": "Bob at noon.", "xq7 bnz tt0 kz9 xq7 bnz": "tt0 kz9"}
# english-lm's greedy continuations, read for plausibility (docs/english-lm.md shows them): the first sentence each.
ENGLISH_LM_EXPECTED = {
    'I would like to': 'go to the movies with you.',
    'Where is the': 'nearest station?',
    'Tom told Mary that': 'he was a doctor.',
    "It's going to": 'be a good way.',
    'My mother': 'is a doctor.',
    'Can you help me': 'with my homework?',
    "I don't think": "I'm a little busy.",
    'We went to the': 'beach to see the movie.',
    'This is the best': "thing I've ever seen.",
    'Why did you': 'go to the party?',
}
EXPECTED = {
    "reverse": None,  # the example reversed
    "reverse-1layer": None,
    "dates": {"3 March 2021": "2021-03-03", "Wednesday, March 3, 2021": "2021-03-03", "03/03/2021": "2021-03-03",
              "3.3.2021": "2021-03-03", "3rd of March 2021": "2021-03-03", "Mar 3 2021": "2021-03-03",
              "3 Mar 21": "2021-03-03", "MARCH 3, 2021": "2021-03-03", "July 14th, 1989": "1989-07-14",
              "1 January 2000": "2000-01-01"},
    "eng-fra": {"I am cold.": "J'ai froid.", "She is reading a book.": "Elle est en train de lire un livre.",
                "We will go to the beach tomorrow.": "Nous irons à la plage demain.",
                "Where is the station?": "Où se trouve la gare ?", "I don't like cats.": "Je n'aime pas les chats.",
                "The children are playing in the garden.": "Les enfants jouent dans le jardin.",
                "He bought a red car.": "Il a acheté une voiture rouge.",
                "Do you speak French?": "Parlez-vous français ?",
                "Tom is taller than Mary.": "Tom est plus grand que Mary.",
                "It is raining today.": "Il pleut aujourd'hui."},
    "induction": INDUCTION_EXPECTED,
    "english-lm": ENGLISH_LM_EXPECTED,
}


@pytest.fixture(scope="module", params=SHIPPED)
def shipped(request):
    return load_checkpoint(ROOT / "checkpoints" / request.param)


def test_the_shipped_folders_are_the_ones_tested():
    assert sorted(path.name for path in (ROOT / "checkpoints").iterdir() if path.is_dir()) == sorted(SHIPPED)


def test_card_and_config_are_valid_and_agree_with_the_weights(shipped):
    folder = ROOT / "checkpoints" / shipped.name
    config = TransformerConfig.from_dict(json.loads((folder / CONFIG_FILE).read_text()))
    assert config == shipped.model.config
    card = shipped.card
    assert json.loads((folder / CARD_FILE).read_text())["name"] == card.name == shipped.name
    assert card.parameters == shipped.model.num_parameters()
    assert card.task in FLOORS and card.examples and card.description and card.data and card.training_command
    recorded = next((card.metrics[name] for name in ("fresh_exact_match_worst_case", "dev_bleu", "dev_repeat_accuracy",
                                                     "dev_next_token_accuracy") if name in card.metrics), None)
    floor = 0.5 if shipped.name in COMPARISONS else FLOORS[card.task]  # a comparison model still works, mostly
    assert recorded is not None and recorded >= floor  # the figure the README quotes meets its floor
    assert [s["step"] for s in card.history] == sorted(s["step"] for s in card.history)
    assert shipped.snapshot_names()
    for name in shipped.snapshot_names():
        snapshot = shipped.load_snapshot(name)
        embedding = (snapshot.encoder or snapshot.decoder).embed.token.weight
        assert snapshot.config == config and embedding.dtype == torch.float32


def test_the_examples_translate(shipped):
    expected = EXPECTED[shipped.name]
    for example in shipped.card.examples:
        want = example[::-1] if expected is None else expected[example]
        if shipped.config.stacks == "decoder-only":  # it goes on after the repeat: its first pieces are checked
            assert shipped.translate(example).text.startswith(want), example
        else:
            assert shipped.translate(example).text == want, example


def test_cached_beam_search_equals_full_re_runs_on_the_examples(shipped):
    """On eng-fra a beam search whose cache did not follow its beams changed 2 of 6 outputs. (A language model
    continues its prompt greedily: the same check, without beams.)"""
    texts = shipped.card.examples
    ids = [shipped.encode(text) for text in texts]
    if shipped.config.stacks == "decoder-only":
        for row_ids in ids:  # one prompt at a time: a decoder-only model's prompts are rows of one length
            src = torch.tensor([row_ids])
            assert torch.equal(greedy(shipped.model, src, len(row_ids) + 20),
                               greedy(shipped.model, src, len(row_ids) + 20, use_cache=False))
        return
    src = torch.full((len(ids), max(map(len, ids))), shipped.model.config.pad_id)
    for row, row_ids in enumerate(ids):
        src[row, :len(row_ids)] = torch.tensor(row_ids)
    assert torch.equal(beam_search(shipped.model, src, beam_size=4),
                       beam_search(shipped.model, src, beam_size=4, use_cache=False))


def test_eng_fra_decodes_with_its_cards_coverage_penalty():
    """The card's coverage penalty keeps a word that beam search alone drops (docs/eng-fra.md)."""
    checkpoint = load_checkpoint(ROOT / "checkpoints" / "eng-fra")
    decoding = checkpoint.card.decoding
    text = "A group of tourists is taking pictures in front of the old church in the center of the town."
    assert decoding["coverage_penalty"] > 0
    assert " devant la vieille église " in checkpoint.translate(text).text  # "old" kept
    without = beam_search(checkpoint.model, torch.tensor([checkpoint.encode(text)]), decoding["beam_size"],
                          length_penalty=decoding["length_penalty"])
    assert "vieil" not in checkpoint.tgt_tokenizer.decode(without[0].tolist())  # and dropped


@pytest.mark.parametrize("name", COMPARISONS)
def test_a_comparison_checkpoint_shares_its_partners_vocabulary_and_changes_one_idea(name):
    partner, changed = COMPARISONS[name]
    folder, partner_folder = ROOT / "checkpoints" / name, ROOT / "checkpoints" / partner
    for file in ("src.model", "tgt.model"):
        assert (folder / file).read_bytes() == (partner_folder / file).read_bytes()
    config, partner_config = (asdict(TransformerConfig.from_dict(json.loads((f / CONFIG_FILE).read_text())))
                              for f in (folder, partner_folder))  # fields a config leaves out take their defaults
    assert {key for key in config if config[key] != partner_config[key]} == set(changed)
    assert all(config[key] == value for key, value in changed.items())


@pytest.mark.parametrize("name, per_case", [("reverse", 3), ("dates", 5)])
def test_fresh_inputs_meet_the_floor_in_every_case(name, per_case):
    checkpoint = load_checkpoint(ROOT / "checkpoints" / name)
    result = evaluate(checkpoint, fresh_examples(name, per_case, seed=CHECK_SEED))
    assert len(result["per_case"]) == {"reverse": 30, "dates": 12}[name]
    assert result["meets_floor"], (result["worst"], result["errors"][:5])


def card_corpora(checkpoint) -> tuple[list[str], list[str]]:
    """The corpora and dev sets a card names (paths from the repository's root), found beside the repository, as
    `--data` and `--dev-data` take them."""
    def found(spec: CorpusSpec) -> str:
        return f"{spec.name}=" + ",".join(str(corpus_file(ROOT / path)) for path in (spec.source, spec.target) if path)

    corpora, dev_sets = corpus_specs(checkpoint.card.training)
    return [found(spec) for spec in corpora], [found(spec) for spec in dev_sets.values()]


@pytest.mark.slow
def test_eng_fra_meets_its_bleu_floor_on_the_whole_dev_split():
    """Two minutes or so: every dev pair of its corpora, greedy, from the corpora beside the repository."""
    checkpoint = load_checkpoint(ROOT / "checkpoints" / "eng-fra")
    data, dev_data = card_corpora(checkpoint)
    result = evaluate(checkpoint, evaluation_cases(checkpoint, 1, data=data, dev_data=dev_data))
    assert result["metric"] == METRICS["translate"] and result["inputs"] == checkpoint.card.metrics["dev_pairs"]
    assert {"tatoeba", "multi30k"} <= set(result["per_case"])
    assert result["overall"] >= FLOORS["translate"]


def test_long_inputs_made_of_dev_pairs_are_scored_apart_from_the_dev_split():
    """`--joined`: 2-3 dev pairs joined, and two dev statements made one sentence by a conjunction, each get their own
    BLEU and leave the dev split's as it is."""
    checkpoint = load_checkpoint(ROOT / "checkpoints" / "eng-fra")
    cases = [("1-5 words", "I am cold.", "J'ai froid."), ("1-5 words", "He is tired.", "Il est fatigué."),
             ("1-5 words", "Tom is here.", "Tom est ici."), ("1-5 words", "It is raining.", "Il pleut."),
             ("6-10 words", "The children are playing in the garden.", "Les enfants jouent dans le jardin.")]
    long = joined_cases(cases, count=6)
    clauses = [(source, target) for case, source, target in long if case == "clauses"]
    assert len(clauses) == 6 and len(long) == 12
    assert all(" " in target and target.count(".") == 1 for _, target in clauses)  # one sentence each
    result = evaluate(checkpoint, cases + long)
    assert result["inputs"] == len(cases)
    assert result["overall"] == evaluate(checkpoint, cases)["overall"]
    predicted = translate_texts(checkpoint.model, checkpoint.src_tokenizer, checkpoint.tgt_tokenizer,
                                [source for source, _ in clauses])
    assert result["per_case"]["clauses"] == score("translate", predicted, [target for _, target in clauses])


def test_eng_fra_snapshots_show_bleu_rising():
    """The Training view's snapshots: a monotone rise in dev BLEU, one below 20, one between 20 and the final model."""
    card = load_checkpoint(ROOT / "checkpoints" / "eng-fra").card
    bleu = [snapshot["dev_metric"] for snapshot in sorted(card.snapshots, key=lambda s: s["step"])]
    final = max(entry["dev_metric"] for entry in card.history)
    assert bleu == sorted(bleu) and bleu[-1] <= final
    assert any(value < 20 for value in bleu) and any(20 <= value < final for value in bleu)


def test_eng_fra_knows_which_words_it_never_trained_on():
    """Its word list is exactly the words of its training split (the card's corpora, dev sets, dev fraction and split
    seed): a lecturer who types a word the corpora never have is told why it comes out invented."""
    checkpoint = load_checkpoint(ROOT / "checkpoints" / "eng-fra")
    training = checkpoint.card.training
    data, dev_data = card_corpora(checkpoint)
    dev_sets = {spec.name: spec for spec in map(CorpusSpec.parse, dev_data)}
    train, _ = corpus_splits([CorpusSpec.parse(text) for text in data], dev_sets, training["dev_fraction"],
                             training["split_seed"])
    sources = [source for pairs in train.values() for source, _ in pairs]
    assert checkpoint.source_words == {word for source in sources for word in words(source)}
    assert checkpoint.unseen_words(f"We are going to visit our {UNSEEN_WORD} next weekend.") == [UNSEEN_WORD]
    assert all(checkpoint.unseen_words(example) == [] for example in checkpoint.card.examples)


def test_the_induction_snapshots_show_in_context_learning_appear():
    """Its card's in-context numbers per snapshot are those its weights give, and they rise across training: the
    loss drop on a repeat from about nothing to most of the loss, an induction head (layer 1) from none to one that
    the Heads view names, after layer 0's attention to the previous token, which it reads."""
    checkpoint = load_checkpoint(ROOT / "checkpoints" / "induction")
    ids = probe(checkpoint.tgt_tokenizer, checkpoint.config.bos_id)
    snapshots = sorted(checkpoint.card.snapshots, key=lambda s: s["step"])
    measured = [in_context(checkpoint.load_snapshot(s["name"]), ids) for s in snapshots]
    final = in_context(checkpoint.model, ids)
    for snapshot, numbers in zip(snapshots, measured):
        for name in ("in_context_loss_drop", "induction_score", "previous_token_score"):
            assert snapshot[name] == pytest.approx(numbers[name], abs=0.02), (snapshot["name"], name)  # fp16 weights
    drops = [numbers["in_context_loss_drop"] for numbers in measured + [final]]
    scores = [numbers["induction_score"] for numbers in measured + [final]]
    for earlier, later in zip(drops + scores, drops[1:] + [math.inf] + scores[1:]):
        assert later >= earlier - 0.02  # rising (before the jump both stay at their start, within noise)
    assert drops[0] < 0.2 and scores[0] < 0.1 and drops[-1] > 2.0 and scores[-1] > 0.5
    assert final["repeat_accuracy"] >= FLOORS["induction"]
    induction, previous = head_scores(checkpoint.model, ids)  # (layers, heads)
    assert int(induction.max(dim=1).values.argmax()) == 1 and int(previous.max(dim=1).values.argmax()) == 0
    table = head_statistics(checkpoint, (), ids[0].tolist())
    assert table.loc[table["induction_share"].idxmax(), "layer"] == 1
    assert "induction" in set(table["role"])


def shipped_outputs(checkpoint) -> dict[str, torch.Tensor]:
    """What a shipped model computes on its card's first two examples as one right-padded batch, teacher-forced on
    their greedy outputs: the logits without a capture (the fused attention), and with every hook point captured
    (the explicit softmax) those logits and every hook's tensor."""
    model, config = checkpoint.model, checkpoint.config
    rows = [checkpoint.encode(text) for text in checkpoint.card.examples[:2]]
    if config.stacks == "encoder-decoder":
        outputs = [greedy(model, torch.tensor([row]))[0].tolist() for row in rows]
    batch = [[*row, *[config.pad_id] * (max(map(len, rows)) - len(row))] for row in rows]
    src, tgt = (None, torch.tensor(batch)) if config.stacks == "decoder-only" else (torch.tensor(batch), None)
    if tgt is None:
        width = max(map(len, outputs))
        tgt = torch.tensor([[*row, *[config.pad_id] * (width - len(row))] for row in outputs])
    with torch.no_grad():
        found = {"logits": model(src, tgt)}
        with capture(model, "*") as record:
            found["captured logits"] = model(src, tgt)
    return found | dict(record.hooks)


RECORDED_THREADS = 2  # the digests are computed with this many intra-op threads wherever the test runs


@contextmanager
def recorded_threads():
    """torch with RECORDED_THREADS intra-op threads: another test may have left fewer, and the sums of a product
    split over other threads run in another order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(RECORDED_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def machine() -> str:
    """What float results depend on besides the code: torch's version, the device, the processor and its kernels,
    and the threads a product is split over."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return (f"torch {torch.__version__}, {atlas_device().type}, {cpu}, {torch.backends.cpu.get_cpu_capability()}, "
            f"{torch.get_num_threads()} threads")


def digests(checkpoint) -> dict[str, str]:
    """sha256 of each of shipped_outputs' tensors (dtype, shape and bytes): equal digests are torch.equal tensors."""
    with recorded_threads():
        outputs = shipped_outputs(checkpoint)
    return {name: hashlib.sha256(f"{tensor.dtype} {tuple(tensor.shape)}".encode()
                                 + tensor.cpu().contiguous().numpy().tobytes()).hexdigest()
            for name, tensor in outputs.items()}


RECORDED = json.loads(OUTPUTS_FILE.read_text())


@pytest.mark.parametrize("name", RECORDED["digests"])
def test_the_shipped_models_compute_what_they_always_have(name):
    """Every config field added for another model family defaults to the model as it was: the logits (fused and
    explicit attention) and every hook point's tensor of the checkpoints shipped before those fields are bit for bit
    those recorded then (torch.equal), on the kind of machine that recorded them."""
    with recorded_threads():
        here = machine()
    if RECORDED["machine"] != here:
        pytest.skip(f"recorded on {RECORDED['machine']}, this is {here}: other kernels round otherwise")
    assert digests(load_checkpoint(ROOT / "checkpoints" / name)) == RECORDED["digests"][name]


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:  # PYTHONPATH=.:tests python tests/test_shipped.py --record
    with recorded_threads():
        here = machine()
    OUTPUTS_FILE.write_text(json.dumps({"machine": here, "digests": {
        name: digests(load_checkpoint(ROOT / "checkpoints" / name)) for name in RECORDED["digests"]}}, indent=1) + "\n")
