"""`python -m ui.pack DECK OUT.html`: a deck as one HTML file that needs no server (ui.deck.packing draws and packs
it)."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from ui.deck import DeckError, read_deck
from ui.deck.packing import SLIDE_TIMEOUT_S, PackError, draw_slide, pack_html, write_new


def pack_deck(name: str, timeout_s: float = SLIDE_TIMEOUT_S) -> bytes:
    """The deck `name` (one of the decks folder's) drawn and packed."""
    deck = read_deck(name)
    return pack_html(deck, [draw_slide(name, deck, number, timeout_s) for number in range(1, len(deck.slides) + 1)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ui.pack", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("deck", help="a deck of the decks folder, by name (attention-step-by-step)")
    parser.add_argument("out", type=Path, help="the HTML file to write")
    parser.add_argument("--replace", action="store_true", help="replace OUT if it exists")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        data = pack_deck(args.deck)
        write_new(args.out, data, args.replace)
    except (DeckError, PackError, FileExistsError) as error:
        raise SystemExit(f"error: {error}") from None
    print(f"{args.out}: {len(data) / 2**20:.1f} MB, in {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
