"""Attention Atlas: look inside a trained encoder-decoder Transformer. Run with `streamlit run app.py`.

The page (ui.frame) is the view picker, the lecture switch, the sidebar and the chosen view. The model work happens in
`transformer/` through ui.passes, every figure comes from `viz/`, and the whole view state lives in the URL
(ui.state.URL_STATE): a lecturer can prepare links, and a student can share exactly what they see.
"""
from __future__ import annotations

import contextlib

import streamlit as st
from streamlit import runtime


@contextlib.asynccontextmanager
async def warm_first_page(_app: st.App):
    """Draw the page a first visitor gets (the default view of the default checkpoint) once, in a session of its own,
    before the server takes its first connection: torch is imported, the checkpoint loaded, and the model pass and
    figures are built and shared (ui.shared) before anyone waits for them. A page that fails here fails again, with
    its message, for the visitor. Then decks are warmed in the background (ui.deck.warm): those $ATLAS_WARM_DECKS names
    now, the others when first opened."""
    await runtime.get_instance().does_script_run_without_error()
    from ui.deck import warm

    warm.serve()
    yield


# Streamlit runs this file as `__main__` for every session. `streamlit run app.py` first imports it as a module, finds
# `app` and serves it, warming the first page as it starts.
if __name__ == "__main__":
    from ui.frame import draw_page

    draw_page()
else:
    app = st.App(__file__, lifespan=warm_first_page)
