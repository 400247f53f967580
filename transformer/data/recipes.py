"""eng-fra's extra training pairs: inputs longer than the corpus's short sentences, made by joining its pairs or adding
English/French phrases read off it (`python -m transformer.train --concat ...`). The generic reading, splitting and
batching of a corpus is transformer/data/corpora.py's.
"""
from __future__ import annotations

import random
import re
from collections.abc import Sequence


def joined_pairs(pairs: Sequence[tuple[str, str]], count: int, rng: random.Random) -> list[tuple[str, str]]:
    """`count` pairs, each 2-3 random pairs of `pairs` joined by a space on both sides: inputs longer than a corpus of
    short sentences holds, whose translation is still known (each part in turn)."""
    return [tuple(" ".join(side) for side in zip(*rng.sample(pairs, rng.choice((2, 3))))) for _ in range(count)]


def _statements(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs whose two sides end in ".": statements, which a conjunction or a phrase may extend."""
    return [pair for pair in pairs if pair[0].endswith(".") and pair[1].endswith(".")]


# Conjunctions that make one sentence of two statements, English and French. The joined statements are unrelated,
# but the shape is what the corpus lacks: no English sentence in it is over 9 words, so a model trained on it alone
# ends a long sentence after its first clause.
CLAUSE_JOINS = ((", and", ", et"), (", but", ", mais"), (" because", " parce que"), (" when", " quand"),
                (", so", ", donc"))
_ELIDED_QUE = re.compile(r"\bque ([aeiouyàâéèêîôûAEIOUYÀÂÉÈÊÎÔÛ])")  # "parce que il" is written "parce qu'il"


def _inside_words(pairs: Sequence[tuple[str, str]]) -> set[str]:
    """The words that come after a sentence's first word in `pairs`, either side: a word found here in lower case
    may be lower-cased where a joined sentence puts it second."""
    return {word for pair in pairs for side in pair for word in side.split()[1:]}


def clause_joined_pairs(pairs: Sequence[tuple[str, str]], count: int, rng: random.Random,
                        statements: Sequence[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """`count` pairs, each two statements of `pairs` (both sides ending in ".") made one sentence with a conjunction
    of CLAUSE_JOINS: "I am cold." + "He is tired." -> "I am cold because he is tired." on both sides. The second
    statement's first word is lower-cased only if the corpus has it in lower case inside a sentence, so "Tom" and
    "I" keep their capitals. `statements`: join these instead (e.g. statements already extended by a phrase)."""
    statements = _statements(pairs) if statements is None else statements
    inside = _inside_words(pairs)
    joined = []
    for _ in range(count):
        first, then = rng.sample(statements, 2)
        joined.append(_clause_join(first, then, rng.choice(CLAUSE_JOINS), inside))
    return joined


def _clause_join(first: tuple[str, str], then: tuple[str, str], conjunction: tuple[str, str], inside: set[str]
                 ) -> tuple[str, str]:
    """Statement `first` and `then` made one sentence with `conjunction` (English, French) on both sides: `first`'s
    full stop dropped, `then`'s first word lower-cased if the corpus has it in lower case inside a sentence (the
    words of `inside`), "que" elided before a vowel."""
    def second(sentence: str) -> str:
        word, _, rest = sentence.partition(" ")
        lower = word[:1].lower() + word[1:]
        return " ".join(part for part in ((lower if lower in inside else word), rest) if part)

    (source_a, target_a), (source_b, target_b) = first, then
    english, french = conjunction
    return (f"{source_a[:-1]}{english} {second(source_b)}",
            _ELIDED_QUE.sub(r"qu'\1", f"{target_a[:-1]}{french} {second(target_b)}"))


# A place or company phrase that ends an English statement ("... on the table."), and the French words that may
# begin its translation. Appended to other statements, the phrases teach what the corpus's short sentences rarely
# show: a sentence goes on after its object ("My brother works in a hospital" + "near the station"), and the phrase
# after it must be translated too, not dropped.
_TRAILING_PHRASE = re.compile(
    r" ((?:near|in|at|on|under|behind|with) (?:the|a|an|my|his|her|our|their|your) [a-z]+)\.$")
_FRENCH_PHRASE_STARTS = frozenset({"près", "dans", "sur", "sous", "à", "au", "aux", "derrière", "avec", "chez", "en"})


def _translations_by_phrase(pairs: Sequence[tuple[str, str]], phrase: re.Pattern, least: int
                             ) -> dict[str, list[list[str]]]:
    """Each phrase `phrase` finds at the end of at least `least` English sides -> the words of their French sides,
    end punctuation stripped."""
    translations: dict[str, list[list[str]]] = {}
    for source, target in pairs:
        found = phrase.search(source)
        if found:
            translations.setdefault(found.group(1), []).append(target.rstrip(" .!?").split())
    return {found: targets for found, targets in translations.items() if len(targets) >= least}


def trailing_phrases(pairs: Sequence[tuple[str, str]], least: int = 3, share: float = 0.6) -> dict[str, str]:
    """English phrase -> its French ending, read off the corpus: for each phrase that ends at least `least` English
    statements, the French ending of 2-5 words, starting with a preposition, that ends at least `share` of their
    translations (the most common; the longest of equals). "on the table" ends 32 statements, and 31 of their
    translations end "sur la table": the pair is kept. A phrase whose translations disagree is left out."""
    table = {}
    for phrase, targets in _translations_by_phrase(pairs, _TRAILING_PHRASE, least).items():
        counts: dict[str, int] = {}
        for words in targets:
            for size in range(2, 6):
                if len(words) > size and words[-size] in _FRENCH_PHRASE_STARTS:
                    ending = " ".join(words[-size:])
                    counts[ending] = counts.get(ending, 0) + 1
        shared = [ending for ending, count in counts.items() if count >= share * len(targets)]
        if shared:
            table[phrase] = max(shared, key=lambda ending: (counts[ending], len(ending)))
    return table


def phrase_joined_pairs(pairs: Sequence[tuple[str, str]], count: int, rng: random.Random) -> list[tuple[str, str]]:
    """`count` pairs, each a statement of `pairs` (both sides ending in ".") with a phrase of `trailing_phrases`
    appended on both sides: "He bought a red car." + "near the station" -> "He bought a red car near the station." /
    "Il a acheté une voiture rouge près de la gare." """
    statements = _statements(pairs)
    phrases = sorted(trailing_phrases(pairs).items())
    if not phrases:
        return []
    joined = []
    for _ in range(count):
        (source, target), (english, french) = rng.choice(statements), rng.choice(phrases)
        joined.append((f"{source[:-1]} {english}.", f"{target[:-1]} {french}."))
    return joined


def long_joined_pairs(pairs: Sequence[tuple[str, str]], count: int, rng: random.Random) -> list[tuple[str, str]]:
    """`count` pairs, each two statements of `pairs` that each got a phrase of `trailing_phrases`, joined by a
    conjunction of CLAUSE_JOINS: "He bought a red car near the station, but I am cold in the kitchen." / "Il a acheté
    une voiture rouge près de la gare, mais j'ai froid dans la cuisine." 12-24 words in one sentence: the length of
    what a class types, where the corpus stops at 9 words and the other extra pairs at about 18."""
    extended = phrase_joined_pairs(pairs, 2 * count, rng)
    return clause_joined_pairs(pairs, count, rng, statements=extended) if extended else []


# A time phrase that ends an English statement ("... yesterday.", "... this morning."). A place phrase put before it
# makes the shape a model of short sentences drops the end of: two phrases after the object ("Tom left his umbrella on
# the train this morning"). The statements that already end in a time phrase have the tense it needs.
_TRAILING_TIME = re.compile(r" ((?:this|last|next|all|every) (?:morning|afternoon|evening|night|day|week|weekend|"
                            r"month|year|summer|winter)|yesterday|tomorrow|today|tonight)\.$")


def trailing_times(pairs: Sequence[tuple[str, str]], least: int = 3, share: float = 0.6) -> dict[str, str]:
    """English time phrase -> its French ending, read off the corpus: for each phrase that ends at least `least`
    English statements, the longest French ending of 1-3 words, and of no fewer words than the phrase, that ends at
    least `share` of their translations ("all day" -> "toute la journée", not "journée"). "last night", whose
    translations end "la nuit dernière" or "hier soir", is left out; so is "all afternoon", whose translations share
    only "l'après-midi" ("toute" or "tout" before it would be left behind)."""
    table = {}
    for phrase, targets in _translations_by_phrase(_statements(pairs), _TRAILING_TIME, least).items():
        for size in range(3, len(phrase.split()) - 1, -1):
            counts: dict[str, int] = {}
            for words in targets:
                if len(words) > size:
                    ending = " ".join(words[-size:])
                    counts[ending] = counts.get(ending, 0) + 1
            ending, count = max(counts.items(), key=lambda item: item[1], default=("", 0))
            if count >= share * len(targets):
                table[phrase] = ending
                break
    return table


def timed_phrase_pairs(pairs: Sequence[tuple[str, str]], count: int, rng: random.Random) -> list[tuple[str, str]]:
    """`count` pairs, each a statement of `pairs` that ends in a time phrase of `trailing_times`, with a phrase of
    `trailing_phrases` put before the time phrase on both sides: "I saw him yesterday." + "near the station" -> "I saw
    him near the station yesterday." / "Je l'ai vu près de la gare hier." """
    times = trailing_times(pairs)
    timed = []
    for source, target in _statements(pairs):
        found = _TRAILING_TIME.search(source)
        french_time = times.get(found.group(1), "") if found else ""
        if french_time and target.endswith(f" {french_time}.") and not target.endswith(f", {french_time}."):
            timed.append((source, target, found.group(1), french_time))
    phrases = sorted(trailing_phrases(pairs).items())
    if not timed or not phrases:
        return []
    joined = []
    for _ in range(count):
        (source, target, english_time, french_time), (english, french) = rng.choice(timed), rng.choice(phrases)
        joined.append((f"{source[:-len(english_time) - 2]} {english} {english_time}.",  # " yesterday." replaced
                       f"{target[:-len(french_time) - 2]} {french} {french_time}."))
    return joined


