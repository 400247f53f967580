"""Views of the model's positional encoding matrix pe (positions, d_model), as the app passes it; for a rotary
model, its rotation table (positions, d_head), its frequencies, and what the rotation does to one q·k."""
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .labels import safe_label
from .panels import set_colour_axis, subplots, symmetric_limit
from .theme import DIVERGING, Theme, apply_theme


def _check_pe(pe) -> np.ndarray:
    pe = np.asarray(pe, dtype=float)
    if pe.ndim != 2:
        raise ValueError(f"pe must be (positions, d_model); got shape {pe.shape}")
    return pe


def _signed_heatmap(values, hovertemplate, x_title, y_title, colour_title, theme, title) -> go.Figure:
    """A numeric heatmap on a scale centred at 0, first row at the top (as the position matrices read)."""
    fig = subplots(1, 1)
    fig.add_trace(go.Heatmap(z=values, coloraxis="coloraxis", hovertemplate=hovertemplate + "<extra></extra>"))
    limit = symmetric_limit(values)
    set_colour_axis(fig, "coloraxis", DIVERGING, -limit, limit, colour_title)
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title, autorange="reversed")
    return apply_theme(fig, theme, title)


def pe_heatmap(pe: ArrayLike, *, title: str = "Positional encoding", x_title: str = "dimension",
               theme: Theme = Theme()) -> go.Figure:
    """pe as positions (rows, top to bottom) x dimensions (columns), on a scale centred at 0. x_title: what the
    columns are (a rotary table's: each pair's sine, then its cosine)."""
    return _signed_heatmap(_check_pe(pe), "position %{y}<br>dimension %{x}<br>value %{z:.4g}", x_title,
                           "position", "value", theme, title)


