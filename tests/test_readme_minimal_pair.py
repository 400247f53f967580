"""The README's minimal pair is the shipped deck's, and it lines up piece for piece on the shipped eng-fra: its source
pieces and its two outputs' pieces are lists of one length that differ in one piece, so Compare draws A − B."""
import re
import tomllib

from helpers import ROOT
from transformer import load_checkpoint


def readme_pair() -> tuple[str, str]:
    """The endings the README quotes for its minimal pair ("…too tired." / "…too big."), without the ellipses."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r'minimal pair \(`compare=inputs&text_b=`: "…([^"]+)" / "…([^"]+)"\)', readme)
    assert found, "the README names no minimal pair"
    return found[1], found[2]


def deck_pair() -> dict:
    """The link of the shipped deck's slide that compares two inputs."""
    deck = tomllib.loads((ROOT / "decks" / "attention-step-by-step.toml").read_text())
    (link,) = [slide["link"] for slide in deck["slides"] if slide.get("link", {}).get("compare") == "inputs"]
    return link


def one_piece_apart(a: list[str], b: list[str]) -> bool:
    return len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1


def test_the_readmes_minimal_pair_lines_up_piece_for_piece_on_the_shipped_model():
    link = deck_pair()
    text, text_b = link["text"], link["text_b"]
    ending_a, ending_b = readme_pair()
    assert text.endswith(ending_a) and text_b.endswith(ending_b)
    assert text[: -len(ending_a)] == text_b[: -len(ending_b)]  # the README's "…" is one sentence
    checkpoint = load_checkpoint(ROOT / "checkpoints" / link["checkpoint"])
    assert one_piece_apart(*(checkpoint.src_tokenizer.encode_pieces(side) for side in (text, text_b)))
    assert one_piece_apart(*(list(checkpoint.translate(side).output_tokens) for side in (text, text_b)))


def test_a_pair_a_piece_apart_is_told_from_one_that_is_not():
    assert one_piece_apart(["▁too", "▁tired", "."], ["▁too", "▁big", "."])
    assert not one_piece_apart(["▁too", "▁tired", "."], ["▁too", "▁w", "ide", "."])  # the README's old "…too wide."
    assert not one_piece_apart(["▁too", "▁big", "."], ["▁too", "▁big", "."])
