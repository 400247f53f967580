"""Attention Atlas: look inside a trained encoder-decoder Transformer. Run with `streamlit run app.py`.

A thin frame: one function per view. The model work happens in `transformer/` (translation, capture, ablation,
step-by-step decoding) and every figure comes from `viz/`. Models are loaded once per checkpoint folder
(st.cache_resource) and never changed; forward passes are cached once per (checkpoint, input, options) as
read-only numpy arrays and lists, so picking another head or layer only redraws. The whole view state lives in the
URL (see URL_STATE): a lecturer can prepare links, and a student can share exactly what they see.

Checkpoints are the direct sub-folders of $ATLAS_CHECKPOINTS (default: `checkpoints/` next to this file); a name
from the picker or a link only becomes a path through transformer.resolve_checkpoint, which never leads outside it.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import streamlit as st
import torch

import viz
from transformer import (ATTENTION_KINDS, Checkpoint, CheckpointError, ablate, capture, checkpoint_folders,
                         decode_steps, load_checkpoint, resolve_checkpoint)
from transformer.data import normalize

CHECKPOINTS_DIR = Path(os.environ.get("ATLAS_CHECKPOINTS", Path(__file__).parent / "checkpoints"))
MAX_INPUT_CHARS = 1000  # keeps links short; far beyond every model's max_len anyway
TOP_CANDIDATES = 5
SNAPSHOT_COLUMNS = 5  # the usual four snapshots and the final model in one row

VIEWS = {
    "attention": "Attention",
    "model": "Model view",
    "compare": "Compare",
    "decoding": "Decoding",
    "masks": "Masks",
    "positional": "Positional encoding",
    "heads": "Heads",
    "ablation": "Ablation",
    "training": "Training",
}
# On a projector (lecture mode, larger text) the full labels no longer fit the view picker's one row at 1280 pixels.
LECTURE_VIEW_LABELS = {**VIEWS, "positional": "Positions"}
# transformer's kind keys (used in the URL) -> viz's kind names (used by its multi-kind tables).
VIZ_KIND = dict(zip(ATTENTION_KINDS, viz.KINDS))
KIND_LABELS = {"encoder.self": "encoder self", "decoder.self": "decoder self", "decoder.cross": "cross"}
COMPARISONS = {"heads": "two heads", "layers": "two layers", "checkpoints": "two checkpoints",
               "snapshots": "two snapshots"}
PE_SIDES = {"src": "encoder", "tgt": "decoder"}
PE_PLOTS = {"heatmap": "positions × dimensions", "curves": "curves by dimension", "similarity": "similarity"}
FINAL = "final"  # the trained model, listed after the card's snapshots


# ---------------------------------------------------------------------------------------------- URL state


def flag(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def items(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def numbers(text: str) -> list[int]:
    return [int(item) for item in items(text)]


# Query parameter -> (parser of its text, default). Every one is also the session-state key of its widget.
# None as default: the default depends on the checkpoint (its first example, its first snapshot, ...).
URL_STATE: dict[str, tuple[Callable[[str], object], object]] = {
    "checkpoint": (str, None),
    "text": (str, None),
    "view": (str, "attention"),
    "kind": (str, "decoder.cross"),
    "layer": (int, 0),
    "head": (int, 0),
    "average": (flag, False),
    "masks": (flag, True),
    "stages": (flag, False),
    "values": (flag, False),
    "own_scale": (flag, False),
    "decoding": (str, "greedy"),
    "beam": (int, 4),
    "pad_src": (int, 0),
    "pad_tgt": (int, 0),
    "lecture": (flag, False),
    "dark": (flag, False),
    "image": (str, "png"),
    "step": (int, 0),
    "compare": (str, "heads"),
    "layer_b": (int, 0),
    "head_b": (int, 1),
    "checkpoint_b": (str, None),
    "snapshot_a": (str, None),
    "snapshot_b": (str, FINAL),
    "snapshot": (str, FINAL),
    "ablate": (items, []),
    "ablation_mode": (str, "zero"),
    "pe_side": (str, "src"),
    "pe_plot": (str, "heatmap"),
    "pe_positions": (int, 50),
    "pe_dims": (numbers, [0, 1, 2, 3]),
    "stat_x": (str, "entropy"),
    "stat_y": (str, "mean_distance"),
}
ALWAYS_IN_URL = ("checkpoint", "text", "view", "kind", "layer", "head")  # the core of a shared link


def notice(message: str) -> None:
    """Tell the user once, at the top of the page, that part of their link was not used."""
    st.session_state.url_notices.append(message)


def restore_state_from_url() -> None:
    """On a session's first run, copy the link's query parameters into session state.

    Values are only parsed here; whether they fit the checkpoint (a layer it has, ...) is checked by settle()
    when the widget that uses them is drawn, which is also where a bad one falls back with a notice."""
    if "url_pending" in st.session_state:
        return
    st.session_state.url_pending = set()
    st.session_state.url_notices = []
    unknown = 0
    for name in st.query_params:
        if name not in URL_STATE:
            unknown += 1
            continue
        parse = URL_STATE[name][0]
        try:
            value = parse(st.query_params[name])
        except ValueError:
            notice(f"The link's `{name}` could not be read, so the default is used.")
            continue
        st.session_state[name] = value
        st.session_state.url_pending.add(name)
    if unknown:
        notice(f"{unknown} unknown link parameter(s) were ignored.")


def settle(name: str, allowed, fallback):
    """st.session_state[name] if it is one of `allowed`, else `fallback` (with a notice if the link set it).

    Called before the widget `name` is drawn, so a value that no longer fits (a layer the newly picked
    checkpoint lacks) never reaches the widget."""
    value = st.session_state.get(name, fallback)
    if value not in allowed:
        if name in st.session_state.url_pending:
            notice(f"The link's `{name}` is not available for this checkpoint and input: showing `{fallback}` instead.")
        value = fallback
    st.session_state[name] = value
    st.session_state.url_pending.discard(name)
    return value


def settle_all(name: str, allowed, fallback: list) -> list:
    """settle() for a multi-choice: keeps the allowed values of the list, drops the others."""
    values = st.session_state.get(name, fallback)
    kept = [value for value in values if value in allowed]
    if len(kept) < len(values) and name in st.session_state.url_pending:
        notice(f"Some of the link's `{name}` do not fit this checkpoint and were left out.")
    st.session_state[name] = kept
    st.session_state.url_pending.discard(name)
    return kept


def sync_url() -> None:
    """Write the view state into the URL: the core always, options only where they differ from the default."""
    params = {}
    for name, (_, default) in URL_STATE.items():
        value = st.session_state.get(name)
        if value is None or (value == default and name not in ALWAYS_IN_URL):
            continue
        if isinstance(value, bool):
            params[name] = "1" if value else "0"
        elif isinstance(value, list):
            params[name] = ",".join(str(item) for item in value)
        else:
            params[name] = str(value)
    st.query_params.from_dict(params)


# ---------------------------------------------------------------------------------------------- loading


class Loaded(NamedTuple):
    checkpoint: Checkpoint | None
    error: str  # why it could not be loaded ("" if it was)


def checkpoint_names() -> list[str]:
    """The checkpoint folders: the only names the app accepts, from the UI or a link."""
    return checkpoint_folders(CHECKPOINTS_DIR)


def checkpoint_path(name: str) -> str:
    return str(resolve_checkpoint(CHECKPOINTS_DIR, name))


def folder_version(name: str) -> int:
    """Changes whenever a file of the folder does, so a checkpoint that finishes training is loaded again."""
    path = Path(checkpoint_path(name))
    stamps = [path.stat().st_mtime_ns]
    for file in path.iterdir():
        try:
            stamps.append(file.stat().st_mtime_ns)
        except FileNotFoundError:  # a trainer replaced it between listing and reading: the folder's stamp moved
            continue
    return max(stamps)


@st.cache_resource(max_entries=8, show_spinner="Loading the checkpoint…")
def load(path: str, version: int) -> Loaded:
    """The checkpoint at `path`, loaded once and shared by every session (never mutated: capture and ablation
    are per call). A failure is kept too, so a broken folder is not read again until it changes."""
    try:
        return Loaded(load_checkpoint(path), "")
    except CheckpointError as error:
        return Loaded(None, str(error))


@st.cache_resource(max_entries=16, show_spinner="Loading the training snapshot…")
def load_snapshot(path: str, version: int, snapshot: str) -> torch.nn.Module:
    return load(path, version).checkpoint.load_snapshot(snapshot)


def model_of(path: str, version: int, snapshot: str) -> torch.nn.Module:
    """The final model, or one of its training snapshots."""
    return load(path, version).checkpoint.model if snapshot == FINAL else load_snapshot(path, version, snapshot)


# ---------------------------------------------------------------------------------------------- cached passes


# The passes are cached with st.cache_resource, not st.cache_data: every session gets the same objects instead of
# unpickling its own copy on every rerun (75 MB at 256 tokens, a quarter of a second). So that no session can change
# what another sees, the arrays are read-only and no view mutates the lists.
def read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def attention_arrays(record) -> dict[str, dict[str, np.ndarray]]:
    """kind -> weights and scores (layers, heads, q_len, k_len), and the model's mask (q_len, k_len, True = may
    attend), as read-only numpy: what the cache keeps instead of the torch record."""
    return {kind: {"weights": read_only(record.stack(kind).numpy()),
                   "scores": read_only(record.stack(kind, part="scores").numpy()),
                   "allowed": read_only(record.stack(kind, part="mask")[0, 0].numpy())}
            for kind in ATTENTION_KINDS}


@st.cache_resource(max_entries=64, show_spinner="Running the model…")
def translate_and_capture(path: str, version: int, text: str, beam_size: int, pad_src: int = 0, pad_tgt: int = 0,
                          snapshot: str = FINAL, ablated: tuple = (), mode: str = "zero") -> dict:
    """Translate `text` and capture the attention of one pass over (source, decoder input).

    pad_src / pad_tgt append that many pad ids to the source / decoder input of the captured pass, as a batch
    with a longer sentence would: the model's outputs on the real positions do not change, and the padding masks
    appear. ablated: ((attention key, heads), ...) removed during the call. Raises ValueError when the input has
    nothing to read."""
    checkpoint = load(path, version).checkpoint
    model = model_of(path, version, snapshot)
    pad_id = checkpoint.config.pad_id
    with ablate(model, dict(ablated), mode):
        translation = checkpoint.translate(text, beam_size=beam_size, model=model)
        src_ids = translation.src_ids + [pad_id] * pad_src
        tgt_ids = translation.tgt_ids + [pad_id] * pad_tgt
        if pad_src or pad_tgt:
            with torch.no_grad(), capture(model) as record:
                model(torch.tensor([src_ids]), torch.tensor([tgt_ids]))
        else:
            record = translation.attention
    return {
        "text": translation.text,
        "src_tokens": checkpoint.src_tokenizer.pieces(src_ids),
        "tgt_tokens": checkpoint.tgt_tokenizer.pieces(tgt_ids),
        "output_tokens": translation.output_tokens,
        "output_ids": translation.output_ids,
        "probs": translation.probs,
        "warnings": translation.warnings,
        "src_ids": src_ids,
        "tgt_ids": tgt_ids,
        "attention": attention_arrays(record),
    }


@st.cache_resource(max_entries=64, show_spinner="Running the model…")
def teacher_forced(path: str, version: int, snapshot: str, src_ids: tuple, tgt_ids: tuple, labels: tuple = (),
                   ablated: tuple = (), mode: str = "zero") -> dict:
    """One captured pass of a model over given ids (no decoding): the weights of every kind, and the probability
    of each of `labels` at its position. Lets snapshots and other checkpoints read exactly the same sequence."""
    model = model_of(path, version, snapshot)
    with torch.no_grad(), ablate(model, dict(ablated), mode), capture(model) as record:
        probs = model(torch.tensor([src_ids]), torch.tensor([tgt_ids])).softmax(dim=-1)[0]
    return {"weights": {kind: arrays["weights"] for kind, arrays in attention_arrays(record).items()},
            "label_probs": [float(probs[position, label]) for position, label in enumerate(labels)]}


@st.cache_resource(max_entries=32, show_spinner="Decoding step by step…")
def decoding_steps(path: str, version: int, text: str) -> dict:
    """Greedy generation one token at a time: each step's candidates and cross-attention row, and the decoder
    self-attention of the finished prefix (row t is what step t computed: the decoder is causal)."""
    checkpoint = load(path, version).checkpoint
    src_ids = checkpoint.encode(text)
    steps = list(decode_steps(checkpoint.model, torch.tensor([src_ids]), top_k=TOP_CANDIDATES))
    decoder_input = steps[-1].prefix
    pieces = checkpoint.tgt_tokenizer.pieces
    self_attention = teacher_forced(path, version, FINAL, tuple(src_ids), tuple(decoder_input))["weights"]
    return {
        "src_tokens": checkpoint.src_tokenizer.pieces(src_ids),
        "prefix_tokens": pieces(decoder_input),
        "top": [[(piece, prob) for piece, prob in zip(pieces([i for i, _ in step.top]), [p for _, p in step.top])]
                for step in steps],
        # (layers, heads, steps, src_len)
        "cross": read_only(np.stack([step.cross_attention.numpy() for step in steps], axis=2)),
        "decoder_self": self_attention["decoder.self"],
    }


# ---------------------------------------------------------------------------------------------- page context


@dataclass(frozen=True)
class Page:
    """What every view needs: the checkpoint, the input and its analysis, and how figures look."""

    name: str
    version: int
    checkpoint: Checkpoint
    text: str
    beam_size: int
    analysis: dict | None  # None while the input cannot be translated (empty)
    theme: viz.Theme
    lecture: bool
    image_format: str

    @property
    def path(self) -> str:
        return checkpoint_path(self.name)

    def layers(self, kind: str) -> int:
        config = self.checkpoint.config
        return config.num_encoder_layers if kind == "encoder.self" else config.num_decoder_layers

    def snapshots(self) -> list[str]:
        return self.checkpoint.snapshot_names() + [FINAL]

    def snapshot_label(self, snapshot: str) -> str:
        card = self.checkpoint.card
        if snapshot == FINAL:
            last = [entry["step"] for entry in card.history if "step" in entry]
            return f"final (step {last[-1]})" if last else "final"
        info = next(entry for entry in card.snapshots if entry["name"] == snapshot)
        return f"step {info.get('step', '?')} ({info.get('fraction', 0):.0%})"


def tokens_of(analysis: dict, kind: str) -> tuple[list[str], list[str]]:
    """(query tokens, key tokens) of a kind: encoder self is source × source, decoder self is decoder input ×
    decoder input, cross is decoder input × source."""
    src, tgt = analysis["src_tokens"], analysis["tgt_tokens"]
    return {"encoder.self": (src, src), "decoder.self": (tgt, tgt), "decoder.cross": (tgt, src)}[kind]


def blocked_of(analysis: dict, kind: str) -> dict[str, np.ndarray]:
    """Why each cell is masked, from the ids (padding) and the kind (causal); reasons that block nothing are
    left out so that legends only name masks that are there."""
    src_pad = np.array(analysis["src_tokens"]) == viz.PAD_TOKEN
    tgt_pad = np.array(analysis["tgt_tokens"]) == viz.PAD_TOKEN
    query_pad, key_pad = {"encoder.self": (src_pad, src_pad), "decoder.self": (tgt_pad, tgt_pad),
                          "decoder.cross": (tgt_pad, src_pad)}[kind]
    return viz.mask_reasons(len(query_pad), len(key_pad), key_is_pad=key_pad if key_pad.any() else None,
                            query_is_pad=query_pad if query_pad.any() else None, causal=kind == "decoder.self")


def all_kinds(analysis: dict) -> tuple[dict, dict, dict, dict]:
    """stacks, query tokens, key tokens and masks by viz kind name, as viz's multi-kind tables take them."""
    stacks, queries, keys, blocked = {}, {}, {}, {}
    for kind, name in VIZ_KIND.items():
        stacks[name] = analysis["attention"][kind]["weights"]
        queries[name], keys[name] = tokens_of(analysis, kind)
        blocked[name] = blocked_of(analysis, kind)
    return stacks, queries, keys, blocked


