"""Tests for transformer.data.tasks: reversal, date formats (checked by an independent parser), determinism."""

import datetime
import random
import re
import string

import pytest

from transformer.data.tasks import (
    CORPUS_TASKS,
    DATE_FORMATS,
    INPUT_CAVEATS,
    LANGUAGE_MODEL_TASKS,
    TASKS,
    date_example,
    format_date,
    generate,
    input_caveats,
    ordinal,
    reverse_example,
)

# Written out again rather than imported, so that the parser below checks the task, not itself.
MONTHS = ["january", "february", "march", "april", "may", "june", "july",
          "august", "september", "october", "november", "december"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

DAY, YEAR = r"(?P<day>[1-9]|[12]\d|3[01])", r"(?P<year>\d{4})"
TH = r"(?P<th>[1-9]|[12]\d|3[01])(?P<suffix>st|nd|rd|th)"
MONTH_TITLE, MON = r"(?P<month>[A-Z][a-z]+)", r"(?P<mon>[A-Z][a-z]{2})"
# One regular expression per format, in the case that format must use.
PATTERNS = {
    "D Month YYYY": rf"{DAY} {MONTH_TITLE} {YEAR}",
    "Month D, YYYY": rf"{MONTH_TITLE} {DAY}, {YEAR}",
    "Month Dth, YYYY": rf"{MONTH_TITLE} {TH}, {YEAR}",
    "Dth of Month YYYY": rf"{TH} of {MONTH_TITLE} {YEAR}",
    "MM/DD/YYYY": r"(?P<mm>\d\d)/(?P<dd>\d\d)/" + YEAR,
    "D.M.YYYY": rf"{DAY}\.(?P<m>[1-9]|1[0-2])\.{YEAR}",
    "YYYY-M-D": rf"{YEAR}-(?P<m>[1-9]|1[0-2])-{DAY}",
    "Mon D YYYY": rf"{MON} {DAY} {YEAR}",
    "D Mon YY": rf"{DAY} {MON} (?P<yy>\d\d)",
    "Weekday, Month D, YYYY": rf"(?P<weekday>[A-Z][a-z]+), {MONTH_TITLE} {DAY}, {YEAR}",
    "month D YYYY": rf"(?P<month>[a-z]+) {DAY} {YEAR}",
    "MONTH D, YYYY": rf"(?P<month>[A-Z]+) {DAY}, {YEAR}",
}


def expected_suffix(day: int) -> str:
    return {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}.get(day, "th")


def parse_date(text: str, fmt: str) -> datetime.date:
    """Parse `text` written in `fmt`, checking ordinal suffixes, weekdays and the two-digit-year rule."""
    match = re.fullmatch(PATTERNS[fmt], text)
    assert match, f"{text!r} does not look like {fmt!r}"
    fields = match.groupdict()
    if "month" in fields:
        month = MONTHS.index(fields["month"].lower()) + 1
    elif "mon" in fields:
        month = [m[:3] for m in MONTHS].index(fields["mon"].lower()) + 1
    else:
        month = int(fields.get("m") or fields["mm"])
    if "th" in fields:
        day = int(fields["th"])
        assert fields["suffix"] == expected_suffix(day), text
    else:
        day = int(fields.get("day") or fields["dd"])
    if "yy" in fields:
        yy = int(fields["yy"])
        year = 1900 + yy if yy >= 50 else 2000 + yy
    else:
        year = int(fields["year"])
    date = datetime.date(year, month, day)
    if "weekday" in fields:
        assert fields["weekday"].lower() == WEEKDAYS[date.weekday()], text
    return date


# ----------------------------------------------------------------------------- reverse

def test_reverse_is_the_reversal():
    rng = random.Random(0)
    for _ in range(200):
        source, target = reverse_example(rng)
        assert target == source[::-1] and source == target[::-1]


def test_reverse_covers_lengths_and_alphabet():
    pairs = generate("reverse", 3000, seed=1)
    assert {len(source) for source, _ in pairs} == set(range(1, 31))
    assert set("".join(source for source, _ in pairs)) == set(string.ascii_lowercase + string.digits)


def test_reverse_training_strings_include_runs_of_few_characters():
    pairs = generate("reverse", 4000, seed=3)
    assert all(target == source[::-1] for source, target in pairs)
    long_ones = [source for source, _ in pairs if len(source) >= 12]
    few = [source for source in long_ones if len(set(source)) <= 4]  # ~never by chance from 36 characters
    assert 0.2 < len(few) / len(long_ones) < 0.3  # REVERSE_RUNS_SHARE of them
    assert sum(bool(re.search(r"(.)\1\1", source)) for source in few) > len(few) / 2  # runs of three are common


def test_reverse_with_given_length():
    assert all(len(reverse_example(random.Random(seed), length=7)[0]) == 7 for seed in range(20))


# ----------------------------------------------------------------------------- dates

def test_at_least_twelve_formats_with_a_parser_each():
    assert len(DATE_FORMATS) >= 12 and len(set(DATE_FORMATS)) == len(DATE_FORMATS)
    assert set(DATE_FORMATS) == set(PATTERNS)


def test_every_example_format_for_3_march_2021():
    expected = {
        "D Month YYYY": "3 March 2021",
        "Month D, YYYY": "March 3, 2021",
        "Month Dth, YYYY": "March 3rd, 2021",
        "Dth of Month YYYY": "3rd of March 2021",
        "MM/DD/YYYY": "03/03/2021",
        "D.M.YYYY": "3.3.2021",
        "YYYY-M-D": "2021-3-3",
        "Mon D YYYY": "Mar 3 2021",
        "D Mon YY": "3 Mar 21",
        "Weekday, Month D, YYYY": "Wednesday, March 3, 2021",
        "month D YYYY": "march 3 2021",
        "MONTH D, YYYY": "MARCH 3, 2021",
    }
    assert {fmt: format_date(datetime.date(2021, 3, 3), fmt) for fmt in DATE_FORMATS} == expected


def test_slashes_are_month_first_and_dots_day_first():
    d = datetime.date(1999, 12, 5)
    assert format_date(d, "MM/DD/YYYY") == "12/05/1999"
    assert format_date(d, "D.M.YYYY") == "5.12.1999"


def test_ordinals():
    days = [1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31]
    assert [ordinal(d) for d in days] == ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th",
                                          "21st", "22nd", "23rd", "31st"]


