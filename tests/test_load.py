"""The app under concurrent load: CI's short form of `python -m benchmarks.load` (benchmarks/load/).

A few sessions at once against `streamlit run app.py`, each opening its own link, typing inputs, switching views,
and closing and reopening its session; then the checks that would catch one session seeing another's data.
"""
from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote, urlencode

import pytest

from benchmarks.chromium import CHROMIUM
from benchmarks.load import checks
from benchmarks.load.checks import verify
from benchmarks.load.churn import ChurnClient
from benchmarks.load.client import VIEWS, Client, Interaction, Tally
from benchmarks.load.crowd import run_load
from benchmarks.load.deck import deck_table, run_deck
from benchmarks.load.hall import HALL_CLICKS, run_hall
from benchmarks.load.inputs import INPUT_KINDS, MIN_INPUT_CHARS, Inputs, none_inside_another, typed_inputs
from benchmarks.load.lecture import LectureClient
from benchmarks.load.protocol import AppSession, Page, SessionLog, open_websocket
from benchmarks.load.server import checkout
from deploy.server import streamlit_server
from helpers import LOADABLE, ROOT, checkpoints_folder
from transformer import load_checkpoint
from ui.shared import CLOSED_FIGURE_BYTES
from ui.views import BY_KEY
from ui.widgets import OUTPUT_HELP

pytestmark = pytest.mark.slow  # a real server

SESSIONS = 4
SECONDS = 15
INTERACTIONS_PER_SESSION = 2  # so that every client closes and reopens its session within the short run
# Generous: the load's own working set (caches of a few dozen passes of a tiny model, sessions kept for
# reconnection) is a few MB; a leak of every closed session's pages would still pass a few runs, not a long one.
RSS_GROWTH_LIMIT_MB = 150


@pytest.mark.parametrize("inputs", INPUT_KINDS)
def test_concurrent_sessions_each_see_only_their_own_input(tiny_checkpoint, tmp_path, inputs):
    checkpoints = checkpoints_folder(tiny_checkpoint, tmp_path / "checkpoints")
    result = run_load(checkpoints, LOADABLE[0], sessions=SESSIONS, seconds=SECONDS, inputs=inputs,
                      interactions_per_session=INTERACTIONS_PER_SESSION, log=tmp_path / "streamlit.log")
    assert result["errors"] == []
    assert result["inputs"] == inputs
    assert result["sessions_opened"] > SESSIONS  # sessions were closed and new ones opened
    assert result["interactions"] >= 2 * SESSIONS
    assert result["outputs_checked"] == result["interactions"]
    assert result["interactions_by_action"]["type"] + result["interactions_by_action"]["view"] > 0
    assert 0 < result["p50_s"] <= result["p95_s"] <= result["max_s"]
    assert result["p95_by_view_s"] and set(result["p95_by_view_s"]) <= set(BY_KEY)  # read off each run's link
    assert max(result["p95_by_view_s"].values()) <= result["max_s"]
    assert result["server_cpu_s"] > 0
    assert result["rss_warm_mb"] > result["rss_before_mb"] > 0  # the samples read the server, not nothing
    assert result["rss_growth_mb"] < RSS_GROWTH_LIMIT_MB


def test_a_hall_types_its_own_sentences_at_once(tiny_checkpoint, tmp_path):
    """The hall scenario's short form: sessions on one link all type their own input at once (the server decodes
    them together), then click; every output is the checkpoint's own translation of that session's input, and no
    session is sent another's."""
    checkpoints = checkpoints_folder(tiny_checkpoint, tmp_path / "checkpoints")
    result = run_hall(checkpoints, LOADABLE[0], sessions=SESSIONS, rounds=1, think_s=0.2,
                      log=tmp_path / "streamlit.log")
    assert result["errors"] == []
    assert result["inputs_typed"] == SESSIONS and result["batching"]
    assert result["outputs_checked"] >= SESSIONS * (2 + HALL_CLICKS)  # the links, inputs and clicks
    assert 0 < result["type_p50_s"] <= result["type_p95_s"] and result["click_p95_s"] > 0
    assert result["server_cpu_s_per_input"] > 0
    (only_round,) = result["rounds"]
    assert only_round["inputs"] == SESSIONS and only_round["p95_s"] == result["type_p95_s"]
    assert only_round["cpu_s_per_input"] == result["server_cpu_s_per_input"]