def show_figure(page: Page, fig, name: str, rows: int = 0, **kwargs) -> None:
    """Every figure with the export toolbar; theme=None, as viz.Theme already styles it for light or dark.

    rows: token rows of the tallest panel; the figure grows with them so that every row keeps its label."""
    if rows:
        fig.update_layout(height=min(max(450, rows * page.theme.font_size * 1.7 + 220), 2000))
    st.plotly_chart(fig, theme=None, config=viz.toolbar_config(page.image_format, f"{page.name}-{name}"),
                    key=kwargs.pop("key", f"figure-{name}"), **kwargs)


def controls() -> st.delta_generator.DeltaGenerator:
    """A row of widgets, each as wide as its content, wrapping when the page is narrow (or the fonts large)."""
    return st.container(horizontal=True, vertical_alignment="bottom", gap="medium")


def head_picker(page: Page, *, layer: bool = True, head: bool = True,
                allow_average: bool = False) -> tuple[str, int | None, int | None]:
    """Kind, layer and head, shared by every view that shows one head (the same keys, kept between views).
    head is None when averaging over heads (or not asked for), layer None when not asked for."""
    row = controls()
    kind = settle("kind", ATTENTION_KINDS, "decoder.cross")
    row.segmented_control("Attention", ATTENTION_KINDS, format_func=KIND_LABELS.get, key="kind", required=True,
                          persist_state="session")
    if not layer:
        return kind, None, None
    settle("layer", range(page.layers(kind)), 0)
    chosen_layer = row.segmented_control("Layer", range(page.layers(kind)), key="layer", required=True,
                                         persist_state="session")
    if not head:
        return kind, chosen_layer, None
    heads = range(page.checkpoint.config.num_heads)
    settle("head", heads, 0)
    head_slot = row.container()  # keeps the head before the average switch, which decides whether it is enabled
    average = allow_average and row.toggle("Average heads", key="average", persist_state="session",
                                           help="The mean of all heads' weights in this layer.")
    chosen_head = head_slot.segmented_control("Head", heads, key="head", required=True, disabled=average,
                                              persist_state="session")
    return kind, chosen_layer, None if average else chosen_head


