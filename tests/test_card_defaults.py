"""What a card tells `Checkpoint.translate`: its default decoding and the warnings an input deserves."""
import json
import shutil
from pathlib import Path

import pytest

from transformer import Caveat, CheckpointError, load_checkpoint

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints"


@pytest.fixture
def reverse_copy(tmp_path):
    folder = tmp_path / "reverse"
    shutil.copytree(SHIPPED / "reverse", folder)
    return folder


def edit_card(folder: Path, **fields) -> None:
    card = json.loads((folder / "card.json").read_text())
    for name, value in fields.items():
        card[name] = {**card.get(name, {}), **value}
    (folder / "card.json").write_text(json.dumps(card))


def test_translate_decodes_as_the_card_says(reverse_copy):
    edit_card(reverse_copy, decoding={"beam_size": 3, "length_penalty": 1.0})
    checkpoint = load_checkpoint(reverse_copy)
    default = checkpoint.translate("attention42")
    assert default.text == checkpoint.translate("attention42", beam_size=3).text == "24noitnetta"
    assert checkpoint.card.decoding == {"beam_size": 3, "length_penalty": 1.0}


@pytest.mark.parametrize("decoding", [{"beam_size": 0}, {"beam_size": 2.5}, {"length_penalty": "long"},
                                      {"beam_size": 2, "temperature": 1.0}, {"coverage_penalty": -0.1},
                                      {"coverage_penalty": 3}])
def test_bad_decoding_settings_are_refused(reverse_copy, decoding):
    edit_card(reverse_copy, decoding=decoding)
    with pytest.raises(CheckpointError, match="decoding"):
        load_checkpoint(reverse_copy)


def test_input_longer_than_any_training_input_is_warned(reverse_copy):
    edit_card(reverse_copy, training={"longest_source_tokens": 8})
    checkpoint = load_checkpoint(reverse_copy)
    assert not any(w.code == "longer_than_trained" for w in checkpoint.translate("abcdefgh").warnings)
    (warning,) = [w for w in checkpoint.translate("abcdefghi").warnings if w.code == "longer_than_trained"]
    assert warning.values == {"pieces": 9, "longest": 8, "joined": False}
    edit_card(reverse_copy, training={"concat_clauses": 0.15})  # as if it had also trained on sentences joined
    (warning,) = [w for w in load_checkpoint(reverse_copy).translate("abcdefghi").warnings
                  if w.code == "longer_than_trained"]
    assert warning.values == {"pieces": 9, "longest": 8, "joined": True}


def test_dates_warns_about_years_it_never_saw():
    dates = load_checkpoint(SHIPPED / "dates")
    out_of_range = Caveat("years_out_of_range", {"years": [1789], "first": 1900, "last": 2099})
    assert out_of_range in dates.translate("14 July 1789").warnings
    assert dates.translate("14 July 1989").warnings == []
