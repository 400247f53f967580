"""The shipped english-lm (docs/english-lm.md): a Llama-shaped language model of at most 10 M parameters whose card
holds what its weights give: the scores on random tokens repeated, recomputed here; its held-out perplexity and its
heads' scores on held-out English sentences repeated, recomputed from the corpus (../shared/data, beside the
repository: skipped where it is absent, failed where CI is set); and the ten continuations docs/english-lm.md shows.
Skipped until checkpoints/english-lm is trained (docs/english-lm.md has the command)."""
import re

import pytest

from helpers import ROOT, corpus_file
from transformer.data.corpora import CorpusSpec, corpus_specs, lm_dev_sentences, sentence_splits
from transformer.inference.translation import load_checkpoint
from transformer.training.evaluate import continuations, lm_checkpoint_metrics, lm_random_numbers

FOLDER = ROOT / "checkpoints" / "english-lm"
DOC = ROOT / "docs" / "english-lm.md"
PROMPTS_HEADING = "## Ten prompts and what it writes"
HELD_OUT_FIGURES = ("dev_next_token_accuracy", "dev_perplexity", "dev_perplexity_per_word", "dev_tokens", "dev_words",
                    "text_in_context_loss_drop", "text_repeat_accuracy", "text_induction_score",
                    "text_previous_token_score")
RANDOM_FIGURES = ("in_context_loss_drop", "repeat_accuracy", "induction_score", "previous_token_score")

pytestmark = pytest.mark.skipif(not (FOLDER / "card.json").is_file(),
                                reason="checkpoints/english-lm is not trained yet (docs/english-lm.md has the command)")


@pytest.fixture(scope="module")
def english_lm():
    return load_checkpoint(FOLDER)


def corpora(card) -> tuple[list[CorpusSpec], dict[str, CorpusSpec]]:
    """The corpora the card's training read (and dev sets, if any), their paths taken from the repository root,
    where the training command ran; each one absent skips the test (corpus_file; fails where CI is set)."""
    def here(spec: CorpusSpec) -> CorpusSpec:
        paths = [str(corpus_file(ROOT / path)) if path else None for path in (spec.source, spec.target)]
        return CorpusSpec(spec.name, *paths)

    specs, dev_sets = corpus_specs(card.training)
    return [here(spec) for spec in specs], {name: here(spec) for name, spec in dev_sets.items()}


def test_it_is_llama_shaped_and_small(english_lm):
    config, card = english_lm.config, english_lm.card
    assert (card.task, config.stacks, config.positional, config.norm, config.norm_first, config.feed_forward,
            config.activation, config.attention_bias, config.feed_forward_bias) == (
        "lm", "decoder-only", "rotary", "rms", True, "gated", "silu", "none", False)
    assert config.num_heads == 2 * config.kv_heads  # two query heads per key/value head
    assert card.parameters == english_lm.model.num_parameters() <= 10_000_000
    assert "Tatoeba" in card.data and "CC BY 2.0 FR" in card.data
    assert "packed into up to" in card.description  # how its sequences were made, repeats included if any
    assert ("--repeat-sentences" in card.description) == bool(card.training.get("repeat_sentences"))


def test_its_scores_on_random_tokens_are_those_on_its_card(english_lm):
    measured = lm_random_numbers(english_lm.model)
    for name in RANDOM_FIGURES:
        assert english_lm.card.metrics[name] == pytest.approx(measured[name], abs=5e-4), name


@pytest.mark.slow  # the card's held-out figures computed again (tens of seconds)
def test_its_held_out_perplexity_and_scores_on_english_repeated_are_those_on_its_card(english_lm):
    specs, dev_sets = corpora(english_lm.card)
    measured = lm_checkpoint_metrics(english_lm, [str(spec) for spec in specs],
                                     [str(spec) for spec in dev_sets.values()])
    metrics = english_lm.card.metrics
    for name in HELD_OUT_FIGURES:
        assert metrics[name] == pytest.approx(measured[name], rel=1e-3, abs=5e-4), name


def test_no_held_out_sentence_trained(english_lm):
    training = english_lm.card.training
    specs, dev_sets = corpora(english_lm.card)
    train, dev = sentence_splits(specs, dev_sets, training["text_side"], training["dev_fraction"],
                                 training["split_seed"])
    trained = {sentence for sentences in train.values() for sentence in sentences}
    held_out = [sentence for sentences in dev.values() for sentence in sentences]
    assert held_out and not trained.intersection(held_out)
    assert (len(trained), len(held_out)) == (english_lm.card.metrics["train_sentences"],
                                             english_lm.card.metrics["dev_sentences"])


def test_its_snapshots_and_curve_show_the_heads_forming(english_lm):
    """Its snapshots span training, and its curve records both heads' scores at every evaluation: a previous-token
    head forms (an induction head's forming is the card's text_induction_score, for a reader to judge)."""
    card = english_lm.card
    assert len(card.snapshots) >= 3 and len(english_lm.snapshot_names()) == len(card.snapshots)
    first, *_, last = sorted(card.snapshots, key=lambda snapshot: snapshot["step"])
    assert last["induction_score"] > first["induction_score"] + 0.2  # an induction head formed between them
    curve = [entry for entry in card.history if "text_induction_score" in entry]
    assert len(curve) >= 5 and all("text_previous_token_score" in entry for entry in curve)
    assert curve[-1]["text_previous_token_score"] > curve[0]["text_previous_token_score"] + 0.1


def documented_continuations() -> list[tuple[str, str]]:
    """The (prompt, continuation) rows of docs/english-lm.md's table, as `python -m transformer.evaluate
    checkpoints/english-lm` prints them."""
    section = DOC.read_text(encoding="utf-8").split(PROMPTS_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (.*?) \| (.*?) \|$", section, flags=re.MULTILINE)
    return [(prompt.replace("\\|", "|"), text.replace("\\|", "|")) for prompt, text in rows
            if prompt not in ("prompt", "---")]


def test_the_docs_show_what_it_writes_for_ten_everyday_prompts(english_lm):
    shown = documented_continuations()
    assert len(shown) == 10, (f"docs/english-lm.md's table holds {len(shown)} rows: fill it with what `python -m "
                              "transformer.evaluate checkpoints/english-lm` prints")
    prompts = [prompt for prompt, _ in shown]
    assert prompts == english_lm.card.examples  # the app offers the same prompts
    assert [(prompt, text.strip()) for prompt, text in continuations(english_lm, prompts)] == \
        [(prompt, text.strip()) for prompt, text in shown]


def test_the_heads_views_corpus_run_reads_its_held_out_sentences(english_lm):
    """Heads → "Run over the corpus" on a language model: its held-out sentences, each one text as it reads them."""
    from transformer.analysis.corpus_heads import corpus_pairs, corpus_unavailable

    corpora(english_lm.card)  # skipped without the corpus, failed where CI is set
    assert corpus_unavailable(english_lm) == ""
    pairs = list(corpus_pairs(english_lm, 5))
    held_out = [sentence for sentences in lm_dev_sentences(english_lm.card.training).values() for sentence in sentences]
    assert pairs == [("", sentence) for sentence in held_out[:5]]
