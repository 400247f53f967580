"""Training dynamics: one head across training snapshots, and the loss curves."""
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Blocked, Tokens
from .labels import safe_label
from .layout import BUDGET_PX, TOKEN_STEP_EM, fit_grid, grid_layout
from .panels import colour_axis, matrix_panel, shared_grid, subplots, value_range
from .theme import Theme, apply_theme, merged, theme_layout, themed_figure


def snapshots_figure(snapshots: Sequence[tuple[str, ArrayLike]], q_tokens: Tokens, k_tokens: Tokens, *,
                     blocked: Blocked | None = None, show_masks: bool = True, fixed_scale: bool = True,
                     columns: int = 4, title: str = "", theme: Theme = Theme()) -> go.Figure:
    """The same head at several points of training: `snapshots` is a list of (label, weights (q_len, k_len)),
    drawn in order as small multiples, at most `columns` per row, on one shared colour scale. Long inputs get
    fewer per row (as many as fit the theme's width at the smallest readable labels): the figure then grows
    downwards, which scrolls better than sideways."""
    if not snapshots:
        raise ValueError("snapshots is empty: give at least one (label, weights)")
    if theme.width is None:  # as many as fit the preferred plot width at the smallest readable labels
        fitting = int(BUDGET_PX[theme.large][0] // (len(k_tokens) * TOKEN_STEP_EM * theme.min_font_size))
    else:  # as many as fit the theme's width
        fitting = fit_grid(theme, q_tokens, k_tokens, 1, min(columns, len(snapshots)), title=title,
                           titles=[dict(text=label) for label, _ in snapshots], colour_bars=[("coloraxis", 1)])[1]
    cols = max(1, min(columns, len(snapshots), fitting))
    rows = math.ceil(len(snapshots) / cols)
    # Built as dicts (as viz.model_view is): through make_subplots, add_trace and update_layout
    # the same figure is several times slower, on every new input of the Training view.
    traces, axes = [], {}
    for index, (_, weights) in enumerate(snapshots):
        panel_traces, panel_axes = matrix_panel(index, weights, q_tokens, k_tokens, blocked=blocked,
                                                show_masks=show_masks, show_legend=index == 0)
        traces += panel_traces
        axes.update(panel_axes)
    all_weights = np.stack([np.asarray(weights, dtype=float) for _, weights in snapshots])
    grid = shared_grid(rows, cols, [label for label, _ in snapshots], theme)
    sized, _ = grid_layout(theme, q_tokens, k_tokens, rows=rows, cols=cols, title=title,
                           titles=grid.pop("annotations"), colour_bars=[("coloraxis", cols)],
                           legend=any(trace["showlegend"] for trace in traces))
    # Shared x axes label the bottom row only: where the last row is short, the panel above an empty cell labels its
    # column (its labels fall into the empty cell), and the empty cell's axes are hidden.
    empty_cells = {}
    for empty in range(len(snapshots), rows * cols):  # 0-based panel index; axes are named from 1
        above, blank = empty - cols + 1, empty + 1
        empty_cells.update({f"xaxis{above if above > 1 else ''}": dict(showticklabels=True),
                            f"xaxis{blank}": dict(visible=False), f"yaxis{blank}": dict(visible=False)})
    layout = merged(grid, axes, colour_axis("coloraxis", theme.sequential, *value_range(all_weights, fixed_scale),
                                            "weight"), sized, empty_cells, theme_layout(theme, title))
    return themed_figure(traces, layout, theme)


_DASHES = ("solid", "dot", "dash", "dashdot")  # one per data a history was measured on


def series_name(key: str, metric_name: str | None = None) -> str:
    """A history key as a legend reads it: "dev_metric" -> "dev BLEU" (with metric_name "BLEU"), "train_loss" ->
    "train loss"."""
    if key == "dev_metric" and metric_name:
        return f"dev {metric_name}"
    return str(key).replace("_", " ")


def loss_curve(history: Sequence[Mapping[str, float | str]], *, metric_name: str | None = None,
               title: str = "Training", theme: Theme = Theme()) -> go.Figure:
    """Curves of a training history: a list of dicts such as {"step", "train_loss", "dev_loss", "dev_metric"}.

    Every numeric key but "step" becomes a line, drawn only at the entries that have it (dev values are usually
    logged less often than train values). Keys with "loss" in their name share the left axis, the others
    (metrics) the right one. Without "step" the entry's index is the x axis. An entry's "data" names what its
    numbers were measured on (a continued run that trains and scores on other corpora: "tatoeba + multi30k"); where
    a history has more than one, each series is drawn once per data, named with it and dashed apart, so that numbers
    of different inputs never join into one line. An empty history gives an empty figure that says so.
    """
    frame = pd.DataFrame(list(history))
    x = frame.pop("step") if "step" in frame.columns else pd.Series(range(len(frame)), name="entry")
    data = frame.pop("data").fillna("").astype(str) if "data" in frame.columns else pd.Series([""] * len(frame))
    datasets = list(dict.fromkeys(data))
    fig = subplots(1, 1, specs=[[{"secondary_y": True}]])
    for name in frame.columns:
        values = pd.to_numeric(frame[name], errors="coerce")
        for dash, dataset in zip(_DASHES * len(datasets), datasets):
            logged = values.notna() & (data == dataset).to_numpy()
            if not logged.any():
                continue
            named = series_name(name, metric_name) + (f" ({dataset or 'unnamed data'})" if len(datasets) > 1 else "")
            label = safe_label(named)
            fig.add_trace(go.Scatter(x=x[logged], y=values[logged], mode="lines+markers", name=label,
                                     line=dict(dash=dash),
                                     hovertemplate=f"{label}<br>{x.name} %{{x}}<br>%{{y:.4g}}<extra></extra>"),
                          secondary_y="loss" not in name)
    if not fig.data:
        fig.add_annotation(text="no training history", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    fig.update_xaxes(title_text=x.name)
    fig.update_yaxes(title_text="loss", secondary_y=False)
    # Its own ticks (tickmode "auto"): ticks synced to the loss axis land on odd values such as 0.306.
    fig.update_yaxes(title_text=safe_label(metric_name or "metric"), secondary_y=True, showgrid=False,
                     tickmode="auto")
    return apply_theme(fig, theme, title)
