"""Hostile and odd input, one table through the library (translate, capture) and the app: every case gives a result
or a clear message, never an unhandled exception, and the app never renders it as HTML or Markdown.

The tiny checkpoint reads lowercase letters and digits one character each (no space piece), so anything else is
<unk> and the expectations below can be worked out by hand."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

import ui
from helpers import LOADABLE, TINY_TRAINING, outputs
from transformer import Caveat, capture, load_checkpoint
from transformer.io.tokenizer import EOS_ID
from ui.state import MAX_INPUT_CHARS
from ui.views import VIEWS
from ui.warnings import worded

MAX_LEN = int(TINY_TRAINING[TINY_TRAINING.index("--max-len") + 1])

EMPTY = "The input is empty"
UNREADABLE = "no characters this model reads"
CUT = "were cut off"  # as the app words a caveat that the input was cut


@dataclass(frozen=True)
class Case:
    text: str
    outcome: str = "ok"  # "ok"; "cut" (too long: truncated with a warning); EMPTY or UNREADABLE (a ValueError)
    unknown: bool = False  # whether some piece is <unk> (with a warning)
    pieces: tuple[str, ...] | None = None  # the exact source pieces, where worth spelling out

    @property
    def fails(self) -> bool:
        return self.outcome in (EMPTY, UNREADABLE)


def source(*pieces: str) -> tuple[str, ...]:
    """The source pieces the model reads: these, then EOS."""
    return pieces + ("</s>",)


CASES = {
    # nothing to read
    "empty": Case("", EMPTY),
    "one-space": Case(" ", EMPTY),
    "whitespace-mix": Case(" \t\n\r\n\x0b\x0c ", EMPTY),
    "no-break-spaces": Case("\u00a0\u2007\u202f\u3000", EMPTY),  # NFKC makes them plain spaces
    "next-line-char": Case("\x85\u2028\u2029", EMPTY),  # Unicode line and paragraph separators
    "5000-newlines": Case("\n" * 5000, EMPTY),
    "10000-spaces": Case(" " * 10_000, EMPTY),
    "zero-width-only": Case("\u200b\u200c\u200e\u200f", UNREADABLE),  # the tokenizer reads these as spaces
    "byte-order-mark-only": Case("\ufeff", UNREADABLE),
    "replacement-char-only": Case("\ufffd\ufffd", UNREADABLE),
    "lone-low-surrogate": Case("\udfff", UNREADABLE),  # becomes U+FFFD, which the tokenizer reads as a space
    "swapped-surrogate-pair": Case("\ude00\ud83d", UNREADABLE),
    # short
    "one-letter": Case("a", pieces=source("a")),
    "one-digit": Case("7", pieces=source("7")),
    "one-unknown-char": Case("€", unknown=True, pieces=source("<unk>")),
    "spaces-around-a-word": Case(" " * 5000 + "ab" + " " * 5000, pieces=source("a", "b")),
    # at and past max_len
    "max-len-minus-one-tokens": Case("a" * (MAX_LEN - 1), pieces=source(*"a" * (MAX_LEN - 1))),  # + EOS: max_len ids
    "max-len-tokens": Case("a" * MAX_LEN, "cut"),
    "512-tokens": Case("ab" * 256, "cut"),
    "10000-chars": Case("abc1 " * 2000, "cut", unknown=True),
    "one-5000-char-word": Case("x" * 5000, "cut"),
    "5000-spaces-between-words": Case("a" + " " * 5000 + "b", unknown=True, pieces=source("a", "<unk>", "b")),
    "10000-digits": Case("0123456789" * 1000, "cut"),
    # other scripts
    "emoji": Case("😀🚀👍🏽", unknown=True),
    "emoji-zwj-family": Case("👨‍👩‍👧‍👦", unknown=True),
    "flags": Case("🇫🇷🇩🇪", unknown=True),
    "chinese": Case("注意力机制", unknown=True, pieces=source("<unk>")),
    "japanese-and-korean": Case("こんにちは 안녕하세요", unknown=True),
    "arabic-rtl": Case("مرحبا بالعالم", unknown=True),
    "hebrew-rtl-with-latin": Case("abc שלום 123", unknown=True),
    "rtl-override": Case("\u202eabc\u202c", unknown=True),
    "combining-marks": Case("e\u0301a\u0308", unknown=True),  # NFKC composes é and ä: not in the vocabulary
    "zalgo": Case("a" + "\u0300\u0301\u0302" * 50 + "b", unknown=True, pieces=source("<unk>", "b")),
    "upper-case": Case("ABC", unknown=True),
    # invisible and control characters
    "zero-width-inside": Case("a\u200bb\u200dc", unknown=True, pieces=source("a", "<unk>", "b", "<unk>", "c")),
    "word-joiners-only": Case("\u200d\u2060", unknown=True, pieces=source("<unk>")),
    "control-chars": Case("a\x07b\x1b[31mc\x7f", unknown=True),
    "c1-controls": Case("a\x80\x9bb", unknown=True),
    "nul-inside": Case("a\x00b", unknown=True, pieces=source("a", "<unk>", "b")),
    "nul-only": Case("\x00", unknown=True, pieces=source("<unk>")),
    "1000-nuls": Case("\x00" * 1000, unknown=True),
    "lone-high-surrogate": Case("a\ud800b", unknown=True, pieces=source("a", "<unk>", "b")),  # U+FFFD, read as a space
    "surrogate-pair-as-code-points": Case("\ud83d\ude00", unknown=True, pieces=source("<unk>")),  # one emoji
    "noncharacter-and-private-use": Case("\uffff\ue000", unknown=True),
    # markup and code that must stay text
    "html-tags": Case("<b>bold</b> <i>x</i>", unknown=True),
    "script-tag": Case("<script>window.__xss=1</script>", unknown=True),
    "img-onerror": Case("<img src=x onerror=window.__xss=1>", unknown=True),
    "html-entities": Case("&lt;script&gt; &amp; &#60;", unknown=True),
    "markdown": Case("**bold** _it_ # title\n- item [link](javascript:alert(1))", "cut", unknown=True),
    "markdown-image": Case("![x](https://example.com/x.png)", unknown=True),
    "latex": Case("$\\frac{a}{b}$ $$\\int_0^1 x\\,dx$$", unknown=True),
    "templates": Case("{{ 7*7 }} {% if x %} ${7*7} <%= 7*7 %>", unknown=True),
    "format-strings": Case("{0} %s %(x)d {text}", unknown=True),
    "sql": Case("'; drop table users; --", unknown=True),
    "path-traversal": Case("../../etc/passwd", unknown=True),
    "url-syntax": Case("a%00b&text=x#frag?view=1", unknown=True),
}
assert len(CASES) >= 40


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint)


def check_translation(checkpoint, case: Case, beam_size: int) -> None:
    if case.fails:
        with pytest.raises(ValueError, match=case.outcome):
            checkpoint.translate(case.text, beam_size=beam_size)
        return
    result = checkpoint.translate(case.text, beam_size=beam_size)
    assert 2 <= len(result.src_ids) <= MAX_LEN  # at least one piece, and EOS
    assert result.src_ids[-1] == EOS_ID and EOS_ID not in result.src_ids[:-1]
    if case.outcome == "cut":
        assert len(result.src_ids) == MAX_LEN
    if case.pieces is not None:
        assert tuple(result.src_tokens) == case.pieces
    codes = [warning.code for warning in result.warnings]
    assert any(code.startswith("cut_off") for code in codes) == (case.outcome == "cut")
    assert ("unknown_pieces" in codes) == case.unknown
    assert ("<unk>" in result.src_tokens) == case.unknown
    assert len(result.src_typed) == len(result.src_tokens)  # as typed: an <unk> shows its own text
    assert all(typed == piece for typed, piece in zip(result.src_typed, result.src_tokens) if piece != "<unk>")
    assert all(typed != "<unk>" for typed in result.src_typed)
    assert 1 <= len(result.tgt_ids) <= MAX_LEN - 1
    assert len(result.output_tokens) == len(result.probs) == len(result.tgt_ids)
    assert all(0.0 < p <= 1.0 and math.isfinite(p) for p in result.probs)
    for key, weights in result.attention.items():
        assert torch.isfinite(weights).all(), key
        assert weights.shape[-1] <= MAX_LEN and weights.shape[-2] <= MAX_LEN


@pytest.mark.parametrize("name", CASES)
def test_translate(checkpoint, name):
    for beam_size in (1, 3):
        check_translation(checkpoint, CASES[name], beam_size)


@pytest.mark.parametrize("name", CASES)
def test_capture_of_a_teacher_forced_pass(checkpoint, name):
    case, model = CASES[name], checkpoint.model
    if case.fails:
        with pytest.raises(ValueError, match=case.outcome):
            checkpoint.encode(case.text)
        return
    src = torch.tensor([checkpoint.encode(case.text)])
    tgt = torch.tensor([checkpoint.encode(case.text, side="tgt")[:-1]])
    with torch.no_grad():
        plain = model(src, tgt)
        with capture(model) as record:
            captured = model(src, tgt)
    torch.testing.assert_close(captured, plain, atol=1e-5, rtol=0)
    assert src.shape[1] <= MAX_LEN and tgt.shape[1] <= MAX_LEN - 1
    for key, weights in record.items():
        allowed = record.mask(key)
        assert torch.isfinite(weights).all(), key
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))  # every row can attend somewhere
        assert torch.all(weights.masked_fill(allowed, 0) == 0)  # nothing on masked keys


def test_one_piece_too_many_is_cut_from_the_end(checkpoint):
    result = checkpoint.translate("a" * (MAX_LEN - 1) + "b")
    assert result.src_tokens == ["a"] * (MAX_LEN - 1) + ["</s>"]
    assert result.warnings[0] == Caveat("cut_off_pieces", {"pieces": MAX_LEN, "cut": 1, "reads": MAX_LEN - 1,
                                                           "max_len": MAX_LEN, "around": "eos"})
    # It learned strings of 1-6 characters, none joined.
    assert result.warnings[1] == Caveat("longer_than_trained", {"pieces": MAX_LEN - 1, "longest": 6, "joined": False})


def test_memory_is_bounded_by_max_len(checkpoint):
    """However long the input, each tensor a translation captures is no bigger than in a pass over the longest
    sequences the model takes (max_len source ids, max_len - 1 decoder inputs): its memory is bounded."""
    model = checkpoint.model
    with torch.no_grad(), capture(model) as longest:
        model(torch.full((1, MAX_LEN), 5), torch.full((1, MAX_LEN - 1), 5))
    for text in ("ab" * 256, "abc1 " * 2000, "x" * 100_000):
        result = checkpoint.translate(text, beam_size=2)
        assert len(result.src_ids) == MAX_LEN
        assert result.attention.hooks.keys() == longest.hooks.keys()
        for name, tensor in result.attention.hooks.items():
            assert tensor.numel() <= longest.hooks[name].numel(), name


def test_every_app_cache_has_a_size_limit():
    """ui.shared.expiring without max_entries would keep every input ever typed."""
    code = "".join(path.read_text(encoding="utf-8") for path in Path(ui.__file__).parent.rglob("*.py"))
    decorators = re.findall(r"@expiring\(([^)]*)\)", code)
    assert len(decorators) == code.count("@expiring(") >= 10
    assert all("max_entries=" in arguments for arguments in decorators), decorators


# ---------------------------------------------------------------------------------------------- the app


def as_sent_by_a_browser(text: str) -> str:
    """Links and widgets travel as UTF-8, which has no lone surrogates: browsers send U+FFFD in their place."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def rendered_as_markdown(at: AppTest) -> list[str]:
    """The text of every element the browser renders as Markdown."""
    elements = [*at.markdown, *at.caption, *at.title, *at.header, *at.subheader, *at.latex, *at.warning, *at.info,
                *at.error, *at.success, *at.toast]
    return [element.value for element in elements]


