"""Code-generated toy tasks: every example is (input text, output text), made from a seeded RNG.

- reverse: "attention42" -> "24noitnetta". The ideal attention map is an anti-diagonal.
- dates:   "Wednesday, March 3, 2021" -> "2021-03-03". Each output character has to look at one
           or two input tokens that move around with the format, which makes the attention readable.
- induction: a language model's text (no input): random characters with a stretch of them repeated, which only
           looking back at the first occurrence predicts. A decoder-only model learns it with a previous-token head
           and an induction head (Olsson et al. 2022), which appear suddenly during training.

The training command's other tasks read corpora (CORPUS_TASKS): translate, and lm, a language model of one side of a
corpus (transformer/data/corpora.py).
"""

from __future__ import annotations

import datetime
import random
import re
import string
import sys
import unicodedata
from collections.abc import Callable

from ..io.caveats import Caveat

FRESH_SEED = 20261122  # fresh test inputs: a seed no training run uses

# ----------------------------------------------------------------------------- reverse

REVERSE_ALPHABET = string.ascii_lowercase + string.digits
REVERSE_MAX_LENGTH = 30


REVERSE_RUNS_SHARE = 0.25  # training strings drawn from a few characters only (see reverse_training_example)


def reverse_example(rng: random.Random, length: int | None = None, alphabet: str = REVERSE_ALPHABET) -> tuple[str, str]:
    """A random string of `alphabet` (length uniform in 1..30 unless given), reversed."""
    if length is None:
        length = rng.randint(1, REVERSE_MAX_LENGTH)
    text = "".join(rng.choice(alphabet) for _ in range(length))
    return text, text[::-1]


def reverse_training_example(rng: random.Random) -> tuple[str, str]:
    """reverse_example, but a quarter of the strings use 2-4 characters only, so repeats and runs ("xxx") are common.

    In uniform strings runs are rare, so a model can get away with copying "the character after the one I just
    wrote", which fails on "qw5rrrra77"; these strings leave position as the only way to tell one r from another."""
    if rng.random() < REVERSE_RUNS_SHARE:
        return reverse_example(rng, alphabet="".join(rng.sample(REVERSE_ALPHABET, rng.randint(2, 4))))
    return reverse_example(rng)


# ----------------------------------------------------------------------------- dates

# Spelled out here rather than with strftime("%B"/"%A"), whose names follow the machine's locale.
MONTHS = ("January", "February", "March", "April", "May", "June", "July",
          "August", "September", "October", "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

FIRST_DATE, LAST_DATE = datetime.date(1900, 1, 1), datetime.date(2099, 12, 31)
# A two-digit year is only unambiguous inside one century window: 50..99 -> 19xx, 00..49 -> 20xx.
TWO_DIGIT_FIRST_DATE, TWO_DIGIT_LAST_DATE = datetime.date(1950, 1, 1), datetime.date(2049, 12, 31)


def ordinal(day: int) -> str:
    """1 -> "1st", 2 -> "2nd", 3 -> "3rd", 11 -> "11th", 22 -> "22nd"."""
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _month(d: datetime.date) -> str:
    return MONTHS[d.month - 1]


# Each format's name is its pattern, shown on 3 March 2021 in the comment.
_FORMATTERS: dict[str, Callable[[datetime.date], str]] = {
    "D Month YYYY": lambda d: f"{d.day} {_month(d)} {d.year}",                          # 3 March 2021
    "Month D, YYYY": lambda d: f"{_month(d)} {d.day}, {d.year}",                        # March 3, 2021
    "Month Dth, YYYY": lambda d: f"{_month(d)} {ordinal(d.day)}, {d.year}",             # March 3rd, 2021
    "Dth of Month YYYY": lambda d: f"{ordinal(d.day)} of {_month(d)} {d.year}",         # 3rd of March 2021
    "MM/DD/YYYY": lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}",                      # 03/03/2021
    "D.M.YYYY": lambda d: f"{d.day}.{d.month}.{d.year}",                                # 3.3.2021
    "YYYY-M-D": lambda d: f"{d.year}-{d.month}-{d.day}",                                # 2021-3-3
    "Mon D YYYY": lambda d: f"{_month(d)[:3]} {d.day} {d.year}",                        # Mar 3 2021
    "D Mon YY": lambda d: f"{d.day} {_month(d)[:3]} {d.year % 100:02d}",                # 3 Mar 21
    "Weekday, Month D, YYYY":
        lambda d: f"{WEEKDAYS[d.weekday()]}, {_month(d)} {d.day}, {d.year}",            # Wednesday, March 3, 2021
    "month D YYYY": lambda d: f"{_month(d).lower()} {d.day} {d.year}",                  # march 3 2021
    "MONTH D, YYYY": lambda d: f"{_month(d).upper()} {d.day}, {d.year}",                # MARCH 3, 2021
}
DATE_FORMATS: tuple[str, ...] = tuple(_FORMATTERS)
TWO_DIGIT_YEAR_FORMATS = frozenset({"D Mon YY"})


def _check_format(fmt: str) -> None:
    if fmt not in _FORMATTERS:
        raise ValueError(f"unknown date format {fmt!r}; known formats: {', '.join(DATE_FORMATS)}")


