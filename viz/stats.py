"""Head statistics: one tidy row of numbers per head, a rule-based role, and a scatter plot of them."""
from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import EOS_TOKEN, KINDS, PAD_TOKEN, Blocked, Tokens, each_kind
from .theme import Theme, themed

# (role, statistic, threshold): a head gets the first role whose statistic is above its threshold, else "".
# The thresholds are deliberately high, so a role is named only where one pattern clearly dominates.
ROLE_RULES = (
    ("induction", "induction_share", 0.5),
    ("previous-token", "previous_share", 0.5),
    ("diagonal", "diagonal_share", 0.5),
    ("first-token/positional sink", "first_share", 0.5),
    ("EOS sink", "eos_share", 0.5),
    ("broad", "entropy_normalised", 0.9),
)

_KIND_SYMBOLS = dict(zip(KINDS, ("circle", "square", "diamond")))

SCATTER_CAPTION = "One point per head: its colour is its layer, its shape its kind (see the legend)."


def head_statistics(stacks: Mapping[str, ArrayLike], q_tokens_by_kind: Mapping[str, Tokens],
                    k_tokens_by_kind: Mapping[str, Tokens], blocked_by_kind: Mapping[str, Blocked] | None = None,
                    ) -> pd.DataFrame:
    """One row per head of every stack: kind, layer, head (0-based), the statistics below and `role`.

    stacks: kind -> (layers, heads, q_len, k_len); tokens and blocked (optional) keyed by the same kinds.
    Every statistic is a mean over query rows, skipping rows whose query token is "<pad>" (the loss ignores
    their output) and rows that may attend to a single key (per blocked: e.g. the first row of causal
    self-attention, forced onto its diagonal, says nothing about the head). No row left to average gives NaN.
      entropy: -sum_k w log w of a row, in nats (0 log 0 = 0).
      entropy_normalised: entropy / ln(number of keys the row may attend to); 1 = uniform.
      mean_distance: sum_k w * |q - k|, in positions. For cross-attention q and k index different sequences.
      diagonal_share: w[q, q], over rows q that have key q.
      previous_share: w[q, q-1], over rows q >= 1 that have key q-1 (the first row has no previous token).
      induction_share: self-attention only: the summed weight on the keys just after an earlier occurrence of the
        query's token, over rows whose token occurred before (the induction score of Olsson et al. 2022: a head
        that finds where this token was and looks at what came next, to copy it).
      first_share: w[q, 0].  eos_share / pad_share: summed weight on keys "</s>" / "<pad>".
      mean_max_weight: the row's largest weight (1 = the head always looks at one key).
    role: first of ROLE_RULES that the head's statistics pass, else "".
    """
    rows = []
    for kind, stack, q_tokens, k_tokens, masked in each_kind(stacks, q_tokens_by_kind, k_tokens_by_kind,
                                                             blocked_by_kind):
        for layer, head in np.ndindex(*stack.shape[:2]):
            statistics = _head_statistics(stack[layer, head], q_tokens, k_tokens, masked, kind != "cross")
            role = next((r for r, column, threshold in ROLE_RULES if statistics[column] > threshold), "")
            rows.append({"kind": kind, "layer": layer, "head": head, **statistics, "role": role})
    return pd.DataFrame(rows)


def _head_statistics(weights, q_tokens, k_tokens, masked, self_attention: bool) -> dict[str, float]:
    q_len, k_len = weights.shape
    query = np.arange(q_len)
    may_attend = (~masked).sum(axis=1)
    rows = np.array([token != PAD_TOKEN for token in q_tokens], dtype=bool) & (may_attend > 1)
    k_tokens = np.array(k_tokens, dtype=object)
    entropy = -np.sum(weights * np.log(np.where(weights > 0, weights, 1.0)), axis=1)
    distance = np.abs(query[:, None] - np.arange(k_len)[None, :])
    has_diagonal, has_previous = rows & (query < k_len), rows & (query >= 1) & (query <= k_len)

    def mean(values, which=rows):
        return float(np.mean(values[which])) if which.any() else float("nan")

    # after_repeat[q, k]: key k follows an earlier occurrence (at k - 1 < q) of query q's token.
    after_repeat = np.zeros((q_len, k_len), dtype=bool)
    if self_attention:
        earlier = np.arange(k_len)[None, 1:] - 1 < query[:, None]  # (q_len, k_len - 1): key k - 1 is before q
        after_repeat[:, 1:] = (np.array(q_tokens, dtype=object)[:, None] == k_tokens[None, :-1]) & earlier

    return {
        "entropy": mean(entropy),
        "entropy_normalised": mean(entropy / np.log(np.maximum(may_attend, 2))),  # (1-key rows are left out)
        "mean_distance": mean((weights * distance).sum(axis=1)),
        "diagonal_share": mean(weights[query, np.minimum(query, k_len - 1)], has_diagonal),
        "previous_share": mean(weights[query, np.clip(query - 1, 0, k_len - 1)], has_previous),
        "induction_share": mean((weights * after_repeat).sum(axis=1), rows & after_repeat.any(axis=1)),
        "first_share": mean(weights[:, 0]),
        "eos_share": mean(weights[:, k_tokens == EOS_TOKEN].sum(axis=1)),
        "pad_share": mean(weights[:, k_tokens == PAD_TOKEN].sum(axis=1)),
        "mean_max_weight": mean(weights.max(axis=1)),
    }


def statistics_scatter(df: pd.DataFrame, x: str = "entropy", y: str = "mean_distance", *, title: str = "Heads",
                       theme: Theme = Theme()) -> go.Figure:
    """Heads of head_statistics() as points of statistic `x` against `y`: colour = layer, symbol = kind; the
    legend names both (the kinds in grey, by their symbol). SCATTER_CAPTION says so without asking to hover."""
    missing = [column for column in (x, y) if column not in df.columns]
    if missing:
        raise ValueError(f"no column {missing} in the statistics; choose from {list(df.columns)}")
    # Built as dicts (what go.Figure, add_trace and apply_theme make, without their validation): on every new
    # input of the Heads view.
    traces = [dict(type="scatter", mode="markers", x=heads[x].to_numpy(), y=heads[y].to_numpy(), name=f"layer {layer}",
                   marker=dict(symbol=[_KIND_SYMBOLS.get(kind, "x") for kind in heads["kind"]]),
                   customdata=heads[["kind", "head", "role"]].to_numpy(dtype=object),
                   hovertemplate=(f"%{{customdata[0]}} L{layer} H%{{customdata[1]}}<br>{x}: %{{x:.4g}}<br>{y}: "
                                  "%{y:.4g}<br>role: %{customdata[2]}<extra></extra>"))
              for layer, heads in df.groupby("layer")]
    traces += [dict(type="scatter", mode="markers", x=[None], y=[None], name=f"{kind} attention",
                    legendgroup="kinds", marker=dict(symbol=_KIND_SYMBOLS.get(kind, "x"), color="grey"))
               for kind in df["kind"].unique()]
    return themed(traces, dict(xaxis=dict(title=dict(text=x)), yaxis=dict(title=dict(text=y))), theme, title)