def test_an_earlier_commits_app_is_served_from_a_worktree_that_goes_afterwards():
    """--code: the benchmarks measure the app before a change in the same run as after it."""
    import subprocess
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    with checkout(head.stdout.strip()) as root:
        assert (root / "app.py").read_bytes() == subprocess.run(
            ["git", "-C", str(ROOT), "show", "HEAD:app.py"], capture_output=True, check=True).stdout
    assert not root.exists()
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True)
    assert str(root) not in worktrees.stdout


@pytest.mark.skipif(not shutil.which("nginx") and not Path("/usr/sbin/nginx").exists(),
                    reason="no nginx (apt-get install nginx)")
def test_sessions_through_the_proxy_to_two_processes(tiny_checkpoint, tmp_path):
    """deploy/'s nginx in front of two real app processes: every session's websocket, routed by the cookie its page
    load got, reaches a process that serves it its own input; a new browser's first page stays within 4 MB."""
    checkpoints = checkpoints_folder(tiny_checkpoint, tmp_path / "checkpoints")
    result = run_load(checkpoints, LOADABLE[0], sessions=SESSIONS, seconds=SECONDS / 2, processes=2,
                      interactions_per_session=INTERACTIONS_PER_SESSION, log=tmp_path / "streamlit.log")
    assert result["errors"] == []
    assert result["interactions"] >= SESSIONS and result["outputs_checked"] == result["interactions"]
    if CHROMIUM.exists():
        assert 0 < result["first_page_bytes"] <= 4 * 2**20


def test_the_server_keeps_what_closed_sessions_built_within_a_bound(tmp_path):
    """Sessions opened and closed one after another, each building a shared result of 8 MB that only it asks for:
    a real server's closed sessions count as closed (ui.shared.session_is_open), so their results are dropped down
    to CLOSED_FIGURE_BYTES instead of piling up (48 MB after six)."""
    result_bytes = 8 * 2**20

    async def open_in_turn(url: str) -> list[int]:
        held = []
        for number in range(6):
            async with open_websocket(url, 60) as websocket:
                page = await AppSession(websocket, SessionLog(number), urlencode({"session": number}), 60).rerun([])
                assert page.exceptions == []
                held.append(int(page.output))
        return held

    with streamlit_server(tmp_path, tmp_path / "streamlit.log",
                          script=Path(__file__).with_name("closed_sessions_page.py")) as (url, _):
        held = asyncio.run(open_in_turn(url))
    assert held[0] == result_bytes
    # the session's own result, and the closed ones' within their bound (the one just closed may not count as closed
    # yet when the next session builds)
    assert max(held) <= CLOSED_FIGURE_BYTES + 2 * result_bytes, held


def test_a_room_follows_the_shipped_deck_on_a_warmed_and_a_cold_server(tmp_path):
    """--deck's short form: two students, the deck's first two slides, on both servers."""
    result = run_deck(ROOT / "checkpoints", students=2, slides=2, log_dir=tmp_path)
    assert result["errors"] == []
    assert result["views"] == ["positional", "attention"]
    for name in ("warmed", "not_warmed"):
        assert result[name]["waits"] == 2 * 2 and len(result[name]["p95_by_slide_s"]) == 2
        assert all(seconds > 0 for seconds in result[name]["p95_by_slide_s"] + result[name]["lecturer_s"])
    assert result["warmed"]["warm_up_s"] > 0 and result["not_warmed"]["warm_up_s"] == 0
    warmed = (tmp_path / "streamlit-deck-warmed.log").read_text()
    assert "Warmed the deck `attention-step-by-step`: 2 slides in" in warmed  # the deck cut to the slides shown
    assert result["median_ratio"] > 0 and result["worst_ratio"] > 0
    assert "2 attention" in deck_table(result)


def client_of(kind: type) -> Client:
    return kind(0, "http://127.0.0.1:1/", LOADABLE[0], Tally(), inputs=Inputs("letters"), seed=0, timeout_s=1,
                think_s=0, interactions_per_session=2)


def clicks_of(client: Client, count: int = 60) -> set[str]:
    """The actions of `count` clicks on a page with every control the load clients use."""
    widgets = {label: SimpleNamespace(id=label, options=[SimpleNamespace(content="1")])
               for label in ("Input", "View", "Head", "Layer")}
    return {client.next_click(Page(widgets=widgets), "text")[0] for _ in range(count)}


def test_the_churn_opens_every_view_before_the_memory_after_10_is_read():
    client = client_of(ChurnClient)
    views = [client.first_page()[1] for _ in range(40)]
    assert len(VIEWS) <= 10 and views[:len(VIEWS)] == list(VIEWS)
    assert len(set(views[len(VIEWS):])) > 1  # then at random
    assert clicks_of(client) == {"type", "view"}  # as any other session of the load does


