"""View: one entry of the view picker. A view module exports one (VIEW) and ui/views/__init__.py lists it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .page import Page


@dataclass(frozen=True)
class View:
    key: str  # its `?view=` value in links: never change it once shared
    label: str  # in the view picker
    short_label: str  # in lecture mode, where the larger text must keep every view on one row at 1280 pixels
    render: Callable[[Page], None]  # draws the view under the output
    needs_input: bool = True  # False: also drawn while the input cannot be translated (page.analysis is None)
