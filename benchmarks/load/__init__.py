"""Load test: many sessions at once against `streamlit run app.py`, and the server's memory while they come and go.

    python -m benchmarks.load --sessions=20 --seconds 60 [--checkpoints checkpoints --checkpoint reverse] [--json PATH]
    python -m benchmarks.load --inputs typed --checkpoints checkpoints --checkpoint eng-fra  # dev sentences typed
    python -m benchmarks.load --lecture --sessions=40 --seconds 60 --think 2     # a lecture hall on one link
    python -m benchmarks.load --hall --sessions=40 --checkpoint eng-fra          # the hall types its own sentences
    python -m benchmarks.load --via-proxy 1 2                                  # K processes behind nginx, K = 1, 2
    python -m benchmarks.load --churn 200                                      # sessions opened and closed in turn
    python -m benchmarks.load --deck --sessions=40 --checkpoints checkpoints   # a room following a lecturer's deck

The parts, each module's docstring saying more: protocol (a browser tab's side of the app's websocket protocol),
client (one user of the app, the default scenario's), inputs (what the sessions type), server (the app served, and
its processes' CPU and memory), checks (outputs and leaks, checked after the load), report (what the tables share);
the scenarios: crowd (the timed load, the default and --lecture's), lecture (--lecture's students), proxy
(--via-proxy), hall (--hall), churn (--churn) and deck (--deck); __main__ (the command line). docs/load-test.md has
the measured runs.
"""
from .checks import sent
from .churn import run_churn
from .client import widget_id
from .crowd import run_load
from .deck import WARMED, logged, open_slide, run_deck
from .hall import run_hall
from .protocol import AppSession, SessionLog
from .server import batching_switch

# The scenarios' runs, and the client's pieces that other tests of the app speak to a server with.
__all__ = ["WARMED", "AppSession", "SessionLog", "batching_switch", "logged", "open_slide", "run_churn", "run_deck",
           "run_hall", "run_load", "sent", "widget_id"]
