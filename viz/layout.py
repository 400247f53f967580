"""Pixel layout of token-labelled figures: tick fonts, panel sizes, gaps, margins and colour bars.

Plotly lays a figure out in fractions of its area and, when tick labels do not fit, skips or piles them. Here
token figures are laid out in pixels instead: every token gets TOKEN_STEP_EM tick-font sizes along its axis, the
tick font shrinks from theme.font_size down to theme.min_font_size to fit the theme's budget, and beyond that the
figure grows. layout.width and layout.height then say how big the figure must be drawn (at least that wide; the
caller scrolls). Colour bars get their own pixels between or after the panels, titles written upwards beside
their tick labels, so they touch neither ticks, titles nor panels.

Text widths are estimated from glyph widths measured in headless Chromium for DejaVu Sans (what Plotly's default
font family resolves to on Debian; it is wider than Open Sans), rounded up.
"""
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from .labels import token_axis
from .theme import Theme

TOKEN_STEP_EM = 1.3  # pixels per token along an axis, in tick-font sizes: one line of text and a gap
LINE_EM = 1.3  # height of a line of text, in font sizes
COLOUR_BAR_PX = 14  # thickness of a colour bar
COLOUR_BAR_TICK_CHARS = 5  # widest colour bar tick label we expect, e.g. "−0.25"
# Plot pixels one figure may use before its tick fonts shrink, (width, height); lecture mode is for a 1280x720
# projector, so less height, and wider as its fonts are bigger.
BUDGET_PX = {False: (900, 640), True: (1100, 480)}
MIN_PANEL_EM = 20  # a panel is never smaller than this many font sizes, so short inputs do not look like stamps

_WIDE, _CAPITAL = set("mwMW@%"), 0.75


def text_px(text: str, font_size: float) -> float:
    """Estimated width in pixels of `text` (raw, not HTML-escaped) at `font_size`."""
    width = 0.0
    for char in str(text):
        width += 0.98 if char in _WIDE else 0.8 if char == "▁" else _CAPITAL if char.isupper() else 0.64
    return width * font_size


def widest_px(texts: Iterable[object], font_size: float) -> float:
    return max((text_px(text, font_size) for text in texts), default=0.0)


def token_font(theme: Theme, axes: Iterable[tuple[int, float]]) -> int:
    """Largest tick font from theme.font_size down to theme.min_font_size at which every (token count, budget px)
    of `axes` fits at TOKEN_STEP_EM per token; theme.min_font_size when none does (the figure then grows)."""
    for font in range(theme.font_size, theme.min_font_size - 1, -1):
        if all(count * TOKEN_STEP_EM * font <= budget for count, budget in axes):
            return font
    return theme.min_font_size


@dataclass(frozen=True)
class Fit:
    """What lay_out chose: the tick font and pixels per token across (columns) and down (rows) a panel."""

    font: int
    column_px: float
    row_px: float
    x_angle: int  # 0: horizontal column labels, -90: written upwards


def colour_bar_px(theme: Theme) -> float:
    """Width a colour bar takes with its tick labels and its title written upwards beside them, plus gaps."""
    return 10 + COLOUR_BAR_PX + 6 + text_px("0" * COLOUR_BAR_TICK_CHARS, theme.font_size) + 10 \
        + LINE_EM * theme.font_size + 10


def lay_out(fig: go.Figure, theme: Theme, row_labels: Sequence[object], col_labels: Sequence[object], *,
            panel_titles: bool = False, **options: Any) -> Fit:
    """Size `fig`, a rows x cols grid of token panels (make_subplots order), so that every label is readable:
    grid_layout's layout applied to `fig`, whose annotations are the panel titles when panel_titles."""
    titles = [annotation.to_plotly_json() for annotation in fig.layout.annotations] if panel_titles else None
    layout, fit = grid_layout(theme, row_labels, col_labels, titles=titles, **options)
    fig.update_layout(layout)
    return fit


