"""What views share on screen: figures with the export toolbar, rows of controls, the head picker, labels."""
from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import plotly.io
import streamlit as st
from plotly.utils import PlotlyJSONEncoder

import viz

from .analysis import KIND_LABELS
from .page import Page
from .state import URL_STATE, draw

PROBABILITY = st.column_config.ProgressColumn(format="%.3f", min_value=0.0, max_value=1.0)
OUTPUT_HELP = "The model's output as plain text: its pieces joined, nothing read as Markdown or HTML."
TYPED_TARGET_HELP = ("The target typed in the sidebar, not the model's output: the decoder reads it piece by piece "
               "(teacher forcing), and every view shows the attention for it. Shown as plain text.")
EMPTY_OUTPUT = "(empty: the model ended at once)"


def write_charts_with_the_json_engine() -> None:
    """st.plotly_chart writes each chart's JSON for every session that draws it, through plotly.io.to_json's default
    engine. Where orjson is installed (Streamlit suggests it), that engine first walks every value of the figure in
    Python to clean it: for our heatmaps, whose cells are lists of floats, 4 to 9 times slower than the json engine
    (0.2 against 1.8 ms at 24 tokens, 2.7 against 10 ms at 64), for the same bytes. The engine is process-wide, so
    the app picks it where a page starts (ui.frame.draw_page), never on import."""
    plotly.io.json.config.default_engine = "json"


FOLDED_CHARS = 90  # of the first message, on a folded line: one line at 1280 pixels in lecture mode's large text


def folded(messages: list[str] | tuple[str, ...], what: str) -> str:
    """Messages on one line, as lecture mode shows them above a figure (the rest on demand): how many `what` there
    are, and the start of the first (as plain text: a cut code span would show its backtick)."""
    first = messages[0].replace("`", "")
    first = first if len(first) <= FOLDED_CHARS else first[: FOLDED_CHARS - 1].rstrip() + "…"
    return (f"{len(messages)} {what}: " if len(messages) > 1 else "") + first


def pieces_shown(tokens) -> list[str]:
    """Pieces as a table or list shows them: word-start markers as middle dots, as in every figure (viz.piece_text)."""
    return [viz.piece_text(token) for token in tokens]


def model_output(text: str, tooltip: str = OUTPUT_HELP) -> None:
    """A model's output (or a typed target, with its own `tooltip`) in a box, as plain text. Not st.code: its syntax
    highlighter is a 1.5 MB script that the browser compiled before drawing the first page's figure (part of a first
    visitor's wait)."""
    st.container(border=True).text(text or EMPTY_OUTPUT, help=tooltip)


# A scroll box that shows its scrollbars (overlay scrollbars hide until touched): a reader sees there is more.
SCROLL_CSS = """.st-key-{box} {{ overflow: {overflow}; max-height: {height}; }}
.st-key-{box}::-webkit-scrollbar {{ width: 12px; height: 12px; }}
.st-key-{box}::-webkit-scrollbar-thumb {{ background: #9aa0a6; border-radius: 6px; }}
.st-key-{box}::-webkit-scrollbar-track {{ background: rgba(128, 128, 128, 0.15); }}"""


# What the toolbar's camera saves for each download format: html adds a button under each figure (show_figure).
CAMERA = {"png": "png", "svg": "svg", "html": "png"}


# What one figure may send to the browser, as JSON in one websocket message: a 1,000-token heatmap with its hover
# data is about 76 MB, which Chromium took 90 s and 1.7 GB to draw.
PAYLOAD_LIMIT_BYTES = 10_000_000
HOVER_EXTRAS = ("customdata", "hovertext")  # per-cell hover data, most of a heatmap's bytes (4 values a cell)
ARRAYS = ("z", "x", "y", "text", *HOVER_EXTRAS)
SAMPLE_VALUES = 512  # values serialised per array to estimate its bytes


def _array_bytes(value) -> int:
    """About how many bytes `value` (an array of a trace) takes as JSON: a sample of its values serialised, times
    its size."""
    if value is None or isinstance(value, str):
        return 0
    flat = (value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object)).ravel()
    if not flat.size:
        return 2
    sample = flat[np.linspace(0, flat.size - 1, min(flat.size, SAMPLE_VALUES)).astype(int)].tolist()
    return int(len(json.dumps(sample, cls=PlotlyJSONEncoder)) / len(sample) * flat.size) + 2


