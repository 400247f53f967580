"""Getting numbers and pictures out: a tidy table of every weight, CSV/Parquet bytes, the toolbar's export, and a
figure as one interactive HTML file."""
import io
from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import Blocked, Tokens, each_kind


def tidy_frame(stacks: Mapping[str, ArrayLike], q_tokens_by_kind: Mapping[str, Tokens],
               k_tokens_by_kind: Mapping[str, Tokens], blocked_by_kind: Mapping[str, Blocked] | None = None,
               ) -> pd.DataFrame:
    """One row per weight of every head: kind, layer, head, q_pos, q_token, k_pos, k_token, weight, masked.

    stacks: kind -> (layers, heads, q_len, k_len); tokens and blocked (optional) keyed by the same kinds.
    Positions and layer/head numbers are 0-based. masked: the model masks this cell (its weight is 0); the
    informational "padded query" reason does not count (filter those rows by q_token == "<pad>").
    """
    frames = []
    for kind, stack, q_tokens, k_tokens, masked in each_kind(stacks, q_tokens_by_kind, k_tokens_by_kind,
                                                             blocked_by_kind):
        layer, head, q_pos, k_pos = (index.ravel() for index in np.indices(stack.shape))
        frames.append(pd.DataFrame({
            "kind": kind, "layer": layer, "head": head,
            "q_pos": q_pos, "q_token": np.asarray(q_tokens, dtype=object)[q_pos],
            "k_pos": k_pos, "k_token": np.asarray(k_tokens, dtype=object)[k_pos],
            "weight": stack.ravel(), "masked": masked[q_pos, k_pos],
        }))
    return pd.concat(frames, ignore_index=True)


def to_csv_bytes(df: pd.DataFrame) -> bytes:
    """UTF-8 CSV without the index. Read it back with keep_default_na=False, or pandas turns tokens such as
    "NA" or "null" into missing values."""
    return df.to_csv(index=False).encode("utf-8")


def to_parquet_bytes(df: pd.DataFrame) -> bytes:
    """Parquet (pyarrow) without the index: exact floats and types, smaller than CSV."""
    buffer = io.BytesIO()
    df.to_parquet(buffer, engine="pyarrow", index=False)
    return buffer.getvalue()


def toolbar_config(image_format: str = "png", filename: str = "attention") -> dict:
    """Plotly config for st.plotly_chart(config=...): the toolbar's camera button saves `filename`.png or .svg
    (PNG at twice the on-screen resolution, sharp on slides), without the Plotly logo."""
    if image_format not in ("png", "svg"):
        raise ValueError(f"image_format must be 'png' or 'svg'; got {image_format!r}")
    return {"displaylogo": False, "toImageButtonOptions": {"format": image_format, "filename": filename, "scale": 2}}


def to_html_bytes(fig: go.Figure, filename: str = "attention") -> bytes:
    """The figure as one HTML file that works offline, as interactive as on screen (hover, zoom, the toolbar): Plotly's
    JavaScript is inlined, and nothing is fetched (no CDN, no MathJax, no web font)."""
    return fig.to_html(include_plotlyjs=True, include_mathjax=False, full_html=True,
                       config=toolbar_config("png", filename)).encode("utf-8")
