"""Numbers per head (sortable), a scatter of two of them, attention rollout, and heads ranked across a corpus."""
from __future__ import annotations

import pandas as pd
import streamlit as st

import viz
from ui.analysis import KIND_LABELS
from ui.model_pass import CORPUS_FILE, CORPUS_UNAVAILABLE, HOUR, SHARED, Kept, Pass
from ui.page import Page
from ui.shared import once
from ui.state import draw, settle
from ui.view import View
from ui.widgets import controls, head_title, show_figure, side_by_side, table_height

CORPUS_SIZE = 200  # inputs by default: a few seconds on the shipped checkpoints
MAX_CORPUS_SIZE = 1000  # larger corpora: python -m transformer.corpus (it streams, and runs under torchrun)
STATISTICS = "transformer.analysis.corpus_heads:STATISTICS"  # name -> what it measures
# Heads by their mean statistic over the corpus, highest first: kind, layer, head, mean, sentences (count=,
# statistic=); the sentences where one head's statistic is highest: sentence, value, source, target (count=, kind=,
# layer=, head=, statistic=).
CORPUS_RANKING = Pass("corpus ranking", "ui.passes:corpus_ranking", pd.DataFrame, Kept(HOUR, max_entries=64))
CORPUS_TOP = Pass("corpus top sentences", "ui.passes:corpus_top", pd.DataFrame, Kept(HOUR, max_entries=64))
# This input's heads: kind, layer, head, each statistic and role.
HEAD_STATISTICS = Pass("head statistics", "transformer.analysis.head_map:head_statistics", pd.DataFrame, SHARED,
                       "Measuring every head…")
ROLES = "transformer.analysis.head_map:ROLES"  # statistic -> the role of a head where it passes ROLE_THRESHOLD
ROLE_THRESHOLD = "transformer.analysis.head_map:ROLE_THRESHOLD"


def render(page: Page) -> None:
    statistics = page.run(HEAD_STATISTICS)
    # The role first after the head's name (the caption explains it, and the numbers may run past the right edge);
    # no column at all where no head has one, so that every number fits.
    leading = ["kind", "layer", "head"] + (["role"] if statistics["role"].astype(bool).any() else [])
    # On a projector the scatter of every head comes first (in the screen's height), the table under it.
    first, second = st.container(), st.container()
    table, scatter = (second, first) if page.lecture else (first, second)
    shown = statistics.assign(kind=statistics["kind"].replace(KIND_LABELS))  # the kinds as the figures name them
    table.dataframe(shown, hide_index=True, key="head-table", height=table_height(page),
                    column_order=leading + [name for name in statistics.columns if name not in leading + ["role"]],
                    column_config={"role": st.column_config.TextColumn(width="medium"),  # "previous-token" whole
                                   **{name: st.column_config.NumberColumn(format="%.3f")
                                      for name in statistics.select_dtypes("float").columns}})
    table.caption("Means over query rows (pad rows and rows that can attend to one key only are left out). Role: "
                  f"the pattern that takes over {page.library(ROLE_THRESHOLD):g} of a head's weight, the largest "
                  "where several do: " + "; ".join(f"{role} ({column})" for column, role
                                                  in page.library(ROLES).items()) + ".")
    numeric = list(statistics.select_dtypes("number").columns.drop(["layer", "head"]))
    x, y = settle("stat_x", numeric), settle("stat_y", numeric)
    with scatter:
        if not page.lecture:
            columns = st.columns(2)
            x = columns[0].selectbox("x", numeric, key="stat_x", persist_state="session")
            y = columns[1].selectbox("y", numeric, key="stat_y", persist_state="session")
        show_figure(page, once(viz.statistics_scatter, statistics, x, y, theme=page.theme), "head-statistics")
        st.caption(viz.SCATTER_CAPTION)
    if len(page.kinds) == 1:  # decoder-only or encoder-only
        one_stack_rollout(page)
    else:
        rollouts(page)
    across_corpus(page)


