"""ui.turns: model work and page code take turns, oldest click first; how many turns a process and a deployment's
processes get. (tests/test_concurrency.py runs the app's passes through them from many threads.)"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from deploy.local import app_environment
from helpers import WAIT_S, wait_until
from ui import shared, turns
from ui.shared import Expiring, SharedResults
from ui.turns import Turns, arrived, turn_count


def test_a_freed_turn_goes_to_the_click_that_arrived_first():
    """Click A arrives, then click B; B asks for a turn first (A's view drew something before its next pass), then
    A, then C, which set no arrival (it counts from its request). All wait for the one turn: A, B, C."""
    turns = Turns(1)
    served: list[str] = []
    a_arrived, a_may_ask = threading.Event(), threading.Event()

    def click(name: str) -> None:
        if name == "A":
            arrived()
            a_arrived.set()
            a_may_ask.wait(timeout=WAIT_S)
        elif name == "B":
            a_arrived.wait(timeout=WAIT_S)
            time.sleep(0.01)  # a later arrival, whatever the clock's resolution
            arrived()
        with turns.turn():
            served.append(name)

    def queued(count: int) -> None:
        wait_until(lambda: turns.waiting >= count, f"{count} clicks waiting for the turn")

    threads = {name: threading.Thread(target=click, args=(name,)) for name in "ABC"}
    with turns.turn():  # the one turn is held until all three wait
        threads["A"].start()
        threads["B"].start()
        queued(1)  # B
        a_may_ask.set()
        queued(2)  # A
        threads["C"].start()
        queued(3)
    for thread in threads.values():
        thread.join(timeout=WAIT_S)
    assert served == ["A", "B", "C"]


def test_a_process_takes_as_many_turns_as_it_has_cores_unless_told():
    assert turn_count({}) == turns.cores() >= 1
    assert turn_count({"ATLAS_MODEL_TURNS": "3"}) == 3
    for refused in ("0", "-1", "two", "1.5", " 2"):
        with pytest.raises(ValueError, match="ATLAS_MODEL_TURNS"):
            turn_count({"ATLAS_MODEL_TURNS": refused})


@pytest.mark.parametrize(("cores", "processes", "each"), [(2, 1, "2"), (2, 2, "1"), (2, 3, "1"), (8, 2, "4")])
def test_a_deployments_processes_share_the_cores(monkeypatch, cores, processes, each):
    monkeypatch.setattr("deploy.local.cores", lambda: cores)
    assert app_environment(processes, {})["ATLAS_MODEL_TURNS"] == each
    assert app_environment(processes, {"ATLAS_MODEL_TURNS": "5"})["ATLAS_MODEL_TURNS"] == "5"  # the operator's say


def started(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)  # a test that fails by deadlock must not hang pytest
    thread.start()
    return thread


def test_a_rerun_lets_go_of_its_page_turn_while_it_waits_for_a_pass(monkeypatch):
    """One page turn: A waits (for a model pass) until B has drawn its page, which B can only do in A's turn."""
    monkeypatch.setattr(shared, "PAGE", Turns(1))
    order, a_waits, b_drew = [], threading.Event(), threading.Event()

    def a():
        with shared.page():
            with shared.waiting():
                a_waits.set()
                assert b_drew.wait(timeout=WAIT_S)
            order.append("A")

    def b():
        assert a_waits.wait(timeout=WAIT_S)
        with shared.page():
            order.append("B")
            b_drew.set()
    for thread in [started(a), started(b)]:
        thread.join(timeout=WAIT_S)
    assert order == ["B", "A"]


def test_a_rerun_waiting_for_another_sessions_result_holds_no_page_turn(monkeypatch):
    """One page turn. A builds a shared pass (outside its turn, as shared_pass does); B asks for the same key and
    waits for A's build; C, a click with nothing to wait for, still draws its page before A's build ends."""
    monkeypatch.setattr(shared, "PAGE", Turns(1))
    cache = SharedResults(10**6, session=lambda: None)
    building, b_asks, c_drew, got = threading.Event(), threading.Event(), threading.Event(), {}

    def build():
        with shared.waiting():
            building.set()
            assert c_drew.wait(timeout=WAIT_S)
            return "the pass"

    def session(name):
        def run():
            with shared.page():
                if name == "C":
                    c_drew.set()
                else:
                    if name == "B":
                        b_asks.set()
                    got[name] = cache.get("the input", build)
        return run
    a = started(session("A"))
    assert building.wait(timeout=WAIT_S)
    b = started(session("B"))
    assert b_asks.wait(timeout=WAIT_S)
    time.sleep(0.05)  # B is waiting for A's build
    c = started(session("C"))
    for thread in (a, b, c):
        thread.join(timeout=WAIT_S)
    assert got == {"A": "the pass", "B": "the pass"} and c_drew.is_set()


def test_sessions_waiting_for_a_cached_lookup_leave_the_page_to_its_computation(monkeypatch):
    """One page turn. A computes a cached lookup that needs a slow lookup of its own (both ui.shared.Expiring); B asks
    for the same entry meanwhile and waits for A's; C, a click with nothing to wait for, still draws its page before
    A's computation ends. Neither the computation nor the wait holds the page turn."""
    monkeypatch.setattr(shared, "PAGE", Turns(1))
    computing, b_asks, c_drew, got = threading.Event(), threading.Event(), threading.Event(), {}

    def slow_lookup(name):
        computing.set()
        assert c_drew.wait(timeout=WAIT_S)
        return name.upper()
    lookup = Expiring(slow_lookup, ttl_s=60, max_entries=2)
    ranking = Expiring(lambda name: lookup(name) + " ranked", ttl_s=60, max_entries=2)

    def session(name):
        def run():
            with shared.page():
                if name == "C":
                    c_drew.set()
                else:
                    if name == "B":
                        b_asks.set()
                    got[name] = ranking("checkpoint")
        return run
    a = started(session("A"))
    assert computing.wait(timeout=WAIT_S)
    b = started(session("B"))
    assert b_asks.wait(timeout=WAIT_S)
    time.sleep(0.05)  # B is waiting for A's computation
    c = started(session("C"))
    for thread in (a, b, c):
        thread.join(timeout=WAIT_S)
    assert got == {"A": "CHECKPOINT ranked", "B": "CHECKPOINT ranked"} and c_drew.is_set()


def test_the_app_caches_only_through_ui_shared():
    """Streamlit's caches wait on a lock of their own, which would hold the page turn of a session waiting for
    another's entry; ui.shared's waits let it go."""
    import ui

    files = [*Path(ui.__file__).parent.rglob("*.py"), Path(ui.__file__).parents[1] / "app.py"]
    assert not [path.name for path in files if "st.cache_" in path.read_text(encoding="utf-8")]
