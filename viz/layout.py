"""Pixel layout of token-labelled figures: tick fonts, panel sizes, gaps, margins and colour bars.

Plotly lays a figure out in fractions of its area and, when tick labels do not fit, skips or piles them. Here
token figures are laid out in pixels instead: every token gets TOKEN_STEP_EM tick-font sizes along its axis, the
tick font shrinks from theme.font_size down to theme.min_font_size to fit the theme's budget, and beyond that the
figure grows. layout.width and layout.height then say how big the figure must be drawn (at least that wide; the
caller scrolls). Colour bars get their own pixels between or after the panels, titles written upwards beside
their tick labels, so they touch neither ticks, titles nor panels.

Text widths are estimated from glyph widths: the wider of DejaVu Sans and Liberation Sans (what Plotly's default
font family, "Open Sans", verdana, arial, resolves to on Linux; both are at least as wide as Open Sans), each
character rounded up to one of a few classes.
"""
import itertools
import math
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .labels import token_axis
from .theme import Theme

TOKEN_STEP_EM = 1.3  # pixels per token along an axis, in tick-font sizes: one line of text and a gap
# (columns, rows) apart, in tick-font sizes, tried in turn at each font before a smaller one: labels written upwards
# need a font size each, rows about the height of a line of text (DejaVu Sans is 1.16 tall; 1.15 is text set solid,
# the last resort of a projector's 30-piece sentence).
STEPS_EM = ((TOKEN_STEP_EM, TOKEN_STEP_EM), (1.1, TOKEN_STEP_EM), (1.1, 1.2), (1.1, 1.15))
LINE_EM = 1.3  # height of a line of text, in font sizes
LEGEND_LINES = 2  # a horizontal legend's room: its names may wrap onto a second line
LEGEND_SYMBOL_PX = 40  # a legend entry's symbol and the gap to its name (Plotly.js draws names 40 px in)
LEGEND_GAP_PX = 10  # between the panels and a legend beside them
COLOUR_BAR_PX = 14  # thickness of a colour bar
COLOUR_BAR_TICK_CHARS = 5  # widest colour bar tick label we expect, e.g. "−0.25"
# Plot pixels one figure may use before its tick fonts shrink, (width, height); lecture mode is for a 1280x720
# projector, whose height the figure has to itself (the theme's height binds first), and wider as its fonts are bigger.
BUDGET_PX = {False: (900, 640), True: (1100, 640)}
PICTURE_HEIGHT = 560  # a map of points (heads, queries and keys) on a laptop: room for its spread
MIN_PANEL_EM = 20  # a panel is never smaller than this many font sizes, so short inputs do not look like stamps

# Advance widths in font sizes, by class: every character of a class is at most that wide in both fonts.
_GLYPH_EM = {char: em for chars, em in (
    ("'ijlI", 0.30), (" ,.·’/:;\\|", 0.34), ("f-()[]t!r", 0.42), ('"*J`', 0.50), ("“”szc?L_–", 0.56),
    ("kvxyFTaeo$0123456789bdghnpqu{}€", 0.64), ("EKPSYABVXZ", 0.70), ("CRUNH▁&DGOQ", 0.79),
    ("w#+<=>^~−M", 0.87), ("%mW…→—@", 1.02)) for char in chars}
_WIDE_EM = 1.02  # a full-width character (CJK)


def picture_height(theme: Theme) -> int:
    """A map of points' height: the screen's in lecture mode (theme.height), PICTURE_HEIGHT otherwise."""
    return theme.height or PICTURE_HEIGHT


def text_px(text: str, font_size: float) -> float:
    """Estimated width in pixels of `text` (raw, not HTML-escaped) at `font_size`."""
    return sum(_GLYPH_EM.get(char) or _other_glyph_em(char) for char in str(text)) * font_size


