"""What a user should know before trusting an output, as data: a `Caveat` is a code and the values a sentence about
it quotes. The library never words them: the app does (ui/warnings.py), one sentence per code, so that what is wrong
is something code can test, count or translate, and the words are the app's to change."""
from __future__ import annotations

from dataclasses import dataclass, field

# Every code, and the names of the values each of its caveats carries (plain JSON: ints, strings, bools, lists). A code
# fixes its values, so a variant that quotes other facts (a limit set by the memory budget, not by max_len) is a code
# of its own.
CAVEATS: dict[str, tuple[str, ...]] = {
    # The input's characters after the first `chars` were never read; the model reads at most `reads` pieces,
    # `max_len` tokens with the tokens AROUND names.
    "cut_off_chars": ("chars", "reads", "max_len", "around"),
    # The same, but the memory budget of one captured pass sets `reads`: more pieces would record more attention
    # (encoder_layers + decoder_layers layers x heads heads x length²) than the server allows.
    "cut_off_chars_by_memory": ("chars", "reads", "encoder_layers", "decoder_layers", "heads"),
    # The input is `pieces` pieces long and its last `cut` were cut off to fit `reads` (as above).
    "cut_off_pieces": ("pieces", "cut", "reads", "max_len", "around"),
    "cut_off_pieces_by_memory": ("pieces", "cut", "reads", "encoder_layers", "decoder_layers", "heads"),
    # The input is `pieces` pieces long, longer than any training input (at most `longest`); `joined`: the longest
    # training inputs were sentences joined (data.recipes.JOINED_PAIRS), so `longest` is a sentence's.
    "longer_than_trained": ("pieces", "longest", "joined"),
    # The dates task learned years `first`-`last` only; `years` of the input are outside them.
    "years_out_of_range": ("years", "first", "last"),
    # The words of the input its training sources never contain, each once, in order.
    "unseen_words": ("words",),
    # `count` pieces of the input are the vocabulary's <unk>.
    "unknown_pieces": ("count",),
    # The output has no </s>: decoding stopped it after `pieces` pieces at its default limit
    # (decoding.output_limit of an input of `src_len` tokens with </s>) ...
    "unended_at_output_limit": ("pieces", "src_len"),
    # ... or at `max_len` tokens with <s> (the caller's limit, the model's max_len or the memory budget's).
    "unended_at_max_len": ("pieces", "max_len"),
    # An encoder-only model predicts masked tokens, and the input has no mask token.
    "no_mask_token": (),
}

# What fills a model's max_len tokens besides the input's pieces (Checkpoint.input_room): </s> after them (our
# encoders); <s> before them and one token to continue (our language models); one token to continue (a converted
# language model); the converted tokenizer's own special tokens ([CLS] ... [SEP], <s> ... </s>).
AROUND = ("eos", "bos_and_continuation", "continuation", "special_tokens", "special_tokens_and_continuation")


@dataclass(frozen=True)
class Caveat:
    """One thing the user should know before trusting an output: `code` (a key of CAVEATS) says what, `values` the
    numbers and words a sentence about it needs, exactly the names CAVEATS gives the code. ValueError otherwise: a
    code the app has no words for, or values it does not expect, fail where they are made."""

    code: str
    values: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.code not in CAVEATS:
            raise ValueError(f"unknown caveat code {self.code!r}; known codes: {', '.join(CAVEATS)}")
        if set(self.values) != set(CAVEATS[self.code]):
            raise ValueError(f"a {self.code!r} caveat carries {sorted(CAVEATS[self.code])}, got {sorted(self.values)}")
