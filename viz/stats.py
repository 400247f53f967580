"""Heads as points of two of their statistics (the library measures them: one row per head, with its role)."""
import pandas as pd
import plotly.graph_objects as go

from .conventions import KIND_LABELS, KIND_SYMBOLS
from .theme import Theme, themed

SCATTER_CAPTION = "One point per head: its colour is its layer, its shape its kind (see the legend)."


def statistics_scatter(df: pd.DataFrame, x: str = "entropy", y: str = "mean_distance", *, title: str = "Heads",
                       theme: Theme = Theme()) -> go.Figure:
    """Heads as points of statistic `x` against `y`: one row of `df` per head, with kind (the model's name,
    "decoder.self_attn"), layer, head, role and the statistics. Colour = layer, symbol = kind; the legend names both
    (the kinds in grey, by their symbol). SCATTER_CAPTION says so without asking to hover."""
    missing = [column for column in (x, y) if column not in df.columns]
    if missing:
        raise ValueError(f"no column {missing} in the statistics; choose from {list(df.columns)}")
    df = df.assign(label=df["kind"].replace(KIND_LABELS))  # the kinds as figures name them
    # Built as dicts (what go.Figure, add_trace and apply_theme make, without their validation): on every new
    # input of the Heads view.
    traces = [dict(type="scatter", mode="markers", x=heads[x].to_numpy(), y=heads[y].to_numpy(), name=f"layer {layer}",
                   marker=dict(symbol=[KIND_SYMBOLS.get(kind, "x") for kind in heads["kind"]]),
                   customdata=heads[["label", "head", "role"]].to_numpy(dtype=object),
                   hovertemplate=(f"%{{customdata[0]}} L{layer} H%{{customdata[1]}}<br>{x}: %{{x:.4g}}<br>{y}: "
                                  "%{y:.4g}<br>role: %{customdata[2]}<extra></extra>"))
              for layer, heads in df.groupby("layer")]
    traces += [dict(type="scatter", mode="markers", x=[None], y=[None], name=f"{label} attention",
                    legendgroup="kinds", marker=dict(symbol=KIND_SYMBOLS.get(kind, "x"), color="grey"))
               for kind, label in df[["kind", "label"]].drop_duplicates().itertuples(index=False)]
    return themed(traces, dict(xaxis=dict(title=dict(text=x)), yaxis=dict(title=dict(text=y))), theme, title)

