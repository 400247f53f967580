"""Fonts and colours of every figure, in one place.

Every figure builder takes `theme=Theme()` and ends with apply_theme(), so no builder sets a font size itself.
Theme(large=True) is lecture mode: fonts twice as big and thicker lines, readable from the back of a hall.
"""
import copy
import functools
import json
import os
import re
from dataclasses import dataclass

import numpy as np
import plotly.colors
import plotly.graph_objects as go
import plotly.io as pio

from .conventions import CAUSAL, PADDED_QUERY, PADDING, SLIDING_WINDOW
from .labels import safe_label

# (r, g, b, alpha): translucent, so the weights beneath stay visible; distinct hues, so cells blocked for two
# reasons read apart. Grey and orange stay apart for the common colour-vision deficiencies.
MASK_COLOURS = {
    PADDING: (100, 100, 100, 0.6),
    CAUSAL: (230, 120, 20, 0.5),
    PADDED_QUERY: (150, 80, 200, 0.35),
    SLIDING_WINDOW: (30, 140, 160, 0.5),  # teal: apart from the causal orange it meets on the diagonal's far side
}
OTHER_MASK_COLOUR = (200, 30, 120, 0.45)  # for reasons a caller invents

# Blue below zero, red above; used for signed values (differences, positional encodings) centred at 0.
DIVERGING = "RdBu_r"


@dataclass(frozen=True)
class Theme:
    """Look of a figure and the space it is drawn in. large: lecture mode (about 2x fonts, thicker lines). dark: dark
    background. width: the pixels its container offers across (None: as wide as its labels need); a figure lays
    itself out to fit (viz.layout) and is wider only where even its smallest readable layout is. height: the pixels
    it should fit down (lecture mode: the screen under the controls; None: no limit)."""

    large: bool = False
    dark: bool = False
    width: int | None = None
    height: int | None = None
    smallest_font: int | None = None  # token labels' smallest font, where not the mode's (min_font_size)
    font: int | None = None  # the text's font, where not the mode's (font_size): a figure fitted to a height

    @property
    def _scale(self) -> int:
        return 2 if self.large else 1

    @property
    def font_size(self) -> int:
        return self.font or 12 * self._scale

    @property
    def min_font_size(self) -> int:
        """Token labels shrink from font_size down to this, never below: beyond it the figure wraps, pages or grows.
        In lecture mode 12: the back row of a hall reads nothing smaller. smallest_font, where set, instead (the model
        view's thumbnails: each head opens full size in the Attention view)."""
        return self.smallest_font or (12 if self.large else 10)

    @property
    def title_size(self) -> int:
        """24 in lecture mode, not 32: a projector's height is the figure's."""
        return 24 if self.large else 16

    @property
    def line_width(self) -> int:
        return 2 * self._scale

    @property
    def marker_size(self) -> int:
        return 7 * self._scale

    @property
    def template(self) -> dict:
        """Plotly's plotly_white or plotly_dark, less its axis titles' standoff: with a standoff Plotly.js
        measures every tick label of every axis to place the axis's title, titled or not (slow for a 48-panel model
        view at 256 tokens; docs/performance.md). Without it, titles sit beyond the labels as they do
        in Plotly's own default. Shared: read it, never change it (inline_template copies what it writes in)."""
        return _template("plotly_dark" if self.dark else "plotly_white")

    @property
    def sequential(self) -> str:
        """Colour scale for values from 0 up (weights): light-to-dark blue on white, Viridis on dark."""
        return "Viridis" if self.dark else "Blues"


@functools.cache
def _template(name: str) -> dict:
    template = pio.templates[name].to_plotly_json()
    for axis in ("xaxis", "yaxis"):
        template["layout"][axis]["title"].pop("standoff", None)
        if not template["layout"][axis]["title"]:
            del template["layout"][axis]["title"]
    return template


def mask_rgba(reason: str) -> tuple:
    """(r, g, b, alpha) of the overlay drawn over cells blocked for `reason`."""
    return MASK_COLOURS.get(reason, OTHER_MASK_COLOUR)


def css_colour(rgba: tuple) -> str:
    """An (r, g, b, alpha) tuple as the CSS colour string Plotly takes."""
    return "rgba({}, {}, {}, {})".format(*rgba)


def colour_stops(colorscale: str | list) -> list:
    """A colour scale as [[position, colour], ...], as plotly.py's validation writes a named one (Plotly.js's own
    scales of the same names differ)."""
    return [list(stop) for stop in plotly.colors.get_colorscale(colorscale)] if isinstance(colorscale, str) \
        else colorscale


