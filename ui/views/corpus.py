"""Across many inputs: a map of every head, one head's queries and keys over the corpus, heads matched across
checkpoints and training snapshots, and feed-forward neurons' top examples. One corpus pass per checkpoint and
corpus (SUMMARY), kept on disk; every picture here is read from it."""
from __future__ import annotations

import pandas as pd
import streamlit as st

import viz
from ui.analysis import KIND_LABELS
from ui.model_pass import CORPUS_UNAVAILABLE, HOUR, SUMMARY_ON_DISK, Kept, Pass
from ui.page import Page
from ui.shared import once
from ui.state import draw, settle
from ui.view import View
from ui.widgets import aside, controls, head_picker, head_title, show_figure, table_height

MIN_SENTENCES = 10
MAX_SENTENCES = 1000  # the most the app reads (eng-fra: 23-41 s on two busy cores); more: python -m transformer.corpus
PARTS = {"map": "Map of heads", "qk": "Queries and keys", "match": "Matched heads", "neurons": "Neurons"}
PROJECTIONS = {"pca": "PCA", "tsne": "t-SNE"}
COLOURS = {"position": "Position", "side": "Query or key", "token class": "Token class"}
MAP_KEY, QK_KEY = "figure-head-map", "figure-queries-keys"
ORDER_LABELS = {"strongest": "Strongest", "selective": "Most selective"}
# What the summary promises and bounds, as the library measured and set them: "…:SECONDS_FIXED", "…:TSNE_POINTS".
MEASURED = "transformer.analysis.corpus_summary:"

# Each over the summary of count= inputs. Every head placed by how alike it attends, with its role (in its attrs,
# roles_no_head_reaches and role_threshold).
HEAD_MAP = Pass("head map", "ui.passes:head_map", pd.DataFrame, Kept(HOUR, max_entries=16))
# One head's queries and keys in 2-D (head=, method=), and the share of its queries nearest their top key.
QUERIES_KEYS = Pass("queries and keys", "ui.passes:queries_keys_picture", tuple, Kept(HOUR, max_entries=64),
                    "Placing the queries and keys by t-SNE…")
# This checkpoint's heads matched one-to-one to another's (other_path=, other_version=), or to a training
# snapshot's (snapshot=); one head of the final weights followed through every snapshot (head=).
MATCHED_HEADS = Pass("matched heads", "ui.passes:matched_heads", pd.DataFrame, Kept(HOUR, max_entries=16),
                     "Matching heads…")
MATCHED_SNAPSHOT = Pass("matched snapshot", "ui.passes:matched_snapshot", pd.DataFrame, Kept(HOUR, max_entries=16),
                        "Matching heads…")
FOLLOWED_HEAD = Pass("followed head", "ui.passes:followed_head", pd.DataFrame, Kept(HOUR, max_entries=64),
                     "Following the head through the training snapshots…")


def corpus_inputs(page: Page, count: int | None = None) -> str:
    """What a summary reads, in words: "200 pairs of its dev split", "its held-out sentences", "fresh dates inputs"."""
    number = "" if count is None else f"{count} "
    return {"translate": f"{number}pairs of its dev split", "lm": f"{number}of its held-out sentences"}.get(
        page.card.task, f"{number}fresh {page.card.task} inputs")


def classed(frame):
    """The picture's points with each token's class (viz.token_class), to colour them by."""
    return frame.assign(**{"token class": [viz.token_class(piece) for piece in frame["piece"]]})


def notice(page: Page, text: str, error: bool = False) -> None:
    """A message about the view: a box on a laptop; in lecture mode a line beside the figure, whole (a projector's
    message boxes show two lines)."""
    if page.lecture:
        aside(("⚠ " if error else "") + text)
    else:
        (st.error if error else st.info)(text)


def open_head(kind: str, layer: int, head: int) -> None:
    st.session_state.update(kind=kind, layer=layer, head=head, average=False, view="attention")


