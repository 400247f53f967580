"""Masks as viz draws them: `blocked` dicts from reason to a bool (q_len, k_len) array, True = blocked.

The model's own convention is the opposite (True = may attend); mask_reasons() builds viz's form from the facts
the app knows, and keeps one array per reason so the figures can show why a cell is blocked.
"""
import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

from .conventions import CAUSAL, INFORMATIONAL, PADDED_QUERY, PADDING, Blocked, Tokens, check_blocked, union
from .panels import panels_figure
from .theme import Theme


def mask_reasons(q_len: int, k_len: int, *, key_is_pad: ArrayLike | None = None, query_is_pad: ArrayLike | None = None,
                 causal: bool = False) -> dict[str, np.ndarray]:
    """Build `blocked` for one attention kind: reason name -> bool (q_len, k_len), True = blocked.

    key_is_pad: bool (k_len,), True for padding keys -> reason "padding" blocks their columns (the model masks them).
    causal: True for decoder self-attention -> reason "causal" blocks keys after the query (k > q).
    query_is_pad: bool (q_len,), True for padding queries -> reason "padded query" covers their rows. This one is
        informational: the model does not mask these rows (their weights are a real softmax), but the loss ignores
        their output, so figures shade them; model_mask(), the masked scores of stages_figure and the `masked`
        column of tidy_frame leave them out. Reasons not asked for are absent from the dict.
    """
    blocked = {}
    if key_is_pad is not None:
        key_is_pad = _flags(key_is_pad, k_len, "key_is_pad")
        blocked[PADDING] = np.broadcast_to(key_is_pad[None, :], (q_len, k_len)).copy()
    if causal:
        blocked[CAUSAL] = np.triu(np.ones((q_len, k_len), dtype=bool), k=1)
    if query_is_pad is not None:
        query_is_pad = _flags(query_is_pad, q_len, "query_is_pad")
        blocked[PADDED_QUERY] = np.broadcast_to(query_is_pad[:, None], (q_len, k_len)).copy()
    return blocked


def _flags(flags, length, name) -> np.ndarray:
    flags = np.asarray(flags)
    if flags.shape != (length,) or flags.dtype != bool:
        raise ValueError(f"{name} must be a bool array of length {length}; got {flags.dtype} {flags.shape}")
    return flags


def mask_panels(blocked: Blocked) -> list[tuple[str, Blocked]]:
    """The panels mask_figure draws, in order: (title, the reasons it shows). One panel per reason, then all
    reasons together where there are several; informational reasons ("padded query": shaded, not masked) are left
    out of "all reasons", which shows what the model blocks. A single reason is drawn once: all reasons together
    would be the same panel again (and on a projector, half the room a panel needs)."""
    panels = [(reason, {reason: mask}) for reason, mask in blocked.items()]
    if len(blocked) > 1:
        panels.append(("all reasons", {reason: mask for reason, mask in blocked.items()
                                       if reason not in INFORMATIONAL}))
    return panels


def mask_figure(blocked: Blocked, q_tokens: Tokens, k_tokens: Tokens, *, title: str = "Masks",
                only: int | None = None, theme: Theme = Theme()) -> go.Figure:
    """The masks alone, for teaching: the panels of mask_panels side by side (True = blocked), or only the one of
    index `only` (panels_figure's only: lecture mode shows them one at a time).

    Each panel uses the overlay colour of its reason, the same as on the attention figures; the legend names them
    in one line (at most four short names) under the panels, or beside them where a projector's height has no room
    for that line, and is left out where one reason is drawn alone (its title names it).
    """
    shape = (len(q_tokens), len(k_tokens))
    panels = mask_panels(check_blocked(blocked, shape))
    # The base heatmap is invisible: it only carries the hover; the overlays show the blocked cells.
    invisible = dict(colorscale=[[0, "rgba(0,0,0,0)"], [1, "rgba(0,0,0,0)"]], showscale=False)
    # One reason alone is named by its title: on a projector its legend would only cost the panel a line.
    alone = only is not None and len(panels[only][1]) == 1
    figure = panels_figure([dict(matrix=union(reasons.values(), shape).astype(float), colour=invisible,
                                 value_name="blocked", blocked=reasons, show_legend=col == len(panels))
                            for col, (_, reasons) in enumerate(panels, start=1)],
                           q_tokens, k_tokens, titles=[name for name, _ in panels], title=title,
                           legend=0 if alone else 1, only=only, theme=theme)
    return figure.update_layout(showlegend=False) if alone else figure