def colour_table(colorscale: str | list, n: int) -> np.ndarray:
    """`n` colours (n, 3), floats 0-255, sampled evenly along a Plotly colour scale (a name or [[pos, colour]])
    by linear interpolation in RGB, as Plotly.js does, so images drawn with it match the figure's colour bar."""
    stops = plotly.colors.get_colorscale(colorscale) if isinstance(colorscale, str) else colorscale
    positions = [position for position, _ in stops]
    rgb = np.array(plotly.colors.convert_colors_to_same_type([c for _, c in stops], colortype="tuple")[0]) * 255
    samples = np.linspace(0, 1, n)
    return np.stack([np.interp(samples, positions, rgb[:, channel]) for channel in range(3)], axis=1)


def theme_layout(theme: Theme, title: str = "") -> dict:
    """The layout part of the theme: fonts, the legend's place, and `title` (escaped: it may hold tokens). Figures
    built as dicts merge it in (with their annotations' fonts and traces' sizes set as apply_theme does), then go
    through themed_figure for the template."""
    return dict(
        font=dict(size=theme.font_size),
        title=dict(text=safe_label(title), font=dict(size=theme.title_size)),
        hoverlabel=dict(font=dict(size=theme.font_size)),
        # Horizontal, under the plot: a legend at the right would sit on the colour bar.
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left"),
    )


def merged(base: dict, *updates: dict) -> dict:
    """`base` updated by each of `updates` in turn, nested dicts merged key by key (as Figure.update_layout does,
    without its cost: building a 48-panel figure through it is much slower than validating the result once)."""
    result = dict(base)
    for update in updates:
        for key, value in update.items():
            result[key] = merged(result[key], value) if isinstance(value, dict) and isinstance(
                result.get(key), dict) else value
    return result


# Template entries for subplot kinds the figures never draw: written into a layout, some would draw an empty subplot.
_UNUSED_SUBPLOTS = {"polar", "ternary", "scene", "geo", "mapbox", "map", "smith"}


def inline_template(layout: dict, data: list[dict], template: dict) -> tuple[dict, list[dict]]:
    """`layout` and `data` (plain dicts) with `template`'s values written in wherever they set none, as Plotly.js
    applies a template: its layout's xaxis, yaxis and coloraxis to every axis of that kind (and to the x and y
    axes the traces use), its annotationdefaults to every annotation, its other entries key by key; its data's
    entries for a trace type to the traces of that type in turn.

    Why: Plotly.js compares a figure's layout.template by identity, so a figure that carries one is drawn again in
    full by every Plotly.react, and Streamlit reacts once with a copy of each chart it has just drawn."""
    layout = {key: value for key, value in layout.items() if key != "template"}
    # A copy of the layout part: what is written in below must not be the shared template's (Theme.template).
    template = {"layout": copy.deepcopy(template.get("layout", {})), "data": template.get("data", {})}
    axes = {f"{letter}axis{trace.get(letter + 'axis', letter)[1:]}" for trace in data for letter in "xy"}
    for key, value in template.get("layout", {}).items():
        if key in ("xaxis", "yaxis", "coloraxis"):
            names = {name for name in layout if re.fullmatch(key + r"\d*", name)}
            for name in names | {axis for axis in axes if axis.startswith(key)}:
                axis = layout.get(name, {})
                # Plotly.js draws an axis line when the figure (not its template) gives the line a colour or width.
                implied = {} if key == "coloraxis" or {"showline", "linecolor", "linewidth"} & set(axis) else {
                    "showline": False}
                layout[name] = merged(implied, value, axis)
        elif key.endswith("defaults"):  # annotationdefaults: each of layout.annotations
            items = key.removesuffix("defaults") + "s"
            if items in layout:
                layout[items] = [merged(value, item) for item in layout[items]]
        elif key in layout:
            layout[key] = merged(value, layout[key]) if isinstance(value, dict) and isinstance(layout[key], dict) \
                else layout[key]
        elif key not in _UNUSED_SUBPLOTS:
            layout[key] = value
    seen: dict[str, int] = {}  # traces of each type so far
    themed = []
    for trace in data:
        kind = trace.get("type", "scatter")
        entries = template.get("data", {}).get(kind) or [{}]
        index = seen[kind] = seen.get(kind, -1) + 1
        themed.append(merged({key: copy.deepcopy(value) for key, value in entries[index % len(entries)].items()
                              if key != "type"}, trace))
    return layout, themed


