"""Continuing a checkpoint (--init-from), snapshots chosen by what they show, and long inputs made of joined pairs."""
import json
import random

import torch

from helpers import TINY_TRAINING
from transformer.data.recipes import (
    CLAUSE_JOINS,
    clause_joined_pairs,
    joined_pairs,
    long_joined_pairs,
    phrase_joined_pairs,
    timed_phrase_pairs,
    trailing_phrases,
    trailing_times,
)
from transformer.inference.translation import load_checkpoint
from transformer.training.evaluate import length_bucket
from transformer.training.train import Progress, main, select_snapshots


def test_init_from_starts_at_the_checkpoint_and_carries_its_history(tmp_path):
    every_ten = TINY_TRAINING + ["--eval-every", "10"]
    main(every_ten + ["--out", str(tmp_path / "first"), "--steps", "20", "--snapshots", "0,0.5",
                      "--description", "Reverses strings.", "--data-credit", "Made here.", "--examples", "abc", "de"])
    first = json.loads((tmp_path / "first" / "card.json").read_text())
    first["decoding"] = {"beam_size": 3, "length_penalty": 1.2}  # as `transformer.training.evaluate --record` writes it
    (tmp_path / "first" / "card.json").write_text(json.dumps(first))
    continued = main(every_ten + ["--out", str(tmp_path / "second"), "--init-from", str(tmp_path / "first"),
                                      "--steps", "20", "--snapshots", "0", "--d-ff", "8"])
    card = json.loads((tmp_path / "second" / "card.json").read_text())
    steps = [entry["step"] for entry in card["history"]]
    assert steps == [10, 20, 30, 40]  # the first run's evaluations, then ours counted after its 20 steps
    assert card["history"][:2] == first["history"]
    assert [s["step"] for s in card["snapshots"]] == [0, 10, 20]  # the first run's two, then our start (step 20)
    for snapshot in load_checkpoint(tmp_path / "second").snapshot_names():
        assert (tmp_path / "second" / "snapshots" / f"{snapshot}.safetensors").is_file()
    start = load_checkpoint(tmp_path / "second").load_snapshot("step_000020").state_dict()  # fp16 copy of our start
    inherited = load_checkpoint(tmp_path / "first").model.state_dict()
    best_of_first = max(first["history"], key=lambda e: e["dev_metric"])["step"]
    if best_of_first == 20:  # the final weights of the first run is its last state exactly when that was its best
        torch.testing.assert_close(start["generator.bias"], inherited["generator.bias"], atol=1e-3, rtol=1e-3)
    assert not torch.equal(continued.generator.bias.detach(), inherited["generator.bias"])  # and it trained on
    assert (tmp_path / "second" / "src.model").read_bytes() == (tmp_path / "first" / "src.model").read_bytes()
    assert card["training_command"].splitlines()[0] == first["training_command"]
    assert "--init-from" in card["training_command"].splitlines()[1]
    assert card["training"]["d_ff"] == first["training"]["d_ff"] != 8  # the architecture it continued, not the flag
    assert card["decoding"] == first["decoding"]  # the app decodes the continued model as it did the first
    # and shows it as the first: the card's words are kept where the continuation gives no flag for them
    assert (card["description"], card["data"], card["examples"]) == ("Reverses strings.", "Made here.", ["abc", "de"])


def test_select_snapshots_keeps_first_each_threshold_and_last_before_best(tmp_path):
    metrics = {0: 0.0, 100: 3.0, 200: 7.0, 300: 12.0, 400: 25.0, 500: 30.0, 600: 31.0, 700: 29.0}
    progress = Progress(history=[{"step": s, "dev_metric": m} for s, m in metrics.items()],
                        snapshots=[{"name": f"step_{s:06d}", "step": s, "dev_metric": m} for s, m in metrics.items()])
    for snapshot in progress.snapshots:
        (tmp_path / f"{snapshot['name']}.safetensors").write_bytes(b"x")
    select_snapshots(progress, [5, 20], tmp_path, final_step=600)
    kept = [s["step"] for s in progress.snapshots]
    assert kept == [0, 200, 400, 500]  # first state, first > 5, first > 20, last before the final weights (600)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"step_{s:06d}.safetensors" for s in kept]


def test_keep_last_gives_the_checkpoint_the_last_state_not_the_best(tmp_path):
    """--keep last: the final weights are the state after the last step (a cool-down's end) even where an earlier quick
    evaluation scored higher, and the last snapshot kept is the one before it."""
    trained = main(TINY_TRAINING + ["--out", str(tmp_path), "--steps", "30", "--eval-every", "10", "--cooldown", "0.5",
                                    "--snapshot-metrics", "0.5", "--keep", "last"])
    card = json.loads((tmp_path / "card.json").read_text())
    assert [entry["step"] for entry in card["history"]] == [10, 20, 30]
    for name, tensor in load_checkpoint(tmp_path).model.state_dict().items():
        assert torch.equal(tensor, trained.state_dict()[name]), name
    assert max(s["step"] for s in card["snapshots"]) == 20


