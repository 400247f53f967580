"""Regular expressions in a tokenizer.json that could take a visitor's input for minutes: refused before use.

The `tokenizers` library runs a Split pre-tokenizer's, a Replace normalizer's or decoder's regex with Oniguruma, a
backtracking engine: `(a+)+b` tries every way to cut a run of a's (2^23 ways for 23 of them), and three quantifiers
in a row that can match the same characters try n^3 ways over an input of n. `pattern_problem` parses the regex
(Oniguruma's syntax, as far as tokenizers use it) and refuses, before the file is used:

- a repetition (`*`, `+`, `{2,}`, `{1,3}`, ...) of a group whose inside repeats, alternates or looks around
  (exponential: `(a+)+`, `(a|a)*`, `(?:a?b?)+`); a group of plain characters may repeat (`(?:ab)+`);
- more than MAX_UNBOUNDED unbounded repetitions along one path of the regex (polynomial of a higher degree:
  `\\s*\\s*\\s*x`), or more than MAX_CHOICES choices of any kind (a repetition whose count varies, an alternation
  inside a sequence: `a?a?a?...aaa` and `(a|a)(a|a)...` take 2^choices steps); GPT-2's, Llama 3's, Qwen2's and
  GPT-4o's patterns have at most two unbounded repetitions and five choices on a path;
- what backtracks without a bound and is rarely a tokenizer's: back-references, subexpression calls, conditionals,
  the absent operator; and anything this parser does not know (refused rather than guessed at).

What is left is at most cubic in the input's length (times 2^MAX_CHOICES), which the app's input limit bounds
(1,000 characters); while one input runs long, the library releases the interpreter's lock (JsonTokenizer encodes
through encode_batch), so other sessions go on.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_UNBOUNDED = 2  # unbounded repetitions on one path: n^3 steps over an input of n; three would be n^4
LARGE_REPEAT = 16  # a counted repetition above this ({0,500}) costs as much as an unbounded one
MAX_CHOICES = 5  # variable repetitions and alternations on one path: GPT-4o's pattern has five


class RegexRefused(ValueError):
    """A regex that could backtrack for long, or that this parser cannot read; the message says which part."""


@dataclass
class Node:
    """One element of a regex: "char" (matches one character: a literal, an escape, a class, `.`), "empty" (matches
    no character: an anchor, a flag setting), "group" (its `branches` alternate) or "look" (a lookaround)."""

    kind: str
    branches: list[list[Item]] = field(default_factory=list)


@dataclass
class Item:
    """A node with its repetition: `low` to `high` times, `high` None for no bound; `text` is its source."""

    node: Node
    low: int = 1
    high: int | None = 1
    text: str = ""

    @property
    def repeats(self) -> bool:
        return self.high is None or self.high > 1

    @property
    def unbounded(self) -> bool:
        return self.high is None or self.high > LARGE_REPEAT


class _Parser:
    """A recursive-descent reader of one pattern; `at` is the position of the next character."""

    def __init__(self, pattern: str) -> None:
        self.text, self.at = pattern, 0

    def peek(self, count: int = 1) -> str:
        return self.text[self.at:self.at + count]

    def refuse(self, why: str) -> RegexRefused:
        return RegexRefused(f"cannot be read here ({why} at character {self.at})")

    def unbounded(self, what: str) -> RegexRefused:
        return RegexRefused(f"has {what} at character {self.at}, which can backtrack without bound")

    def alternation(self) -> list[list[Item]]:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.at += 1
            branches.append(self.sequence())
        return branches

    def sequence(self) -> list[Item]:
        items: list[Item] = []
        while self.at < len(self.text) and self.peek() not in "|)":
            start = self.at
            node = self.atom()
            low, high = self.quantifier()
            items.append(Item(node, low, high, self.text[start:self.at]))
        return items

    def atom(self) -> Node:
        char = self.peek()
        self.at += 1
        if char == "(":
            return self.group()
        if char == "[":
            self.char_class()
            return Node("char")
        if char == "\\":
            return self.escape()
        if char in "^$":
            return Node("empty")
        if char in "*+?" or char == "{" and self._counted_at(self.at):
            raise self.refuse(f"a quantifier {char!r} with nothing to repeat")
        return Node("char")

    def group(self) -> Node:
        kind = "group"
        if self.peek() == "?":
            head = self.text[self.at + 1:self.at + 3]
            if head[:1] in (":", ">"):  # non-capturing, atomic
                self.at += 2
            elif head in ("<=", "<!") or head[:1] in ("=", "!"):
                self.at += 1 + (2 if head[:1] == "<" else 1)
                kind = "look"
            elif head[:1] in ("<", "P", "'") and head[:2] != "P=":  # a named group
                close = ">" if head[:1] != "'" else "'"
                end = self.text.find(close, self.at + 2)
                if end == -1:
                    raise self.refuse("a group name that does not end")
                self.at = end + 1
            else:
                self.flags()
                if self.peek() == ")":  # (?i): flags for the rest, matches nothing
                    self.at += 1
                    return Node("empty")
        branches = self.alternation()
        if self.peek() != ")":
            raise self.refuse("a group that does not end")
        self.at += 1
        return Node(kind, branches)

    def flags(self) -> None:
        """Skip `?imx-imx` and the `:` that opens a group with them; anything else after `(?` is refused."""
        self.at += 1
        start = self.at
        while self.peek() and self.peek() in "imxWDSPy-{}ag":
            self.at += 1
        if self.at == start or self.peek() not in (":", ")"):
            raise self.unbounded("a group construct other than a group, a lookaround or flags (a conditional, a "
                                 "call, the absent operator)")
        if self.peek() == ":":
            self.at += 1

    def escape(self) -> Node:
        char = self.peek()
        if not char:
            raise self.refuse("a pattern that ends in a backslash")
        self.at += 1
        if char.isdigit() and char != "0" or char in "kg":
            raise self.unbounded("a back-reference or subexpression call")
        if char in "pPxuo" and self.peek() == "{":
            end = self.text.find("}", self.at)
            if end == -1:
                raise self.refuse(f"\\{char}{{ that does not end")
            self.at = end + 1
        elif char == "x":
            self.at += min(2, sum(1 for c in self.peek(2) if c in "0123456789abcdefABCDEF"))
        elif char == "u":
            self.at += 4
        return Node("empty" if char in "bBAzZG" else "char")

    def char_class(self) -> None:
        """Skip a character class, nested classes (`[a-z&&[^x]]`) and POSIX brackets (`[[:alpha:]]`) included."""
        depth = 1
        if self.peek() == "^":
            self.at += 1
        if self.peek() == "]":  # a leading ] is a character
            self.at += 1
        while depth:
            char = self.peek()
            if not char:
                raise self.refuse("a character class that does not end")
            self.at += 1
            if char == "\\":
                self.at += 1
            elif char == "[" and self.peek() == ":":
                end = self.text.find(":]", self.at)
                self.at = end + 2 if end != -1 else self.at
            elif char == "[":
                depth += 1
            elif char == "]":
                depth -= 1

    def _counted_at(self, position: int) -> bool:
        """Whether the `{` before `position` opens a counted repetition ({2}, {1,3}, {2,}, {,4}), not a literal."""
        end = self.text.find("}", position)
        low, comma, high = self.text[position:end].partition(",") if end != -1 else ("", "", "x")
        return (low.isdigit() or not low and bool(comma)) and (high.isdigit() or not high)

    def quantifier(self) -> tuple[int, int | None]:
        char = self.peek()
        if char not in "*+?{" or not char or char == "{" and not self._counted_at(self.at + 1):
            return 1, 1
        if char == "{":
            end = self.text.index("}", self.at)
            low, comma, high = self.text[self.at + 1:end].partition(",")
            self.at = end + 1
            bounds = (int(low or 0), (int(high) if high else None) if comma else int(low))
        else:
            self.at += 1
            bounds = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        if self.peek() in ("?", "+"):  # lazy or possessive: the same ways to try, in another order
            self.at += 1
        if self.peek() and self.peek() in "*+?" or self.peek() == "{" and self._counted_at(self.at + 1):
            raise self.refuse("a quantifier of a quantifier")
        return bounds


def parse(pattern: str) -> list[list[Item]]:
    """The branches of `pattern`; RegexRefused for what this parser cannot read."""
    parser = _Parser(pattern)
    branches = parser.alternation()
    if parser.at != len(pattern):
        raise parser.refuse("an unmatched ')'")
    return branches


def _plain(branches: list[list[Item]]) -> bool:
    """Whether a group matches one fixed string of characters: one branch, no repetition, no lookaround."""
    return len(branches) == 1 and all(
        item.low == item.high == 1 and (item.node.kind in ("char", "empty")
                                         or item.node.kind == "group" and _plain(item.node.branches))
        for item in branches[0])


def _on_a_path(branches: list[list[Item]], counted) -> int:
    """The most of what `counted(item)` counts that one match attempt may have to combine: summed along a sequence
    (a group's inside and a lookaround's included), the largest over alternatives."""
    return max(sum(counted(item) + (_on_a_path(item.node.branches, counted) if item.node.branches else 0)
                   for item in branch) for branch in branches)


def _unbounded(item: Item) -> int:
    return int(item.unbounded)


def _choices(item: Item) -> int:
    """A repetition whose count varies is a choice; so is a group of alternatives."""
    return int(item.low != item.high) + int(len(item.node.branches) > 1)


def _nested_repetition(branches: list[list[Item]]) -> Item | None:
    """The first repeated group whose inside repeats, alternates or looks around, if any."""
    for branch in branches:
        for item in branch:
            if item.node.branches and item.repeats and (item.node.kind == "look" or not _plain(item.node.branches)):
                return item
            if item.node.branches and (inner := _nested_repetition(item.node.branches)):
                return inner
    return None


def pattern_problem(pattern: str) -> str | None:
    """Why the Oniguruma regex `pattern` could backtrack for long, or None when it cannot (see the module's
    docstring)."""
    try:
        branches = parse(pattern)
    except RegexRefused as error:
        return str(error)
    if nested := _nested_repetition(branches):
        return (f"repeats {nested.text!r}, a group whose inside repeats or alternates: it can backtrack "
                "exponentially in the input's length")
    if (count := _on_a_path(branches, _unbounded)) > MAX_UNBOUNDED:
        return (f"combines {count} unbounded repetitions in one match (at most {MAX_UNBOUNDED} allowed): it can "
                f"backtrack for n^{count + 1} steps over an input of n characters")
    if (count := _on_a_path(branches, _choices)) > MAX_CHOICES:
        return (f"combines {count} optional parts and alternatives in one match (at most {MAX_CHOICES} allowed): it "
                f"can backtrack for 2^{count} steps at each character")
    return None


SECTIONS = {"normalizer": "normalizer", "pre_tokenizer": "pre-tokenizer", "decoder": "decoder",
            "post_processor": "post-processor"}


def regexes(tokenizer: dict) -> Iterator[tuple[str, str]]:
    """(where, pattern) of every regex a tokenizer.json's parts hold: a Split's or a Replace's `{"Regex": ...}`,
    inside Sequences too ("the pre-tokenizer's Split")."""
    for key, section in SECTIONS.items():
        pending = [tokenizer.get(key)]
        while pending:
            part = pending.pop()
            if isinstance(part, list):
                pending.extend(part)
            elif isinstance(part, dict):
                pattern = part.get("pattern")
                if isinstance(pattern, dict) and isinstance(pattern.get("Regex"), str):
                    yield f"the {section}'s {part.get('type', 'part')}", pattern["Regex"]
                pending.extend(value for value in part.values() if isinstance(value, (list, dict)))


def tokenizer_problem(tokenizer: dict) -> str | None:
    """The first regex of a tokenizer.json that could backtrack for long, as a message; None when none can."""
    for where, pattern in regexes(tokenizer):
        if problem := pattern_problem(pattern):
            return f"{where} regex {pattern[:80]!r} {problem}; refused"
    return None