def _listed(value):
    """`value` with its one-dimensional numeric arrays, at any depth of dicts, as lists. plotly.py sends a numpy
    array as a typed array, which Plotly.js compares by identity: a copy handed to Plotly.react (Streamlit sends
    one) looks like new data and the whole figure is drawn again. Two-dimensional arrays arrive as lists of rows,
    which Plotly.js compares by datarevision."""
    if isinstance(value, dict):
        return {key: _listed(item) for key, item in value.items()}
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "biuf":
        return value.tolist()
    return value


def themed_figure(data: list[dict], layout: dict, theme: Theme) -> go.Figure:
    """The figure of `data` and `layout` (plain dicts) with the theme's template written in (inline_template), none
    left on it (plotly.py would otherwise add its default one) and its traces' 1-D arrays as lists (_listed).

    Not validated: plotly.py's check of every property name and value was most of a new input's figure (2.7 of
    3.3 ms for a 16-token heatmap), on every rerun of every session, for figures that are this package's code. So
    the dicts are written as validation would leave them (colour scales as lists, no magic underscores, no empty
    dicts). Where ATLAS_VALIDATE_FIGURES=1, as the test suite runs, every figure is also validated and must give the
    same JSON."""
    layout, data = inline_template(layout, [_listed(trace) for trace in data], theme.template)
    validated = _sent(_figure(data, layout, validate=True)) if os.environ.get("ATLAS_VALIDATE_FIGURES") == "1" else None
    fig = _figure(data, layout, validate=False)
    if validated is not None and _sent(fig) != validated:
        raise AssertionError("a figure's dicts are not as plotly.py's validation leaves them, at "
                             + "; ".join(_differences(_sent(fig), validated)[:5]))
    return fig


def _differences(sent, validated, path: str = "") -> list[str]:
    """Where two JSON values differ: 'path: sent -> validated'."""
    if isinstance(sent, dict) and isinstance(validated, dict):
        missing = "(none)"
        return [difference for key in sorted(sent.keys() | validated.keys())
                for difference in _differences(sent.get(key, missing), validated.get(key, missing), f"{path}.{key}")]
    if isinstance(sent, list) and isinstance(validated, list) and len(sent) == len(validated):
        return [difference for index, (a, b) in enumerate(zip(sent, validated))
                for difference in _differences(a, b, f"{path}[{index}]")]
    return [] if sent == validated else [f"{path}: {json.dumps(sent)[:80]} -> {json.dumps(validated)[:80]}"]


def _figure(data: list[dict], layout: dict, validate: bool) -> go.Figure:
    """The figure of these dicts (copies where validated: validation may change what it is given) with no template,
    and whatever is changed on it later validated."""
    figure = dict(data=data, layout=dict(layout, template={}))  # {}: plotly.py looks up no default template
    fig = go.Figure(copy.deepcopy(figure) if validate else figure, _validate=validate)
    for part in (fig, fig.layout, *fig.data):
        part._validate = True
    fig.layout.template = None
    return fig


def _sent(fig: go.Figure):
    """What Plotly.js reads of the JSON st.plotly_chart sends of a figure (key order and 1 against 1.0 aside)."""
    return json.loads(pio.to_json(fig.to_dict(), validate=False))


def apply_theme(fig: go.Figure, theme: Theme, title: str = "") -> go.Figure:
    """`fig` with the theme's template (written in: see inline_template), fonts and line widths, and `title`
    (escaped: it may hold tokens). A new figure: use the one returned."""
    return themed([trace.to_plotly_json() for trace in fig.data], fig.layout.to_plotly_json(), theme, title)


def themed(data: list[dict], layout: dict, theme: Theme, title: str = "") -> go.Figure:
    """A figure still in plain dicts with the theme's fonts, title, line widths and height bound added (what
    apply_theme adds to a plotly figure), through themed_figure, where plotly.py's update_layout, update_annotations and
    update_traces would validate each change."""
    # The theme's legend place is the default: a figure that places its own (beside its panels) keeps it.
    layout = merged(layout, theme_layout(theme, title), {"legend": layout["legend"]} if "legend" in layout else {})
    if "annotations" in layout:  # subplot titles and notes
        layout["annotations"] = [merged(note, dict(font=dict(size=theme.font_size))) for note in layout["annotations"]]
    data = [merged(trace, dict(line=dict(width=theme.line_width), marker=dict(size=theme.marker_size)))
            if trace.get("type", "scatter") == "scatter" else trace for trace in data]
    if layout.get("height") is None and theme.height is not None:  # Plotly's 450 px would pass a projector's bottom
        layout["height"] = min(theme.height, 450)
    return themed_figure(data, layout, theme)
