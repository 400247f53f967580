"""Inside a head's figures on a projector: each closes its rows up to a line of text and shrinks its font, never below
12 px, until the figure fits the screen's height (and, with panels of a fixed width, its width); on a laptop (no
height) they keep the mode's font."""
from __future__ import annotations

import numpy as np

import viz
from viz.inside import neuron_figure, softmax_figure, vectors_figure

LECTURE = viz.Theme(large=True, width=860, height=708)  # the figure column of lecture mode at 1280 x 720


def labels(count: int) -> list[str]:
    return [f"·word{index}" for index in range(count)]


def font_of(fig) -> int:
    return fig.layout.font.size


def test_thirty_one_rows_take_the_largest_font_that_fits_the_screens_height():
    rows = np.random.default_rng(0).normal(size=(31, 64))
    fig = vectors_figure(rows, labels(31), title="1 · q and every k", width=860, heading="64 numbers each",
                         theme=LECTURE)
    assert fig.layout.height <= LECTURE.height and font_of(fig) >= 12
    larger = vectors_figure(rows, labels(31), title="1 · q and every k", width=860, heading="64 numbers each",
                            theme=viz.Theme(large=True, width=860, font=font_of(fig) + 1))
    assert larger.layout.height > LECTURE.height  # one size up would not fit
    few = vectors_figure(rows[:5], labels(5), title="1 · q and every k", width=860, theme=LECTURE)
    assert font_of(few) == LECTURE.font_size  # short inputs keep lecture mode's large font


def test_bar_panels_of_a_fixed_width_fit_the_screens_width():
    values = np.linspace(-1, 1, 8)
    fig = softmax_figure(values, values, np.full(8, 1 / 8), np.zeros(8, bool), labels(8), 64, title="3 · softmax",
                         theme=LECTURE)
    assert fig.layout.width <= LECTURE.width and font_of(fig) >= 12
    assert neuron_figure(values, labels(8), 3, theme=LECTURE).layout.width <= LECTURE.width


def test_without_a_height_the_modes_font_stays():
    rows = np.ones((40, 8))
    for theme in (viz.Theme(), viz.Theme(large=True, width=860)):
        fig = vectors_figure(rows, labels(40), title="t", width=860, theme=theme)
        assert font_of(fig) == theme.font_size


def test_a_projectors_sixty_one_rows_close_up_before_their_font_shrinks_below_twelve():
    """A 60-piece input's keys and the query on a 1920 x 1080 projector (the figure column, ui.screen.figure_space):
    rows 1.5 fonts apart would pass its height even at 12 px; closer, they fit at 12 px or more."""
    projector = viz.Theme(large=True, width=1339, height=1068)
    fig = vectors_figure(np.ones((61, 64)), labels(61), title="1 · q and every k", width=1339,
                         heading="64 numbers each", theme=projector)
    assert fig.layout.height <= projector.height and font_of(fig) >= 12