def head_title(kind: str, layer: int, head: int | None) -> str:
    return f"{KIND_LABELS[kind]} · layer {layer} · " + ("mean of heads" if head is None else f"head {head}")


def one_head(stack: np.ndarray, layer: int, head: int | None) -> np.ndarray:
    return stack[layer].mean(axis=0) if head is None else stack[layer, head]


# ---------------------------------------------------------------------------------------------- views


def attention_view(page: Page) -> None:
    """One head (or a layer's mean) as a heatmap with its masks, or its three stages from scores to weights."""
    kind, layer, head = head_picker(page, allow_average=True)
    analysis = page.analysis
    options = controls()
    show_masks = options.toggle("Mask overlays", key="masks", persist_state="session")
    stages = options.toggle("Scores → masked → softmax", key="stages", persist_state="session",
                            help="The three stages of attention side by side.")
    show_values, own_scale = False, False
    if not page.lecture:
        show_values = options.toggle("Numbers in cells", key="values", persist_state="session")
        own_scale = options.toggle("Own colour scale", key="own_scale", persist_state="session",
                                   help="On: this head's own range. Off: 0 to 1 for every head, so heads compare at a "
                                        "glance.")
    arrays = analysis["attention"][kind]
    q_tokens, k_tokens = tokens_of(analysis, kind)
    blocked = blocked_of(analysis, kind)
    weights, scores = one_head(arrays["weights"], layer, head), one_head(arrays["scores"], layer, head)
    title = head_title(kind, layer, head)
    if stages:
        fig = viz.stages_figure(scores, blocked, weights, q_tokens, k_tokens, show_masks=show_masks, title=title,
                                theme=page.theme)
    else:
        fig = viz.head_heatmap(weights, q_tokens, k_tokens, scores=scores, blocked=blocked, show_masks=show_masks,
                               fixed_scale=not own_scale, show_values=show_values, title=title, theme=page.theme)
    show_figure(page, fig, f"{kind}-L{layer}-" + ("mean" if head is None else f"H{head}"), rows=len(q_tokens))
    st.caption("Rows are queries, columns keys; each row's weights sum to 1 over the keys it may attend to. "
               + ("Averaged scores are the mean of the heads' scores; the softmax of that mean is not shown."
                  if head is None and stages else ""))
    if not page.lecture:
        export_downloads(page)