def default_pe_dims(d_model: int) -> list[int]:
    """Dimensions 0, d/4, d/2 and 3d/4 (even: the sine of a sine/cosine pair): four frequencies far apart, from
    the fastest wave to slow ones; dimensions 0-3 are four near-identical fast waves."""
    return sorted({2 * (d_model * quarter // 8) for quarter in range(4)})


def pe_curves(pe: ArrayLike, dims: Sequence[int] | None = None, positions: Sequence[int] | None = None, *,
              names: Sequence[str] | None = None, title: str = "Positional encoding by dimension",
              theme: Theme = Theme()) -> go.Figure:
    """One line per dimension in `dims` (default default_pe_dims): its value against position. positions: the
    positions to plot (default all). names: each dimension's name, one per column of pe (default "dim i"; a rotary
    table's: rotary_dim_names)."""
    pe = _check_pe(pe)
    dims = default_pe_dims(pe.shape[1]) if dims is None else dims
    positions = np.arange(pe.shape[0]) if positions is None else np.asarray(positions, dtype=int)
    for name, values, size in (("dims", dims, pe.shape[1]), ("positions", positions, pe.shape[0])):
        outside = [int(v) for v in values if not 0 <= v < size]
        if outside:
            raise ValueError(f"{name} {outside} are outside 0..{size - 1} of pe with shape {pe.shape}")
    if names is not None and len(names) != pe.shape[1]:
        raise ValueError(f"{len(names)} names for the {pe.shape[1]} dimensions of pe")
    labels = [safe_label(names[dim]) if names is not None else f"dim {dim}" for dim in dims]
    fig = go.Figure([go.Scatter(x=positions, y=pe[positions, dim], mode="lines", name=label,
                                hovertemplate=f"{label}<br>position %{{x}}<br>value %{{y:.4g}}<extra></extra>")
                     for dim, label in zip(dims, labels)])
    fig.update_xaxes(title_text="position")
    fig.update_yaxes(title_text="value")
    return apply_theme(fig, theme, title)


def pe_similarity(pe: ArrayLike, *, cosine: bool = False, title: str | None = None, theme: Theme = Theme()
                  ) -> go.Figure:
    """PE·PEᵀ: how alike the encodings of two positions are (cosine=True: of unit-length encodings)."""
    pe = _check_pe(pe)
    if cosine:
        pe = pe / np.maximum(np.linalg.norm(pe, axis=1, keepdims=True), 1e-12)
    name = "cosine similarity" if cosine else "dot product"
    fig = _signed_heatmap(pe @ pe.T, f"positions %{{y}} and %{{x}}<br>{name} %{{z:.4g}}", "position",
                          "position", name, theme, title or f"Positional encoding: {name} of positions")
    # Square: position i against position j reads the same both ways, so both axes get the same pixels per position.
    fig.update_yaxes(scaleanchor="x", scaleratio=1, constrain="domain")
    fig.update_xaxes(constrain="domain")
    return fig


# ---------------------------------------------------------------------------------------------- rotary positions
# A rotary model (RoPE, Llama's) adds nothing to its embeddings: it turns each query and key of a head, pair by pair
# of its dimensions, by the angle position × θ_i. Pair i is dimensions i and i + d_head / 2 (the layout of Llama's
# weights as transformers stores them: transformer.model.positional.rotate). Its table, as the app passes it, is
# (positions, d_head): the sines of each pair's angle in the first half, the cosines in the second.


def rotary_dims(d_head: int) -> list[int]:
    """Four pairs far apart, as the table's sine columns 0, h/4, h/2 and 3h/4 (h = d_head / 2 pairs): the fastest
    turn and slow ones, each once (a sine and its cosine are one pair)."""
    half = d_head // 2
    return sorted({half * quarter // 4 for quarter in range(4)})


def rotary_dim_names(d_head: int) -> list[str]:
    """Each column of a rotary table by what it holds: 'sin · pair i' (first half), 'cos · pair i' (second)."""
    half = d_head // 2
    return [f"{'sin' if dim < half else 'cos'} · pair {dim % half}" for dim in range(d_head)]


def _check_frequencies(frequencies) -> np.ndarray:
    frequencies = np.asarray(frequencies, dtype=float)
    if frequencies.ndim != 1 or not len(frequencies) or not np.all(frequencies > 0):
        raise ValueError(f"frequencies must be (d_head / 2,) positive angles per token; got {frequencies!r:.80}")
    return frequencies


def rotary_wavelengths(frequencies: ArrayLike) -> np.ndarray:
    """Tokens for each pair to turn a full circle: 2π / θ_i."""
    return 2 * np.pi / _check_frequencies(frequencies)


def rotary_scores(q: ArrayLike, k: ArrayLike, frequencies: ArrayLike, distances: ArrayLike) -> np.ndarray:
    """q·k after the rotation, for a query `distances` tokens after its key: q turned by position n + Δ, k by n,
    (len(distances),), in float64. The same for every n: turning both by n more changes no dot product, so k is
    turned by 0 (not at all) and q by Δ, as transformer.model.positional.rotate turns them: the pair (a, b) of
    dimensions i and i + d_head / 2 goes to (a cos Δθ_i − b sin Δθ_i, b cos Δθ_i + a sin Δθ_i)."""
    q, k = np.asarray(q, dtype=float), np.asarray(k, dtype=float)
    frequencies = _check_frequencies(frequencies)
    if q.shape != k.shape or q.shape != (2 * len(frequencies),):
        raise ValueError(f"q and k must be (d_head,) = ({2 * len(frequencies)},), one pair per frequency; got "
                         f"{q.shape} and {k.shape}")
    angles = np.asarray(distances, dtype=float)[:, None] * frequencies[None, :]  # (distances, d_head / 2)
    cos, sin = np.cos(angles), np.sin(angles)
    first, second = np.split(q, 2)
    turned = np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=1)  # (distances, d_head)
    return turned @ k


def rotary_frequencies_figure(frequencies: ArrayLike, unscaled: ArrayLike | None = None, *,
                              context: int | None = None, pretrained: int | None = None,
                              title: str = "Rotary positions: how fast each pair turns",
                              theme: Theme = Theme()) -> go.Figure:
    """One point per dimension pair i: its wavelength 2π/θ_i in tokens (a full turn), on a log scale; the hover
    adds its angle θ_i in radians per token. unscaled: the frequencies before a scaling (linear, llama3) stretched
    them, drawn beside them where they differ. context: the model's max_len, pretrained: the context a llama3
    scaling was pretrained at; each a dashed line named at its right end (a pair whose wavelength is above it never
    turns a full circle within it)."""
    frequencies = _check_frequencies(frequencies)
    half = len(frequencies)
    pairs = np.arange(half)
    hover = ("pair %{x} (dimensions %{x} and %{customdata[1]})<br>%{customdata[0]:.4g} radians per token"
             "<br>wavelength %{y:.4g} tokens")
    series = [("as the model turns", frequencies, "solid", "circle")]
    if unscaled is not None and not np.allclose(_check_frequencies(unscaled), frequencies, rtol=1e-6, atol=0):
        series = [("before scaling", _check_frequencies(unscaled), "dot", "circle-open"),
                  ("scaled, as the model turns", frequencies, "solid", "circle")]
    fig = go.Figure([go.Scatter(x=pairs, y=rotary_wavelengths(values), mode="lines+markers", name=name,
                                line=dict(dash=dash), marker=dict(symbol=symbol),
                                customdata=np.stack([values, pairs + half], axis=1),
                                hovertemplate=f"{name}<br>{hover}<extra></extra>")
                     for name, values, dash, symbol in series])
    lines = [(name, tokens) for name, tokens in (("max_len", context), ("pretrained at", pretrained)) if tokens]
    for name, tokens in lines:
        fig.add_trace(go.Scatter(x=[-0.5, half - 0.5], y=[tokens, tokens], mode="lines", showlegend=False,
                                 line=dict(dash="dash" if name == "max_len" else "dashdot", color="grey"),
                                 hovertemplate=f"{name} {tokens} tokens<extra></extra>"))
        # Named on the line, not in the legend: the longer of two close lines above it, the shorter below.
        above = tokens == max(value for _, value in lines)
        fig.add_annotation(x=half - 0.5, y=float(np.log10(tokens)), xanchor="right",
                           yanchor="bottom" if above else "top", text=f"{name} {tokens}", showarrow=False)
    fig.update_layout(showlegend=len(series) > 1)
    fig.update_xaxes(title_text=f"pair i (dimensions i and i + {half})", range=[-0.5, half - 0.5], zeroline=False,
                     **({"dtick": 1} if half <= 16 else {}))  # whole pairs; Plotly's own steps are whole beyond
    fig.update_yaxes(title_text="wavelength (tokens)", type="log")  # an annotation's y on it is log10 of its value
    return apply_theme(fig, theme, title)


def rotary_score_figure(q: ArrayLike, k: ArrayLike, frequencies: ArrayLike, distances: ArrayLike, *,
                        marked: tuple[int, float] | None = None, title: str = "q·k by distance, rotary positions",
                        theme: Theme = Theme()) -> go.Figure:
    """q·k of one fixed q and k (rotary_scores) against the distance Δ = query position − key position, one point
    per distance; q·k without the rotation is the value at Δ = 0. marked: (distance, value) of the pair's own score
    where it stands in an input (the model's, to be seen on the curve)."""
    distances = np.asarray(distances, dtype=int)
    scores = rotary_scores(q, k, frequencies, distances)
    fig = go.Figure([go.Scatter(x=distances, y=scores, mode="lines", name="q·k after rotation",
                                hovertemplate="distance %{x}<br>q·k %{y:.4g}<extra></extra>")])
    if marked is not None:
        fig.add_trace(go.Scatter(x=[marked[0]], y=[marked[1]], mode="markers", name="their distance in this input",
                                 marker=dict(symbol="circle-open", color="crimson", line=dict(width=3)),
                                 hovertemplate="in this input: distance %{x}<br>q·k %{y:.4g}<extra></extra>"))
    fig.update_xaxes(title_text="distance: query position − key position (tokens)")
    fig.update_yaxes(title_text="q·k")
    fig = apply_theme(fig, theme, title)
    if marked is not None:  # larger than the theme's markers: one point to be found on the curve
        fig.update_traces(marker_size=2 * theme.marker_size, selector=-1)
    return fig
