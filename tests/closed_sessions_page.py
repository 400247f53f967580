"""A Streamlit page for tests/test_load.py: every session builds an 8 MB shared result of its own (ui.shared.once),
then shows the bytes the shared figure cache holds."""
import numpy as np
import streamlit as st

from ui import shared
from ui.widgets import OUTPUT_HELP

shared.once(np.full, 2**20, int(st.query_params.get("session", "0")))  # int64: 8 MB only this session asks for
st.text(str(shared.RESULTS.bytes), help=OUTPUT_HELP)