def test_students_in_a_lecture_click_heads_layers_and_views_and_type_nothing():
    assert clicks_of(client_of(LectureClient)) == {"head", "layer", "view"}


def test_the_checks_catch_a_leaked_input_and_a_wrong_output(tiny_checkpoint):
    mine, theirs = "abcdefghij0123", "zyxwvu9876543210"
    tally = Tally(
        sessions=[SessionLog(0, {mine}, [f"text={mine}".encode(), f"other={theirs}".encode()]),
                  SessionLog(1, {theirs}, [])],
        interactions=[Interaction(1, "open", theirs, "attention", 1.0, "not the translation")],
    )
    assert verify(tiny_checkpoint, tally) == 0
    assert any(f"session #0 was sent {theirs!r}, the input of session #1" in error for error in tally.errors)
    assert any(f"session #1 was never sent its own input {theirs!r}" in error for error in tally.errors)
    assert any("the page showed 'not the translation'" in error for error in tally.errors)
    assert len(tally.errors) == 3


def test_the_checks_find_typed_sentences_as_typed_and_as_a_link_writes_them(tiny_checkpoint):
    mine, theirs = "Where is the train station?", "She didn't want to go to school."
    expected = load_checkpoint(tiny_checkpoint).translate(mine).text
    tally = Tally(
        sessions=[SessionLog(0, {mine}, [urlencode({"text": mine}).encode()]),  # spaces as +, ? as %3F
                  SessionLog(1, {theirs}, [f"value: {theirs}".encode(), quote(mine).encode()])],  # spaces as %20
        interactions=[Interaction(0, "open", mine, "attention", 1.0, expected)],
    )
    assert verify(tiny_checkpoint, tally) == 1
    assert tally.errors == [f"session #1 was sent {mine!r}, the input of session #0"]


def test_an_output_is_checked_as_the_page_shows_it(tiny_checkpoint, monkeypatch):
    # st.text strips the ends of what it shows: an output of noise that ends in a space is still the right one.
    checkpoint = load_checkpoint(tiny_checkpoint)
    translate = checkpoint.translate
    monkeypatch.setattr(checkpoint, "translate", lambda text: dataclasses.replace(translate(text), text="8 8 8 "))
    monkeypatch.setattr(checks, "load_checkpoint", lambda path: checkpoint)
    text = "87w8v89574siblq1p8fme8"
    tally = Tally(sessions=[SessionLog(0, {text}, [text.encode()])],
                  interactions=[Interaction(0, "type", text, "attention", 1.0, "8 8 8"),
                                Interaction(0, "type", text, "attention", 1.0, "8 8")])
    assert verify(tiny_checkpoint, tally) == 1
    assert tally.errors == [f"session #0 (type): the input {text!r} should give '8 8 8', the page showed '8 8'"]


def test_typed_inputs_are_the_tasks_own_long_enough_and_none_inside_another(tiny_checkpoint):
    pool = typed_inputs(tiny_checkpoint, seed=0)
    assert len(pool) > 100 and all(len(text) >= MIN_INPUT_CHARS for text in pool)
    assert len(set(pool)) == len(pool) and not any(a in b for a in pool for b in pool if a != b)
    assert pool == typed_inputs(tiny_checkpoint, seed=0) != typed_inputs(tiny_checkpoint, seed=1)
    # "I'm tired." inside another session's input would be found in that session's page as a leak
    assert none_inside_another(["Yes, I'm tired.", "I'm tired.", "Where is it?"]) == ["Yes, I'm tired.",
                                                                                     "Where is it?"]


def test_shared_inputs_are_no_leak_but_others_still_are(tiny_checkpoint):
    # A lecture: every session typed the same input, so seeing it is no leak; an input only another session
    # typed still is one.
    shared, theirs = "attention2026", "zyxwvu9876543210"
    received = [f"text={shared}&other={theirs}".encode()]
    tally = Tally(sessions=[SessionLog(0, {shared}, received), SessionLog(1, {shared, theirs}, received)])
    verify(tiny_checkpoint, tally)
    assert tally.errors == [f"session #0 was sent {theirs!r}, the input of session #1"]


def test_a_page_reads_the_sidebars_output_not_a_views():
    """The training and ablation views show other models' outputs after the sidebar's, with the same help text."""
    from streamlit.proto.Element_pb2 import Element

    page = Page()
    for body in ("the model's output", "a snapshot's output"):
        element = Element()
        element.text.body, element.text.help = body, OUTPUT_HELP
        page.read(element)
    assert page.output == "the model's output"