def open_clicked_head() -> None:
    """A click on the map: open that head (the point's customdata: kind, layer, head) in the Attention view."""
    for point in st.session_state[MAP_KEY]["selection"]["points"]:
        kind, layer, head = (point.get("customdata") or [None] * 3)[:3]
        if kind is not None:
            open_head(str(kind), int(layer), int(head))
            return


def open_clicked_sentence(pairs, head: tuple[str, int, int]) -> None:
    """A click on a query or key: open its sentence in the Attention view at this head, teacher-forced on the
    reference the picture was computed on (a language model's sentence is its input)."""
    for point in st.session_state[QK_KEY]["selection"]["points"]:
        data = point.get("customdata") or []
        if data and 0 <= int(data[0]) < len(pairs):
            source, reference = pairs[int(data[0])]
            st.session_state.update(text=source or reference, target=reference if source else "")
            open_head(*head)
            return


def render(page: Page) -> None:
    row = controls("corpus-view")
    settle("summary_count", range(MIN_SENTENCES, MAX_SENTENCES + 1))
    count = int(row.number_input("Inputs", min_value=MIN_SENTENCES, max_value=MAX_SENTENCES, step=50,
                                 key="summary_count", persist_state="session",
                                 help=f"Read from {corpus_inputs(page)}, teacher-forced on the reference; more than "
                                 "a thousand: python -m transformer.corpus cache"))
    part = draw(row.segmented_control, "Show", "corpus_part", list(PARTS), format_func=PARTS.get, required=True,
                persist_state="session", **({"label_visibility": "collapsed"} if page.lecture else {}))
    unavailable, on_disk = page.run(CORPUS_UNAVAILABLE), page.run(SUMMARY_ON_DISK, count=count)
    if unavailable and not on_disk:
        own = (f" `python -m transformer.corpus cache CHECKPOINT --count {count} --data CORPUS` reads a corpus of your "
               "own into this server's cache (docs/methods.md).") if page.card.task in ("translate", "lm") else ""
        notice(page, f"Not on this server: {unavailable}.{own}")
        return
    asked = st.session_state.get("summary_asked") == (page.path, page.version, count)
    if not asked and not on_disk:
        row.button(f"Read {count} inputs", key="summary-run", type="primary", on_click=st.session_state.__setitem__,
                   args=("summary_asked", (page.path, page.version, count)))
        seconds = round(page.library(MEASURED + "SECONDS_FIXED") + count * page.library(MEASURED + "SECONDS_PER_INPUT"))
        st.caption(f"Reads {corpus_inputs(page, count)} once (up to about {seconds} s on two busy cores, a bar "
                   "showing how far it has got; kept on this server for every session), "
                   "then draws every head's place on a map, each head's queries and keys, heads matched across "
                   "checkpoints and snapshots, and neurons' top examples.")
        return
    bar = st.empty()
    found = page.summary(count, lambda done: bar.progress(done, text=f"Reading {count} inputs…"))
    bar.empty()
    if found.error:
        notice(page, found.error, error=True)
        return
    summary = found.summary
    {"map": head_map, "qk": queries_keys, "match": matched, "neurons": neurons}[part](page, count, summary)


def head_map(page: Page, count: int, summary) -> None:
    frame = page.run(HEAD_MAP, count=count)
    chosen = tuple(st.session_state.get(key) for key in ("kind", "layer", "head"))  # the head the other views show
    fig = once(viz.head_map_figure, frame, title=f"Every head of {page.name}, over {len(summary.pairs)} inputs",
               theme=page.theme, chosen=chosen if None not in chosen else None)
    show_figure(page, fig, "head-map", key=MAP_KEY, on_select=open_clicked_head, selection_mode="points")
    missing = frame.attrs["roles_no_head_reaches"]
    if missing:  # a pattern a class may look for, said to be absent rather than drawn on a head that falls short
        aside(f"No head is marked {' or '.join(role for role, _, _ in missing)}: none puts over "
              f"{frame.attrs['role_threshold']:g} of its weight there. Closest: " + "; ".join(
                  f"{role}, {head_title(*head)} ({share:.2f})" for role, head, share in missing) + ".")
    aside(viz.MAP_CAPTION + " Click a head to open it in the Attention view.")
    roles = frame[frame["role"] != ""][["kind", "layer", "head", "role"]]
    if not page.lecture and len(roles):
        st.caption("Roles: " + "; ".join(f"{head_title(kind, layer, head)}: {role}"
                                         for kind, layer, head, role in roles.itertuples(index=False)) + ".")


