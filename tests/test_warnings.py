"""The app's words for the library's caveats (ui/warnings.py): every code the library can give has its sentence, and
each sentence quotes its values as the app shows them."""
from __future__ import annotations

import pytest

from transformer import CAVEATS, Caveat
from transformer.io import caveats
from ui.warnings import AROUND, WORDINGS, worded

MEMORY = {"reads": 35, "encoder_layers": 64, "decoder_layers": 64, "heads": 128}  # the memory budget sets the limit
BUDGET = ("at most 35 pieces here: a pass over more would record more attention (64 + 64 layers x 128 heads x "
          "length²) than this server allows")
UNSEEN = ("It can only guess {} from the pieces, so expect an invented or missing word there.")

# One caveat of every code (and of each variant a value words differently), as the app words it.
WORDED = [
    (Caveat("cut_off_chars", {"chars": 2048, "reads": 63, "max_len": 64, "around": "eos"}),
     "The input is longer than this model reads (at most 63 pieces (max_len 64 tokens with </s>)): the characters "
     "after the first 2,048 were cut off."),
    (Caveat("cut_off_chars_by_memory", {"chars": 65536, **MEMORY}),
     f"The input is longer than this model reads ({BUDGET}): the characters after the first 65,536 were cut off."),
    (Caveat("cut_off_pieces", {"pieces": 66, "cut": 3, "reads": 63, "max_len": 64, "around": "eos"}),
     "The input is 66 pieces long but this model reads at most 63 pieces (max_len 64 tokens with </s>): the last 3 "
     "were cut off."),
    (Caveat("cut_off_pieces", {"pieces": 119, "cut": 57, "reads": 62, "max_len": 64, "around": "bos_and_continuation"}),
     "The input is 119 pieces long but this model reads at most 62 pieces (max_len 64 tokens with <s> and one to "
     "continue): the last 57 were cut off."),
    (Caveat("cut_off_pieces_by_memory", {"pieces": 100, "cut": 65, **MEMORY}),
     f"The input is 100 pieces long but this model reads {BUDGET}: the last 65 were cut off."),
    (Caveat("longer_than_trained", {"pieces": 9, "longest": 8, "joined": False}),
     "The input is 9 pieces long, longer than anything this model trained on (at most 8 pieces): expect dropped or "
     "invented words."),
    (Caveat("longer_than_trained", {"pieces": 9, "longest": 8, "joined": True}),
     "The input is 9 pieces long, longer than any sentence of its training corpus (at most 8 pieces; its longer "
     "training inputs were those sentences joined): expect dropped or invented words."),
    (Caveat("years_out_of_range", {"years": [1789, 2100], "first": 1900, "last": 2099}),
     "This model was trained on years 1900-2099 only: it cannot write 1789, 2100 and will put a year from its range "
     "instead."),
    (Caveat("unseen_words", {"words": ["cc"]}),
     "Never in this model's training data: “cc”. " + UNSEEN.format("this word")),
    (Caveat("unseen_words", {"words": ["a", "b", "c", "aa", "bb"]}),
     "Never in this model's training data: “a”, “b”, “c”, “aa”, “bb”. " + UNSEEN.format("these words")),
    (Caveat("unseen_words", {"words": ["a", "b", "c", "aa", "bb", "cc", "dd"]}),
     "Never in this model's training data: “a”, “b”, “c”, “aa”, “bb” and 2 more. " + UNSEEN.format("these words")),
    (Caveat("unknown_pieces", {"count": 2}),
     "2 piece(s) of the input are unknown to this model's vocabulary and shown as <unk>."),
    (Caveat("unended_at_output_limit", {"pieces": 17, "src_len": 4}),
     "The model did not end its output: decoding stopped it after 17 pieces, at twice the input's length plus 10 "
     "tokens (the input: 4 tokens with </s>)."),
    (Caveat("unended_at_max_len", {"pieces": 5, "max_len": 6}),
     "The model did not end its output: decoding stopped it after 5 pieces, at max_len (6 tokens with <s>)."),
    (Caveat("no_mask_token"),
     "This model predicts masked tokens: put a mask token (such as [MASK]) where a word is missing, e.g. “Paris is "
     "the [MASK] of France.”"),
]


def test_every_code_the_library_gives_has_words():
    assert set(WORDINGS) == set(CAVEATS)
    assert set(AROUND) == set(caveats.AROUND)
    assert {caveat.code for caveat, _ in WORDED} == set(CAVEATS)  # each sentence below is checked


@pytest.mark.parametrize(("caveat", "sentence"), WORDED, ids=lambda case: getattr(case, "code", ""))
def test_a_caveat_is_worded_with_its_values(caveat, sentence):
    assert worded(caveat) == sentence


@pytest.mark.parametrize("around", caveats.AROUND)
def test_every_input_room_is_worded_in_the_cut_off_sentence(around):
    caveat = Caveat("cut_off_pieces", {"pieces": 9, "cut": 1, "reads": 8, "max_len": 10, "around": around})
    assert f"(max_len 10 tokens {AROUND[around]}): the last 1 were cut off." in worded(caveat)


def test_a_caveat_carries_exactly_the_values_its_code_names():
    with pytest.raises(ValueError, match="unknown caveat code 'cut_off'"):
        Caveat("cut_off", {})
    with pytest.raises(ValueError, match="carries"):
        Caveat("unknown_pieces", {"count": 1, "pieces": 2})
