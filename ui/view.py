"""View: one entry of the view picker. A view module exports one (VIEW) and ui/views/__init__.py lists it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .page import Page


@dataclass(frozen=True)
class View:
    key: str  # its `?view=` value in links: never change it once shared
    label: str  # in the view picker, the same in lecture mode: a lecturer's students hear the name they see
    render: Callable[[Page], None]  # draws the view under the output
    needs_input: bool = True  # False: also drawn while the input cannot be translated (page.analysis is None)
