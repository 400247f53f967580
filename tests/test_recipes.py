"""The chained pairs (--concat-chains): 2-4 corpus pairs joined into one long input, both sides the same way."""
import random
import re

from transformer.data.recipes import CHAIN_WORDS, CLAUSE_JOINS, chained_pairs

# Each pair's sides carry its number, so a joined pair shows which pairs it joined and in what order.
SHORT = [(f"Tom saw {i} birds.", f"Tom a vu {i} oiseaux.") for i in range(40)]
LONG = [(f"The man who lives next door has {i} old bikes in his garage.",
         f"L'homme qui vit à côté a {i} vieux vélos dans son garage.") for i in range(40, 80)]
QUESTIONS = [(f"Where are the {i} cats?", f"Où sont les {i} chats ?") for i in range(80, 100)]
UNENDED = [(f"A dog runs {i} times", f"Un chien court {i} fois") for i in range(100, 110)]  # no full stop: left out
CORPUS = SHORT + LONG + QUESTIONS + UNENDED


def numbers(text: str) -> list[str]:
    return re.findall(r"\d+", text)


def test_chained_pairs_join_both_sides_the_same_way_within_the_words_aimed_at():
    joined = chained_pairs(CORPUS, 300, random.Random(0))
    assert len(joined) == 300
    least, most = CHAIN_WORDS
    parts_seen, conjunctions_seen, full_stops_seen = set(), set(), 0
    for source, target in joined:
        parts = numbers(source)
        assert numbers(target) == parts  # the same pairs, in the same order, on both sides
        assert 2 <= len(parts) <= 4 and len(set(parts)) == len(parts)  # no pair joined with itself
        assert all(int(part) < 100 for part in parts)  # no pair without a sentence's end
        assert least <= len(source.split()) <= most
        parts_seen.add(len(parts))
        for english, french in CLAUSE_JOINS:
            if english + " " in source:
                assert source.count(english + " ") == target.count(french + " ") or french == ", et"
                conjunctions_seen.add(english)
        full_stops_seen += source.count(". ")
    assert parts_seen == {2, 3, 4}
    assert conjunctions_seen == {english for english, _ in CLAUSE_JOINS} and full_stops_seen
    # A question is never the first clause of a conjunction: it keeps its question mark and a sentence follows.
    assert all(re.search(r"\? [A-Z]", source) or not source.count("?") or source.endswith("?") for source, _ in joined)


def test_a_conjunction_lowercases_the_second_statement_and_elides_que():
    pairs = [("I saw them near the big old station yesterday.", "Je les ai vus près de la grande vieille gare hier."),
             ("It rained all day long in the small town.", "Il a plu toute la journée dans la petite ville."),
             ("Tom was waiting for us at the station.", "Tom nous attendait à la gare."),
             ("When it snows, he stays at home.", "Quand il neige, il reste à la maison.")]  # "it", "il" inside
    joined = chained_pairs(pairs, 200, random.Random(1), words=(15, 30))
    assert any(" parce qu'il a plu" in target and " because it rained" in source for source, target in joined)
    assert any(", and Tom was waiting" in source and ", et Tom nous attendait" in target for source, target in joined)
    assert not any(" It rained" in source.replace(". It rained", "") for source, _ in joined)


def test_chained_pairs_are_seeded():
    assert chained_pairs(CORPUS, 50, random.Random(7)) == chained_pairs(CORPUS, 50, random.Random(7))
    assert chained_pairs(CORPUS, 50, random.Random(7)) != chained_pairs(CORPUS, 50, random.Random(8))


def test_a_corpus_that_cannot_reach_the_length_makes_fewer_and_never_loops():
    assert chained_pairs(SHORT[:2], 10, random.Random(0)) == []  # two 4-word pairs never make 26 words
    assert chained_pairs(UNENDED, 10, random.Random(0)) == []
    assert chained_pairs(CORPUS, 0, random.Random(0)) == []


def test_the_trainer_leaves_out_joined_pairs_longer_than_max_len_and_says_how_many():
    from transformer.io.text import source_ids, target_ids
    from transformer.io.tokenizer import Tokenizer
    from transformer.training.train import extra_pairs, parse_args

    src_tok, tgt_tok = (Tokenizer(f"checkpoints/eng-fra/{side}.model") for side in ("src", "tgt"))
    args = parse_args(["--task", "translate", "--data", "c.tsv", "--out", "x", "--concat-chains", "2",
                       "--max-len", "40"])
    made = chained_pairs(CORPUS, 2 * len(CORPUS), random.Random(args.seed))
    kept = extra_pairs(args, CORPUS, src_tok, tgt_tok)
    fits = [pair for pair in made if len(source_ids(src_tok, pair[0], 10**9)[0]) <= 40
            and len(target_ids(tgt_tok, pair[1], 10**9)) <= 40]
    assert kept == fits and 0 < len(kept) < len(made)  # the same seeded pairs, those over 40 pieces left out
    assert args.extra_pairs == {"concat_chains": {"kept": len(kept), "longer_than_max_len": len(made) - len(kept)}}


def test_the_words_a_conjunction_adds_count_towards_the_length():
    tens = [(f"My brother bought {i} red apples at the market today.", f"Mon frère a acheté {i} pommes rouges.")
            for i in range(30)]  # every chain is 30 or 40 words before its conjunctions
    joined = chained_pairs(tens, 200, random.Random(0))
    assert len(joined) == 200 and all(26 <= len(source.split()) <= 40 for source, _ in joined)
    assert any(len(source.split()) == 40 for source, _ in joined) and any("," in source for source, _ in joined)


def test_a_card_records_how_many_chained_pairs_a_run_trained_on(tmp_path):
    from helpers import TINY_TRAINING
    from transformer.inference.translation import load_checkpoint
    from transformer.training.train import main

    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{source}\t{target}\n" for source, target in CORPUS), encoding="utf-8")
    model = TINY_TRAINING[TINY_TRAINING.index("--d-model"):]  # the tiny model and its schedule, max_len 34
    main(["--task", "translate", "--data", str(data), "--vocab-size", "80", "--dev-fraction", "0.2", "--steps", "2",
          "--snapshots", "0", "--concat-chains", "0.5", "--out", str(tmp_path / "model")] + model)
    card = load_checkpoint(tmp_path / "model").card
    training = card.training
    assert training["concat_chains"] == 0.5 and "--concat-chains 0.5" in card.training_command
    made = training["extra_pairs"]["concat_chains"]
    assert made["kept"] + made["longer_than_max_len"] > 0 and made["longer_than_max_len"] > 0  # 26+ words > 34 pieces
