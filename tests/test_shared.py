"""ui.shared: results built once for every session, keyed on the content of every argument, bounded in bytes."""
from __future__ import annotations

import threading
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import viz
from helpers import run_together
from ui import shared
from ui.shared import Expiring, SharedResults, clear, fingerprint, once, size_of


def weights(seed: int = 0, n: int = 6) -> np.ndarray:
    matrix = np.random.default_rng(seed).random((n, n))
    return matrix / matrix.sum(-1, keepdims=True)


TOKENS = [f"t{i}" for i in range(6)]


def test_the_same_call_returns_the_same_figure_and_builds_it_once():
    calls = []

    def build(matrix, labels, *, theme):
        calls.append(1)
        return viz.head_heatmap(matrix, labels, labels, theme=theme)

    first = once(build, weights(), TOKENS, theme=viz.Theme())
    second = once(build, weights().copy(), list(TOKENS), theme=viz.Theme())  # equal content, other objects
    assert second is first and len(calls) == 1


@pytest.mark.parametrize("change", ["one weight", "a label", "the theme", "a keyword", "the function"])
def test_any_difference_in_content_is_another_key(change):
    matrix = weights()
    base = fingerprint(viz.head_heatmap, (matrix, TOKENS, TOKENS), {"theme": viz.Theme()})
    other_matrix = matrix.copy()
    other_matrix[5, 5] += 1e-7  # one weight in the last cell: hashed in full, not sampled
    changed = {
        "one weight": (viz.head_heatmap, (other_matrix, TOKENS, TOKENS), {"theme": viz.Theme()}),
        "a label": (viz.head_heatmap, (matrix, TOKENS, [*TOKENS[:-1], "t9"]), {"theme": viz.Theme()}),
        "the theme": (viz.head_heatmap, (matrix, TOKENS, TOKENS), {"theme": viz.Theme(large=True)}),
        "a keyword": (viz.head_heatmap, (matrix, TOKENS, TOKENS), {"theme": viz.Theme(), "title": "x"}),
        "the function": (viz.rollout_figure, (matrix, TOKENS, TOKENS), {"theme": viz.Theme()}),
    }[change]
    assert fingerprint(*changed) != base


def test_a_call_is_one_key_however_its_arguments_are_written():
    # The sidebar asks translate(path, version, text, beam); a view asking the same with the defaults spelled out
    # (or a keyword for a positional) must get the same pass, not decode again.
    matrix = weights()
    base = fingerprint(viz.head_heatmap, (matrix, TOKENS, TOKENS), {})
    assert fingerprint(viz.head_heatmap, (matrix, TOKENS), {"k_tokens": TOKENS, "title": ""}) == base
    assert fingerprint(viz.head_heatmap, (matrix, TOKENS, TOKENS), {"theme": viz.Theme(), "show_masks": True}) == base
    assert fingerprint(viz.head_heatmap, (matrix, TOKENS, TOKENS), {"show_masks": False}) != base


def test_arrays_of_other_shape_or_type_with_the_same_bytes_differ():
    flat = np.arange(6, dtype=np.float32)
    assert fingerprint(len, (flat,), {}) != fingerprint(len, (flat.reshape(2, 3),), {})
    assert fingerprint(len, (flat,), {}) != fingerprint(len, (flat.view(np.int32),), {})
    assert fingerprint(len, ([1, 2],), {}) != fingerprint(len, ((1, 2),), {})
    assert fingerprint(len, ("1",), {}) != fingerprint(len, (1,), {})


def test_frames_are_keyed_on_their_values():
    frame = pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]})
    edited = frame.copy()
    edited.loc[1, "a"] = 2.5
    assert fingerprint(len, (frame,), {}) == fingerprint(len, (frame.copy(),), {})
    assert fingerprint(len, (frame,), {}) != fingerprint(len, (edited,), {})


def test_an_argument_it_cannot_read_exactly_is_refused():
    with pytest.raises(TypeError, match="cannot key"):
        fingerprint(len, (object(),), {})


def test_the_byte_bound_drops_the_least_recently_used():
    cache = SharedResults(3 * 8000)
    for name in "abc":
        cache.get(name, lambda: np.zeros(1000))  # 8000 bytes each
    cache.get("a", lambda: pytest.fail("a is cached"))  # a is now the most recent
    cache.get("d", lambda: np.zeros(1000))  # over the bound: b goes
    assert cache.bytes <= 3 * 8000 and len(cache) == 3
    rebuilt = []
    cache.get("b", lambda: rebuilt.append("b") or np.zeros(1000))
    assert rebuilt == ["b"]
    big = cache.get("huge", lambda: np.zeros(10_000))  # larger than the bound: returned, not kept
    assert big.shape == (10_000,) and cache.bytes <= 3 * 8000