def export_downloads(page: Page) -> None:
    """This input's attention (every kind, layer and head, one row per weight) and its input and output."""
    analysis = page.analysis

    def table() -> pd.DataFrame:
        return viz.tidy_frame(*all_kinds(analysis))

    decoding = f"beam search, {page.beam_size} beams" if page.beam_size > 1 else "greedy"
    record = {"checkpoint": page.name, "input": page.text, "decoding": decoding, "output": analysis["text"],
              "source_pieces": analysis["src_tokens"], "decoder_input_pieces": analysis["tgt_tokens"],
              "output_pieces": analysis["output_tokens"], "probabilities": analysis["probs"],
              "warnings": analysis["warnings"]}
    columns = st.columns(3)
    # Built only when clicked (a callable): a table of every weight is big and most reruns never need it.
    columns[0].download_button("Attention as CSV", lambda: viz.to_csv_bytes(table()), f"{page.name}-attention.csv",
                               "text/csv", key="download-csv", on_click="ignore",
                               help="One row per weight of every kind, layer and head of this input.")
    columns[1].download_button("Attention as Parquet", lambda: viz.to_parquet_bytes(table()),
                               f"{page.name}-attention.parquet", "application/vnd.apache.parquet",
                               key="download-parquet", on_click="ignore")
    columns[2].download_button("Input and output as JSON", json.dumps(record, ensure_ascii=False, indent=1),
                               f"{page.name}-translation.json", "application/json", key="download-json",
                               on_click="ignore")


def open_head(layer: int, head: int) -> None:
    """Show one head of the model view in the Attention view."""
    st.session_state.update(layer=layer, head=head, average=False, view="attention")


def model_view(page: Page) -> None:
    """Every layer × head of one kind at once; pick a head below to open it in the Attention view. (Plotly reports
    no clicks on the image panels the grid is drawn with, so a click cannot open it.)"""
    kind, _, _ = head_picker(page, layer=False)
    analysis = page.analysis
    heads = page.checkpoint.config.num_heads
    show_masks = st.toggle("Mask overlays", key="masks", persist_state="session")
    q_tokens, k_tokens = tokens_of(analysis, kind)
    fig = viz.model_view(analysis["attention"][kind]["weights"], q_tokens, k_tokens,
                         blocked=blocked_of(analysis, kind), show_masks=show_masks,
                         title=f"{KIND_LABELS[kind]}: every layer and head", theme=page.theme)
    show_figure(page, fig, f"{kind}-all-heads")
    panels = [(layer, head) for layer in range(page.layers(kind)) for head in range(heads)]
    columns = st.columns([3, 2], vertical_alignment="bottom")
    chosen = columns[0].selectbox("Head to open", panels, format_func=lambda panel: f"L{panel[0]} H{panel[1]}",
                                  key="model-pick")
    columns[1].button("Open in the Attention view", on_click=open_head, args=chosen, key="model-open")


def compare_view(page: Page) -> None:
    """Two heads, two layers, two checkpoints or two training snapshots side by side, and A − B."""
    mode = settle("compare", COMPARISONS, "heads")
    st.segmented_control("Compare", COMPARISONS, format_func=COMPARISONS.get, key="compare", required=True,
                         persist_state="session")
    analysis = page.analysis
    kind, layer, head = head_picker(page, head=mode != "layers")
    q_tokens, k_tokens = tokens_of(analysis, kind)
    weights = analysis["attention"][kind]["weights"]
    a, label_a = one_head(weights, layer, head), f"L{layer} H{head}" if head is not None else f"L{layer} mean"
    if mode in ("heads", "layers"):
        row = controls()
        settle("layer_b", range(page.layers(kind)), min(1, page.layers(kind) - 1))
        layer_b = row.segmented_control("Layer B", range(page.layers(kind)), key="layer_b", required=True,
                                        persist_state="session")
        head_b = None
        if mode == "heads":
            settle("head_b", range(page.checkpoint.config.num_heads), min(1, page.checkpoint.config.num_heads - 1))
            head_b = row.segmented_control("Head B", range(page.checkpoint.config.num_heads), key="head_b",
                                           required=True, persist_state="session")
        b = one_head(weights, layer_b, head_b)
        label_b = f"L{layer_b} H{head_b}" if head_b is not None else f"L{layer_b} mean"
    elif mode == "checkpoints":
        compared = compare_checkpoints(page, kind, layer, head)
        if compared is None:
            return
        b, label_b = compared
        label_a = f"{page.name} {label_a}"
    else:
        compared = compare_snapshots(page, kind, layer, head)
        if compared is None:
            return
        (a, label_a), (b, label_b) = compared
    fig = viz.compare_figure(a, b, q_tokens, k_tokens, label_a, label_b, blocked=blocked_of(analysis, kind),
                             title=f"{KIND_LABELS[kind]}: A − B (red: A attends more)", theme=page.theme)
    show_figure(page, fig, f"compare-{mode}", rows=len(q_tokens))


def same_ids_in(page: Page, other: Checkpoint) -> bool:
    """Whether `other` reads this input's ids as the same pieces, so that it can run on exactly this sequence."""
    analysis = page.analysis
    config = other.config
    if max(analysis["src_ids"]) >= config.src_vocab_size or max(analysis["tgt_ids"]) >= config.tgt_vocab_size:
        return False
    if max(len(analysis["src_ids"]), len(analysis["tgt_ids"])) > config.max_len:
        return False
    return (other.src_tokenizer.pieces(analysis["src_ids"]) == analysis["src_tokens"]
            and other.tgt_tokenizer.pieces(analysis["tgt_ids"]) == analysis["tgt_tokens"])


