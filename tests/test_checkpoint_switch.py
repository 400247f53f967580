"""A checkpoint switch, as the sidebar's picker makes it (AppTest on the shipped checkpoints): the typed sentence
stays where the other checkpoint can read it and comes back when the lecturer switches back; the settings that
named a part of the previous model go back to their defaults, with a line saying which."""
from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.slow
CHECKPOINTS = Path(__file__).parents[1] / "checkpoints"


@pytest.fixture(autouse=True)
def shipped(app, monkeypatch):
    """conftest's app, on the shipped checkpoints."""
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(CHECKPOINTS))


def switch(at: AppTest, name: str) -> AppTest:
    at.selectbox(key="checkpoint").set_value(name).run()
    assert not at.exception, at.exception
    return at


def test_the_typed_sentence_comes_back_after_a_switch_and_back(app):
    at = app(checkpoint="eng-fra", text="My neighbour painted his fence green.")
    switch(at, "reverse")
    assert at.text_input(key="text").value != "My neighbour painted his fence green."  # reverse cannot read it
    switch(at, "eng-fra")
    assert at.text_input(key="text").value == "My neighbour painted his fence green."


def test_a_sentence_the_other_checkpoint_reads_is_kept(app):
    at = app(checkpoint="eng-fra", text="The old man is walking his dog.")
    switch(at, "english-lm")  # another task, but every piece of the sentence is one it knows
    assert at.text_input(key="text").value == "The old man is walking his dog."


def test_an_example_is_not_carried_to_another_task(app):
    at = switch(app(checkpoint="eng-fra"), "dates")
    assert at.text_input(key="text").value in at.selectbox(key="example").options


def test_the_previous_model_s_settings_are_dropped_with_a_line(app):
    chosen = {"layer": "2", "head": "3", "layer_b": "2", "head_b": "3", "corrupt": "I am warm."}
    at = app(checkpoint="eng-fra", view="compare", **chosen)
    switch(at, "reverse")
    for name, value in chosen.items():
        assert at.query_params.get(name) != value, name
    (line,) = [warning.value for warning in at.warning if "Switched to" in warning.value]
    assert "layer" in line and "head" in line and "corrupt" in line
    assert at.query_params["view"] == "compare"  # the view is kept
    at.run()  # the line stays through the page's own reruns until the user acts
    assert any("Switched to" in warning.value for warning in at.warning)
