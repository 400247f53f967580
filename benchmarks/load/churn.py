"""Sessions opened and closed in turn (--churn N): one client opens N sessions in sequence, each its link and one
click, the first nine on every view in turn, then random views; the server's resident memory is read after each.
The target: after all of them at most 1.5x after the first 10."""
from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from .checks import verify
from .client import TIMEOUT_S, VIEWS, Client, Tally
from .inputs import Inputs
from .protocol import SESSION_ERRORS, error_text
from .report import with_errors
from .server import rss_mb, serving


class ChurnClient(Client):
    """Sessions opened and closed in turn: the first len(VIEWS) open every view once, so that what a view loads once
    for all (the training snapshots, the checkpoints it compares with) is loaded when the memory after 10 sessions is
    read; later ones open a random view."""

    opened = 0

    def first_page(self) -> tuple[str, str]:
        text, view = super().first_page()
        self.opened += 1
        return text, VIEWS[self.opened - 1] if self.opened <= len(VIEWS) else view


async def churn(url: str, pids: list[int], checkpoint: str, tally: Tally, *, sessions: int, seed: int,
                timeout_s: float) -> list[float]:
    """One client opens a session (its link, then one click) and closes it, `sessions` times in sequence. Returns
    the app's resident memory after each session, MB."""
    client = ChurnClient(0, url, checkpoint, tally, inputs=Inputs("letters"), seed=seed, timeout_s=timeout_s,
                         think_s=0, interactions_per_session=2)
    after = []
    for _ in range(sessions):
        log = tally.new_session()
        try:
            await client.session(log, deadline=float("inf"))  # bounded: two runs, each within timeout_s
        except SESSION_ERRORS as error:
            tally.errors.append(f"session #{log.number}: {error_text(error)}")
        after.append(rss_mb(pids))
    return after


def run_churn(checkpoints_dir: Path | str, checkpoint_name: str, sessions: int = 200, *, seed: int = 0,
              timeout_s: float = TIMEOUT_S) -> dict:
    """Open and close `sessions` sessions one after another against `streamlit run app.py`; the server's RSS after
    each."""
    checkpoints_dir = Path(checkpoints_dir)
    tally = Tally()
    with tempfile.TemporaryDirectory() as scratch, \
            serving(checkpoints_dir, None, Path(scratch) / "streamlit.log") as (url, _, pids):
        before = rss_mb(pids)
        after = asyncio.run(churn(url, pids, checkpoint_name, tally, sessions=sessions, seed=seed,
                                  timeout_s=timeout_s))
    verify(checkpoints_dir / checkpoint_name, tally)
    early = after[min(9, len(after) - 1)]
    return {"checkpoint": checkpoint_name, "sessions": sessions, "errors": tally.errors, "rss_before_mb": before,
            "rss_after_10_mb": early, "rss_after_all_mb": after[-1], "ratio": after[-1] / early,
            "rss_after_each_mb": [round(mb, 1) for mb in after]}


def churn_table(result: dict) -> str:
    rows = [f"{result['sessions']} sessions opened and closed in turn on `{result['checkpoint']}`: server RSS "
            f"{result['rss_before_mb']:.0f} MB before, {result['rss_after_10_mb']:.0f} MB after 10, "
            f"{result['rss_after_all_mb']:.0f} MB after {result['sessions']} ({result['ratio']:.2f}x)",
            f"errors: {len(result['errors'])}"]
    return with_errors(rows, result["errors"])
