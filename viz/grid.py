"""The model view: every layer x head of one attention kind as small multiples on one shared scale.

Each head is drawn as one PNG image (go.Image), not as a heatmap with one SVG cell per value: at 256 tokens and
6 x 8 heads that is 3 million cells, which a browser cannot draw and the app cannot ship.
"""
import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Blocked, Tokens, check_blocked, check_stack
from .labels import safe_label, token_range
from .layout import fit_grid, grid_layout
from .panels import axis_names, colour_axis, shared_grid, value_range
from .png import png_data_uri
from .theme import Theme, colour_table, css_colour, mask_rgba, merged, theme_layout, themed_figure

# Up to this many cells in all, every panel gets an invisible heatmap whose hover names the query and key tokens
# and the weight (a click on it also reports the panel). Beyond, that hover data would outweigh the images (at 256
# tokens and 6 x 8 heads, 3 million cells), and the images' hover names the panel and the positions only.
HOVER_CELLS = 120_000
# With this many panels or fewer, every panel carries its tick labels; with more, the outer ones only.
LABEL_EVERY_PANEL = 4


def model_view(stack: ArrayLike, q_tokens: Tokens, k_tokens: Tokens, *, blocked: Blocked | None = None,
               show_masks: bool = True, fixed_scale: bool = True, title: str = "", first: tuple[int, int] = (0, 0),
               heads_per_kv: int = 1, theme: Theme = Theme()) -> go.Figure:
    """All heads of `stack` (layers, heads, q_len, k_len) as a layers x heads grid with one colour bar.

    first: the (layer, head) of stack[0, 0] when `stack` is a window of a larger grid (one page of
    fit_model_view's): panels, meta and hover name the model's own layers and heads.
    Panels are titled "L2 H5" (0-based, as in the model); with grouped-query attention (heads_per_kv query heads
    share each key/value head) "L2 H5 · kv1", the key/value head the head reads. Trace i for i < layers * heads is
    the window's layer i // heads, head i % heads, and carries meta=[layer, head] (a list: Plotly.js redraws a
    figure in full on every update that hands it a dict meta): the curve number of a click event (or the trace's
    meta) tells the app which head to open; so do the hover heatmaps that follow them (when the input is small
    enough, see HOVER_CELLS). Colours are
    quantised to at most 256 levels per image. blocked: masks as in head_heatmap; with show_masks their colours
    are blended into the images (the legend names them; switching them needs show_masks=False, as images have no
    legend toggle). Every token labels the outer axes (the bottom
    row's keys, the first column's queries), or every panel's when there are LABEL_EVERY_PANEL panels or fewer;
    the panels grow with the tokens so that each label stays readable (draw the figure at least layout.width x
    layout.height pixels).
    """
    stack = check_stack(stack, q_tokens, k_tokens)
    layers, heads = stack.shape[:2]
    blocked = check_blocked(blocked, stack.shape[2:]) if show_masks else {}
    cmin, cmax = value_range(stack, fixed_scale)
    # Built as one dict (theme.themed_figure): through make_subplots, add_trace and update_layout the same
    # figure is many times slower (plotly.py re-validates at every step).
    traces = []
    hover_layer = stack.size <= HOVER_CELLS
    for index, source in enumerate(_head_images(stack, blocked, cmin, cmax, theme.sequential)):
        layer, head = (sum(pair) for pair in zip(divmod(index, heads), first))
        x_id, y_id = axis_names(index)
        name = panel_title(layer, head, heads_per_kv)
        traces.append(dict(type="image", source=source, name=name, meta=[layer, head],
                           xaxis=x_id, yaxis=y_id, hoverinfo="skip" if hover_layer else None,
                           hovertemplate=f"{name}<br>query %{{y}}, key %{{x}}<extra></extra>"))
    if hover_layer:
        tokens = np.stack(np.broadcast_arrays(np.array([safe_label(t) for t in q_tokens], dtype=object)[:, None],
                                              np.array([safe_label(t) for t in k_tokens], dtype=object)[None, :]),
                          axis=-1)  # (q_len, k_len, 2)
        for index, (layer, head) in enumerate(np.ndindex(layers, heads)):
            layer, head = layer + first[0], head + first[1]
            x_id, y_id = axis_names(index)
            name = panel_title(layer, head, heads_per_kv)
            traces.append(dict(
                type="heatmap", z=stack[layer - first[0], head - first[1]], customdata=tokens, showscale=False,
                name=name,
                colorscale=[[0, "rgba(0,0,0,0)"], [1, "rgba(0,0,0,0)"]], meta=[layer, head],
                xaxis=x_id, yaxis=y_id,
                hovertemplate=(f"{name}<br>query: %{{customdata[0]}} (%{{y:d}})<br>key: %{{customdata[1]}}"
                               " (%{x:d})<br>weight: %{z:.4g}<extra></extra>")))
    # Images have neither colour bar nor legend: empty marker traces carry both.
    traces.append(dict(type="scatter", x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip",
                       marker=dict(coloraxis="coloraxis", color=[cmin], size=theme.marker_size)))
    for reason in blocked:
        traces.append(dict(type="scatter", x=[None], y=[None], mode="markers", name=safe_label(reason),
                           marker=dict(symbol="square", color=css_colour(mask_rgba(reason)), size=theme.marker_size)))
    grid = shared_grid(layers, heads, [panel_title(layer + first[0], head + first[1], heads_per_kv)
                                       for layer in range(layers) for head in range(heads)], theme)
    # Token ticks only on the axes that show them: Plotly.js lays out every tick of every axis, labelled or not,
    # and a tick per token on all 96 axes of a 6 x 8 grid at 256 tokens took longer to draw than the 48 images.
    sized, _ = grid_layout(theme, q_tokens, k_tokens, rows=layers, cols=heads, title=title,
                           titles=grid.pop("annotations"), colour_bars=[("coloraxis", heads)],
                           label_every_panel=layers * heads <= LABEL_EVERY_PANEL, token_ticks=True,
                           legend=bool(blocked))
    # scaleanchor=False: Plotly.js locks an image's y axis to its x axis (square pixels) unless the axis is
    # constrained already; with shared y axes only the first column's axes are unmatched, so only that column
    # was locked and shrank to a fraction of the others' width. No panel keeps square pixels; all fill their cell.
    # showgrid=False: the opaque images hide the grid, which Plotly.js would still draw as one path per tick (at 256
    # tokens and 6 x 8 heads, 25,000 paths that Chromium spends much of the figure's drawing time on).
    q_len, k_len = stack.shape[2:]
    axes = {}
    for index in range(layers * heads):
        x_id, y_id = axis_names(index)
        axes[f"xaxis{x_id[1:]}"] = dict(showgrid=False, zeroline=False, **token_range(k_len))
        axes[f"yaxis{y_id[1:]}"] = dict(showgrid=False, zeroline=False, scaleanchor=False,
                                         **token_range(q_len, top_down=True))
    # What Streamlit sets on a chart whose points can be selected: set here, its first redraw finds nothing to change.
    clicks = dict(clickmode="event+select", hovermode="closest", dragmode="pan")
    layout = merged(grid, colour_axis("coloraxis", theme.sequential, cmin, cmax, "weight"), sized, axes, clicks,
                    theme_layout(theme, title))
    return themed_figure(traces, layout, theme)