def _other_glyph_em(char: str) -> float:
    """The width of a character no class lists, in font sizes: its base letter's (é as e), a full-width one's;
    otherwise an ordinary letter's (a capital's: the widest ordinary capitals)."""
    base = unicodedata.normalize("NFD", char)[:1]
    if base in _GLYPH_EM:
        return _GLYPH_EM[base]
    if unicodedata.east_asian_width(char) in "WF":
        return _WIDE_EM
    return 0.79 if char.isupper() else 0.64


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
    """What grid_layout chose: the tick font, pixels per token across (columns) and down (rows) a panel, and how the
    panels stand: per_row of them in each of grid_rows rows."""

    font: int
    column_px: float
    row_px: float
    x_angle: int  # 0: horizontal column labels, -90: written upwards
    per_row: int = 1
    grid_rows: int = 1
    width: float = 0.0  # the figure's pixels
    height: float = 0.0

    def fits(self, theme: Theme) -> bool:
        """Whether the figure fits theme.width (always, when it has none)."""
        return theme.width is None or self.width <= theme.width

    def fits_height(self, theme: Theme) -> bool:
        return theme.height is None or self.height <= theme.height


def colour_bar_px(theme: Theme) -> float:
    """Width a colour bar takes with its tick labels and its title written upwards beside them, plus gaps."""
    return 10 + COLOUR_BAR_PX + 6 + text_px("0" * COLOUR_BAR_TICK_CHARS, theme.font_size) + 10 \
        + LINE_EM * theme.font_size + 10


def _geometry(theme: Theme, row_labels, col_labels, font: int, step_em: tuple[float, float], per_row: int,
              grid_rows: int, *,
              title, titles, bar_columns, label_every_panel, legend, legend_beside=(), min_column_px) -> dict:
    """The pixels of a grid of per_row x grid_rows token panels at tick font `font`, columns and rows step_em
    fonts apart (or wider: min_column_px, or the smallest panel); the legend under them, or beside them where
    legend_beside names its entries."""
    widest_column = widest_px(col_labels, font)
    panel_title_band = LINE_EM * theme.font_size + 6 if titles is not None else 0
    title_band = LINE_EM * theme.title_size + 8 if title else 10
    legend_band = 0 if legend_beside else (LEGEND_LINES if legend is True else int(legend)) * LINE_EM * theme.font_size
    legend_w = _legend_column_px(legend_beside, theme) if legend_beside else 0
    # A panel is never smaller than MIN_PANEL_EM fonts (short inputs do not look like stamps), nor than the budget
    # allows: the preferred plot size, and the space the theme gives (what is left of it beside the labels).
    budget_w, budget_h = BUDGET_PX[theme.large]
    if theme.width is not None:  # less the labels, the colour bars and the gaps between the panels
        gap = (widest_px(row_labels, font) + 14 if label_every_panel else 0.6 * theme.font_size)
        budget_w = min(budget_w, theme.width - widest_px(row_labels, font) - len(bar_columns) * colour_bar_px(theme)
                       - (per_row - 1) * gap - legend_w - 50)
    if theme.height is not None:
        budget_h = min(budget_h, theme.height - title_band - grid_rows * panel_title_band - widest_column - 30
                       - legend_band)
    smallest = (max(min(MIN_PANEL_EM * theme.font_size, budget_w / per_row), 0),
                max(min(MIN_PANEL_EM * theme.font_size, budget_h / grid_rows), 0))
    # A panel is at least as wide as its title (titles side by side must not touch).
    titled = max((text_px(title.get("text", ""), theme.font_size) + 0.6 * theme.font_size for title in titles or ()),
                 default=0)
    column_em, row_em = step_em
    column_px = max(column_em * font, min_column_px, max(smallest[0], titled) / max(len(col_labels), 1))
    row_px = max(row_em * font, smallest[1] / max(len(row_labels), 1))
    panel_w, panel_h = column_px * len(col_labels), row_px * len(row_labels)

    x_angle = 0 if widest_column + 0.6 * font <= column_px else -90
    x_band = 6 + (widest_column if x_angle else LINE_EM * font) + 3  # labels' offset from the axis, labels, gap
    y_band = 8 + widest_px(row_labels, font) + 6
    left = [0.0]  # each column's left edge, pixels from the plot area's left
    for col in range(1, per_row):
        gap = (y_band if label_every_panel else 0.6 * theme.font_size) + (
            colour_bar_px(theme) if col in bar_columns else 0)
        left.append(left[-1] + panel_w + gap)
    plot_w = left[-1] + panel_w
    top = [0.0]  # each row's top edge, pixels from the plot area's top
    for _ in range(1, grid_rows):
        top.append(top[-1] + panel_h + panel_title_band + (x_band if label_every_panel else 0.6 * theme.font_size))
    plot_h = top[-1] + panel_h
    # The legend's room is in the height but not in the bottom margin: Plotly.js adds a bottom legend's height to the
    # margin itself (with it in the margin too, the panels lost that height and their row labels collided).
    margin = dict(l=y_band + 10, r=(colour_bar_px(theme) if per_row in bar_columns else 0) + 20 + legend_w,
                  t=title_band + panel_title_band, b=x_band + 4)
    width = max(margin["l"] + plot_w + margin["r"], text_px(title, theme.title_size) + 40)
    return dict(font=font, column_px=column_px, row_px=row_px, panel_w=panel_w, panel_h=panel_h, x_angle=x_angle,
                left=left, top=top, plot_w=width - margin["l"] - margin["r"], plot_h=plot_h, margin=margin,
                width=width, height=margin["t"] + plot_h + margin["b"] + legend_band, plot_w_panels=plot_w,
                legend_beside=bool(legend_beside))