def payload_bytes(fig) -> int:
    """About how many bytes `fig` sends to the browser: its traces' arrays (each estimated from a sample) and its
    layout."""
    arrays = sum(_array_bytes(trace[name]) for trace in fig.data for name in ARRAYS if name in trace)
    return arrays + len(json.dumps(fig.layout.to_plotly_json(), cls=PlotlyJSONEncoder))


def _block_means(z: np.ndarray, k: int) -> np.ndarray:
    """The mean of each k x k block of `z` (NaN cells left out; a block of NaN only stays NaN)."""
    rows, cols = -(-z.shape[0] // k) * k, -(-z.shape[1] // k) * k
    padded = np.full((rows, cols), np.nan)
    padded[:z.shape[0], :z.shape[1]] = z
    blocks = padded.reshape(rows // k, k, cols // k, k)
    counts = (~np.isnan(blocks)).sum(axis=(1, 3))
    sums = np.nansum(blocks, axis=(1, 3))
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan).astype(np.float32)


def _mergeable(trace) -> bool:
    """A heatmap at integer positions 0, 1, 2, ... (every token panel's): its cells can be merged into blocks."""
    return (trace.type == "heatmap" and trace.x is None and trace.y is None and np.ndim(trace.z) == 2
            and trace.x0 in (None, 0) and trace.y0 in (None, 0) and trace.dx in (None, 1) and trace.dy in (None, 1))


def bounded_figure(fig, limit: int = PAYLOAD_LIMIT_BYTES):
    """(`fig`, or a lighter copy of it, or None; a line that says what was done, "" for nothing). A figure over
    `limit` bytes first loses its per-cell hover data (hover then shows positions and values); still over, each
    token heatmap's cells are merged into k x k blocks, each the mean of its cells, drawn where those cells were
    (axes, labels and size unchanged), k the smallest that fits; a figure still over (no heatmap to merge) is not
    drawn. `fig` itself is never changed: it may be a cached figure other sessions share."""
    size = payload_bytes(fig)
    if size <= limit:
        return fig, ""
    over = (f"This figure would send {size / 1e6:.0f} MB to the browser, more than the {limit / 1e6:.0f} MB one "
            "figure may")
    traces = [trace.to_plotly_json() for trace in fig.data]
    for trace in traces:
        if any([trace.pop(name, None) is not None for name in HOVER_EXTRAS]):
            trace["hovertemplate"] = "row %{y}, column %{x}: %{z:.4g}<extra></extra>"
    lighter = go.Figure(dict(data=traces, layout={**fig.layout.to_plotly_json(), "template": {}}))  # {}: none added
    lighter.layout.template = None
    if payload_bytes(lighter) <= limit:
        return lighter, f"{over}: its hover shows positions and values only."
    merged = [trace for trace in lighter.data if _mergeable(trace)]
    original = [np.asarray(trace.z, dtype=float) for trace in merged]
    if payload_bytes(lighter) - sum(_array_bytes(z) for z in original) >= limit:  # what merging cannot lighten
        return None, f"{over}, so it is not drawn: a shorter input draws it."
    for k in range(2, max([max(z.shape) for z in original], default=1) + 1):
        for trace, z in zip(merged, original, strict=True):
            trace.update(z=_block_means(z, k), x0=(k - 1) / 2, dx=k, y0=(k - 1) / 2, dy=k,
                         hovertemplate=f"{k}×{k} cells around row %{{y}}, column %{{x}}: mean %{{z:.4g}}"
                                       "<extra></extra>")
        if payload_bytes(lighter) <= limit:
            return lighter, (f"{over}: its hover shows positions and values only, and each cell of its heatmaps is "
                             f"the mean of a {k}×{k} block of cells.")
    return None, f"{over}, so it is not drawn: a shorter input draws it."


def show_figure(page: Page, fig, name: str, theme: viz.Theme | None = None, **kwargs):
    """Every figure with the export toolbar; theme=None, as viz.Theme already styles it for light or dark.

    Drawn at the size viz gave it (layout.width x layout.height: every token keeps a readable label). viz lays a
    figure out for the width it was given (theme, the page's by default), so it fits; one that is wider all the
    same (a 64-token panel has no smaller readable layout), or in lecture mode taller than the screen below the
    controls, is drawn in a box that scrolls, with visible scrollbars and a line that says so. Streamlit shrinks
    a chart to its column, so the inner box is held at the figure's width and the outer one scrolls. Returns
    st.plotly_chart's value (its selection with on_select). A figure over PAYLOAD_LIMIT_BYTES is drawn lighter, or
    not at all, with a line that says so (bounded_figure)."""
    fig, bounded = bounded_figure(fig)
    if bounded:
        st.caption(bounded)
    if fig is None:
        return None
    theme = theme or page.theme
    key = kwargs.pop("key", f"figure-{name}")
    box = re.sub(r"[^A-Za-z0-9_-]", "-", key)  # a CSS class name
    width = int(fig.layout.width) if fig.layout.width else None
    wide = bool(width and theme.width and width > theme.width)
    tall = bool(page.lecture and fig.layout.height and theme.height and fig.layout.height > theme.height)
    if wide and not page.lecture:
        st.caption(f"↔ This figure needs {width} pixels for every label to stay readable, more than the "
                   f"{theme.width} here: scroll it sideways for the rest.")
    scroll = f"scroll-{box}" if not (wide or tall) else f"overflow-{box}"  # overflow-: the browser tests' sign
    if width:  # our own constant CSS (no user text)
        overflow = f"{'scroll' if wide else 'hidden'} {'scroll' if tall else 'hidden'}" if wide or tall else \
            "auto hidden"
        st.html("<style>" + SCROLL_CSS.format(box=scroll, overflow=overflow,
                                              height=f"{theme.height}px" if tall else "none")
                + f" .st-key-wide-{box} {{ min-width: {width}px; }}</style>")
    with st.container(key=scroll), st.container(key=f"wide-{box}"):
        chart = st.plotly_chart(fig, theme=None, config=viz.toolbar_config(CAMERA[page.image_format],
                                                                           f"{page.name}-{name}"),
                                key=key, width=width or "stretch", **kwargs)
    if page.image_format == "html" and not page.lecture:  # built on the click (4 MB of Plotly in each file)
        st.download_button("Download interactive (HTML)", lambda: viz.to_html_bytes(fig, f"{page.name}-{name}"),
                           file_name=f"{page.name}-{name}.html", mime="text/html", key=f"html-{key}",
                           on_click="ignore", icon=":material/download:", type="tertiary")
    if page.lecture and (wide or tall):  # under it: above, it would push the figure down the screen
        st.caption(f"{'↔' if wide else ''}{'↕' if tall else ''} More of this figure than the screen holds: "
                   "scroll inside it.")
    return chart


GAP_PX = {False: 16, True: 22}  # st.columns' small gap, 1 rem
EXPANDER_PX = 60  # an expander's border and padding, both sides, in lecture mode's larger rem


def inset(page: Page, pixels: int) -> viz.Theme:
    """The page's theme for a figure drawn `pixels` narrower than the page (inside an expander's padding)."""
    return dataclasses.replace(page.theme, width=page.theme.width - pixels if page.theme.width else None)


def side_by_side(page: Page, widths: list[int]) -> list:
    """Columns at least `widths` pixels wide (each in proportion to its width) when they fit the page's width side by
    side, so that no figure that fits the page is cut by its column; else full-width containers, one under another."""
    if sum(widths) + GAP_PX[page.lecture] * (len(widths) - 1) <= (page.theme.width or 0):
        return st.columns(widths, gap="small")
    return [st.container() for _ in widths]


def table_height(page: Page) -> str:
    """In lecture mode a table shows every row (no inner scrolling a room cannot see); otherwise ten at most."""
    return "content" if page.lecture else "auto"


def word_switch(row) -> bool:
    """The word-level switch every heatmap view shares (?words=1)."""
    return row.toggle("Words", key="words", persist_state="session",
                      help="Merge sentencepiece pieces into words: a word's weight is the sum over its pieces (rows "
                           "still sum to 1), a word's row the mean of its pieces' rows.")


@dataclass(frozen=True)
class Shown:
    """Attention as a figure shows it: pieces or words, decoder rows labelled with what they produce."""

    weights: np.ndarray  # (..., q_len, k_len), or (..., q_words, k_words) at word level
    q_labels: list[str]
    k_labels: list[str]
    blocked: dict[str, np.ndarray]
    produces: bool  # rows read "input → output": show viz.PRODUCES_CAPTION under the figure


def shown(page: Page, kind: str, weights, words: bool) -> Shown:
    """`weights` (..., q_len, k_len) of `kind` at piece or word level (see viz.words)."""
    analysis = page.analysis
    q_tokens, k_tokens = analysis.tokens(kind)
    blocked = analysis.blocked(kind)
    if words:
        merged, q_words, k_words = viz.merge_words(weights, q_tokens, k_tokens)
        return Shown(merged, q_words, k_words, viz.merge_blocked(blocked, q_tokens, k_tokens), False)
    produces = analysis.attention.of(kind).query_side == "tgt"
    if produces:
        q_tokens = viz.produces_labels(q_tokens, analysis.output_tokens)
    return Shown(np.asarray(weights), q_tokens, k_tokens, blocked, produces)


def produces_caption(figure: Shown) -> None:
    if figure.produces:
        st.caption(viz.PRODUCES_CAPTION)


# Lecture mode's column beside the figures (ui.frame): where a view's rows of controls go, for this run only.
_controls_column: ContextVar = ContextVar("attention_atlas_controls_column", default=None)


@contextmanager
def controls_beside(column) -> Iterator[None]:
    """While a view draws: its rows of controls (controls()) in `column`, beside its figures; None: above them."""
    token = _controls_column.set(column)
    try:
        yield
    finally:
        _controls_column.reset(token)


def controls(name: str):
    """A row of widgets, each as wide as its content, wrapping when the page is narrow (or the fonts large); in
    lecture mode, in the column beside the figures (controls_beside), so that a figure has the projector's whole
    height. Its key (controls-name, unique on the page) lets lecture mode's CSS draw it compact."""
    column = _controls_column.get()
    return (column or st).container(horizontal=True, vertical_alignment="bottom", gap="small" if column else "medium",
                                    key=f"controls-{name}")


def aside(text: str, where=None) -> None:
    """A line (Markdown) about the view's figures that stands before them: under the controls in lecture mode's
    column beside the figures (controls_beside), so the figure keeps the screen's height; elsewhere in `where` (a
    container), or where it is called."""
    (_controls_column.get() or where or st).caption(text)


def panel_picker(page: Page, names: list[str], default: int) -> int | None:
    """In lecture mode, the one panel of a figure's row to show (?panel=N), picked by a row of buttons beside the
    figure: three 30-piece panels side by side cannot keep 12 px labels on a 1280 x 720 projector, one can. None
    outside lecture mode: every panel, side by side."""
    if not page.lecture:
        return None
    return draw(controls("panel").segmented_control, "Panel", "panel", range(len(names)), default, required=True,
                format_func=names.__getitem__, label_visibility="collapsed", persist_state="session")


def head_label(layer: int, head: int | None) -> str:
    """Short name of one head (or of a layer's mean), as lists and comparisons show it."""
    return f"L{layer} " + ("mean" if head is None else f"H{head}")


def head_title(kind: str, layer: int, head: int | None, kv: int | None = None) -> str:
    """kv: the key/value head a grouped-query head reads (kv_head), named after it; None: not named."""
    return (f"{KIND_LABELS[kind]} · layer {layer} · " + ("mean of heads" if head is None else f"head {head}")
            + ("" if kv is None or head is None else f" · kv {kv}"))


def kv_head(config, head: int) -> int | None:
    """The key/value head query head `head` reads under grouped-query attention, head // (num_heads / kv_heads); None
    where every head has its own keys and values (multi-head attention: nothing to name)."""
    if config.kv_heads == config.num_heads:
        return None
    return head // (config.num_heads // config.kv_heads)


def kv_sharers(config, head: int) -> list[int]:
    """The query heads that read the same key/value head as `head` (itself included), in order."""
    group = config.num_heads // config.kv_heads
    first = head // group * group
    return list(range(first, first + group))


def kv_sentence(config, head: int) -> str:
    """Which key/value head a grouped-query head reads and which query heads share it; "" in multi-head attention."""
    kv = kv_head(config, head)
    if kv is None:
        return ""
    return (f"query head {head} reads key/value head {kv}, shared with heads "
            + ", ".join(str(h) for h in kv_sharers(config, head)))


def head_option(config, lecture: bool):
    """The head picker's option labels: "2" ("H2" in lecture mode), and with grouped-query attention the head's
    key/value head after it ("4 · kv1", "H4·kv1")."""
    def label(head: int) -> str:
        kv = kv_head(config, head)
        name = f"H{head}" if lecture else str(head)
        return name if kv is None else name + (f"·kv{kv}" if lecture else f" · kv{kv}")
    return label


def step_setting(name: str, delta: int, count: int) -> None:
    """Move the setting `name` (a layer, a head, a decoding step) by delta, within 0..count-1."""
    st.session_state[name] = min(max(st.session_state[name] + delta, 0), count - 1)


def stepper(row, name: str, count: int, keys: tuple[str, str], label: str) -> None:
    """◀ and ▶ buttons for `name`, with keyboard shortcuts (keys: previous, next), as a lecturer steps through.
    Icons only, so that they fit on the lecture row; the tooltip names the setting and its key."""
    value = st.session_state.get(name, 0)
    row.button("◀", key=f"{name}-back", on_click=step_setting, args=(name, -1, count), shortcut=keys[0],
               disabled=value <= 0, type="tertiary", help=f"Previous {label} (key {keys[0]})")
    row.button("▶", key=f"{name}-next", on_click=step_setting, args=(name, 1, count), shortcut=keys[1],
               disabled=value >= count - 1, type="tertiary", help=f"Next {label} (key {keys[1]})")


def head_picker(page: Page, *, layer: bool = True, head: bool = True, allow_average: bool = False,
                row=None) -> tuple[str, int | None, int | None]:
    """Kind, layer and head, shared by every view that shows one head (the same keys, kept between views).
    head is None when averaging over heads (or not asked for), layer None when not asked for. In lecture mode,
    keys step through them: L / Shift+L the layer, H / Shift+H the head. row: the controls() row to draw in (the
    view's own options may follow on it)."""
    row = row or controls("picker")
    # In lecture mode the options name themselves (L0, H2) without a label above them: the row stays one line high.
    compact = {"label_visibility": "collapsed"} if page.lecture else {}
    # A model without cross-attention (decoder-only, encoder-only) falls back to the last kind it has.
    fallback = URL_STATE["kind"][1] if URL_STATE["kind"][1] in page.kinds else page.kinds[-1]
    kind = draw(row.segmented_control, "Attention", "kind", page.kinds, fallback, format_func=KIND_LABELS.get,
                required=True, persist_state="session", **compact)
    if not layer:
        return kind, None, None
    layers = page.layers(kind)
    chosen_layer = draw(row.segmented_control, "Layer", "layer", range(layers), required=True,
                        persist_state="session", format_func=(lambda n: f"L{n}") if page.lecture else str, **compact)
    if page.lecture and layers > 1:
        stepper(row, "layer", layers, ("Shift+L", "L"), "layer")
    if not head:
        return kind, chosen_layer, None
    # The head picker and its steppers wrap as one; lecture mode keeps the whole row on one line anyway.
    head_slot = row if page.lecture else row.container(horizontal=True, vertical_alignment="bottom", gap="small")
    average = allow_average and row.toggle("Mean" if page.lecture else "Average heads", key="average",
                                           persist_state="session",
                                           help="The mean of all heads' weights in this layer.")
    chosen_head = draw(head_slot.segmented_control, "Head", "head", page.heads(), required=True, disabled=average,
                       persist_state="session", format_func=head_option(page.config, page.lecture), **compact)
    if page.lecture and not average:
        stepper(head_slot, "head", len(page.heads()), ("Shift+H", "H"), "head")
    return kind, chosen_layer, None if average else chosen_head