def test_dropping_large_results_hands_their_pages_back(monkeypatch):
    """glibc keeps freed memory in its arenas: without a trim the server's memory stayed up once a long input's
    results were dropped."""
    shared.return_freed_memory()  # the real call: glibc's malloc_trim, or nothing where there is none
    trims = []
    monkeypatch.setattr(shared, "return_freed_memory", lambda: trims.append(len(trims)))
    cache = SharedResults(5 * shared.TRIM_BYTES // 2)
    half = shared.TRIM_BYTES // 8 // 2  # float64 values in half the trim threshold
    for name in "abcd":
        cache.get(name, lambda: np.zeros(half))
    assert not trims  # nothing dropped yet (2 x the threshold kept)
    cache.get("e", lambda: np.zeros(4 * half))  # a's and b's and c's halves go: more than the threshold
    assert trims == [0]
    cache.get("f", lambda: np.zeros(10))
    assert trims == [0]  # d's half of the threshold dropped: not worth a trim


def test_results_nobody_asked_for_expire():
    now = [0.0]
    cache = SharedResults(10**6, kept_for_s=60, clock=lambda: now[0])
    cache.get("old", lambda: "x")
    now[0] = 30
    cache.get("new", lambda: "y")
    now[0] = 70  # old unused for 70 s, new for 40 s
    cache.get("newest", lambda: "z")
    assert len(cache) == 2 and cache.bytes == 2


def test_results_only_closed_sessions_asked_for_are_kept_within_their_own_bound():
    """Hundreds of sessions opened and closed must not leave their passes behind: what no open session asked for is
    held within closed_bytes (least recently used first), what an open session asked for within max_bytes."""
    asking, open_sessions = ["a"], {"a", "b"}
    cache = SharedResults(10**6, closed_bytes=2 * 8000, session=lambda: asking[0], is_open=open_sessions.__contains__)
    for name in ("a1", "a2", "a3", "a4"):
        cache.get(name, lambda: np.zeros(1000))  # 8000 bytes each
    asking[0] = "b"
    cache.get("a1", lambda: pytest.fail("a1 is cached"))  # b asks for one of a's results too
    open_sessions.discard("a")  # a's browser closes
    cache.get("b1", lambda: np.zeros(1000))
    assert len(cache) == 4 and cache.bytes == 4 * 8000  # a1 (b holds it), a3 and a4 (the newest two of a's), b1
    rebuilt = []
    cache.get("a2", lambda: rebuilt.append("a2") or np.zeros(1000))
    assert rebuilt == ["a2"]
    open_sessions.discard("b")
    asking[0] = None
    cache.get("c1", lambda: np.zeros(1000))  # asked outside any session: nobody holds it from the start
    assert cache.bytes == 2 * 8000 and len(cache) == 2


def test_the_size_estimate_follows_the_figure_json():
    for n in (4, 40):
        labels = [f"t{i}" for i in range(n)]
        fig = viz.head_heatmap(weights(n=n), labels, labels, scores=weights(1, n), theme=viz.Theme())
        estimate, sent = size_of(fig), len(fig.to_json())
        assert sent / 4 < estimate < sent * 4, (n, estimate, sent)


def test_threads_asking_at_once_all_get_a_correct_result():
    cache = SharedResults(10**6)
    results = []

    def ask(seed):
        for _ in range(20):
            value = cache.get(f"k{seed % 3}", lambda: seed % 3)
            results.append((seed % 3, value))

    run_together(ask, 8, timeout_s=30)
    assert len(results) == 160
    assert all(key == value for key, value in results)


def test_sessions_that_miss_the_same_key_at_once_wait_for_one_build():
    cache = SharedResults(10**6)
    builds, results = [], []

    def build():
        builds.append(1)
        threading.Event().wait(0.2)  # a slow pass: the others arrive meanwhile
        return "pass"

    run_together(lambda _: results.append(cache.get("the lecture's link", build)), 8, timeout_s=30)
    assert results == ["pass"] * 8 and len(builds) == 1


def test_a_session_arriving_while_a_result_is_stored_does_not_build_it_again(monkeypatch):
    """The key stays "being built" until its result is in the cache: a session that asks while the result is sized
    and stored waits for it, not builds it a second time."""
    import ui.shared

    cache, builds = SharedResults(10**6), []
    sizing, stored = threading.Event(), threading.Event()

    def slow_size(value):  # the first build is between its build() and its entry
        sizing.set()
        stored.wait(10)
        return 8

    monkeypatch.setattr(ui.shared, "size_of", slow_size)
    first = threading.Thread(target=cache.get, args=("k", lambda: builds.append(1) or "pass"))
    first.start()
    assert sizing.wait(10)
    second = threading.Thread(target=lambda: cache.get("k", lambda: builds.append(2) or "again"))
    second.start()
    second.join(0.3)  # it waits for the first session's result (or, if the key was let go too early, builds again)
    stored.set()
    first.join(10)
    second.join(10)
    assert builds == [1]


def test_a_failed_build_is_not_kept_and_can_be_retried():
    cache = SharedResults(10**6)
    with pytest.raises(ValueError):
        cache.get("k", lambda: (_ for _ in ()).throw(ValueError("nothing to read")))
    assert cache.get("k", lambda: "ok") == "ok" and len(cache) == 1


def test_passes_are_sized_through_their_dataclasses():
    from ui.analysis import Attention, KindAttention

    weights = np.zeros((2, 4, 10, 10), dtype=np.float32)
    kind = KindAttention("encoder.self_attn", "src", "src", weights, weights.copy(), np.ones((10, 10), dtype=bool))
    assert size_of(Attention((kind,))) >= 2 * weights.nbytes + 100


def test_the_server_skips_per_rerun_housekeeping():
    """After every rerun Streamlit would walk every imported module's path (file watcher) and collect all garbage:
    most of a lecture hall's server CPU once figures are shared (benchmarks.load --lecture)."""
    config = tomllib.loads((Path(__file__).parents[1] / ".streamlit" / "config.toml").read_text())
    assert config["server"]["fileWatcherType"] == "none"
    assert config["runner"]["postScriptGC"] is False


def test_a_shared_figure_carries_its_key_as_its_data_revision():
    # Streamlit hands each chart it has drawn to Plotly.react again, as a copy: the same datarevision tells Plotly.js
    # the data is unchanged (no second full drawing), another one that it changed.
    tokens = list("abcdef")
    fig = once(viz.head_heatmap, weights(0), tokens, tokens)
    assert fig.layout.datarevision == fingerprint(viz.head_heatmap, (weights(0), tokens, tokens), {})
    assert once(viz.head_heatmap, weights(1), tokens, tokens).layout.datarevision != fig.layout.datarevision


def expiring_cache(function, ttl_s=2.0, max_entries=3, clock=None):
    released = []
    cache = Expiring(function, ttl_s, max_entries, on_release=released.append, clock=clock or (lambda: 0.0))
    return cache, released


def test_an_expiring_result_is_kept_for_its_ttl_then_computed_again():
    now, calls = [0.0], []
    cache, released = expiring_cache(lambda name: calls.append(name) or f"{name}@{now[0]}", clock=lambda: now[0])
    assert cache("eng-fra") == cache("eng-fra") == "eng-fra@0.0" and calls == ["eng-fra"]
    now[0] = 1.9
    assert cache("eng-fra") == "eng-fra@0.0"
    now[0] = 2.0  # ttl_s after it was computed, however often it was read since
    assert cache("eng-fra") == "eng-fra@2.0" and calls == ["eng-fra"] * 2
    assert released == ["eng-fra@0.0"]


def test_expiring_keeps_max_entries_and_releases_the_least_recently_used():
    cache, released = expiring_cache(lambda number, *, twice=False: 2 * number if twice else number)
    assert [cache(1), cache(2), cache(3), cache(1)] == [1, 2, 3, 1]
    assert cache(4) == 4 and released == [2]  # 1 was read after 2
    assert cache(4, twice=True) == 8 and released == [2, 3]  # keyword arguments are part of the key
    clear()  # the app's "forget everything" clears these caches too
    assert released == [2, 3, 1, 4, 8] and cache(1) == 1


def test_callers_that_miss_the_same_expiring_key_at_once_wait_for_one_computation():
    computed, results = [], []

    def load(name):
        computed.append(name)
        threading.Event().wait(0.2)  # a checkpoint loading: the others arrive meanwhile
        return name.upper()
    cache, _ = expiring_cache(load)
    run_together(lambda _: results.append(cache("eng-fra")), 8, timeout_s=30)
    assert results == ["ENG-FRA"] * 8 and computed == ["eng-fra"]


def test_an_expiring_failure_is_raised_and_not_kept():
    outcomes = iter([OSError("the folder went away"), "loaded"])

    def load(name):
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    cache, released = expiring_cache(load)
    with pytest.raises(OSError, match="went away"):
        cache("eng-fra")
    assert cache("eng-fra") == "loaded" and released == []


def test_an_expired_entry_nobody_asks_for_is_released_by_the_next_call():
    """A checkpoint loaded an hour ago and not looked at since is freed, not only replaced when asked for again."""
    now = [0.0]
    cache, released = expiring_cache(lambda name: name.upper(), ttl_s=3600, clock=lambda: now[0])
    assert cache("reverse") == "REVERSE"
    now[0] = 3599.0
    assert cache("eng-fra") == "ENG-FRA" and released == []
    now[0] = 3660.0  # its hour is over, and a minute since the last look for stale entries
    assert cache("eng-fra") == "ENG-FRA"  # a hit on another key
    assert released == ["REVERSE"]