def format_date(d: datetime.date, fmt: str) -> str:
    """`d` written in the human format named `fmt` (one of DATE_FORMATS)."""
    _check_format(fmt)
    if fmt in TWO_DIGIT_YEAR_FORMATS and not TWO_DIGIT_FIRST_DATE <= d <= TWO_DIGIT_LAST_DATE:
        raise ValueError(f"{d} is outside {TWO_DIGIT_FIRST_DATE.year}-{TWO_DIGIT_LAST_DATE.year}, "
                         f"so format {fmt!r} would give an ambiguous two-digit year")
    return _FORMATTERS[fmt](d)


def random_date(rng: random.Random, first: datetime.date, last: datetime.date) -> datetime.date:
    """A date drawn uniformly from first..last inclusive."""
    return datetime.date.fromordinal(rng.randint(first.toordinal(), last.toordinal()))


def date_example(rng: random.Random, fmt: str | None = None) -> tuple[str, str]:
    """A random date in format `fmt` (uniform over DATE_FORMATS if None) and its ISO form YYYY-MM-DD."""
    if fmt is None:
        fmt = rng.choice(DATE_FORMATS)
    _check_format(fmt)
    if fmt in TWO_DIGIT_YEAR_FORMATS:
        d = random_date(rng, TWO_DIGIT_FIRST_DATE, TWO_DIGIT_LAST_DATE)
    else:
        d = random_date(rng, FIRST_DATE, LAST_DATE)
    return format_date(d, fmt), d.isoformat()


def years_out_of_range(text: str) -> list[Caveat]:
    """A year of `text` outside the dates task's training range, which the model turns into some year inside it."""
    years = [int(year) for year in re.findall(r"(?<!\d)\d{4}(?!\d)", text)]
    outside = [year for year in years if not FIRST_DATE.year <= year <= LAST_DATE.year]
    if not outside:
        return []
    return [Caveat("years_out_of_range", {"years": outside, "first": FIRST_DATE.year, "last": LAST_DATE.year})]


def years_table() -> dict:
    """What a page needs to give years_out_of_range's notice itself (ui/deck/live.js): the training years, and
    `digit_zeros`, the code point of each Unicode decimal digit 0 (Python's `\\d` and int() read the ten from each,
    whatever version of Unicode the browser has)."""
    zeros = [code for code in range(sys.maxunicode + 1) if unicodedata.decimal(chr(code), None) == 0]
    return {"first": FIRST_DATE.year, "last": LAST_DATE.year, "digit_zeros": zeros}


# ----------------------------------------------------------------------------- induction

# Mostly lower-case letters, as typed text is; the rest so that a typed sentence's characters are in the vocabulary.
INDUCTION_CHARACTERS = string.ascii_lowercase * 4 + string.ascii_uppercase + string.digits + ".,;:!?'-()"
INDUCTION_SEGMENT = (8, 24)  # characters of the stretch that is repeated
INDUCTION_FILLER = 5  # at most this many random characters before the stretch and between its two occurrences
INDUCTION_MAX_LENGTH = 2 * INDUCTION_SEGMENT[1] + 2 * INDUCTION_FILLER + 3  # 61 with the joining spaces


def random_text(rng: random.Random, length: int) -> str:
    """`length` characters of random words (1-7 characters from INDUCTION_CHARACTERS) separated by single spaces."""
    text = ""
    while len(text) < length:
        text += ("" if not text else " ") + "".join(rng.choice(INDUCTION_CHARACTERS)
                                                    for _ in range(rng.randint(1, 7)))
    return text[:length].strip()


def induction_example(rng: random.Random) -> tuple[str, str]:
    """("", text): a language model has no input, its text is all output. The text is random words, a stretch of
    them, a few more, and the stretch again: "Kq7 zx w(b tnm. i zx w(b tnm." Nothing but the first occurrence
    predicts the second."""
    segment = random_text(rng, rng.randint(*INDUCTION_SEGMENT))
    parts = [random_text(rng, rng.randint(0, INDUCTION_FILLER)), segment,
             random_text(rng, rng.randint(0, INDUCTION_FILLER)), segment]
    return "", " ".join(part for part in parts if part)


# ----------------------------------------------------------------------------- registry

TASKS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "reverse": reverse_training_example,
    "dates": date_example,
    "induction": induction_example,
}
# Trained as decoder-only models: one text, predicted token by token. "lm" is a corpus's sentences packed into
# paragraphs (transformer/data/corpora.py's sentence_splits and packed_examples), not generated here.
LANGUAGE_MODEL_TASKS = frozenset({"induction", "lm"})
CORPUS_TASKS = frozenset({"translate", "lm"})  # read from corpora (--data), where the others are generated
# What a user should know before trusting a task's output on an input: task -> (the input's text -> caveats). A task
# without an entry has none.
INPUT_CAVEATS: dict[str, Callable[[str], list[Caveat]]] = {
    "dates": years_out_of_range,
}
# The caveats a page can give itself, each with the table it reads (by the caveat's name); any other is the app's only.
CAVEAT_TABLES: dict[Callable[[str], list[Caveat]], Callable[[], dict]] = {years_out_of_range: years_table}


def generate(task: str, n: int, seed: int) -> list[tuple[str, str]]:
    """`n` (input, output) pairs of `task`; the same seed always gives the same list."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known tasks: {', '.join(TASKS)}")
    rng = random.Random(seed)
    return [TASKS[task](rng) for _ in range(n)]


def input_caveats(task: str, text: str) -> list[Caveat]:
    """What a user should know before trusting the output of a model of `task` on `text` (INPUT_CAVEATS)."""
    caveats = INPUT_CAVEATS.get(task)
    return caveats(text) if caveats else []