def panel_title(layer: int, head: int, heads_per_kv: int = 1) -> str:
    """A model view panel's title: "L2 H5", and "L2 H5 · kv1" with grouped-query attention (heads_per_kv > 1 query
    heads share each key/value head; head h reads h // heads_per_kv)."""
    return f"L{layer} H{head}" + (f" · kv{head // heads_per_kv}" if heads_per_kv > 1 else "")


def fit_model_view(q_tokens: Tokens, k_tokens: Tokens, layers: int, heads: int, *, title: str = "",
                   legend: bool = False, heads_per_kv: int = 1, theme: Theme = Theme()) -> tuple[int, int]:
    """How many layers and heads of a model view fit the theme's width (and height) at once: (layers, heads) of
    one page (layout.fit_grid). The whole grid where it fits; else the app pages through it. Every panel is at
    least as wide as the longest panel title (model_view's)."""
    widest = panel_title(max(layers - 1, 0), max(heads - 1, 0), heads_per_kv)  # the last digits are the longest
    return fit_grid(theme, q_tokens, k_tokens, layers, heads, title=title, titles=[dict(text=widest)],
                    colour_bars=[("coloraxis", heads)], label_every_panel=layers * heads <= LABEL_EVERY_PANEL,
                    legend=legend)


def _head_images(stack, blocked, cmin, cmax, colorscale) -> list[str]:
    """Each head as a palette PNG data URI, coloured like the colour bar, masks blended in like the overlays.

    Every combination of mask reasons present gets its own copy of the colour ramp, blended with those reasons'
    colours in order (as the browser stacks the overlays), so the 256 palette entries are shared between them.
    """
    combination = np.zeros(stack.shape[2:], dtype=np.int64)  # bit i set: blocked for the i-th reason
    for bit, mask in enumerate(blocked.values()):
        combination |= mask.astype(np.int64) << bit
    present = np.unique(combination)
    levels = 256 // len(present)
    span = (cmax - cmin) or 1.0
    level = np.clip(np.rint((stack - cmin) / span * (levels - 1)), 0, levels - 1).astype(np.int64)
    indices = (np.searchsorted(present, combination) * levels + level).astype(np.uint8)
    ramp = colour_table(colorscale, levels)
    palette = np.concatenate([_blend(ramp, [mask_rgba(r) for bit, r in enumerate(blocked) if code >> bit & 1])
                              for code in present])
    palette = np.rint(palette).astype(np.uint8)
    return [png_data_uri(indices[layer, head], palette) for layer, head in np.ndindex(*stack.shape[:2])]


def _blend(colours, overlays) -> np.ndarray:
    """`colours` (n, 3) seen through translucent (r, g, b, alpha) overlays laid on in order."""
    for *rgb, alpha in overlays:
        colours = (1 - alpha) * colours + alpha * np.array(rgb, dtype=float)
    return colours
