"""ui.turns: model work takes turns, oldest click first; how many turns a process and a deployment's processes get.
(tests/test_concurrency.py runs the app's passes through them from many threads.)"""
from __future__ import annotations

import threading
import time

import pytest

from deploy.local import app_environment
from ui import turns
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
            a_may_ask.wait(timeout=10)
        elif name == "B":
            a_arrived.wait(timeout=10)
            time.sleep(0.01)  # a later arrival, whatever the clock's resolution
            arrived()
        with turns.turn():
            served.append(name)

    def queued(count: int) -> None:
        deadline = time.monotonic() + 10
        while turns.waiting < count and time.monotonic() < deadline:
            time.sleep(0.001)

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
        thread.join(timeout=10)
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