def _legend_column_px(names: Sequence[str], theme: Theme) -> float:
    """Width a vertical legend of `names` takes beside the panels: the gap to them, its symbols, its longest name and
    a margin."""
    return LEGEND_GAP_PX + LEGEND_SYMBOL_PX + widest_px(names, theme.font_size) + 10


def _choose(theme: Theme, row_labels, col_labels, rows: int, cols: int, panels: int, wrap: bool, bar_panels,
            label_every_panel: bool, legend_names: Sequence[str], **options) -> tuple[dict, int, int, bool]:
    """The layout of the panels that reads best in the theme's space: (geometry, per_row, grid_rows, labels on
    every panel). Without a width, the old rule: the largest font at which the panels keep within the preferred
    plot size (BUDGET_PX), side by side. With one: side by side at the largest font that fits the width (and the
    height, or the preferred height); then at smaller fonts down to the smallest readable one, columns closer
    together (labels written upwards need one font size each); then wrapped into more rows (wrap); then, taller
    than the height, the smallest font that fits the width; else the narrowest layout (the caller scrolls)."""
    soft_w, soft_h = BUDGET_PX[theme.large]

    def shape(font, step_em, per_row, grid_rows, every, beside=()):
        # A colour bar needs a gap of its own only where a panel stands right of its panel.
        gaps = {(panel - 1) % per_row + 1 for panel in bar_panels if panel % per_row and panel < panels}
        last = {per_row} if any(panel % per_row == 0 or panel == panels == per_row for panel in bar_panels) else set()
        return _geometry(theme, row_labels, col_labels, font, step_em, per_row, grid_rows,
                         bar_columns=gaps | last, label_every_panel=every, legend_beside=beside, **options)

    if theme.width is None:
        font = token_font(theme, [(len(col_labels), soft_w / cols), (len(row_labels), soft_h / rows)])
        return shape(font, STEPS_EM[0], cols, rows, label_every_panel), cols, rows, label_every_panel
    tried = []
    # The legend under the panels; where the height has no room for it there, beside them (if it names its entries
    # and no colour bar stands at the right).
    places = [(), legend_names] if legend_names and theme.height is not None and not bar_panels else [()]
    for per_row in range(cols, 0, -1) if wrap else [cols]:
        grid_rows = math.ceil(panels / per_row) if wrap else rows
        every = label_every_panel or grid_rows > rows  # wrapped: each panel carries its own labels
        for font in range(theme.font_size, theme.min_font_size - 1, -1):
            for step_em, beside in itertools.product(STEPS_EM, places):
                entry = (shape(font, step_em, per_row, grid_rows, every, beside), per_row, grid_rows, every)
                tried.append(entry)
                size = entry[0]
                if size["width"] <= theme.width and (size["height"] <= theme.height if theme.height is not None
                                                     else size["plot_h"] <= soft_h):
                    return entry
    fitting = [entry for entry in tried if entry[0]["width"] <= theme.width]
    if fitting:  # taller than wished at every readable font: the most panels a row, the least height
        return max(fitting, key=lambda entry: (entry[1], -entry[0]["height"]))
    return min(tried, key=lambda entry: entry[0]["width"])


