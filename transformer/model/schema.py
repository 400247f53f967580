"""config.json and card.json checked against their JSON Schemas (transformer/model/schemas/, Draft 2020-12), which are
also the documentation of both formats. A problem is one line that names the field, what it must be and what it is:
"num_heads must be an integer from 1 to 256, got 0"."""
from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Iterable
from importlib import resources

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, best_match

SHOWN_CHARS = 40  # of a string quoted in a message; a longer one is cut and its length given
SHOWN_NAMES = 5  # unknown or missing field names a message lists; it counts the rest
# Problems weighed before one is reported: a hostile card can hold a hundred thousand wrong values, and each costs
# jsonschema an exception object, so validation stops at this many.
ERRORS_WEIGHED = 16


def _is_integer(_checker: object, value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite_number(checker: object, value: object) -> bool:
    return math.isfinite(value) if isinstance(value, float) else _is_integer(checker, value)


# Draft 2020-12 counts 2.0 as an integer and NaN or infinity as numbers. A JSON file here holds no NaN (read_json
# refuses it), but a config built in code can, and a width of 2.0 or a dropout of NaN is no more valid for that.
_Validator = validators.extend(Draft202012Validator, type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
    {"integer": _is_integer, "number": _is_finite_number}))


@functools.cache
def schema(document: str) -> dict:
    """The JSON Schema of `document` ("config" or "card"), read once from transformer/model/schemas/."""
    path = resources.files(__package__) / "schemas" / f"{document}.schema.json"
    return json.loads(path.read_text(encoding="utf-8"))


@functools.cache
def _validator(document: str) -> Draft202012Validator:
    return _Validator(schema(document))


def schema_problem(values: object, document: str) -> str | None:
    """What is wrong with `values` as `document` ("config" or "card"), or None: of its first ERRORS_WEIGHED problems,
    the one jsonschema's best_match picks (the least deep; the same one every time)."""
    error = best_match(itertools.islice(_validator(document).iter_errors(values), ERRORS_WEIGHED))
    return None if error is None else _described(error, document)


def _described(error: ValidationError, document: str) -> str:
    where = _where(error.absolute_path)
    inside = f"{where}: " if where else ""
    if error.validator == "required":
        missing = [name for name in error.validator_value if name not in error.instance]
        return f"{inside}missing field(s) {_listed(missing)}"
    if error.validator == "additionalProperties":
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})), key=str)
        return f"{inside}unknown field(s) {_listed(unknown)}"
    subject = where or f"the {document}"
    if "propertyNames" in error.schema_path:
        subject = f"a key of {subject}"
    return f"{subject} must be {_expected(error.schema)}, got {_shown(error.instance)}"


def _where(path: Iterable[str | int]) -> str:
    """A path into the document as Python would index it: `snapshots[0]['fraction']`; a top-level field by name."""
    parts = list(path)
    if not parts:
        return ""
    return str(parts[0]) + "".join(f"[{part}]" if isinstance(part, int) else f"[{_shown(part)}]" for part in parts[1:])


def _listed(names: list[str]) -> str:
    listed = ", ".join(_shown(name) for name in names[:SHOWN_NAMES])
    return listed if len(names) <= SHOWN_NAMES else f"{listed} and {len(names) - SHOWN_NAMES:,} more"


def _expected(schema: dict) -> str:
    """What a value of `schema` must be, in words: "an integer from 1 to 256", "a number in [0, 1)", ..."""
    if "enum" in schema:
        return "one of " + ", ".join(map(repr, schema["enum"]))
    kind = schema["type"]
    if kind == "boolean":
        return "true or false"
    if kind in ("integer", "number"):
        return _numbers(schema)
    noun, count, most = {"string": ("a string", "characters", "maxLength"), "array": ("a list", "entries", "maxItems"),
                         "object": ("an object", "fields", "maxProperties")}[kind]
    bounded = f"{noun} of at most {schema[most]:,} {count}" if most in schema else noun
    return f"{bounded} matching {schema['pattern']}" if "pattern" in schema else bounded


def _numbers(schema: dict) -> str:
    noun = "an integer" if schema["type"] == "integer" else "a number"
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    if low is not None and high is not None:
        if "minimum" in schema and "maximum" in schema:
            return f"{noun} from {low:,} to {high:,}"
        return f"{noun} in {'[' if 'minimum' in schema else '('}{low:,}, {high:,}{']' if 'maximum' in schema else ')'}"
    if low is not None:
        return f"{noun} {'of at least' if 'minimum' in schema else 'above'} {low:,}"
    if high is not None:
        return f"{noun} {'of at most' if 'maximum' in schema else 'below'} {high:,}"
    return noun


def _shown(value: object) -> str:
    """`value` as a message quotes it: short, whatever its size."""
    if isinstance(value, list):
        return f"a list of {_count(len(value), 'entry', 'entries')}"
    if isinstance(value, dict):
        return f"an object of {_count(len(value), 'field', 'fields')}"
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        return f"{value[:SHOWN_CHARS]!r}... ({len(value):,} characters)"
    text = f"{value:,}" if _is_integer(None, value) else repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}..."


def _count(number: int, one: str, more: str) -> str:
    return f"{number:,} {one if number == 1 else more}"
