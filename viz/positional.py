"""Views of the model's positional encoding matrix pe (positions, d_model), as the app passes it."""
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

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


def pe_heatmap(pe: ArrayLike, *, title: str = "Positional encoding", theme: Theme = Theme()) -> go.Figure:
    """pe as positions (rows, top to bottom) x dimensions (columns), on a scale centred at 0."""
    return _signed_heatmap(_check_pe(pe), "position %{y}<br>dimension %{x}<br>value %{z:.4g}", "dimension",
                           "position", "value", theme, title)


def default_pe_dims(d_model: int) -> list[int]:
    """Dimensions 0, d/4, d/2 and 3d/4 (even: the sine of a sine/cosine pair): four frequencies far apart, from
    the fastest wave to slow ones; dimensions 0-3 are four near-identical fast waves."""
    return sorted({2 * (d_model * quarter // 8) for quarter in range(4)})


def pe_curves(pe: ArrayLike, dims: Sequence[int] | None = None, positions: Sequence[int] | None = None, *,
              title: str = "Positional encoding by dimension", theme: Theme = Theme()) -> go.Figure:
    """One line per dimension in `dims` (default default_pe_dims): its value against position. positions: the
    positions to plot (default all)."""
    pe = _check_pe(pe)
    dims = default_pe_dims(pe.shape[1]) if dims is None else dims
    positions = np.arange(pe.shape[0]) if positions is None else np.asarray(positions, dtype=int)
    for name, values, size in (("dims", dims, pe.shape[1]), ("positions", positions, pe.shape[0])):
        outside = [int(v) for v in values if not 0 <= v < size]
        if outside:
            raise ValueError(f"{name} {outside} are outside 0..{size - 1} of pe with shape {pe.shape}")
    fig = go.Figure([go.Scatter(x=positions, y=pe[positions, dim], mode="lines", name=f"dim {dim}",
                                hovertemplate=f"dim {dim}<br>position %{{x}}<br>value %{{y:.4g}}<extra></extra>")
                     for dim in dims])
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
