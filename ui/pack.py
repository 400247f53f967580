"""`python -m ui.pack DECK OUT.html [--live]`: a deck as one HTML file that needs no server (ui.deck.packing draws
and packs it; with --live, each Attention slide runs its checkpoint in the page on a typed sentence: ui.deck.live).
OUT is checked before a slide is drawn: never one of the pack's inputs (the deck file, the decks folder, the
checkpoints folder), nor a folder above or inside one, `--replace` or not; its folder must exist."""
from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

from ui.deck import DeckError, read_deck
from ui.deck.live import Live
from ui.deck.packing import SLIDE_TIMEOUT_S, PackError, draw_slide, pack_html, write_new
from ui.deck.parse import decks_dir
from ui.passes import CheckpointError, checkpoints_dir, library


def check_output(output: Path, replace: bool) -> None:
    """ValueError or FileExistsError, in one line, where `output` cannot take the pack: before minutes of drawing."""
    parent = output.parent
    if output.is_dir():
        raise ValueError(f"{output} is a folder: name the HTML file to write")
    if output.exists() and not replace:
        raise FileExistsError(f"{output} already exists: choose another name, or pass --replace")
    if not parent.exists():
        raise ValueError(f"{output}: its folder {parent} does not exist")
    if not parent.is_dir():
        raise ValueError(f"{output}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{output}: the folder {parent} is not writable")


def pack_deck(name: str, timeout_s: float = SLIDE_TIMEOUT_S,
              progress: Callable[[str], None] = lambda line: None, live: bool = False) -> bytes:
    """The deck `name` (one of the decks folder's) drawn and packed, `live` or not; `progress` hears of each slide as
    it starts."""
    deck = read_deck(name)
    slides = []
    for number, slide in enumerate(deck.slides, 1):
        progress(f"slide {number} / {len(deck.slides)}: {slide.title}")
        slides.append(draw_slide(name, deck, number, timeout_s))
    if live:
        progress("the live slides' models, exported for the browser")
    return pack_html(deck, slides, Live(deck) if live else None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ui.pack", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("deck", help="a deck of the decks folder, by name (attention-step-by-step)")
    parser.add_argument("out", type=Path, help="the HTML file to write")
    parser.add_argument("--replace", action="store_true", help="replace OUT if it exists")
    parser.add_argument("--live", action="store_true",
                        help="each Attention slide gets an input box: its checkpoint runs in the page (needs `npm ci`)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        read_deck(args.deck)  # an unknown deck is named before OUT is looked at
        refuse = library("transformer.io.safety:refuse_output_over_inputs")  # OutputOverInput, a CheckpointError
        refuse(args.out, [decks_dir() / f"{args.deck}.toml", decks_dir(), checkpoints_dir()])
        check_output(args.out, args.replace)
        data = pack_deck(args.deck, progress=lambda line: print(line, flush=True), live=args.live)
        write_new(args.out, data, args.replace)
    except (DeckError, PackError, CheckpointError, ValueError, FileExistsError) as error:
        raise SystemExit(f"error: {error}") from None
    except OSError as error:  # the disk full, a file past the size limit, a folder gone while drawing
        raise SystemExit(f"error: {args.out} could not be written: {error.strerror or error}") from None
    print(f"{args.out}: {len(data) / 2**20:.1f} MB, in {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
