"""A lecture hall on one link (--lecture): every session opens the same link (LECTURE_TEXT on the attention view)
within the first LECTURE_SPREAD_S, as a room does when the lecturer says "open this link", then switches head, layer
and view with think time between clicks, in one session until the time is up."""
from __future__ import annotations

import asyncio

from streamlit.proto.WidgetStates_pb2 import WidgetState

from .client import Client, choose_option
from .protocol import Page

LECTURE_TEXT = "attention2026"  # the lecture's link: one input, on the attention view
LECTURE_SPREAD_S = 5.0  # the room opens the link within this many seconds
LECTURE_CONTROLS = ("Head", "Layer", "View")  # what students click


class LectureClient(Client):
    """A student: opens the link everyone was given within the first LECTURE_SPREAD_S, then clicks through heads,
    layers and views with think time between clicks, in one session until the time is up."""

    one_session = True

    async def run_until(self, deadline: float) -> None:
        await asyncio.sleep(self.rng.uniform(0, LECTURE_SPREAD_S))
        await super().run_until(deadline)

    def first_page(self) -> tuple[str, str]:
        return LECTURE_TEXT, "attention"

    def next_click(self, page: Page, text: str) -> tuple[str, str, list[WidgetState]]:
        label = self.rng.choice([label for label in LECTURE_CONTROLS if label in page.widgets])
        return label.lower(), text, [choose_option(page, label, self.rng)]
