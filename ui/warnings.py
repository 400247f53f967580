"""The app's words for what the library warns about: a caveat (transformer.Caveat) is a code and the values its
sentence quotes, and `worded` gives the sentence, one wording per code (transformer.CAVEATS). Read by its `code` and
`values` only, so that this module, like every ui module but passes, imports no transformer."""
from __future__ import annotations

from collections.abc import Callable

MAX_UNSEEN_NAMED = 5  # words the unseen-word warning quotes; it counts the rest

# What fills a model's max_len tokens besides the input's pieces, by the library's code (transformer.io.caveats.AROUND).
AROUND = {"eos": "with </s>", "bos_and_continuation": "with <s> and one to continue",
          "continuation": "with one to continue", "special_tokens": "with its special tokens",
          "special_tokens_and_continuation": "with one to continue and its special tokens"}


def read_limit(values: dict) -> str:
    """How much of an input this model reads: what max_len leaves for the pieces or, where the memory budget of one
    captured pass sets a lower limit (a caveat with `heads` among its values), that limit and why."""
    if "heads" in values:
        return (f"at most {values['reads']} pieces here: a pass over more would record more attention "
                f"({values['encoder_layers']} + {values['decoder_layers']} layers x {values['heads']} heads x "
                "length²) than this server allows")
    return f"at most {values['reads']} pieces (max_len {values['max_len']} tokens {AROUND[values['around']]})"


def chars_cut_off(values: dict) -> str:
    return (f"The input is longer than this model reads ({read_limit(values)}): the characters after the first "
            f"{values['chars']:,} were cut off.")


def pieces_cut_off(values: dict) -> str:
    return (f"The input is {values['pieces']} pieces long but this model reads {read_limit(values)}: the last "
            f"{values['cut']} were cut off.")


def longer_than_trained(values: dict) -> str:
    longest = values["longest"]
    seen = (f"than any sentence of its training corpus (at most {longest} pieces; its longer training inputs were "
            "those sentences joined)" if values["joined"] else f"than anything this model trained on (at most "
            f"{longest} pieces)")
    return f"The input is {values['pieces']} pieces long, longer {seen}: expect dropped or invented words."


def unseen_words(values: dict) -> str:
    unseen = values["words"]
    named = ", ".join(f"“{word}”" for word in unseen[:MAX_UNSEEN_NAMED])
    more = f" and {len(unseen) - MAX_UNSEEN_NAMED} more" if len(unseen) > MAX_UNSEEN_NAMED else ""
    return (f"Never in this model's training data: {named}{more}. It can only guess "
            f"{'this word' if len(unseen) == 1 else 'these words'} from the pieces, so expect an invented or missing "
            "word there.")


def unended(values: dict) -> str:
    """Where decoding stopped an output without </s>: at its default limit (a caveat with `src_len`) or max_len."""
    where = (f"twice the input's length plus 10 tokens (the input: {values['src_len']} tokens with </s>)"
             if "src_len" in values else f"max_len ({values['max_len']} tokens with <s>)")
    return f"The model did not end its output: decoding stopped it after {values['pieces']} pieces, at {where}."


WORDINGS: dict[str, Callable[[dict], str]] = {
    "cut_off_chars": chars_cut_off,
    "cut_off_chars_by_memory": chars_cut_off,
    "cut_off_pieces": pieces_cut_off,
    "cut_off_pieces_by_memory": pieces_cut_off,
    "longer_than_trained": longer_than_trained,
    "years_out_of_range": lambda values: (
        f"This model was trained on years {values['first']}-{values['last']} only: it cannot write "
        f"{', '.join(map(str, values['years']))} and will put a year from its range instead."),
    "unseen_words": unseen_words,
    "unknown_pieces": lambda values: (
        f"{values['count']} piece(s) of the input are unknown to this model's vocabulary and shown as <unk>."),
    "unended_at_output_limit": unended,
    "unended_at_max_len": unended,
    "no_mask_token": lambda values: ("This model predicts masked tokens: put a mask token (such as [MASK]) where a "
                                     "word is missing, e.g. “Paris is the [MASK] of France.”"),
}


def worded(caveat) -> str:
    """The sentence the app shows for a caveat of the library (anything with its `code` and `values`)."""
    return WORDINGS[caveat.code](caveat.values)
