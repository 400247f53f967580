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
