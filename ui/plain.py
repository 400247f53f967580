"""Text from a checkpoint folder (card fields, folder names) where Streamlit reads Markdown: shown literally."""
from __future__ import annotations

import re
import string

MARKDOWN_SYNTAX = re.compile(f"([{re.escape(string.punctuation)}])")


def plain(text: object) -> str:
    """`text` for a label, caption or table cell, shown as typed: no link, image, emphasis or code span. CommonMark
    reads a backslash before any ASCII punctuation as that character; line breaks become spaces (one line)."""
    return MARKDOWN_SYNTAX.sub(r"\\\1", " ".join(str(text).split()))
