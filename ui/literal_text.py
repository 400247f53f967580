"""Text from a checkpoint folder (card fields, folder names) where Streamlit reads Markdown: shown literally."""
from __future__ import annotations

import re
import string
import unicodedata

MARKDOWN_SYNTAX = re.compile(f"([{re.escape(string.punctuation)}])")


def plain(text: object) -> str:
    """`text` for a label, caption or table cell, shown as typed: no link, image, emphasis or code span. CommonMark
    reads a backslash before any ASCII punctuation as that character; line breaks become spaces (one line)."""
    return MARKDOWN_SYNTAX.sub(r"\\\1", " ".join(str(text).split()))


def visible_name(name: str) -> str:
    """A folder name as the picker shows it: as it is, unless it mixes the letters of several scripts (a Cyrillic
    "е" in "reverse") or holds invisible characters; then it says so, so that it cannot pass for another name."""
    scripts = sorted({unicodedata.name(char, "UNNAMED").split()[0].title() for char in name if char.isalpha()})
    hidden = dict.fromkeys(char for char in name if unicodedata.category(char) in ("Cf", "Cc", "Zl", "Zp")
                           or (char.isspace() and char != " "))
    notes = [f"mixes {' and '.join(scripts)} letters"] if len(scripts) > 1 else []
    if hidden:
        notes.append(f"holds invisible characters ({', '.join(f'U+{ord(char):04X}' for char in hidden)})")
    return f"{name} ⚠ {'; '.join(notes)}" if notes else name