def compare_checkpoints(page: Page, kind: str, layer: int, head: int | None) -> tuple[np.ndarray, str] | None:
    """The same head of another checkpoint on this very sequence (teacher-forced, so A − B is meaningful)."""
    others = [name for name in checkpoint_names() if name != page.name
              and load(checkpoint_path(name), folder_version(name)).checkpoint is not None]
    if not others:
        st.info("There is no other loadable checkpoint to compare with.")
        return None
    name_b = settle("checkpoint_b", others, others[0])
    st.selectbox("Checkpoint B", others, key="checkpoint_b", persist_state="session")
    path_b, version_b = checkpoint_path(name_b), folder_version(name_b)
    other = load(path_b, version_b).checkpoint
    layers_b = other.config.num_encoder_layers if kind == "encoder.self" else other.config.num_decoder_layers
    if layer >= layers_b or (head is not None and head >= other.config.num_heads):
        st.info(f"`{name_b}` has no {head_title(kind, layer, head)}: it has {layers_b} layer(s) and "
                f"{other.config.num_heads} heads.")
        return None
    if not same_ids_in(page, other):
        st.info(f"`{name_b}` splits text into other pieces (or reads fewer), so the two cannot read the same "
                "sequence and A − B has no meaning. Pick that checkpoint in the sidebar to see its own attention.")
        return None
    analysis = page.analysis
    weights = teacher_forced(path_b, version_b, FINAL, tuple(analysis["src_ids"]), tuple(analysis["tgt_ids"]))
    st.caption(f"B (`{name_b}`) reads the same source and, teacher-forced, the same decoder input as A "
               f"(`{page.name}`).")
    return one_head(weights["weights"][kind], layer, head), f"{name_b} L{layer} " + (
        "mean" if head is None else f"H{head}")


def compare_snapshots(page: Page, kind: str, layer: int, head: int | None):
    """The same head at two points of training, both teacher-forced on the final model's sequence."""
    snapshots = page.snapshots()
    if len(snapshots) < 2:
        st.info("This checkpoint's card lists no training snapshots.")
        return None
    columns = st.columns(2)
    chosen = []
    for column, name, fallback in ((columns[0], "snapshot_a", snapshots[0]), (columns[1], "snapshot_b", FINAL)):
        settle(name, snapshots, fallback)
        chosen.append(column.selectbox(f"Snapshot {name[-1].upper()}", snapshots, format_func=page.snapshot_label,
                                       key=name, persist_state="session"))
    analysis = page.analysis
    compared = []
    for snapshot in chosen:
        try:
            weights = teacher_forced(page.path, page.version, snapshot, tuple(analysis["src_ids"]),
                                     tuple(analysis["tgt_ids"]))["weights"][kind]
        except CheckpointError as error:
            st.error("This snapshot could not be loaded.")
            st.code(str(error), language=None)
            return None
        compared.append((one_head(weights, layer, head), page.snapshot_label(snapshot)))
    st.caption("Both snapshots read the final model's output (teacher forcing), so the cells line up.")
    return compared


def step_by(delta: int, last: int) -> None:
    st.session_state.step = min(max(st.session_state.step + delta, 0), last)


def decoding_view(page: Page) -> None:
    """Greedy generation, one token at a time: the step's cross-attention, the causal mask growing, the
    candidates."""
    steps = decoding_steps(page.path, page.version, page.text)
    count = len(steps["prefix_tokens"])  # one decoder input piece per step
    step = settle("step", range(count), 0)
    if count > 1:
        row = controls()
        row.button("◀ Back", on_click=step_by, args=(-1, count - 1), disabled=step == 0, key="step-back")
        row.button("Next ▶", on_click=step_by, args=(1, count - 1), disabled=step == count - 1, key="step-next")
        step = row.slider("Step", 0, count - 1, key="step", persist_state="session")
    if page.beam_size > 1:
        st.caption("Step by step is greedy decoding; the output above comes from beam search and may differ.")
    # One input, unpadded: cross-attention masks nothing here.
    # The step's query is the decoder input so far: <s> and the pieces of the earlier steps.
    fig = viz.decoding_step_figure(steps["cross"][:, :, step], steps["src_tokens"],
                                   steps["prefix_tokens"][: step + 1], step, theme=page.theme)
    left, right = st.columns([3, 2])
    with left:
        show_figure(page, fig, "decoding-step")
    with right:
        st.markdown(f"**Step {step}: the {TOP_CANDIDATES} most likely next pieces**")
        st.dataframe(pd.DataFrame(steps["top"][step], columns=["piece", "probability"]), hide_index=True,
                     column_config={"probability": st.column_config.ProgressColumn(format="%.3f", min_value=0.0,
                                                                                   max_value=1.0)})
        st.caption("Greedy decoding takes the first.")
    config = page.checkpoint.config
    row = controls()
    settle("layer", range(config.num_decoder_layers), 0)
    layer = row.segmented_control("Decoder layer", range(config.num_decoder_layers), key="layer", required=True,
                                  persist_state="session")
    settle("head", range(config.num_heads), 0)
    head = row.segmented_control("Head", range(config.num_heads), key="head", required=True, persist_state="session")
    # The whole grid from the first step, so the figure keeps its size while the causal triangle grows row by row;
    # rows not generated yet stay blank and their pieces unknown.
    later = np.arange(count) > step
    weights = np.where(later[:, None], np.nan, steps["decoder_self"][layer, head])
    labels = steps["prefix_tokens"][: step + 1] + ["…"] * (count - step - 1)
    causal = viz.mask_reasons(count, count, causal=True)[viz.CAUSAL] & ~later[:, None]
    growing = viz.head_heatmap(weights, labels, labels, blocked={viz.CAUSAL: causal},
                               title=f"decoder self-attention up to step {step} · layer {layer} · head {head}",
                               theme=page.theme)
    show_figure(page, growing, "decoding-causal", rows=count)


MASK_EXPLANATIONS = {
    viz.PADDING: "Padding mask: pad tokens only fill a batch up to its longest sentence, so no query may attend "
                 "to them (their key columns are blocked).",
    viz.CAUSAL: "Causal mask: the decoder must not see pieces it has not generated yet, so position i may attend "
                "only to positions 0…i.",
    viz.PADDED_QUERY: "Padded query (shaded, not masked): a pad position's row is computed like any other, but its "
                      "output is ignored.",
    "all reasons": "Combined: the model blocks a cell if any mask blocks it; blocked scores are set to the lowest float "
                   "before the softmax and their weights to exactly 0, so even a row with every key blocked stays "
                   "finite.",
}