def test_joined_pairs_join_both_sides_in_the_same_order():
    pairs = [(f"s{i}", f"t{i}") for i in range(10)]
    joined = joined_pairs(pairs, 50, random.Random(0))
    assert len(joined) == 50
    for source, target in joined:
        parts = source.split()
        assert 2 <= len(parts) <= 3 and len(set(parts)) == len(parts)
        assert target.split() == [part.replace("s", "t") for part in parts]


def test_clause_joined_pairs_make_one_sentence_of_two_statements():
    pairs = [("I am cold.", "J'ai froid."), ("He is tired.", "Il est fatigué."), ("Tom is here.", "Tom est ici."),
             ("Yes, he is.", "Si, il l'est."), ("Is he here?", "Est-il ici ?"), ("Run!", "Cours !")]
    # Each statement as the second clause: a word the corpus has in lower case inside a sentence is lower-cased
    # ("he", "il"; "si" is not: it only starts one); names and "I" keep their capitals.
    as_second = {"I am cold.": ("I am cold", "J'ai froid"), "He is tired.": ("he is tired", "il est fatigué"),
                 "Tom is here.": ("Tom is here", "Tom est ici"), "Yes, he is.": ("Yes, he is", "Si, il l'est")}
    joined = clause_joined_pairs(pairs, 200, random.Random(0))
    assert len(joined) == 200
    seen = set()
    for source, target in joined:
        matches = [(english, french, first, second)
                   for english, french in CLAUSE_JOINS for first in as_second for second in as_second
                   if first != second and source == f"{first[:-1]}{english} {as_second[second][0]}."]
        assert len(matches) == 1, source  # two different statements, one conjunction, no question or exclamation
        english, french, first, second = matches[0]
        expected = f"{dict(pairs)[first][:-1]}{french} {as_second[second][1]}."
        assert target == expected.replace("que il", "qu'il")  # "que" elided before a vowel, and only then
        seen.add(english)
    assert seen == {english for english, _ in CLAUSE_JOINS}
    assert any(target.endswith(" parce qu'il est fatigué.") for _, target in joined)
    assert any(target.endswith(" parce que Tom est ici.") for _, target in joined)


def test_trailing_phrases_keep_the_french_ending_that_most_translations_share():
    pairs = [
        # "on the table": three statements, two translations end "sur la table", one "sur cette table" (2 of 3 >= 0.6)
        ("The book is on the table.", "Le livre est sur la table."),
        ("Put it on the table.", "Pose-le sur la table !"),  # counted here, but no statement to extend (the "!")
        ("The cat sleeps on the table.", "Le chat dort sur cette table."),
        # "in the car": "dans la voiture" and "en voiture", neither in 0.6 of them, and the shared "voiture" is no
        # phrase (it starts with no preposition): left out
        ("He is in the car.", "Il est dans la voiture."),
        ("We went in the car.", "Nous sommes allés en voiture."),
        ("I slept in the car.", "J'ai dormi dans le train."),
        # "near my house": "chez moi" and "près de chez moi" both start with a preposition and end all three; the
        # longer is the phrase
        ("I live near my house.", "J'habite près de chez moi."),
        ("She works near my house.", "Elle travaille près de chez moi."),
        ("We met near my house.", "On s'est vus près de chez moi."),
        # "at home": no determiner, no phrase; "with a friend": two statements only (least 3); a question: not one
        ("I am at home.", "Je suis à la maison."),
        ("I came with a friend.", "Je suis venu avec un ami."), ("He left with a friend.", "Il est parti avec un ami."),
        ("Is it on the table?", "Est-ce sur la table ?"),
    ]
    assert trailing_phrases(pairs) == {"on the table": "sur la table", "near my house": "près de chez moi"}
    statements = [("I am cold.", "J'ai froid."), ("Tom sleeps.", "Tom dort."), ("Do you?", "Et toi ?")]
    joined = phrase_joined_pairs(pairs + statements, 300, random.Random(0))
    made = {(f"{source[:-1]} {english}.", f"{target[:-1]} {french}.")
            for source, target in pairs + statements if source.endswith(".") and target.endswith(".")
            for english, french in trailing_phrases(pairs).items()}
    assert set(joined) <= made and len(set(joined)) > 20
    assert ("I am cold near my house.", "J'ai froid près de chez moi.") in joined
    assert not any(source.startswith("Do you") or source.startswith("Is it") for source, _ in joined)
    assert phrase_joined_pairs(statements, 5, random.Random(0)) == []  # no phrase in the corpus: nothing to add


