"""Switch heads off and compare the output and its probabilities with the intact model's."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.analysis import KIND_LABELS
from ui.model_pass import TRANSLATE
from ui.page import Page
from ui.state import draw, settle_all
from ui.view import View
from ui.widgets import PROBABILITY, head_label, model_output, pieces_shown


def ablated_heads(chosen: list[str]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """((attention site, heads), ...) in a fixed order, as the cached passes take them."""
    heads: dict[str, list[int]] = {}
    for item in chosen:
        site, head = item.split(":")
        heads.setdefault(site, []).append(int(head))
    return tuple(sorted((site, tuple(sorted(values))) for site, values in heads.items()))


def render(page: Page) -> None:
    # Each head as the link writes it: its attention site, a colon, the head ('decoder.layers.0.cross_attn:2').
    options = {f"{page.site(kind, layer)}:{head}": f"{KIND_LABELS[kind]} · {head_label(layer, head)}"
               for kind in page.kinds for layer in range(page.layers(kind)) for head in page.heads()}
    settle_all("ablate", options)
    columns = st.columns([4, 1], vertical_alignment="bottom")
    # Every head as a button of its own: a dropdown showed a third of a 36-head model's until a filter was typed.
    chosen = columns[0].pills("Heads to switch off", list(options), selection_mode="multi", format_func=options.get,
                              key="ablate", persist_state="session", wrap=True) or []
    mode = draw(columns[1].segmented_control, "Replace by", "ablation_mode", ("zero", "mean"), required=True,
                persist_state="session", help="zero: the head's output is 0. mean: its mean over positions.")
    if not chosen:
        st.info("Pick heads to switch off: the output and its probabilities appear next to the intact model's.")
        return
    ablated = ablated_heads(chosen)
    intact = page.analysis
    changed = page.run(TRANSLATE, ablated=ablated, mode=mode)
    # Padding (if any) leaves the real positions alone, so the intact pass's ids serve as they are.
    after = page.forced(labels=intact.output_ids, ablated=ablated, mode=mode)
    left, right = st.columns(2)
    with left:
        st.markdown(f"**Intact model** ({page.decoding_name()})")
        model_output(intact.text)
        st.dataframe(pd.DataFrame({"piece": pieces_shown(intact.output_tokens), "probability": intact.probs,
                                   "with heads off": after.label_probs}),
                     hide_index=True, column_config={"probability": PROBABILITY, "with heads off": PROBABILITY})
        st.caption("“with heads off”: the probability the ablated model gives the intact output's piece after the "
                   "same prefix.")
    with right:
        st.markdown(f"**{len(chosen)} head(s) switched off** ({mode}; {page.decoding_name()})")
        model_output(changed.text)
        st.dataframe(pd.DataFrame({"piece": pieces_shown(changed.output_tokens), "probability": changed.probs}),
                     hide_index=True, column_config={"probability": PROBABILITY})


VIEW = View("ablation", "Ablation", render)
