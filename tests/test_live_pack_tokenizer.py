"""The live pack's text and tokenizers (ui/deck/live.js, run by node) against Python's: the same text read (normalised,
cut at max_len's characters), the same ids and pieces as typed, the same decoded text, for every test sentence and
every shipped checkpoint's source and target sentencepiece model (BPE and char)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from transformer import load_checkpoint
from transformer.io.onnx_export import tokenizer_table
from transformer.io.text import read_input

ROOT = Path(__file__).parents[1]
LIVE_JS = ROOT / "ui" / "deck" / "live.js"
pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node runs live.js (node 20, as .ci/run has)")
SENTENCES = [
    "She is reading a book.", "Où est la gare ? J'ai faim!", "The animal didn’t cross the street because it was tired.",
    "ﬁne   spaces\tand\nlines", "a☃☃b c", "héllo wörld", "x\x01y zero\u200bwidth", "  ", "12345 numbers 3.14 and $100",
    "attention42", "Wednesday, March 3, 2021", "Ça coûte 5 €, n'est-ce pas ?", "日本語のテキスト", "emoji 😀 here",
    "UPPER lower MiXeD", "a" * 50, "\ud800 lone", "don`t ‘quote’", "Zürich ½ ² ⅷ", "\ufeffbom\u00a0nbsp\u3000end",
    "We will go to the beach tomorrow, if it does not rain, and we will swim until the sun goes down.",
    "word " * 1000,  # past max_len x 32 characters: cut off
]
NODE = """
const live = require(process.argv[1]);
const data = JSON.parse(require("fs").readFileSync(0, "utf8"));
const tokenizer = live.tokenizer(data.table);
console.log(JSON.stringify(data.sentences.map((sentence) => {
  const [read, cut] = live.readInput(sentence, data.maxChars);
  const [ids, typed] = tokenizer.encodeTyped(read);
  return [read, cut, ids, typed, tokenizer.decode(ids), tokenizer.pieces(ids), live.words(read)];
}).concat([data.decoded.map((ids) => tokenizer.decode(ids))])));
"""


def in_node(table: dict, max_chars: int, decoded: list[list[int]]) -> list:
    done = subprocess.run(["node", "-e", NODE, str(LIVE_JS)], input=json.dumps(
        {"table": table, "sentences": SENTENCES, "maxChars": max_chars, "decoded": decoded}), capture_output=True,
        text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def decoded_cases(tokenizer) -> list[list[int]]:
    """Id lists a decoder writes: leading, repeated and trailing word starts, <unk> and control ids among them."""
    space = tokenizer._sp.piece_to_id("\u2581")
    space = space if space != tokenizer.unk_id else 4
    word = tokenizer.encode("a")[-1]
    return [[space, space, word], [2, space, word, 3], [1, space, word], [space], [word, space], [word, 1, 1],
            [word, space, space, word, 0], [1], list(range(4, min(tokenizer.vocab_size, 60)))]


@pytest.mark.parametrize("name", ["eng-fra", "english-lm", "reverse", "induction", "dates"])
@pytest.mark.parametrize("side", ["src", "tgt"])
def test_the_page_reads_and_encodes_every_sentence_as_python_does(name, side):
    from transformer.io.text import words

    checkpoint = load_checkpoint(ROOT / "checkpoints" / name)
    tokenizer = checkpoint.src_tokenizer if side == "src" else checkpoint.tgt_tokenizer
    max_len = checkpoint.config.max_len
    expected = []
    for sentence in SENTENCES:
        read = read_input(tokenizer, sentence, max_len)
        ids = tokenizer.encode(read.read)
        expected.append([read.read, read.cut_off, ids, tokenizer.encode_pieces(read.read), tokenizer.decode(ids),
                         tokenizer.pieces(ids), words(read.normalized)])
    cases = decoded_cases(tokenizer)
    *found, decoded = in_node(tokenizer_table(tokenizer), max_len * 32, cases)
    assert decoded == [tokenizer.decode(ids) for ids in cases]
    for sentence, python, page in zip(SENTENCES, expected, found, strict=True):
        typed = page[3]
        assert page[:3] + page[4:] == python[:3] + python[4:], sentence
        # Python's pieces as typed show each unknown character alone; the page's, a run of them as one <unk>'s text.
        assert "".join(typed) == "".join(python[3]) and len(typed) == len(python[2]), sentence
    assert any(cut for _, cut, *_ in found) and any(1 in ids for _, _, ids, *_ in found)  # both cases were met


YEARS = ["Wednesday, March 3, 2021", "1 Jan 1899", "1900-01-01", "2099-12-31", "31 Dec 2100", "0999 and 1000",
         "12345 1234", "1899/1900/2100", "year ٢١٠٠ and ١٩٩٩", "x２１５０y", "no year at all", "1999 2000 3000 3000",
         "2024𝟐𝟎𝟐𝟒", "19 99", "a9999b", "", "১৮৯৯ ০২০০"]
TASK_NODE = """
const live = require(process.argv[1]);
const data = JSON.parse(require("fs").readFileSync(0, "utf8"));
console.log(JSON.stringify(data.texts.map((text) => live.taskCaveats(data.notices, text)
  .map(([code, values]) => [code, values, live.worded(code, values)]))));
"""


def test_the_page_gives_the_dates_tasks_year_notice_as_python_does():
    from transformer.data.tasks import input_caveats
    from ui.passes import browser_model
    from ui.warnings import worded

    notices = browser_model("dates")[1]["task_notices"]  # the table the page gets
    done = subprocess.run(["node", "-e", TASK_NODE, str(LIVE_JS)], input=json.dumps(
        {"notices": notices, "texts": YEARS}), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    expected = [[[caveat.code, caveat.values, worded(caveat)] for caveat in input_caveats("dates", text)]
                for text in YEARS]
    assert json.loads(done.stdout) == expected
    assert sum(map(bool, expected)) >= 8 and not expected[0] and not expected[2] and not expected[3]