def queries_keys(page: Page, count: int, summary) -> None:
    row = controls("queries-keys")
    kind, layer, head = head_picker(page, row=row)
    row = controls("queries-keys-picture")  # a row of its own: beside the head picker it would cut the last head
    method = draw(row.segmented_control, "Projection", "projection", list(PROJECTIONS), format_func=PROJECTIONS.get,
                  required=True, persist_state="session", help="PCA: the two directions of most variance, instant. "
                  "t-SNE (scikit-learn): keeps each point's neighbours; at most "
                  f"{page.library(MEASURED + 'TSNE_POINTS'):,} points, computed once "
                  "per head (under 10 s).")
    colour = draw(row.segmented_control, "Colour", "qk_colour", list(COLOURS), format_func=COLOURS.get,
                  required=True, persist_state="session")
    frame, share = page.run(QUERIES_KEYS, count=count, head=(kind, layer, head), method=method)
    if colour == "token class":
        frame = once(classed, frame)
    sentences = int(frame["sentence"].max()) + 1 if len(frame) else 0
    fig = once(viz.queries_keys_figure, frame, colour_by=colour,
               title=f"{head_title(kind, layer, head)}: queries and keys of {sentences} inputs ({PROJECTIONS[method]})",
               theme=page.theme)
    show_figure(page, fig, "queries-keys", key=QK_KEY, on_select=lambda: open_clicked_sentence(summary.pairs,
                                                                                               (kind, layer, head)),
                selection_mode="points")
    aside(f"Every token of {sentences} inputs twice: as a query (circle) and as a key (diamond). Keys are moved to "
          "the queries' mean and both scaled to one mean length (AttentionViz), which keeps each query's order of "
          f"keys, so a query lies near the keys it scores highly. Here {share:.0%} of the queries have the key they "
          "attend to most as their nearest key of their sentence. Click a point to open its sentence at this head.")


def matched(page: Page, count: int, summary) -> None:
    row = controls("matched")
    others = page.comparable_checkpoints()
    options = (["snapshots"] if page.snapshot_names else []) + others
    if not options:
        notice(page, f"{page.name} has no training snapshots and no other checkpoint here reads its vocabulary: "
               "there is nothing to match its heads with.")
        return
    settle("match_with", options, options[0])
    against = row.selectbox("Match with", options, key="match_with",
                            format_func=lambda o: "its training snapshots" if o == "snapshots" else o)
    if against == "snapshots":
        snapshot = draw(row.selectbox, "Snapshot", "match_snapshot", list(page.snapshot_names),
                        page.snapshot_names[0], format_func=page.snapshot_label)
        table = page.run(MATCHED_SNAPSHOT, count=count, snapshot=snapshot)
        names = ("final", page.snapshot_label(snapshot))
        followed = head_picker(page, row=controls("follow"))  # the head followed (and in lecture mode, its kind shown)
    else:
        try:
            other_path, other_version = page.folder(against)
            table = page.run(MATCHED_HEADS, count=count, other_path=other_path, other_version=other_version)
            names = (page.name, against)
        except ValueError as error:  # another shape: its heads cannot be matched one-to-one
            notice(page, str(error))
            return
        followed = head_picker(page, layer=False, row=controls("follow")) if page.lecture else None
    title = f"Heads of {names[0]} matched to {names[1]}"
    if page.lecture:  # one kind's heads: every kind's would run past a projector's height
        kind = followed[0]
        table, title = table[table["kind"] == kind], f"{KIND_LABELS[kind]} heads of {names[0]} matched to {names[1]}"
    fig = once(viz.head_matching_figure, table, names=names, title=title, theme=page.theme)
    show_figure(page, fig, "head-matching")
    aside(f"Each head matched to the one of the other model that attends most alike on the same inputs (the first "
          f"{min(count, page.library(MEASURED + 'MATCH_SENTENCES'))}; one-to-one "
          "within each kind, least summed Jensen-Shannon divergence); the more alike, the darker the line.")
    if against == "snapshots":
        follow(page, count, followed)
    elif not page.lecture:
        st.dataframe(table, hide_index=True, key="matched-heads", column_config={
            "divergence": st.column_config.NumberColumn(format="%.3f")})