def assert_not_rendered(at: AppTest, text: str) -> None:
    """No element may render HTML but the app's own, and the user's text never reaches a Markdown element or an
    unescaped figure label."""
    assert not any(element.proto.allow_html for element in [*at.markdown, *at.caption])
    visible = text.strip()
    for element in at.get("html"):  # st.html carries the app's own CSS only (lecture mode, picker, figure widths)
        body = element.proto.body.strip()
        assert body.startswith("<style>") and body.endswith("</style>") and body.count("<") == 2, body
    if len(visible) >= 4:  # shorter text ("a") turns up in ordinary sentences
        assert not any(visible in body for body in rendered_as_markdown(at))
    for chart in at.get("plotly_chart"):
        # Plotly reads its labels as a subset of HTML: only the figures' own line breaks may be markup.
        assert "<" not in re.sub(r"<br>|</?extra>", "", chart.proto.spec)


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_app(app, checkpoint, name):
    sent = as_sent_by_a_browser(CASES[name].text)
    at = app(text=sent)
    assert not at.exception, [e.value for e in at.exception]
    used = sent[:MAX_INPUT_CHARS]
    assert at.text_input(key="text").value == used
    cut_notice = ([f"The input is longer than {MAX_INPUT_CHARS} characters: only the first {MAX_INPUT_CHARS} are used."]
                  if len(sent) > MAX_INPUT_CHARS else [])
    try:
        expected = checkpoint.translate(used)
    except ValueError as error:  # the app says what the library says, and shows no figure
        assert [info.value for info in at.info] == [str(error)]
        assert [warning.value for warning in at.warning] == cut_notice
        assert not at.get("plotly_chart")
    else:
        assert [warning.value for warning in at.warning] == cut_notice + list(map(worded, expected.warnings))
        assert outputs(at)[0] == (expected.text or "(empty: the model ended at once)")
        assert at.get("plotly_chart")
    assert not at.error
    assert at.selectbox(key="checkpoint").value == LOADABLE[0]
    assert_not_rendered(at, used)


