"""The shipped evaluation script: fresh inputs in every case, floors checked, figures recorded in the card."""
from __future__ import annotations

import json
import shutil

from transformer import load_checkpoint
from transformer.data.tasks import DATE_FORMATS, generate
from transformer.training.evaluate import FLOORS, evaluate, fresh_examples, main, record, translate_texts


def test_fresh_examples_cover_every_case_and_are_unseen():
    reverse = fresh_examples("reverse", per_case=3)
    assert [case for case, _, _ in reverse[::3]] == [f"length {n}" for n in range(1, 31)]
    assert all(len(source) == int(case.split()[1]) and target == source[::-1] for case, source, target in reverse)
    dates = fresh_examples("dates", per_case=2)
    assert sorted({case for case, _, _ in dates}) == sorted(DATE_FORMATS)
    trained_on = {source for source, _ in generate("reverse", 20_000, seed=0)}
    long_enough = {source for _, source, _ in reverse if len(source) >= 6}  # short ones repeat by chance
    assert not long_enough & trained_on


def translate_alone(checkpoint, text: str) -> str:
    """One text in a batch of its own, so that no batching or ordering can mix it up with another."""
    return translate_texts(checkpoint.model, checkpoint.src_tokenizer, checkpoint.tgt_tokenizer, [text])[0]


def test_translate_texts_gives_each_output_in_its_input_s_place(tiny_checkpoint):
    checkpoint = load_checkpoint(tiny_checkpoint)
    texts = ["q1w2e3", "a", "7k4", "zz", "m0nb5", "xy", "b"]  # batched by length inside, in no such order here
    outputs = translate_texts(checkpoint.model, checkpoint.src_tokenizer, checkpoint.tgt_tokenizer, texts,
                              batch_size=3)
    assert outputs == [translate_alone(checkpoint, text) for text in texts]
    assert sum(output == text[::-1] for output, text in zip(outputs, texts)) >= 5  # and it really reverses them


def test_evaluate_scores_each_case_against_a_hand_checked_model(tiny_checkpoint):
    checkpoint = load_checkpoint(tiny_checkpoint)
    cases = fresh_examples("reverse", per_case=2)[:16]  # lengths 1-8: some right, some wrong
    result = evaluate(checkpoint, cases)
    right_per_case = {}
    for case, source, target in cases:
        right_per_case.setdefault(case, []).append(translate_alone(checkpoint, source) == target)
    assert 0 < sum(map(sum, right_per_case.values())) < len(cases)  # both kinds, or the scores prove little
    assert result["per_case"] == {case: sum(right) / len(right) for case, right in right_per_case.items()}
    assert result["worst"] == min(result["per_case"].values())
    assert result["meets_floor"] == (result["worst"] >= FLOORS["reverse"])


def test_record_writes_the_figures_into_the_card(tiny_checkpoint, tmp_path, capsys):
    folder = shutil.copytree(tiny_checkpoint, tmp_path / "copy")
    main([str(folder), "--per-case", "1", "--record"])
    printed = capsys.readouterr().out
    assert "length 30" in printed and "the floor of 0.995" in printed
    card = json.loads((folder / "card.json").read_text())
    assert card["metrics"]["evaluated_inputs"] == 30
    assert 0 <= card["metrics"]["fresh_exact_match_worst_case"] <= card["metrics"]["fresh_exact_match"] <= 1
    assert "--per-case 1 --record" in card["training"]["evaluated_by"]
    load_checkpoint(folder)  # the card stays valid


def test_a_translation_record_keeps_the_decoding_it_was_measured_with(tiny_checkpoint, tmp_path):
    """The card's BLEU and the app's default decoding are one setting: every penalty the score was measured with."""
    folder = shutil.copytree(tiny_checkpoint, tmp_path / "copy")
    result = {"metric": "bleu", "overall": 45.1, "chrf": 62.8, "per_case": {"1-5 words": 45.0}, "worst": 45.1,
              "inputs": 3, "beam_size": 4, "length_penalty": 1.2, "coverage_penalty": 0.1}
    record(load_checkpoint(folder), result, "python -m transformer.evaluate copy --coverage-penalty 0.1 --record")
    card = load_checkpoint(folder).card
    assert card.decoding == {"beam_size": 4, "length_penalty": 1.2, "coverage_penalty": 0.1}
    assert card.metrics["dev_bleu"] == 45.1 and card.metrics["dev_bleu_1-5_words"] == 45.0