def follow(page: Page, count: int, head: tuple[str, int, int]) -> None:
    """One head of the final weights followed back through the snapshots: a row per snapshot."""
    table = page.run(FOLLOWED_HEAD, count=count, head=head)
    table = table.drop(columns=[c for c in table.columns if table[c].isna().all()])  # cross-attention: no induction
    st.dataframe(table, hide_index=True, key="followed-head", height=table_height(page),
                 column_config={column: st.column_config.NumberColumn(format="%.3f")
                                for column in table.select_dtypes("float").columns if column != "step"})
    statistic = table.attrs.get("statistic", "")
    first = table[table["first_above"]]
    threshold = page.library("transformer.analysis.head_map:ROLE_THRESHOLD")  # where a head has its role
    found = (f" Its {statistic} first passes {threshold:g} at {first['snapshot'].iloc[0]}." if len(first)
             else f" Its {statistic} never passes {threshold:g}." if statistic else " It has no role at the final "
             "weights.")
    st.caption(f"{head_title(*head)} of the final weights followed back: in each snapshot, the head matched to it."
               + found)


def neurons(page: Page, count: int, summary) -> None:
    row = controls("neurons")
    orders = page.library(MEASURED + "NEURON_ORDERS")  # order -> what it ranks by
    layers = list(summary.neurons)
    settle("neuron_layer", range(len(layers)), 0)
    index = row.selectbox("Layer", range(len(layers)), key="neuron_layer",
                          format_func=lambda i: f"{layers[i][0]} layer {layers[i][1]}")
    by = draw(row.segmented_control, "Order", "neuron_order", list(orders), "strongest", required=True,
              persist_state="session", format_func=lambda o: ORDER_LABELS[o],
              help="; ".join(f"{ORDER_LABELS[o]}: {orders[o]}" for o in orders))
    order = once(summary.neuron_order, layers[index], by)
    labels = {int(n): f"{n} · {strongest:.2f} · {tokens} token{'s' if tokens > 1 else ''}, top {top!r}"
              for n, strongest, tokens, top in order.itertuples(index=False)}
    if st.session_state.get("corpus_neuron_list") != (index, by):  # another layer or order opens on its first
        st.session_state.update(corpus_neuron=int(order["neuron"].iloc[0]), corpus_neuron_list=(index, by))
    settle("corpus_neuron", list(labels), int(order["neuron"].iloc[0]))
    neuron = int(row.selectbox(f"Neuron, {ORDER_LABELS[by].lower()}", list(labels), key="corpus_neuron",
                               format_func=labels.get))
    table = viz.neuron_examples_table(summary.neuron_examples(layers[index], neuron)).drop(columns="neuron")
    st.dataframe(table, hide_index=True, key="neuron-examples", height=table_height(page),
                 column_config={"activation": st.column_config.NumberColumn(format="%.3f")})
    rank = list(labels).index(neuron) + 1
    aside(f"Neuron {neuron} of the {layers[index][0]}'s layer {layers[index][1]} feed-forward network, "
          f"{rank} of {len(labels)} {orders[by]}: the tokens of {len(summary.pairs)} inputs on which it fires "
          "most (after its activation function), each in its sentence. The Inside view shows the same neurons on "
          "this page's input.")


VIEW = View("corpus", "Across inputs", render)
