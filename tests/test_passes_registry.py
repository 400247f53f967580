"""ui.passes.run: a declared pass (ui.model_pass.Pass) is given what its function names, goes through its declaration's
one cache, and comes back as the declared type, read-only."""
from __future__ import annotations

import types
from typing import NamedTuple

import numpy as np
import pytest
import torch

from ui import passes
from ui.model_pass import FRESH, SHARED, Pass
from ui.page import Page

CALLS = []


class Measured(NamedTuple):
    values: np.ndarray
    names: tuple[str, ...]


def measure(path: str, src_ids: tuple, tgt_ids: tuple, scale: int = 1) -> dict:
    """A pass's function of the kind ui.passes holds: it names `path`; what it returns is typed by the declaration."""
    CALLS.append((path, src_ids, tgt_ids, scale))
    return {"values": torch.tensor([len(src_ids), len(tgt_ids)]) * scale, "names": ["src", "tgt"]}


def add(a, b):
    return a + b


MEASURED = Pass("test measure", f"{__name__}:measure", Measured, SHARED, "Measuring…")


def page_of(src_ids: tuple, tgt_ids: tuple) -> Page:
    analysis = types.SimpleNamespace(src_ids=src_ids, tgt_ids=tgt_ids)
    return Page(name="x", path="/nowhere/x", version=1, config=None, card=None, snapshot_names=(), text="a b",
                beam_size=1, analysis=analysis, theme=None, lecture=False, image_format="png")


def test_a_page_gives_its_checkpoint_and_its_ids_and_the_cache_computes_once():
    CALLS.clear()
    page = page_of((5, 6, 7), (1, 2))
    first = page.run(MEASURED)
    again = page.run(MEASURED, scale=1)  # the default spelled out: the same result
    assert first is again and CALLS == [("/nowhere/x", (5, 6, 7), (1, 2), 1)]
    assert isinstance(first, Measured) and first.names == ("src", "tgt") and first.values.tolist() == [3, 2]
    with pytest.raises(ValueError, match="read-only"):
        first.values[0] = 0
    assert page.run(MEASURED, tgt_ids=(1,), scale=2).values.tolist() == [6, 2]  # a view's own ids win


def test_a_pass_is_refused_what_it_does_not_take_or_what_run_gives():
    page = page_of((5,), (1,))
    with pytest.raises(TypeError, match="unexpected keyword"):
        page.run(MEASURED, colour="red")
    with pytest.raises(TypeError, match="gives"):
        passes.run(MEASURED, "/nowhere/x", 1, model="another", src_ids=(), tgt_ids=())


def test_two_passes_of_one_name_and_a_result_of_the_wrong_type_are_errors():
    with pytest.raises(ValueError, match="two passes are named"):
        passes.run(Pass("test measure", f"{__name__}:add", int, FRESH), "/nowhere/x", 1, a=1, b=2)
    assert passes.run(Pass("test add", f"{__name__}:add", int, FRESH), "/nowhere/x", 1, a=1, b=2) == 3
    with pytest.raises(TypeError, match="not"):
        passes.run(Pass("test concat", f"{__name__}:add", int, FRESH), "/nowhere/x", 1, a="1", b="2")