def grid_layout(theme: Theme, row_labels: Sequence[object], col_labels: Sequence[object], *, rows: int = 1,
                cols: int = 1, panels: int | None = None, wrap: bool = False, title: str = "",
                titles: Sequence[dict] | None = None, colour_bars: Sequence[tuple[str, int]] = (),
                label_every_panel: bool = False, token_ticks: bool = False, legend: bool | int = False,
                legend_names: Sequence[str] = (), min_column_px: float = 0.0) -> tuple[dict, Fit]:
    """The layout (a dict for go.Figure) that sizes a rows x cols grid of token panels (make_subplots order) so
    that every label is readable in the theme's width (and height), and what it chose.

    row_labels, col_labels: the raw labels of a panel's rows and columns (the same in every panel).
    panels: how many of the grid's cells hold a panel (all by default). wrap: the panels, in order, may stand in
    fewer columns and more rows where the theme's width is too narrow for them side by side; every panel then
    shows its own tick labels (set here). colour_bars: (coloraxis name, panel) pairs: that axis's colour bar
    stands right of that panel (1-based; in a single row, its column; the last puts it at the right edge).
    label_every_panel: tick labels on every panel instead of the outer ones only (the caller sets
    showticklabels). titles: the panels' title annotations (dicts, one per panel in order, as make_subplots makes
    them), placed above their panels; None: the panels have none. legend: leave room for the horizontal legend at
    the bottom: LEGEND_LINES lines, or as many as given (a legend of a few short names needs one); legend_names,
    its entries' names where given: where the theme's height has no room for the legend under the panels, it
    stands beside them, a column at the right (a projector's tall figure has width to spare). token_ticks: put
    the token tick labels on the axes that show them (the outer ones, or all) and hide the others' (panels of
    panels.matrix_panel have theirs already). min_column_px: columns at least this wide (numbers in the cells).
    """
    panels = rows * cols if panels is None else panels
    shape, per_row, grid_rows, every = _choose(
        theme, row_labels, col_labels, rows, cols, panels, wrap, [panel for _, panel in colour_bars],
        label_every_panel, legend_names, title=title, titles=titles, legend=legend, min_column_px=min_column_px)
    font, left, top = shape["font"], shape["left"], shape["top"]
    panel_w, panel_h, plot_w, plot_h = shape["panel_w"], shape["panel_h"], shape["plot_w"], shape["plot_h"]
    wrapped = grid_rows > rows
    # One update_layout for everything: setting 96 axes one by one costs seconds in plotly.py.
    layout = dict(width=round(shape["width"]), height=round(shape["height"]), margin=shape["margin"],
                  title=dict(x=0, xref="container", xanchor="left", y=1, yref="container", yanchor="top",
                             pad=dict(t=8, l=12)))
    titles = [dict(annotation) for annotation in titles or ()]
    for index in range(rows * cols):
        row, col = divmod(index, per_row)
        x_name, y_name = (f"{letter}axis{index + 1 if index else ''}" for letter in "xy")  # make_subplots' names
        if index >= panels:  # an empty cell of the grid asked for
            layout[x_name], layout[y_name] = dict(visible=False), dict(visible=False)
            continue
        # automargin=False: the margins above already hold the labels, and with it Plotly.js measures every
        # label of every axis (slow at 256 tokens and 48 panels); the browser tests check that none is cut.
        layout[x_name] = dict(domain=axis_domain(left[col], left[col] + panel_w, plot_w), tickfont=dict(size=font),
                              tickangle=shape["x_angle"], automargin=False)
        layout[y_name] = dict(domain=axis_domain(top[row], top[row] + panel_h, plot_h, from_top=True),
                              tickfont=dict(size=font), automargin=False)
        last_row = row == grid_rows - 1 or index + per_row >= panels  # no panel below it
        if token_ticks:  # the outer axes, or all of them
            layout[x_name].update(token_axis(col_labels) if every or last_row else {},
                                  showticklabels=every or last_row)
            layout[y_name].update(token_axis(row_labels) if every or col == 0 else {},
                                  showticklabels=every or col == 0)
        elif wrapped:  # make_subplots hid the labels of axes shared along the one row
            layout[x_name].update(showticklabels=True)
            layout[y_name].update(showticklabels=True)
            layout[y_name].pop("matches", None)
        if index < len(titles):
            titles[index].update(x=(left[col] + panel_w / 2) / plot_w, y=1 - top[row] / plot_h, yanchor="bottom",
                                 yshift=2)
    if titles:
        layout["annotations"] = titles
    if shape["legend_beside"]:  # top-aligned with the panels (themed keeps a figure's own legend place)
        layout["legend"] = dict(orientation="v", xref="paper", x=(shape["plot_w_panels"] + LEGEND_GAP_PX) / plot_w,
                                xanchor="left", yref="paper", y=1, yanchor="top")
    for name, panel in colour_bars:
        row, col = divmod(panel - 1, per_row)
        layout[name] = dict(colorbar=dict(
            x=(left[col] + panel_w + 10) / plot_w, xanchor="left", y=1 - top[row] / plot_h, yanchor="top",
            lenmode="pixels", len=min(panel_h, 12 * LINE_EM * theme.font_size) if wrapped else
            min(plot_h, 12 * LINE_EM * theme.font_size), thickness=COLOUR_BAR_PX, title=dict(side="right")))
    fit = Fit(font, shape["column_px"], shape["row_px"], shape["x_angle"], per_row, grid_rows, shape["width"],
              shape["height"])
    return layout, fit