def test_joined_inputs_are_bucketed_up_to_forty_words_by_hand_counted_lengths():
    from transformer.training.evaluate import JOINED_BUCKETS, length_bucket

    words = {1: "1-5", 5: "1-5", 6: "6-10", 10: "6-10", 11: "11-15", 15: "11-15", 16: "16-25", 25: "16-25",
             26: "26-35", 35: "26-35", 36: "36-40", 40: "36-40", 41: "41+", 60: "41+"}
    for count, bucket in words.items():
        assert length_bucket(" ".join(["w"] * count), JOINED_BUCKETS) == f"{bucket} words", count
    # The lecturer's sentence: 27 words (commas stick to their words; a word is a run between spaces).
    lecturer = ("When the old fisherman finally returned to the village after the storm, his neighbours, who had "
                "feared the worst, ran to the harbour to greet him.")
    assert length_bucket(lecturer, JOINED_BUCKETS) == "26-35 words" and length_bucket(lecturer) == "26+ words"


def test_a_dev_pair_of_twelve_words_or_more_also_counts_in_its_corpus_s_twelve_plus_row():
    from transformer.training.evaluate import case_groups

    eleven, twelve = " ".join(["w"] * 11), "Tom, who lives next door, has two old bikes in his garage."
    assert len(twelve.split()) == 12
    assert case_groups("tatoeba, 11-15 words", eleven) == ["tatoeba, 11-15 words", "tatoeba", "11-15 words"]
    assert case_groups("tatoeba, 11-15 words", twelve) == ["tatoeba, 11-15 words", "tatoeba", "11-15 words",
                                                           "tatoeba, 12+ words", "12+ words"]
    # Inputs made of dev pairs stand apart, in their own case only, however long.
    assert case_groups("chained, 26-35 words", twelve * 3) == ["chained, 26-35 words"]


def test_chained_cases_fill_the_lecturer_s_buckets_from_dev_pairs():
    from transformer.training.evaluate import chained_cases

    dev = [(f"tatoeba, {n}", f"Tom saw {n} birds in the old park today.", f"Tom a vu {n} oiseaux.")
           for n in range(60)]
    chained = chained_cases(dev, 100)
    assert len(chained) == 100 and chained == chained_cases(dev, 100)  # the same inputs every time
    for case, source, target in chained:
        words = len(source.split())
        assert case == ("chained, 26-35 words" if words <= 35 else "chained, 36-40 words")
        assert 26 <= words <= 40 and target.count("oiseaux") == source.count("birds")
    assert {case for case, _, _ in chained} == {"chained, 26-35 words", "chained, 36-40 words"}


def test_a_longer_max_len_reads_a_long_input_whole_with_the_same_weights():
    import pytest
    import torch

    from transformer.training.evaluate import with_max_len

    checkpoint = load_checkpoint("checkpoints/eng-fra")
    longer = with_max_len(checkpoint.model, 128)
    assert longer.config.max_len == 128 and checkpoint.model.config.max_len == 64  # the checkpoint's own is kept
    short, long, tgt = torch.randint(4, 4000, (1, 12)), torch.randint(4, 4000, (1, 100)), torch.tensor([[2, 5, 9]])
    with torch.no_grad():
        assert torch.equal(longer(short, tgt), checkpoint.model(short, tgt))  # the same weights
        with pytest.raises(ValueError, match="max_len"):
            checkpoint.model(long, tgt)
        assert longer(long, tgt).shape == (1, 3, 4000)


def test_a_subset_or_a_longer_max_len_is_never_recorded_as_the_card_s_figures(tiny_checkpoint, capsys):
    import pytest

    for flags in (["--min-words", "12"], ["--max-len", "128"]):
        with pytest.raises(SystemExit):
            main([str(tiny_checkpoint), "--record", *flags])
        assert "without --min-words or --max-len" in capsys.readouterr().err
