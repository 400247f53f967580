"""A deck: a lecture as a list of live views, one TOML file in the decks folder.

    title = "Attention, step by step"

    [[slides]]
    title = "One head's weights"        # shown above the view
    note = "Each row sums to one."      # the speaker's note, in the sidebar
    line = "Who looks at whom?"         # optional: one line shown large on the slide
    [slides.link]                       # the view, in the parameters a link holds (ui.state.URL_STATE)
    checkpoint = "reverse"
    view = "attention"
    layer = 1

A slide's link values are written as TOML values (strings, integers, floats, booleans, lists) and read by the same
parser, with the same default, as the link's query parameter: a slide and a link cannot disagree. Whether a value fits
the checkpoint (a layer it has) is checked when the slide is shown, as a link's is. Deck files are read
(ui.deck.presenter) under the checkpoints' loading policy: a regular file inside the folder, no link, size capped
before a byte is parsed; a name from the URL only picks one of the listed files, never builds a path.
"""
from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import NamedTuple

from ..state import URL_STATE, shown

MAX_DECK_BYTES = 64 * 1024  # a 15-slide lecture is about 6 KB
MAX_SLIDES = 100  # an afternoon's lecture at most
MAX_TITLE_CHARS = 120  # one line on a projector
MAX_NOTE_CHARS = 2000  # a few paragraphs for the speaker
MAX_LINE_CHARS = 200  # one large line
MAX_DECK_KEYS = 4000  # `name = value` lines and inline fields: 100 slides of 40 link parameters
MAX_KEY_DEPTH = 8  # parts of one dotted key (`slides.link` has two): tomllib's cost grows fast with the depth
MAX_NUMBER_DIGITS = 40  # of a number's digits in a row (an integer of thousands of digits costs seconds to read)
# A TOML file's strings and comments, to look at the rest: its keys and values.
TOML_STRINGS = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*',
                          re.DOTALL)
TOML_SEPARATORS = re.compile(r"[=\n,\[\]{}]")  # between two keys or values
DECK_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # a file name that needs no escaping in a link
DECK_ONLY = ("deck", "slide", "lecture")  # set by opening a deck, never by one of its slides


class DeckError(Exception):
    """A deck file is missing, too big or not a deck; the message says which slide and field."""


class Slide(NamedTuple):
    title: str
    note: str
    line: str
    state: dict[str, object]  # parsed link values: what parse_query would give for the same link


class Deck(NamedTuple):
    title: str
    slides: list[Slide]


def decks_dir() -> Path:
    return Path(os.environ.get("ATLAS_DECKS", Path(__file__).parents[2] / "decks"))


def deck_names(root: Path | None = None) -> list[str]:
    """The decks a link may name: the regular `NAME.toml` files of the folder (no symlink), in name order."""
    root = root or decks_dir()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    return sorted(entry.name[:-5] for entry in entries
                  if entry.name.endswith(".toml") and DECK_NAME.fullmatch(entry.name[:-5])
                  and entry.is_file(follow_symlinks=False))


def text_field(table: Mapping, field: str, where: str, max_chars: int, required: bool = False) -> str:
    value = table.get(field, None if required else "")
    if not isinstance(value, str):
        raise DeckError(f"{where}: `{field}` must be text" + (" and is missing" if value is None else "."))
    if len(value) > max_chars:
        raise DeckError(f"{where}: `{field}` is {len(value):,} characters long, more than the {max_chars} allowed.")
    return value