def test_long_joined_pairs_join_two_statements_that_each_end_in_a_phrase():
    # "on the table" ends three English statements (whose French, ending "!", makes them no statements to extend).
    phrase_pairs = [("Put it on the table.", "Pose-le sur la table !"),
                    ("Leave it on the table.", "Laisse-le sur la table !"),
                    ("Keep it on the table.", "Garde-le sur la table !")]
    statements = [("I am cold.", "J'ai froid."), ("He is tired.", "Il est fatigué."), ("Tom is here.", "Tom est ici.")]
    pairs = phrase_pairs + statements + [("Yes, he is.", "Oui, il l'est !")]  # "he" and "il" inside a sentence
    # Each statement with the phrase on both sides, as the first clause and as the second: lower-cased there only
    # where the corpus has the word in lower case inside a sentence, so "I", "J'ai" and "Tom" keep their capitals.
    firsts = [(f"{english[:-1]} on the table", f"{french[:-1]} sur la table") for english, french in statements]
    seconds = [(english.replace("He ", "he "), french.replace("Il ", "il ")) for english, french in firsts]
    made = {(f"{a}{english} {b}.", f"{fa}{french} {fb}.".replace("que il", "qu'il"))
            for a, fa in firsts for b, fb in seconds for english, french in CLAUSE_JOINS}
    joined = long_joined_pairs(pairs, 300, random.Random(0))
    assert len(joined) == 300 and set(joined) <= made and len(set(joined)) > 20
    assert ("I am cold on the table because he is tired on the table.",
            "J'ai froid sur la table parce qu'il est fatigué sur la table.") in joined
    assert long_joined_pairs(statements, 5, random.Random(0)) == []  # no phrase in the corpus: nothing to add


def test_timed_phrase_pairs_put_a_place_phrase_before_the_time_phrase_a_statement_ends_in():
    phrase_pairs = [("Put it on the table.", "Pose-le sur la table !"),  # "on the table", and no statement to extend
                    ("Leave it on the table.", "Laisse-le sur la table !"),
                    ("Keep it on the table.", "Garde-le sur la table !")]
    timed = [("I saw him yesterday.", "Je l'ai vu hier."), ("Tom left yesterday.", "Tom est parti hier."),
             ("We slept all day.", "Nous avons dormi toute la journée."),
             ("He worked all day.", "Il a travaillé toute la journée."),
             ("She read all day.", "Elle a lu toute la journée.")]
    left_out = [
        # "yesterday" with a comma before it on the French side: counted for the table, but no place for a phrase
        ("It rained yesterday.", "Il a plu, hier."),
        # "last night": "hier soir" and "la nuit dernière", neither in 0.6 of the translations
        ("I was ill last night.", "J'étais malade hier soir."), ("He came last night.", "Il est venu hier soir."),
        ("It snowed last night.", "Il a neigé la nuit dernière."),
        ("I ran last night.", "J'ai couru la nuit dernière."),
        # "all afternoon": its translations share only "l'après-midi", one word for two ("toute" would be left behind)
        ("I slept all afternoon.", "J'ai dormi tout l'après-midi."),
        ("I ran all afternoon.", "J'ai couru tout l'après-midi."),
        ("I sang all afternoon.", "J'ai chanté toute l'après-midi."),
        ("I ate all afternoon.", "J'ai mangé toute l'après-midi."),
        # "tomorrow": two statements only (least 3)
        ("I leave tomorrow.", "Je pars demain."), ("He comes tomorrow.", "Il vient demain.")]
    pairs = phrase_pairs + timed + left_out
    assert trailing_times(pairs) == {"yesterday": "hier", "all day": "toute la journée"}
    made = {("I saw him on the table yesterday.", "Je l'ai vu sur la table hier."),
            ("Tom left on the table yesterday.", "Tom est parti sur la table hier."),
            ("We slept on the table all day.", "Nous avons dormi sur la table toute la journée."),
            ("He worked on the table all day.", "Il a travaillé sur la table toute la journée."),
            ("She read on the table all day.", "Elle a lu sur la table toute la journée.")}
    joined = timed_phrase_pairs(pairs, 100, random.Random(0))
    assert len(joined) == 100 and set(joined) == made
    assert timed_phrase_pairs(timed, 5, random.Random(0)) == []  # no place phrase in the corpus: nothing to add


def test_length_buckets():
    assert [length_bucket(" ".join("w" * n)) for n in (1, 5, 6, 10, 11, 15, 16, 25, 26, 47)] == [
        "1-5 words", "1-5 words", "6-10 words", "6-10 words", "11-15 words", "11-15 words", "16-25 words",
        "16-25 words", "26+ words", "26+ words"]
