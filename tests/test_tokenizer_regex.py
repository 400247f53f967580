"""A converted tokenizer's regexes cannot stall the server: a Split pre-tokenizer's, a Replace normalizer's or a
Replace decoder's regex that could backtrack for long (`(a+)+b`) is refused on conversion and on loading, with one
line naming the file; the patterns real tokenizers ship load; and an encode that runs long lets other threads run."""
from __future__ import annotations

import json
import shutil
import threading
import time

import pytest

from transformer import CheckpointError, load_checkpoint
from transformer.io.backtracking import pattern_problem
from transformer.io.convert import main
from transformer.io.tokenizer import JsonTokenizer

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("transformers", reason="the converter's tests need transformers (requirements-dev)")

from families import SHAPES, save_family  # noqa: E402  (after the skips)

HOSTILE = "(a+)+b"
SHIPPED = {  # the pre-tokenizer regexes of real tokenizers, and the other regexes transformers' converters write
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
              r"""|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
             r"""|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "gpt4o": r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
             r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"""
             r"""[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*"""
             r"""|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "clip": r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
    "spaces": " {2,}", "ends": r"\A +| +\z", "metaspace": r"\A▁", "whitespace": r"\s+", "quotes": "``|''",
    "plain repeated group": "(?:ab)+", "class with a bracket": "[]a]+", "posix class": "[[:alpha:]]+",
}
REFUSED = {
    HOSTILE: "repeats '(a+)+', a group whose inside repeats or alternates",
    "(a|aa)*c": "repeats '(a|aa)*'", "(?:a?b?)+x": "repeats '(?:a?b?)+'", "(a{1,30}){1,30}": "repeats",
    "(?:x|(?:a+)+)y": "repeats '(?:a+)+'", "(?=a+)+": "repeats",
    r"\s*\s*\s*x": "combines 3 unbounded repetitions", "a{0,900}a{0,900}a{0,900}b": "combines 3",
    r"(?:\s*)\s*(?=\s*x)": "combines 3",
    "a?" * 8 + "a" * 8: "combines 8 optional parts and alternatives", "(?:a|a)" * 6 + "b": "combines 6 optional",
    "(?:x|(?:a|a)(?:a|a)(?:a|a))(?:a|a)(?:a|a)(?:a|a)": "combines 7",
    r"(a)\1+": "has a back-reference", r"(a)\g<1>": "has a back-reference or subexpression call",
    "(?~ab)": "has a group construct", "(?(1)a|b)": "has a group construct",
    "(a": "cannot be read here", "[a": "cannot be read here", "a**": "cannot be read here", "+a": "cannot be read",
}


@pytest.mark.parametrize("name", SHIPPED)
def test_the_regexes_real_tokenizers_ship_pass_and_load(name):
    assert pattern_problem(SHIPPED[name]) is None
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex(SHIPPED[name]), "isolated")
    tokenizer = JsonTokenizer("tokenizer.json", backend.to_str().encode())
    assert tokenizer.encode("a") == [0]


@pytest.mark.parametrize("pattern", REFUSED)
def test_regexes_that_can_backtrack_for_long_are_refused(pattern):
    assert REFUSED[pattern] in (pattern_problem(pattern) or "")


def split_first(tokenizer: dict) -> None:
    tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": HOSTILE}, "behavior": "Isolated", "invert": False},
        tokenizer["pre_tokenizer"]]}


def replace_first(tokenizer: dict) -> None:
    tokenizer["normalizer"] = {"type": "Replace", "pattern": {"Regex": HOSTILE}, "content": "b"}


def decoder_replace(tokenizer: dict) -> None:
    tokenizer["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"Regex": HOSTILE}, "content": "b"}, tokenizer["decoder"]]}


@pytest.mark.parametrize(("change", "where"), [(split_first, "the pre-tokenizer's Split"),
                                               (replace_first, "the normalizer's Replace"),
                                               (decoder_replace, "the decoder's Replace")])
def test_a_backtracking_regex_is_refused_on_conversion_and_on_loading_in_one_line(tmp_path, change, where):
    save_family("llama", tmp_path / "hf", **SHAPES["llama"][0])
    hostile = tmp_path / "hostile"
    shutil.copytree(tmp_path / "hf", hostile)
    values = json.loads((hostile / "tokenizer.json").read_text())
    change(values)
    (hostile / "tokenizer.json").write_text(json.dumps(values))
    message = (f"^error: {hostile / 'tokenizer.json'}: {where} regex '\\(a\\+\\)\\+b' repeats '\\(a\\+\\)\\+', a "
               "group whose inside repeats or alternates: it can backtrack exponentially in the input's length; "
               "refused$")
    with pytest.raises(SystemExit, match=message):
        main(["llama", str(hostile), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
    main(["llama", str(tmp_path / "hf"), str(tmp_path / "atlas")])
    (tmp_path / "atlas" / "tokenizer.json").write_text(json.dumps(values))  # planted after conversion
    with pytest.raises(CheckpointError, match=message.removeprefix("^error: ").replace("hostile", "atlas")) as error:
        load_checkpoint(tmp_path / "atlas")
    assert "\n" not in str(error.value)


def test_a_long_encode_lets_other_threads_run(tmp_path):
    """The freeze the regex check prevents, had a slow regex got past it: the library's encode holds the
    interpreter's lock throughout; JsonTokenizer's lets go of it, so another session's request (here a thread that
    wakes every 10 ms) is answered within the second while one input takes seconds."""
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tokenizer = JsonTokenizer(tmp_path / "tokenizer.json", backend.to_str().encode())
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex(HOSTILE), "isolated")
    tokenizer._backend = backend  # past the check, as a regex it missed would be
    wakes: list[float] = []
    done = threading.Event()

    def answer() -> None:
        while not done.is_set():
            wakes.append(time.perf_counter())
            time.sleep(0.01)

    other = threading.Thread(target=answer)
    other.start()
    took, run = 0.0, 21
    try:
        while took < 1.0 and run < 30:  # each letter more doubles the work: long enough to show a freeze, on any CPU
            run += 1
            start = time.perf_counter()
            tokenizer.encode(("a" * run + "!") * 8)
            took = time.perf_counter() - start
    finally:
        done.set()
        other.join()
    assert took > 1.0, f"the encode took {took:.2f} s, too short to show anything"
    longest_wait = max(later - earlier for earlier, later in zip(wakes, wakes[1:], strict=False))
    assert longest_wait < 1.0, f"another thread waited {longest_wait:.2f} s while one input was encoded"