def masks_view(page: Page) -> None:
    """The masks of this input for each kind, each explained in one sentence."""
    analysis = page.analysis
    if viz.PAD_TOKEN not in analysis["src_tokens"] + analysis["tgt_tokens"]:
        st.info("A single sentence has no padding. Use **Padding** in the sidebar to append pad tokens to the source "
                "or decoder input, as batching with a longer sentence would: the padding masks appear, and the "
                "model's outputs on the real positions do not change.")
    for reason, sentence in MASK_EXPLANATIONS.items():
        st.markdown(f"- {sentence}")
    for kind in ATTENTION_KINDS:
        q_tokens, k_tokens = tokens_of(analysis, kind)
        blocked = blocked_of(analysis, kind)
        model_blocks = ~analysis["attention"][kind]["allowed"]
        if not np.array_equal(viz.model_mask(blocked, model_blocks.shape), model_blocks):
            st.error(f"The {KIND_LABELS[kind]}-attention masks below differ from the mask the model used.")
        if not blocked:
            st.markdown(f"**{KIND_LABELS[kind]}-attention**: nothing is masked for this input.")
            continue
        fig = viz.mask_figure(blocked, q_tokens, k_tokens, title=f"{KIND_LABELS[kind]}-attention masks",
                              theme=page.theme)
        show_figure(page, fig, f"masks-{kind}", rows=len(q_tokens))


def positional_view(page: Page) -> None:
    """The model's own positional encoding: as a matrix, as curves, or how alike two positions are."""
    config = page.checkpoint.config
    row = controls()
    settle("pe_side", ("src", "tgt"), "src")
    side = row.segmented_control("Side", ("src", "tgt"), key="pe_side", required=True, format_func=PE_SIDES.get,
                                 persist_state="session")
    settle("pe_plot", PE_PLOTS, "heatmap")
    plot = row.segmented_control("Plot", PE_PLOTS, key="pe_plot", required=True, format_func=PE_PLOTS.get,
                                 persist_state="session")
    settle("pe_positions", range(2, config.max_len + 1), min(50, config.max_len))
    positions = st.slider("Positions shown", 2, config.max_len, key="pe_positions", persist_state="session")
    pe = page.checkpoint.model.positional_table(side).numpy()[:positions]
    kind = config.positional
    if plot == "heatmap":
        fig = viz.pe_heatmap(pe, title=f"{kind} positional encoding of the {PE_SIDES[side]}", theme=page.theme)
    elif plot == "curves":
        settle_all("pe_dims", range(config.d_model), [0, 1, 2, 3])
        dims = st.multiselect("Dimensions", range(config.d_model), key="pe_dims", persist_state="session")
        fig = viz.pe_curves(pe, dims=dims, theme=page.theme)
    else:
        fig = viz.pe_similarity(pe, cosine=True, theme=page.theme)
    show_figure(page, fig, f"positional-{plot}")
    st.caption(f"d_model = {config.d_model}, max_len = {config.max_len}. Sinusoidal encodings are fixed; learned "
               "ones are trained with the model.")


def heads_view(page: Page) -> None:
    """Numbers per head (sortable), a scatter of two of them, and attention rollout."""
    analysis = page.analysis
    stacks, queries, keys, blocked = all_kinds(analysis)
    statistics = viz.head_statistics(stacks, queries, keys, blocked)
    st.dataframe(statistics, hide_index=True, key="head-table",
                 column_config={name: st.column_config.NumberColumn(format="%.3f")
                                for name in statistics.select_dtypes("float").columns})
    st.caption("Means over query rows (pad rows and rows that can attend to one key only are left out). Role: the "
               "first rule a head passes: " + "; ".join(f"{role}: {column} > {limit}"
                                                         for role, column, limit in viz.ROLE_RULES) + ".")
    numeric = list(statistics.select_dtypes("number").columns.drop(["layer", "head"]))
    x, y = settle("stat_x", numeric, "entropy"), settle("stat_y", numeric, "mean_distance")
    if not page.lecture:
        columns = st.columns(2)
        x = columns[0].selectbox("x", numeric, key="stat_x", persist_state="session")
        y = columns[1].selectbox("y", numeric, key="stat_y", persist_state="session")
    show_figure(page, viz.statistics_scatter(statistics, x, y, theme=page.theme), "head-statistics")
    st.caption("One point per head: colour is its layer, symbol its kind (hover a point to read it).")
    attention = analysis["attention"]
    encoder = viz.encoder_rollout(attention["encoder.self"]["weights"])
    source = viz.decoder_source_rollout(attention["decoder.self"]["weights"], attention["decoder.cross"]["weights"],
                                        encoder)
    left, right = st.columns(2)
    with left:
        show_figure(page, viz.rollout_figure(encoder, analysis["src_tokens"], analysis["src_tokens"],
                                             title="Encoder rollout", theme=page.theme), "rollout-encoder",
                    rows=len(analysis["src_tokens"]))
        st.caption("Row i: how much of each input token reaches the encoder's output at position i, through every "
                   "layer (heads averaged, residual counted as half).")
    with right:
        show_figure(page, viz.rollout_figure(source, analysis["tgt_tokens"], analysis["src_tokens"],
                                             title="Decoder rollout onto the source", theme=page.theme),
                    "rollout-decoder", rows=len(analysis["tgt_tokens"]))
        st.caption("Row t: the share of each source token in the decoder's state at position t; the rest of each "
                   "row belongs to the decoder's own input.")


def ablation_view(page: Page) -> None:
    """Switch heads off and compare the output and its probabilities with the intact model's."""
    config = page.checkpoint.config
    options = [f"{kind.split('.')[0]}.{layer}.{kind.split('.')[1]}:{head}" for kind in ATTENTION_KINDS
               for layer in range(page.layers(kind)) for head in range(config.num_heads)]

    def label(option: str) -> str:
        key, head = option.split(":")
        stack, layer, role = key.split(".")
        return f"{KIND_LABELS[f'{stack}.{role}']} · L{layer} · H{head}"

    settle_all("ablate", options, [])
    columns = st.columns([4, 1], vertical_alignment="bottom")
    chosen = columns[0].multiselect("Heads to switch off", options, format_func=label, key="ablate",
                                    persist_state="session", placeholder="Pick heads…")
    settle("ablation_mode", ("zero", "mean"), "zero")
    mode = columns[1].segmented_control("Replace by", ("zero", "mean"), key="ablation_mode", required=True,
                                        persist_state="session",
                                        help="zero: the head's output is 0. mean: its mean over positions.")
    if not chosen:
        st.info("Pick heads to switch off: the output and its probabilities appear next to the intact model's.")
        return
    heads: dict[str, list[int]] = {}
    for option in chosen:
        key, head = option.split(":")
        heads.setdefault(key, []).append(int(head))
    ablated = tuple(sorted((key, tuple(sorted(values))) for key, values in heads.items()))
    intact = page.analysis
    changed = translate_and_capture(page.path, page.version, page.text, page.beam_size, ablated=ablated, mode=mode)
    # Padding (if any) leaves the real positions alone, so the intact pass's ids serve as they are.
    after = teacher_forced(page.path, page.version, FINAL, tuple(intact["src_ids"]), tuple(intact["tgt_ids"]),
                           tuple(intact["output_ids"]), ablated, mode)
    progress = st.column_config.ProgressColumn(format="%.3f", min_value=0.0, max_value=1.0)
    left, right = st.columns(2)
    with left:
        st.markdown("**Intact model**")
        st.code(intact["text"], language=None, wrap_lines=True)
        st.dataframe(pd.DataFrame({"piece": intact["output_tokens"], "probability": intact["probs"],
                                   "with heads off": after["label_probs"]}),
                     hide_index=True, column_config={"probability": progress, "with heads off": progress})
        st.caption("“with heads off”: the probability the ablated model gives the intact output's piece after the "
                   "same prefix.")
    with right:
        st.markdown(f"**{len(chosen)} head(s) switched off** ({mode})")
        st.code(changed["text"], language=None, wrap_lines=True)
        st.dataframe(pd.DataFrame({"piece": changed["output_tokens"], "probability": changed["probs"]}),
                     hide_index=True, column_config={"probability": progress})


