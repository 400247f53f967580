"""Lectures as decks of live views: a deck file read, bounded and parsed (`parse`), presented slide by slide in
lecture mode (`presenter`), its slides drawn once in the background so that a room finds them built (`warm`), and the
whole deck packed into one HTML file that needs no server (`packing`)."""
from .parse import (
    MAX_DECK_BYTES,
    MAX_SLIDES,
    Deck,
    DeckError,
    Slide,
    deck_names,
    deck_toml,
    decks_dir,
    parse_deck,
    slide_state,
)
from .presenter import read_deck

__all__ = ["MAX_DECK_BYTES", "MAX_SLIDES", "Deck", "DeckError", "Slide", "deck_names", "deck_toml", "decks_dir",
           "parse_deck", "read_deck", "slide_state"]