def grid_layout(theme: Theme, row_labels: Sequence[object], col_labels: Sequence[object], *, rows: int = 1,
                cols: int = 1, title: str = "", titles: Sequence[str] | None = None,
                colour_bars: Sequence[tuple[str, int]] = (), label_every_panel: bool = False,
                token_ticks: bool = False, legend: bool = False) -> tuple[dict, Fit]:
    """The layout (a dict for go.Figure) that sizes a rows x cols grid of token panels (make_subplots order) so
    that every label is readable, and what it chose.

    row_labels, col_labels: the raw labels of a panel's rows and columns (the same in every panel).
    colour_bars: (coloraxis name, column) pairs: that axis's colour bar stands right of grid column `column`
    (1-based; the last column puts it at the right edge). label_every_panel: tick labels on every panel instead of
    the outer ones only (the caller sets showticklabels). titles: the panels' title annotations (dicts, one per
    panel in order, as make_subplots makes them), placed above their panels; None: the panels have none. legend:
    leave room for the horizontal legend at the bottom. token_ticks: put the token tick labels on the axes that
    show them (the outer ones, or all) and hide the others' (figures drawn with panels.add_matrix have theirs
    already).
    """
    budget_w, budget_h = BUDGET_PX[theme.large]
    font = token_font(theme, [(len(col_labels), budget_w / cols), (len(row_labels), budget_h / rows)])
    smallest = (min(MIN_PANEL_EM * theme.font_size, budget_w / cols),
                                min(MIN_PANEL_EM * theme.font_size, budget_h / rows))
    column_px = max(TOKEN_STEP_EM * font, smallest[0] / max(len(col_labels), 1))
    row_px = max(TOKEN_STEP_EM * font, smallest[1] / max(len(row_labels), 1))
    panel_w, panel_h = column_px * len(col_labels), row_px * len(row_labels)

    widest_column = widest_px(col_labels, font)
    x_angle = 0 if widest_column + 0.6 * font <= column_px else -90
    x_band = 8 + (widest_column if x_angle else LINE_EM * font) + 6  # tick length, labels, gap
    y_band = 8 + widest_px(row_labels, font) + 6
    panel_title_band = LINE_EM * theme.font_size + 6 if titles is not None else 0
    title_band = LINE_EM * theme.title_size + 16 if title else 10
    bar_columns = {column: name for name, column in colour_bars}

    left = [0.0]  # each column's left edge, pixels from the plot area's left
    for col in range(1, cols):
        gap = (y_band if label_every_panel else 0.6 * theme.font_size) + (
            colour_bar_px(theme) if col in bar_columns else 0)
        left.append(left[-1] + panel_w + gap)
    plot_w = left[-1] + panel_w
    top = [0.0]  # each row's top edge, pixels from the plot area's top
    for _ in range(1, rows):
        top.append(top[-1] + panel_h + panel_title_band + (x_band if label_every_panel else 0.6 * theme.font_size))
    plot_h = top[-1] + panel_h

    margin = dict(l=y_band + 10, r=(colour_bar_px(theme) if cols in bar_columns else 0) + 20,
                  t=title_band + panel_title_band, b=x_band + 10 + (2 * LINE_EM * theme.font_size if legend else 0))
    width = max(margin["l"] + plot_w + margin["r"], text_px(title, theme.title_size) + 40)
    plot_w = width - margin["l"] - margin["r"]  # a wide title widens the plot area: the panels keep their place
    # One update_layout for everything: setting 96 axes one by one costs seconds in plotly.py.
    layout = dict(width=round(width), height=round(margin["t"] + plot_h + margin["b"]), margin=margin,
                  title=dict(x=0, xref="container", xanchor="left", y=1, yref="container", yanchor="top",
                             pad=dict(t=8, l=12)))
    titles = [dict(annotation) for annotation in titles or ()]
    for index in range(rows * cols):
        row, col = divmod(index, cols)
        x_name, y_name = (f"{letter}axis{index + 1 if index else ''}" for letter in "xy")  # make_subplots' names
        # automargin=False: the margins above already hold the labels, and with it Plotly.js measures every
        # label of every axis (slow at 256 tokens and 48 panels); the browser tests check that none is cut.
        layout[x_name] = dict(domain=[_fraction(left[col], plot_w), _fraction(left[col] + panel_w, plot_w)],
                              tickfont=dict(size=font), tickangle=x_angle, automargin=False)
        layout[y_name] = dict(domain=[_fraction(plot_h - top[row] - panel_h, plot_h),
                                      _fraction(plot_h - top[row], plot_h)], tickfont=dict(size=font),
                              automargin=False)
        if token_ticks:  # the outer axes, or all of them
            layout[x_name].update(token_axis(col_labels) if label_every_panel or row == rows - 1 else {},
                                  showticklabels=label_every_panel or row == rows - 1)
            layout[y_name].update(token_axis(row_labels) if label_every_panel or col == 0 else {},
                                  showticklabels=label_every_panel or col == 0)
        if index < len(titles):
            titles[index].update(x=(left[col] + panel_w / 2) / plot_w, y=1 - top[row] / plot_h, yanchor="bottom",
                                 yshift=2)
    if titles:
        layout["annotations"] = titles
    for name, column in colour_bars:
        layout[name] = dict(colorbar=dict(
            x=(left[column - 1] + panel_w + 10) / plot_w, xanchor="left", y=1, yanchor="top", lenmode="pixels",
            len=min(plot_h, 12 * LINE_EM * theme.font_size), thickness=COLOUR_BAR_PX, title_side="right"))
    return layout, Fit(font, column_px, row_px, x_angle)


def _fraction(pixels, total) -> float:
    """pixels / total as a domain bound, kept within [0, 1] against rounding."""
    return min(max(pixels / total, 0.0), 1.0)