def training_view(page: Page) -> None:
    """The loss curve, and one head forming across the training snapshots."""
    card = page.checkpoint.card
    show_figure(page, viz.loss_curve(card.history, theme=page.theme), "loss-curve")
    if page.analysis is None:
        return
    snapshots = page.snapshots()
    settle("snapshot", snapshots, FINAL)
    if len(snapshots) > 1:
        snapshot = st.select_slider("Training snapshot", snapshots, format_func=page.snapshot_label, key="snapshot",
                                    persist_state="session")
    else:
        snapshot = FINAL
        st.info("This checkpoint's card lists no training snapshots.")
    kind, layer, head = head_picker(page)
    analysis = page.analysis
    q_tokens, k_tokens = tokens_of(analysis, kind)
    blocked = blocked_of(analysis, kind)
    try:
        at_snapshot = translate_and_capture(page.path, page.version, page.text, 1, snapshot=snapshot)
        forming = [(page.snapshot_label(name),
                    teacher_forced(page.path, page.version, name, tuple(analysis["src_ids"]),
                                   tuple(analysis["tgt_ids"]))["weights"][kind][layer, head])
                   for name in snapshots]
    except CheckpointError as error:
        st.error("A training snapshot of this checkpoint could not be loaded.")
        st.code(str(error), language=None)
        return
    st.markdown(f"**Output at {page.snapshot_label(snapshot)}** (greedy)")
    st.code(at_snapshot["text"], language=None, wrap_lines=True)
    current = dict(forming)[page.snapshot_label(snapshot)]
    show_figure(page, viz.head_heatmap(current, q_tokens, k_tokens, blocked=blocked,
                                       title=f"{head_title(kind, layer, head)} at {page.snapshot_label(snapshot)}",
                                       theme=page.theme), "training-head", rows=len(q_tokens))
    show_figure(page, viz.snapshots_figure(forming, q_tokens, k_tokens, blocked=blocked, columns=SNAPSHOT_COLUMNS,
                                           title=f"{head_title(kind, layer, head)} across training",
                                           theme=page.theme), "training-snapshots",
                rows=len(q_tokens) * math.ceil(len(forming) / SNAPSHOT_COLUMNS))
    st.caption("Every snapshot reads the final model's output (teacher forcing), so the cells line up.")


VIEW_FUNCTIONS = {
    "attention": attention_view, "model": model_view, "compare": compare_view, "decoding": decoding_view,
    "masks": masks_view, "positional": positional_view, "heads": heads_view, "ablation": ablation_view,
    "training": training_view,
}
NEEDS_NO_INPUT = ("positional", "training")


# ---------------------------------------------------------------------------------------------- sidebar


def use_first_example() -> None:
    """A new checkpoint starts on its own first example: the last one's input rarely suits it."""
    name = st.session_state.checkpoint
    loaded = load(checkpoint_path(name), folder_version(name))
    if loaded.checkpoint is not None and loaded.checkpoint.card.examples:
        st.session_state.text = loaded.checkpoint.card.examples[0]


def use_example() -> None:
    st.session_state.text = st.session_state.example
    st.session_state.example = None


def metric_text(value) -> str:
    """A card metric as the sidebar shows it: counts with thousands separators, scores to 4 significant digits."""
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}" if isinstance(value, float) else str(value)


def choose_checkpoint() -> tuple[str, Checkpoint] | None:
    """The checkpoint picker and its card; None (after saying why) when it cannot be used."""
    names = checkpoint_names()
    loaded = {name: load(checkpoint_path(name), folder_version(name)) for name in names}
    usable = [name for name in names if loaded[name].checkpoint is not None]
    if not usable:
        st.error(f"No loadable checkpoint in {CHECKPOINTS_DIR}. Train one with `python -m transformer.train` "
                 "(see the README), or point ATLAS_CHECKPOINTS at a folder of checkpoints.")
        for name in names:
            st.code(loaded[name].error, language=None)
        return None
    name = settle("checkpoint", names, usable[0])
    st.sidebar.selectbox("Checkpoint", names, key="checkpoint", on_change=use_first_example,
                         format_func=lambda n: n if loaded[n].checkpoint is not None else f"{n} (cannot be loaded)")
    if loaded[name].checkpoint is None:
        st.error(f"The checkpoint `{name}` cannot be loaded; the others still can. Its folder may still be training.")
        st.code(loaded[name].error, language=None)
        return None
    checkpoint = loaded[name].checkpoint
    card = checkpoint.card
    with st.sidebar.expander(f"Model card · {card.task}", expanded=not st.session_state.lecture):
        st.markdown(card.description)
        st.caption(f"{card.parameters or checkpoint.model.num_parameters():,} parameters · "
                   f"{checkpoint.config.num_encoder_layers}+{checkpoint.config.num_decoder_layers} layers · "
                   f"{checkpoint.config.num_heads} heads · d_model {checkpoint.config.d_model} · "
                   f"max_len {checkpoint.config.max_len}")
        if card.metrics:  # a static table: its long metric names wrap in the narrow sidebar instead of hiding values
            rows = [(name.replace("_", " "), metric_text(value)) for name, value in card.metrics.items()]
            st.table(pd.DataFrame(rows, columns=["metric", "value"]), hide_index=True)
        st.caption(f"Data: {card.data}")
    return name, checkpoint


