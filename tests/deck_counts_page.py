"""The app's page with its deck warming (ui.deck.warm), for tests/test_deck_warm.py; `?counts=1` instead shows how many
model passes and figures this server process has built (the misses of ui.shared's caches), as JSON."""
import contextlib
import json

import streamlit as st

from ui import shared
from ui.deck import warm
from ui.widgets import OUTPUT_HELP


@contextlib.asynccontextmanager
async def serve_decks(_app: st.App):
    warm.serve()
    yield


if __name__ == "__main__":
    if st.query_params.get("counts"):
        st.text(json.dumps({"passes": shared.PASSES.misses, "figures": shared.RESULTS.misses}), help=OUTPUT_HELP)
    else:
        from ui.frame import draw_page

        draw_page()
else:
    app = st.App(__file__, lifespan=serve_decks)