def fit_grid(theme: Theme, row_labels: Sequence[object], col_labels: Sequence[object], rows: int, cols: int,
             **options: Any) -> tuple[int, int]:
    """How many rows and columns of a rows x cols grid of token panels (model_view's layers x heads) to show at
    once so that they fit the theme's width (and height): the most columns, then the most rows. At least one of
    each (wider or taller than the theme: the caller scrolls)."""
    def shaped(r, c):
        bars = [(name, c) for name, _ in options.get("colour_bars", ())]  # beside the window's last column
        return grid_layout(theme, row_labels, col_labels, rows=r, cols=c, **{**options, "colour_bars": bars})[1]

    columns = next((c for c in range(cols, 0, -1) if shaped(1, c).fits(theme)), 1)
    shown_rows = next((r for r in range(rows, 0, -1) if shaped(r, columns).fits_height(theme)), 1)
    return shown_rows, columns


def axis_domain(start: float, end: float, total: float, *, from_top: bool = False) -> list[float]:
    """The axis domain of a panel from pixel `start` to `end` of a plot `total` pixels long (counted down from its
    top where from_top, as rows are laid out), each bound kept within [0, 1]: rounding puts the last panel's at
    1 - total / total = -2e-16, and Plotly refuses a figure with any bound outside. Every figure that places its
    own panels takes their domains from here."""
    if from_top:
        start, end = total - end, total - start
    return [min(max(pixels / total, 0.0), 1.0) for pixels in (start, end)]