def choose_input(checkpoint: Checkpoint) -> tuple[str, int]:
    """The input text (typed, or one of the card's examples) and the beam size (1 = greedy)."""
    sidebar = st.sidebar
    st.session_state.setdefault("text", checkpoint.card.examples[0] if checkpoint.card.examples else "")
    if len(st.session_state.text) > MAX_INPUT_CHARS:  # Streamlit cuts typed text to max_chars, but not a link's
        st.session_state.text = st.session_state.text[:MAX_INPUT_CHARS]
        st.warning(f"The input is longer than {MAX_INPUT_CHARS} characters: only the first {MAX_INPUT_CHARS} are used.")
    sidebar.text_input("Input", key="text", max_chars=MAX_INPUT_CHARS,
                       help="Press Enter to run. Pieces the model does not know are shown as <unk>.")
    if checkpoint.card.examples:
        sidebar.selectbox("Examples from the model card", checkpoint.card.examples, index=None, key="example",
                          on_change=use_example, placeholder="Pick an example…")
    decoding = settle("decoding", ("greedy", "beam"), "greedy")
    sidebar.segmented_control("Decoding", ("greedy", "beam"), key="decoding", required=True)
    if decoding == "greedy":
        return st.session_state.text, 1
    settle("beam", range(2, 9), 4)
    return st.session_state.text, sidebar.slider("Beam size", 2, 8, key="beam")


def choose_padding(analysis: dict, max_len: int) -> tuple[int, int]:
    """How many pad ids to append to the source and decoder input (room left below max_len)."""
    amounts = []
    with st.sidebar.expander("Padding", expanded=bool(st.session_state.get("pad_src") or
                                                      st.session_state.get("pad_tgt"))):
        st.caption("Append pad tokens, as a batch with a longer sentence would: the padding masks appear and the "
                   "outputs on real positions do not change.")
        for name, ids, label in (("pad_src", analysis["src_ids"], "source"),
                                 ("pad_tgt", analysis["tgt_ids"], "decoder input")):
            room = max_len - len(ids)
            settle(name, range(room + 1), 0)
            if room:
                amounts.append(st.slider(f"Pad tokens after the {label}", 0, room, key=name, persist_state="session"))
            else:
                st.caption(f"The {label} already has max_len tokens: no room for padding.")
                amounts.append(0)
    return amounts[0], amounts[1]


def show_output(page: Page) -> None:
    """The output with its warnings, and (outside lecture mode) every piece with its id or probability."""
    analysis = page.analysis
    for warning in analysis["warnings"]:
        st.warning(warning, icon="⚠️")
    output = st.container()
    if page.lecture:  # the sidebar is folded away: show what went in next to what came out
        shown, output = st.columns(2)
        shown.caption("Input")
        shown.code(page.text, language=None, wrap_lines=True)
    output.caption(f"Output of `{page.name}`" + (f", beam search with {page.beam_size} beams" if page.beam_size > 1
                                                else ", greedy"))
    output.code(analysis["text"] or "(empty: the model ended at once)", language=None, wrap_lines=True)
    if page.lecture:
        return
    with st.expander("Pieces and probabilities"):
        left, right = st.columns(2)
        real = [piece for piece in analysis["src_tokens"] if piece != viz.PAD_TOKEN]
        typed = page.checkpoint.src_tokenizer.encode_pieces(normalize(page.text))[: len(real) - 1] + ["</s>"]
        left.dataframe(pd.DataFrame({"source piece": analysis["src_tokens"], "id": analysis["src_ids"],
                                     "typed": typed + [""] * (len(analysis["src_tokens"]) - len(typed))}),
                       hide_index=True)
        right.dataframe(pd.DataFrame({"output piece": analysis["output_tokens"], "probability": analysis["probs"]}),
                        hide_index=True, column_config={"probability": st.column_config.ProgressColumn(
                            format="%.3f", min_value=0.0, max_value=1.0)})


# ---------------------------------------------------------------------------------------------- the page


# Streamlit sizes its text in rem: a larger root font enlarges every label, so the back row can read them.
LECTURE_CSS = "<style>html { font-size: 22px; }</style>"


def figure_theme() -> viz.Theme:
    """Figures follow Streamlit's light or dark theme when the browser reports it, else a switch."""
    dark = st.context.theme.type == "dark" if st.context.theme.type else st.sidebar.toggle("Dark figures", key="dark")
    return viz.Theme(large=st.session_state.lecture, dark=dark)


def main() -> None:
    restore_state_from_url()
    for name, (_, default) in URL_STATE.items():
        if default is not None:  # the others depend on the checkpoint: settle() sets them
            st.session_state.setdefault(name, default)
    st.set_page_config(page_title="Attention Atlas", page_icon="🔭", layout="wide",
                       initial_sidebar_state="collapsed" if st.session_state.lecture else "auto")
    st.sidebar.title("Attention Atlas")
    # The views and the lecture switch head the page: the content starts right under them, even on a projector.
    top = st.container(horizontal=True, horizontal_alignment="distribute", vertical_alignment="center")
    settle("view", VIEWS, "attention")
    labels = LECTURE_VIEW_LABELS if st.session_state.lecture else VIEWS
    view = top.segmented_control("View", VIEWS, format_func=labels.get, key="view", required=True,
                                 label_visibility="collapsed")
    top.toggle("Lecture mode", key="lecture", help="Bigger text and figures, fewer controls.")
    if st.session_state.lecture:
        st.html(LECTURE_CSS)
    notices = st.container()
    try:
        show_page(view)
    finally:
        for message in st.session_state.url_notices:
            notices.warning(message, icon="🔗")
        st.session_state.url_notices = []
        sync_url()


def show_page(view: str) -> None:
    """Everything under the view picker: the sidebar's choices, the output, and the view itself."""
    chosen = choose_checkpoint()
    if chosen is None:
        return
    name, checkpoint = chosen
    text, beam_size = choose_input(checkpoint)
    path, version = checkpoint_path(name), folder_version(name)
    try:
        plain = translate_and_capture(path, version, text, beam_size)
    except ValueError as error:  # nothing to read (empty, spaces, invisible characters): translate says what to do
        st.info(str(error))
        plain = None
    analysis = plain
    if plain is not None:
        pad_src, pad_tgt = choose_padding(plain, checkpoint.config.max_len)
        if pad_src or pad_tgt:
            analysis = translate_and_capture(path, version, text, beam_size, pad_src, pad_tgt)
    lecture = st.session_state.lecture
    image_format = settle("image", ("png", "svg"), "png")
    if not lecture:
        st.sidebar.segmented_control("Figure download format", ("png", "svg"), key="image", required=True,
                                     help="What the camera button in each figure's toolbar saves.")
    page = Page(name=name, version=version, checkpoint=checkpoint, text=text, beam_size=beam_size, analysis=analysis,
                theme=figure_theme(), lecture=lecture, image_format=image_format)
    if analysis is not None:
        show_output(page)
    if analysis is None and view not in NEEDS_NO_INPUT:
        return
    VIEW_FUNCTIONS[view](page)
    if not lecture:
        st.sidebar.caption("The address bar holds this exact view: copy it to share what you see.")


main()
