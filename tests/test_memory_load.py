"""A converted long-context model under a crowd of long links: the server's memory stays within its budget
(ui.memory) and the shared results' bounds, it stays healthy, and a normal page is served within 10 s throughout (a
page that waits for memory lets newer, lighter pages by). Each session of the crowd gets its figure or, after its
bounded wait, a message that the server is busy: never a traceback."""
from __future__ import annotations

import asyncio
import random
import shutil
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import pytest

pytest.importorskip("transformers", reason="the long-context model is written with transformers (requirements-dev)")
from families import CORPUS, save_family

from benchmarks.load.protocol import AppSession, SessionLog, open_websocket
from deploy.server import streamlit_server
from transformer.io.convert import main as convert
from ui.shared import FIGURE_BYTES, PASS_BYTES

pytestmark = pytest.mark.slow  # a server and 24 sessions

SESSIONS = 24
TEXT_CHARS = 1000
BUDGET_MB = 64  # one long page (46 MB, estimated): the crowd takes its turns one at a time, a core left for others
NORMAL_PAGE_S = 10.0
PROBE_EVERY_S = 2.0
RUN_TIMEOUT_S = 240.0  # one session's page: its wait for memory (ui.memory.WAIT_S) and its pass, on a busy machine
BUSY = b"This server is busy with other long inputs"


def long_text(number: int) -> str:
    """TEXT_CHARS characters of the tokenizer's sentences, shuffled apart for each session (a new pass each)."""
    rng = random.Random(number)
    words = " ".join(CORPUS).split()
    text = ""
    while len(text) < TEXT_CHARS:
        text += rng.choice(words) + " "
    return text[:TEXT_CHARS].strip()


def vm_hwm(process) -> int:
    """The server's peak resident memory, bytes."""
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


async def open_page(url: str, query: dict, number: int) -> tuple[float, bytes, list[str]]:
    """A new session's first page: (seconds, the messages it was sent but figures, its exceptions)."""
    log = SessionLog(number)
    async with open_websocket(url, RUN_TIMEOUT_S) as websocket:
        start = time.monotonic()
        page = await AppSession(websocket, log, urlencode(query), RUN_TIMEOUT_S).rerun([])
    return time.monotonic() - start, b"".join(log.received), page.exceptions


def healthy(url: str) -> bool:
    with urllib.request.urlopen(url + "_stcore/health", timeout=NORMAL_PAGE_S) as answer:
        return answer.status == 200


def probes_until(url: str, done: threading.Event) -> list[tuple[bool, float]]:
    """(health, seconds of a new normal page) every PROBE_EVERY_S until `done`: a browser of its own, on a loop of its
    own, so that reading the crowd's messages never delays it."""
    probes = []
    while not done.is_set():
        is_healthy = healthy(url)
        seconds, _, exceptions = asyncio.run(open_page(url, {"checkpoint": "normal", "text": f"abc{len(probes)}",
                                                             "view": "attention"}, SESSIONS + len(probes)))
        assert not exceptions, exceptions
        probes.append((is_healthy, seconds))
        done.wait(PROBE_EVERY_S)
    return probes


async def crowd_and_probes(url: str) -> tuple[list, list[tuple[bool, float]]]:
    """SESSIONS long links opened at once, and a normal page (and the health check) every PROBE_EVERY_S meanwhile."""
    done = threading.Event()
    probing = asyncio.create_task(asyncio.to_thread(probes_until, url, done))
    crowd = await asyncio.gather(*(open_page(url, {"checkpoint": "long-gpt2", "text": long_text(number),
                                                   "view": "attention"}, number) for number in range(SESSIONS)))
    done.set()
    return crowd, await probing


@pytest.mark.timeout(900)  # a model converted, a server started, 24 long pages and the probes on two cores
def test_a_crowd_of_long_links_keeps_the_server_within_its_budget(tiny_checkpoint, tmp_path):
    save_family("gpt2", tmp_path / "hf", n_positions=2048, n_embd=64, n_layer=4, n_head=8)  # long context
    root = tmp_path / "checkpoints"
    convert(["gpt2", str(tmp_path / "hf"), str(root / "long-gpt2")])
    shutil.copytree(tiny_checkpoint, root / "normal", ignore=shutil.ignore_patterns("resume.pt"))
    with streamlit_server(root, tmp_path / "streamlit.log", env={"ATLAS_MEMORY_BUDGET_MB": str(BUDGET_MB)}) as (
            url, process):
        for checkpoint, text in (("normal", "abc"), ("long-gpt2", long_text(-1))):  # both loaded, as on a server
            seconds, _, exceptions = asyncio.run(open_page(url, {"checkpoint": checkpoint, "text": text,
                                                                 "view": "attention"}, -1))
            assert not exceptions, exceptions
        one_long_page = vm_hwm(process)  # the model loaded and one long page drawn
        crowd, probes = asyncio.run(crowd_and_probes(url))
        peak = vm_hwm(process)
    assert all(not exceptions for _, _, exceptions in crowd), [exceptions for _, _, exceptions in crowd]
    served = [received for _, received, _ in crowd if BUSY not in received]
    assert served, "no session of the crowd got its page"
    assert probes and all(is_healthy for is_healthy, _ in probes)
    assert max(seconds for _, seconds in probes) <= NORMAL_PAGE_S, probes
    # What the crowd added: at most the budget in its pages at once, and the shared results' bounds (ui.shared).
    assert peak - one_long_page <= BUDGET_MB * 2**20 + PASS_BYTES + FIGURE_BYTES, (one_long_page, peak)
