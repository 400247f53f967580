"""The checks after a load, run once the server is gone so that they take none of its CPU: every output is the
checkpoint's own translation of the session's input, and no session was sent another session's input.

Each input is searched for, as typed and as a link writes it, in every message the session got except figures and
tables (protocol.FIGURE_ELEMENTS). Errors found during the load (an exception shown on the page, a run that does not
finish within the timeout, a dropped connection, a link or an input the page did not take) are the clients'."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote, quote_plus

import torch
from streamlit.string_util import clean_text

from transformer import load_checkpoint

from .client import Tally
from .protocol import SessionLog


def verify(checkpoint_path: Path, tally: Tally) -> int:
    """Check every run's output against the checkpoint's own translation of that run's input, and every session's
    messages for the inputs of all other sessions; add what fails to tally.errors. Returns how many outputs match."""
    matched = check_outputs(checkpoint_path, tally)
    check_leaks(tally)
    return matched


def check_outputs(checkpoint_path: Path, tally: Tally) -> int:
    checkpoint = load_checkpoint(checkpoint_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the server runs (OMP_NUM_THREADS=1): the same sums in the same order
    try:
        # As st.text shows it (ui.widgets.model_output): dedented and stripped (an output of noise can end in a space).
        expected = {text: clean_text(checkpoint.translate(text).text) for text in {i.text for i in tally.interactions}}
    finally:
        torch.set_num_threads(threads)
    matched = 0
    for interaction in tally.interactions:
        if interaction.output == expected[interaction.text]:
            matched += 1
        else:
            tally.errors.append(f"session #{interaction.session} ({interaction.action}): the input "
                                f"{interaction.text!r} should give {expected[interaction.text]!r}, the page showed "
                                f"{interaction.output!r}")
    return matched


def check_leaks(tally: Tally) -> None:
    owner = {text: log.number for log in tally.sessions for text in log.inputs}  # an owner, when inputs are shared
    shown = {(interaction.session, interaction.text) for interaction in tally.interactions}
    for log in tally.sessions:
        found = sent(log, owner.keys())
        for text in sorted(found - log.inputs):
            tally.errors.append(f"session #{log.number} was sent {text!r}, the input of session #{owner[text]}")
        # The search must find the inputs that were there, or finding no other session's proves nothing.
        for text in sorted({text for session, text in shown if session == log.number} - found):
            tally.errors.append(f"session #{log.number} was never sent its own input {text!r}")


def sent(log: SessionLog, texts: Iterable[str]) -> set[str]:
    """Which of `texts` the session's messages hold, as typed or as a link writes them."""
    received = b"\0".join(log.received)
    return {text for text in texts if any(form.encode() in received for form in (text, quote(text), quote_plus(text)))}
