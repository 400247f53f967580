"""Every view of every shipped checkpoint on each of its card's examples, on a laptop (1400 x 900) and in lecture
mode (1280 x 720; ui.screen.DEFAULT_PX is each one's space until a browser measures it): none shows an exception or
an error. One AppTest per checkpoint and screen, switched from view to view and example to example as a person
would (the view picker, the input box), so the checkpoint loads once and each example is translated once; the
Model view is drawn both as heatmaps and as lines on both screens. Every figure is also validated by plotly.py as it
is built (conftest), so a domain, size or position Plotly refuses fails here too."""
from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from helpers import APP, ROOT
from ui.views import VIEWS
from ui.views.model import DRAWN_AS

CHECKPOINTS = ROOT / "checkpoints"
SHIPPED = ("reverse", "reverse-1layer", "dates", "induction", "eng-fra", "english-lm")
SCREENS = {"laptop": "0", "lecture": "1"}  # the lecture flag: lecture mode is drawn for a 1280 x 720 projector


def examples(checkpoint: str) -> list[str]:
    return json.loads((CHECKPOINTS / checkpoint / "card.json").read_text())["examples"]


def drawings() -> list[tuple[str, str | None]]:
    """(view, how the Model view draws its heads, or None) for every view, the Model view once per drawing."""
    return [(view.key, drawn) for view in VIEWS for drawn in (DRAWN_AS if view.key == "model" else (None,))]


def shown_failures(at: AppTest) -> list[str]:
    """What the page shows that went wrong: exceptions (with their traceback's last line) and errors."""
    return ([f"exception: {error.value}" for error in at.exception]
            + [f"error: {error.value}" for error in at.error])


def test_the_examples_cover_every_shipped_checkpoint():
    assert {path.name for path in CHECKPOINTS.iterdir() if (path / "card.json").is_file()} == set(SHIPPED)
    assert all(examples(checkpoint) for checkpoint in SHIPPED)


@pytest.mark.slow
@pytest.mark.timeout(900)  # eng-fra on a laptop: 150 runs, 40 s of CPU alone, minutes on two busy cores
@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("checkpoint", SHIPPED)
def test_no_view_shows_an_exception_on_any_card_example(checkpoint, screen, monkeypatch):
    monkeypatch.delenv("ATLAS_CHECKPOINTS", raising=False)  # the shipped folder
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(checkpoint=checkpoint, lecture=SCREENS[screen])
    at.run()
    assert not shown_failures(at), shown_failures(at)
    failures, drawn = [], 0
    for example in examples(checkpoint):
        for view, drawn_as in drawings():
            picker = at.selectbox(key="view") if screen == "lecture" else at.segmented_control(key="view")
            picker.set_value(view)
            if drawn_as is not None:
                at.session_state["model_as"] = drawn_as
            at.text_input(key="text").set_value(example)
            at.run()
            assert at.session_state["view"] == view and at.session_state["text"] == example
            if drawn_as is not None:
                assert at.session_state["model_as"] == drawn_as
            failures += [f"{view}{f' ({drawn_as})' if drawn_as else ''}, {example!r}: {failure}"
                         for failure in shown_failures(at)]
            drawn += 1
    assert drawn == len(examples(checkpoint)) * (len(VIEWS) + len(DRAWN_AS) - 1)
    assert not failures, "\n".join(failures)