# What the chained pairs aim at: a source of 26-40 words, the length of what a lecturer types (a long sentence of
# subordinate and relative clauses, or two or three sentences), where the corpora have few pairs past 20 words.
CHAIN_WORDS = (26, 40)
CHAIN_PARTS = (2, 3, 4)
CHAIN_LEAST_PART = 3  # words of the shortest pair a chain takes: "Run!" would add a sentence, not a clause
CHAIN_CONJUNCTIONS = 0.5  # chance that two statements are joined by a conjunction, not as two sentences
_SENTENCE_ENDS = (".", "!", "?")


def chained_pairs(pairs: Sequence[tuple[str, str]], count: int, rng: random.Random,
                  words: tuple[int, int] = CHAIN_WORDS) -> list[tuple[str, str]]:
    """`count` pairs (fewer only where `pairs` cannot make them), each 2-4 different pairs of `pairs` (sources of at
    least CHAIN_LEAST_PART words, both sides ending in ".", "!" or "?") joined in the same order on both sides into a
    source of `words` words (from, to), conjunctions counted: a length drawn evenly, cut at random into the parts'
    lengths, each part a random pair of the nearest length the corpus has. Between two statements, a conjunction
    of CLAUSE_JOINS with chance CHAIN_CONJUNCTIONS (as --concat-clauses joins two), else a space (as --concat joins
    them): "A man is painting a fence. The children are playing in the garden, but it is raining today." Random,
    not consecutive, pairs: Tatoeba's order is by length, its neighbours near-copies ("I'm cold." / "I am cold."),
    and Multi30k's descriptions are of unrelated images."""
    if count <= 0:
        return []
    ended = [pair for pair in pairs if pair[0].endswith(_SENTENCE_ENDS) and pair[1].endswith(_SENTENCE_ENDS)
             and len(pair[0].split()) >= CHAIN_LEAST_PART]
    by_length: dict[int, list[tuple[str, str]]] = {}
    for pair in ended:
        by_length.setdefault(len(pair[0].split()), []).append(pair)
    if len(ended) < 2:
        return []
    inside, (least, most) = _inside_words(pairs), words
    joined: list[tuple[str, str]] = []
    for _ in range(20 * count):  # bounded: a corpus of too few lengths makes fewer
        if len(joined) == count:
            break
        parts = rng.choice([n for n in CHAIN_PARTS if n * CHAIN_LEAST_PART <= most])
        total = rng.randint(max(least, parts * CHAIN_LEAST_PART), most)
        cuts = sorted(rng.randint(0, total - parts * CHAIN_LEAST_PART) for _ in range(parts - 1))
        spans = [b - a + CHAIN_LEAST_PART for a, b in zip([0, *cuts], [*cuts, total - parts * CHAIN_LEAST_PART])]
        chain: list[tuple[str, str]] = []
        for wanted in spans:
            for length in sorted(by_length, key=lambda length: (abs(length - wanted), length)):
                free = [pair for pair in rng.sample(by_length[length], min(3, len(by_length[length])))
                        if pair[0] not in {source for source, _ in chain}]  # never a sentence twice in one input
                if free:
                    chain.append(free[0])
                    break
        if len(chain) < parts:
            continue
        made = chain[0]
        for part in chain[1:]:
            if made[0].endswith(".") and made[1].endswith(".") and part[0].endswith(".") and part[1].endswith(".") \
                    and rng.random() < CHAIN_CONJUNCTIONS:
                made = _clause_join(made, part, rng.choice(CLAUSE_JOINS), inside)
            else:
                made = (f"{made[0]} {part[0]}", f"{made[1]} {part[1]}")
        if least <= len(made[0].split()) <= most:  # (a conjunction adds a word)
            joined.append(made)
    return joined


# The extra pairs `python -m transformer.train` can add, by the training setting that gives their share (--concat,
# --concat-clauses, ...): inputs longer than the corpus's sentences, all made by joining them or adding to them.
JOINED_PAIRS = {"concat": joined_pairs, "concat_clauses": clause_joined_pairs, "concat_phrases": phrase_joined_pairs,
                "concat_long": long_joined_pairs, "concat_timed": timed_phrase_pairs, "concat_chains": chained_pairs}
