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
    # The attention kinds the view cannot do without (page.kinds says which the model has) and what it does with
    # them; a model without one (decoder-only, encoder-only) gets a note saying so instead of the view.
    needs: tuple[str, ...] = ()
    needs_why: str = ""

    def missing(self, page: Page) -> str:
        """Why this view has nothing to show for the page's model, or "" when it has."""
        if all(kind in page.kinds for kind in self.needs):
            return ""
        return (f"{self.label} {self.needs_why}: this {page.config.stacks} model has no "
                f"{' or '.join(kind for kind in self.needs if kind not in page.kinds)} attention.")
