"""ui.memory: the process's budget for model passes. Passes wait for memory in click order, keep it until their
rerun ends, are refused with a message after a bounded wait, and a crowd of reruns never blocks itself."""
from __future__ import annotations

import resource
import threading
import time

import pytest

from helpers import WAIT_S, wait_until
from ui import memory, turns
from ui.memory import MemoryBudget, ServerBusy, budget_bytes


def in_thread(work) -> tuple[threading.Thread, dict]:
    """Run work() in a thread of its own (its own click); what it returned or raised lands in the dict."""
    outcome: dict = {}

    def run():
        turns.arrived()
        try:
            outcome["value"] = work()
        except Exception as error:
            outcome["error"] = error
        outcome["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_pass_outside_a_rerun_gives_its_memory_back_when_it_ends():
    budget = MemoryBudget(100)
    with budget.held(60):
        assert budget.in_use == 60
    assert budget.in_use == 0 and budget.peak == 60


def queued(budget: MemoryBudget, count: int) -> None:
    """Wait until `count` passes wait for memory in `budget` (each has asked, none has gone on)."""
    wait_until(lambda: len(budget._waiting) == count, f"{count} passes waiting for memory")


def test_a_rerun_keeps_its_passes_memory_until_it_ends():
    budget = MemoryBudget(100)
    with budget.rerun():
        with budget.held(30):
            pass
        with budget.held(20):
            pass
        assert budget.in_use == 50  # the page still holds both results
    assert budget.in_use == 0


def test_a_pass_that_does_not_fit_waits_for_a_rerun_to_end():
    budget = MemoryBudget(100)
    first_holds, first_may_end = threading.Event(), threading.Event()

    def first():
        with budget.rerun():
            with budget.held(70):
                first_holds.set()
            first_may_end.wait(WAIT_S)
        return time.monotonic()

    one, first_outcome = in_thread(first)
    assert first_holds.wait(WAIT_S)
    two, second = in_thread(lambda: budget.held(50).__enter__())
    queued(budget, 1)
    assert "at" not in second  # 70 + 50 > 100: it waits
    first_may_end.set()
    one.join(WAIT_S)
    two.join(WAIT_S)
    assert "error" not in second and second["at"] >= first_outcome["value"]
    assert budget.peak <= 100


def test_waiting_passes_are_served_oldest_click_first():
    budget = MemoryBudget(100)
    order: list[str] = []
    release = threading.Event()

    def holder():
        with budget.held(100):
            release.wait(WAIT_S)

    def waiter(name):
        def work():
            with budget.held(60):
                order.append(name)
        return work

    threads = [in_thread(holder)[0]]
    wait_until(lambda: budget.in_use == 100, "the holder's pass")
    for count, name in enumerate(("first", "second", "third"), start=1):
        threads.append(in_thread(waiter(name))[0])
        queued(budget, count)  # clicks arrive in this order
    assert order == []
    release.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert order == ["first", "second", "third"]


def test_a_short_inputs_pass_that_fits_does_not_queue_behind_a_long_one():
    budget = MemoryBudget(3200)
    release = threading.Event()

    def holder():
        with budget.held(3000):
            release.wait(WAIT_S)

    holding = in_thread(holder)[0]
    wait_until(lambda: budget.in_use == 3000, "the holder's pass")
    long, long_outcome = in_thread(lambda: budget.held(1000).__enter__())  # waits for the holder
    queued(budget, 1)
    short, short_outcome = in_thread(lambda: budget.held(100).__enter__())  # 3,100 fit: it goes at once
    short.join(WAIT_S)
    assert "at" in short_outcome and "at" not in long_outcome
    release.set()
    for thread in (holding, long):
        thread.join(WAIT_S)
    assert "error" not in long_outcome and long_outcome["at"] > short_outcome["at"]


def test_after_its_wait_a_pass_is_refused_with_a_message():
    budget = MemoryBudget(100, wait_s=0.3)
    with budget.held(80):
        thread, outcome = in_thread(lambda: budget.held(30 * memory.MB).__enter__())
        thread.join(WAIT_S)
    assert isinstance(outcome["error"], ServerBusy)
    message = str(outcome["error"])
    assert "busy" in message and "30 MB" in message and "shorter input" in message
    assert budget.in_use == 0


def test_a_pass_larger_than_the_budget_runs_alone():
    budget = MemoryBudget(100, wait_s=0.3)
    with budget.held(500):
        assert budget.in_use == 500


def test_reruns_that_all_wait_for_more_do_not_block_each_other():
    """Two pages each hold a pass's result and each ask for a second pass that fits only once the other's page
    ends: neither can end first, so the older one goes on (and the other once it has ended)."""
    budget = MemoryBudget(100, wait_s=5)
    both_hold = threading.Barrier(2)

    def page():
        with budget.rerun():
            with budget.held(50):
                pass
            both_hold.wait(WAIT_S)
            with budget.held(40):
                pass
        return True

    started = time.monotonic()
    runs = [in_thread(page) for _ in range(2)]
    for thread, _ in runs:
        thread.join(WAIT_S)
    assert all(outcome.get("value") for _, outcome in runs), [outcome.get("error") for _, outcome in runs]
    assert time.monotonic() - started < 4  # neither waited out its wait_s
    assert budget.in_use == 0


def test_the_budget_is_set_from_the_environment_or_the_process_memory(monkeypatch):
    one_pass = 512 * memory.MB
    assert budget_bytes(one_pass, {"ATLAS_MEMORY_BUDGET_MB": "256"}) == 256 * memory.MB
    for wrong in ("0", "-5", "1.5", "lots"):
        with pytest.raises(ValueError, match="ATLAS_MEMORY_BUDGET_MB"):
            budget_bytes(one_pass, {"ATLAS_MEMORY_BUDGET_MB": wrong})
    monkeypatch.setattr(resource, "getrlimit", lambda which: (6 * 2**30, resource.RLIM_INFINITY))
    assert memory.process_memory() <= 6 * 2**30  # an address-space limit counts, as a cgroup's does
    assert budget_bytes(one_pass, {}) == max(one_pass, memory.process_memory() // 4)