def link_text(value: object) -> str:
    """A TOML value as a link writes it, so that the link's parser reads it."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list) and all(isinstance(item, (int, str)) and not isinstance(item, bool) for item in value):
        return ",".join(str(item) for item in value)
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ValueError(type(value).__name__)


def parse_slide(table: object, views: Collection[str], where: str) -> Slide:
    if not isinstance(table, dict):
        raise DeckError(f"{where} is not a table of title, note, line and link.")
    unknown = set(table) - {"title", "note", "line", "link"}
    if unknown:
        raise DeckError(f"{where}: unknown field `{shown(sorted(unknown)[0])}` (a slide has title, note, line, link).")
    link = table.get("link", {})
    if not isinstance(link, dict):
        raise DeckError(f"{where}: `link` must be a table of link parameters.")
    state = {}
    for name, value in link.items():
        if name not in URL_STATE or name in DECK_ONLY:
            raise DeckError(f"{where}: `{shown(name)}` is not a link parameter a slide can set.")
        try:
            state[name] = URL_STATE[name][0](link_text(value))
        except ValueError:
            raise DeckError(f"{where}: `{name}` = `{shown(value)}` cannot be read as a link's `{name}`.") from None
    if state.get("view", URL_STATE["view"][1]) not in views:
        raise DeckError(f"{where}: there is no view `{shown(state['view'])}` (views: {', '.join(views)}).")
    return Slide(text_field(table, "title", where, MAX_TITLE_CHARS, required=True),
                 text_field(table, "note", where, MAX_NOTE_CHARS), text_field(table, "line", where, MAX_LINE_CHARS),
                 state)


def check_bounds(text: str, name: str) -> None:
    """DeckError unless the TOML `text` stays within what a deck needs, checked in linear time before tomllib reads
    it: at most MAX_DECK_KEYS keys, MAX_KEY_DEPTH parts to a dotted key and MAX_NUMBER_DIGITS digits in a row
    (outside strings and comments, where a note may say anything)."""
    bare = TOML_STRINGS.sub(" ", text)
    keys = bare.count("=")
    if keys > MAX_DECK_KEYS:
        raise DeckError(f"The deck `{name}` sets {keys:,} values, more than the {MAX_DECK_KEYS:,} allowed.")
    depth = max(part.count(".") for part in TOML_SEPARATORS.split(bare)) + 1
    if depth > MAX_KEY_DEPTH:
        raise DeckError(f"The deck `{name}` has a dotted key of {depth:,} parts, more than the {MAX_KEY_DEPTH} "
                        "allowed.")
    digits = max((len(run) for run in re.findall(r"[0-9_]+", bare)), default=0)
    if digits > MAX_NUMBER_DIGITS:
        raise DeckError(f"The deck `{name}` has a number of {digits:,} digits, more than the {MAX_NUMBER_DIGITS} "
                        "allowed.")


def parse_deck(data: bytes, views: Collection[str], name: str = "deck") -> Deck:
    """A deck from the bytes of its file, or a DeckError naming the first thing wrong with it."""
    if len(data) > MAX_DECK_BYTES:
        raise DeckError(f"The deck `{name}` is {len(data):,} bytes, more than the {MAX_DECK_BYTES:,} allowed.")
    try:
        text = data.decode("utf-8")
        check_bounds(text, name)
        table = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise DeckError(f"The deck `{name}` is not a TOML file: {error}") from None
    except RecursionError:
        raise DeckError(f"The deck `{name}` nests its values too deep.") from None
    except ValueError as error:  # what tomllib lets through from int() (a number past Python's digit limit)
        raise DeckError(f"The deck `{name}` holds a value that cannot be read: {error}") from None
    slides = table.get("slides")
    if not isinstance(slides, list) or not slides:
        raise DeckError(f"The deck `{name}` has no slides (write each one under `[[slides]]`).")
    if len(slides) > MAX_SLIDES:
        raise DeckError(f"The deck `{name}` has {len(slides):,} slides, more than the {MAX_SLIDES} allowed.")
    slides = [parse_slide(slide, views, f"Deck `{name}`, slide {number}") for number, slide in enumerate(slides, 1)]
    return Deck(text_field(table, "title", f"Deck `{name}`", MAX_TITLE_CHARS) or name, slides)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return '"' + "".join(ch if ch.isprintable() and ch not in '"\\' else f"\\U{ord(ch):08x}" for ch in str(value)) + '"'


def deck_toml(deck: Deck) -> str:
    """The TOML file of a deck: parse_deck reads it back as the same deck."""
    lines = [f"title = {toml_value(deck.title)}"]
    for slide in deck.slides:
        lines += ["", "[[slides]]", f"title = {toml_value(slide.title)}"]
        lines += [f"{field} = {toml_value(value)}" for field, value in (("note", slide.note), ("line", slide.line))
                  if value]
        lines.append("[slides.link]")
        lines += [f"{name} = {toml_value(value)}" for name, value in slide.state.items()]
    return "\n".join(lines) + "\n"


def slide_state(slide: Slide, current: Mapping[str, object]) -> dict[str, object]:
    """The whole view state a slide shows, after `current`: what the slide names; the checkpoint kept unless named,
    and the input too while the checkpoint stays (the lecturer's typed sentence carries on); the deck, lecture mode,
    theme and image format kept; every other parameter its default (None: the view's own default)."""
    kept = ("deck", "slide", "lecture", "dark", "image", "checkpoint")
    result = {}
    for name, (_, default) in URL_STATE.items():
        if name in slide.state:
            result[name] = slide.state[name]
        elif name in kept or (name == "text" and slide.state.get("checkpoint", current.get("checkpoint"))
                              == current.get("checkpoint")):
            result[name] = current.get(name, default)
        else:
            result[name] = default
    return result