HOSTILE = "<img src=x onerror=window.__xss=1> **b** \x00 😀 שלום \u200b $x$ {{x}} " + "ab" * 40


@pytest.mark.slow
@pytest.mark.parametrize("view", [view.key for view in VIEWS])
def test_every_view_with_hostile_input(app, view):
    at = app(text=HOSTILE, view=view)
    assert not at.exception, [e.value for e in at.exception]
    assert any(CUT in warning.value for warning in at.warning)
    assert_not_rendered(at, HOSTILE)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["10000-chars", "img-onerror", "zero-width-only", "lone-high-surrogate"])
def test_typed_input(app, checkpoint, name):
    """The same through the text box. set_value, not input(): a script talking to the server is not held to the
    box's max_chars as a browser is, and Streamlit cuts what it sends (silently: the box cannot show more)."""
    at = app()
    typed = as_sent_by_a_browser(CASES[name].text)
    at.text_input(key="text").set_value(typed).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.text_input(key="text").value == typed[:MAX_INPUT_CHARS]
    assert at.query_params["text"] == typed[:MAX_INPUT_CHARS]  # the link holds what was used, no more
    if CASES[name].fails:
        assert UNREADABLE in at.info[0].value
    else:
        assert outputs(at)[0] == (checkpoint.translate(typed[:MAX_INPUT_CHARS]).text or
                                    "(empty: the model ended at once)")
    assert_not_rendered(at, typed)