def one_stack_rollout(page: Page) -> None:
    """A decoder-only or encoder-only model: the rollout of its one self-attention stack."""
    (kind,) = page.kinds
    side, name = ("src", "Encoder") if kind == "encoder.self_attn" else ("tgt", "Decoder")
    tokens = page.analysis.pieces(side)
    rollout = once(viz.encoder_rollout, page.analysis.stack(kind))
    show_figure(page, once(viz.rollout_figure, rollout, tokens, tokens, title=f"{name} rollout", theme=page.theme),
                "rollout-encoder" if side == "src" else "rollout-decoder")
    st.caption(f"Row i: how much of each input token reaches the {name.lower()}'s output at position i, through "
               "every layer (heads averaged, residual counted as half).")


def rollouts(page: Page) -> None:
    """An encoder-decoder model: the encoder's rollout, and the decoder's onto the source."""
    analysis = page.analysis
    encoder = once(viz.encoder_rollout, analysis.stack("encoder.self_attn"))
    source = once(viz.decoder_source_rollout, analysis.stack("decoder.self_attn"),
                  analysis.stack("decoder.cross_attn"), encoder)
    src, tgt = analysis.pieces("src"), analysis.pieces("tgt")
    encoder_fig = once(viz.rollout_figure, encoder, src, src, title="Encoder rollout", theme=page.theme)
    decoder_fig = once(viz.rollout_figure, source, tgt, src, title="Decoder rollout onto the source", theme=page.theme)
    left, right = side_by_side(page, [int(encoder_fig.layout.width), int(decoder_fig.layout.width)])
    with left:
        show_figure(page, encoder_fig, "rollout-encoder")
        st.caption("Row i: how much of each input token reaches the encoder's output at position i, through every "
                   "layer (heads averaged, residual counted as half).")
    with right:
        show_figure(page, decoder_fig, "rollout-decoder")
        st.caption("Row t: the share of each source token in the decoder's state at position t; the rest of each "
                   "row belongs to the decoder's own input.")


def across_corpus(page: Page) -> None:
    """Rank heads by a statistic over a corpus, and list the sentences where the chosen head does most of it. The
    corpus runs only when the button is pressed; its results stay for the session (cached per checkpoint version)."""
    st.subheader("Across a corpus")
    statistics = page.library(STATISTICS)
    row = controls("corpus")
    statistic = draw(row.selectbox, "Statistic", "corpus_stat", list(statistics),
                     format_func=lambda name: f"{name}: {statistics[name]}", persist_state="session")
    count = int(row.number_input("Inputs", min_value=1, max_value=MAX_CORPUS_SIZE, value=CORPUS_SIZE, step=50,
                                 key="corpus_count"))
    unavailable = page.run(CORPUS_UNAVAILABLE)
    row.button("Run over the corpus", key="corpus-run", on_click=st.session_state.__setitem__,
               args=("corpus_ran", (page.path, page.version, count)), disabled=bool(unavailable))
    if unavailable:
        st.caption(f"Not on this server: {unavailable}. `python -m transformer.corpus run CHECKPOINT --out FILE "
                   "--data CORPUS` runs it over a corpus of your own (docs/methods.md).")
        return
    ran = st.session_state.get("corpus_ran")
    if not ran or ran[:2] != (page.path, page.version):
        st.caption(f"Runs this checkpoint over {'its dev split' if page.card.task == 'translate' else 'fresh inputs'}"
                   " and ranks every head by the statistic's mean over the sentences.")
        return
    count = ran[2]
    result = page.run(CORPUS_FILE, count=count)
    if result.error:
        st.error(result.error)
        return
    ranking = page.run(CORPUS_RANKING, count=count, statistic=statistic)
    st.dataframe(ranking, hide_index=True, key="corpus-ranking", height="content",
                 column_config={"mean": st.column_config.NumberColumn(format="%.3f")})
    st.caption(f"Every head by its mean {statistic} over {result.sentences} sentences (taken over the sentences where "
               "the statistic is defined), highest first.")
    heads = list(ranking[["kind", "layer", "head"]].itertuples(index=False, name=None))
    kind, layer, head = st.selectbox("Head", heads, key="corpus_head",
                                     format_func=lambda h: head_title(*h))
    top = page.run(CORPUS_TOP, count=count, kind=kind, layer=int(layer), head=int(head), statistic=statistic)
    st.dataframe(top, hide_index=True, key="corpus-top", height="content",
                 column_config={statistic: st.column_config.NumberColumn(format="%.3f")})
    st.caption(f"The sentences where this head's {statistic} is highest.")


VIEW = View("heads", "Heads", render)