@pytest.mark.parametrize("fmt", DATE_FORMATS)
def test_every_format_round_trips(fmt):
    rng = random.Random(fmt)
    for _ in range(300):
        text, iso = date_example(rng, fmt)
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", iso)
        assert parse_date(text, fmt) == datetime.date.fromisoformat(iso), (fmt, text, iso)


@pytest.mark.parametrize("fmt", [f for f in DATE_FORMATS if f != "D Mon YY"])
def test_range_edges_round_trip(fmt):
    for d in [datetime.date(1900, 1, 1), datetime.date(2000, 2, 29), datetime.date(2099, 12, 31)]:
        assert parse_date(format_date(d, fmt), fmt) == d


def test_true_weekday():
    known = {datetime.date(2021, 3, 3): "Wednesday", datetime.date(1900, 1, 1): "Monday",
             datetime.date(2000, 1, 1): "Saturday", datetime.date(2099, 12, 31): "Thursday"}
    for d, weekday in known.items():
        assert format_date(d, "Weekday, Month D, YYYY").startswith(weekday + ", ")


def test_two_digit_year_rule():
    assert format_date(datetime.date(1950, 1, 1), "D Mon YY") == "1 Jan 50"
    assert format_date(datetime.date(2049, 12, 31), "D Mon YY") == "31 Dec 49"
    assert format_date(datetime.date(2005, 6, 9), "D Mon YY") == "9 Jun 05"
    for outside in [datetime.date(1949, 12, 31), datetime.date(2050, 1, 1)]:
        with pytest.raises(ValueError):
            format_date(outside, "D Mon YY")
    rng = random.Random(3)
    years = [int(date_example(rng, "D Mon YY")[1][:4]) for _ in range(500)]
    assert 1950 <= min(years) < 1960 and 2040 < max(years) <= 2049


def test_default_draws_all_formats_over_the_full_range():
    pairs = generate("dates", 2000, seed=2)
    seen_formats = set()
    for text, iso in pairs:
        matching = {fmt for fmt in DATE_FORMATS if re.fullmatch(PATTERNS[fmt], text)}
        assert matching, text
        assert any(parse_date(text, fmt) == datetime.date.fromisoformat(iso) for fmt in matching)
        seen_formats |= matching
    assert seen_formats == set(DATE_FORMATS)
    years = [int(iso[:4]) for _, iso in pairs]
    assert 1900 <= min(years) < 1905 and 2095 < max(years) <= 2099


def test_unknown_format():
    with pytest.raises(ValueError, match="known formats"):
        date_example(random.Random(0), "YYYY/DD/MM")


# ----------------------------------------------------------------------------- registry

def test_tasks_registry():
    assert set(TASKS) == {"reverse", "dates", "induction"}
    for make_example in TASKS.values():
        source, target = make_example(random.Random(0))
        assert isinstance(source, str) and isinstance(target, str)


@pytest.mark.parametrize("task", ["reverse", "dates"])
def test_generate_is_deterministic_per_seed(task):
    assert generate(task, 50, seed=7) == generate(task, 50, seed=7)
    assert generate(task, 50, seed=7) != generate(task, 50, seed=8)
    assert len(generate(task, 50, seed=7)) == 50


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ValueError, match="reverse.*dates|dates.*reverse"):
        generate("sort", 10, seed=0)


def test_a_language_model_of_a_corpus_is_read_not_generated():
    assert "lm" in LANGUAGE_MODEL_TASKS and CORPUS_TASKS == {"translate", "lm"} and not CORPUS_TASKS & set(TASKS)
    with pytest.raises(ValueError, match="unknown task 'lm'"):
        generate("lm", 10, seed=0)


def test_a_task_names_its_own_caveats():
    """The registry says which task warns about what: the dates task about years it never saw (and only those), a
    task without an entry about nothing, whatever the text."""
    assert set(INPUT_CAVEATS) <= set(TASKS) | CORPUS_TASKS
    (caveat,) = input_caveats("dates", "14 July 1789, 3 May 2021 and 1 June 2100")
    assert caveat.code == "years_out_of_range" and caveat.values == {"years": [1789, 2100], "first": 1900,
                                                                      "last": 2099}
    assert input_caveats("dates", "14 July 1989") == []
    assert input_caveats("reverse", "14 July 1789") == input_caveats("translate", "14 July 1789") == []

