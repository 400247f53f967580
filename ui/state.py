"""The view state lives in the URL: a lecturer can prepare links, and a student can share exactly what they see.

URL_STATE is the only place a default is written. A link's values are parsed once per session (restore), checked
against the checkpoint when their widget is drawn (settle, or draw: settle and draw in one call) and written back
after every run (sync). The pure parts (parse_query, settled, url_params) take plain values, so they are unit-tested
without Streamlit.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping

import streamlit as st
from streamlit.runtime.state import query_params as streamlit_query_params

from .passes import FINAL  # the trained model, listed after the card's snapshots

MAX_INPUT_CHARS = 1000  # keeps links short; far beyond every model's max_len anyway
MAX_LINK_ITEMS = 64  # of a link's list (heads to switch off, dimensions to plot): more than any model shown here has
DEFAULT_BEAM_SIZE = 4  # when beam search is picked and neither the link nor the card says how wide
DEFAULT_CHECKPOINT = "eng-fra"  # the translator the README opens with; where it is missing, the first loadable folder


def default_checkpoint(usable: list[str]) -> str:
    return DEFAULT_CHECKPOINT if DEFAULT_CHECKPOINT in usable else usable[0]


def flag(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def unique(values) -> list:
    """The first MAX_LINK_ITEMS distinct values, in order: a link repeating one 20,000 times costs nothing."""
    return list(itertools.islice(dict.fromkeys(values), MAX_LINK_ITEMS))


def items(text: str) -> list[str]:
    return unique(item for item in text.split(",") if item)


def typed_text(text: str) -> str:
    """A second input from a link (the corrupted sentence, a minimal pair's input B), cut as its text box cuts what
    is typed."""
    return text[:MAX_INPUT_CHARS]


def numbers(text: str) -> list[int]:
    return unique(int(item) for item in text.split(",") if item)


def finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(text)
    return value


class Between:
    """The numbers from low to high, as settle() checks a slider's value (it only asks `in`)."""

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    def __contains__(self, value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and self.low <= value <= self.high


# Query parameter -> (parser of its text, default). Every one is also the session-state key of its widget.
# None as default: the default depends on the checkpoint (its first example, its layers, ...), so the view gives it
# to settle() as the fallback.
URL_STATE: dict[str, tuple[Callable[[str], object], object]] = {
    "checkpoint": (str, None),
    "text": (str, None),
    "view": (str, "attention"),
    "kind": (str, "decoder.cross_attn"),
    "layer": (int, 0),
    "head": (int, 0),
    "average": (flag, False),
    "masks": (flag, True),
    "model_as": (str, None),  # the Model view's heads as "heatmaps" or "lines"; None: lines in lecture mode
    "stages": (flag, False),
    "values": (flag, False),
    "own_scale": (flag, False),
    "decoding": (str, None),
    "beam": (int, None),
    "pad_src": (int, 0),
    "pad_tgt": (int, 0),
    "lecture": (flag, False),
    "dark": (flag, False),
    "image": (str, "png"),
    "step": (int, 0),
    "step_mode": (str, "greedy"),
    "temperature": (finite, 1.0),
    "top_k": (int, 0),
    "top_p": (finite, 1.0),
    "seed": (int, 0),
    "tree_beam": (int, None),
    "node": (int, None),
    "panel": (int, None),  # lecture mode: the one panel shown (Stages, Compare, Masks, Patching); None: the view's own
    "compare": (str, "heads"),
    "layer_b": (int, None),
    "head_b": (int, None),
    "checkpoint_b": (str, None),
    "text_b": (typed_text, None),  # compare=inputs: the second input (None: the input itself, to edit)
    "snapshot_a": (str, None),
    "snapshot_b": (str, FINAL),
    "snapshot": (str, FINAL),
    "ablate": (items, []),
    "ablation_mode": (str, "zero"),
    "pe_side": (str, "src"),
    "pe_plot": (str, "heatmap"),
    "pe_positions": (int, None),
    "pe_dims": (numbers, [0, 1, 2, 3]),
    "stat_x": (str, "entropy"),
    "stat_y": (str, "mean_distance"),
    "words": (flag, False),
    "lines_heads": (numbers, [0]),
    "attr_token": (int, 0),
    "corrupt": (typed_text, None),
    "patch_position": (int, 0),
    "corpus_stat": (str, "previous_share"),
    "summary_count": (int, 200),  # Across inputs: the inputs read
    "corpus_part": (str, "map"),  # Across inputs: the map of heads, queries and keys, matched heads or neurons
    "projection": (str, "pca"),
    "qk_colour": (str, "position"),
    "match_snapshot": (str, None),
    "query": (int, 0),
    "inside_step": (int, 0),
    "neuron": (int, None),
    "target": (str, ""),
    "foil": (str, ""),
    "deck": (str, None),  # a lecture's deck (ui.deck): one of the decks folder's files, by name
    "slide": (int, 1),  # its slide, counted from 1
}
ALWAYS_IN_URL = ("checkpoint", "text", "view", "kind", "layer", "head")  # the core of a shared link
# What a checkpoint switch keeps: the view and how it is looked at; every other setting names a part of the model or
# of its input (a layer, a head, a neuron, a corrupted sentence, a snapshot) and goes back to its default.
KEPT_ACROSS_CHECKPOINTS = frozenset((
    "checkpoint", "text", "view", "kind", "average", "masks", "model_as", "stages", "values", "own_scale", "decoding",
    "beam", "lecture", "dark", "image", "step_mode", "temperature", "top_k", "top_p", "seed", "compare", "pe_side",
    "pe_plot", "stat_x", "stat_y", "words", "ablation_mode", "corpus_stat", "summary_count", "corpus_part",
    "projection", "qk_colour", "deck", "slide"))
SHOWN_CHARS = 40  # of a refused link value in its notice


# ---------------------------------------------------------------------------------------------- pure parts


def parse_query(query: Mapping[str, str]) -> tuple[dict[str, object], list[str]]:
    """The known parameters of a link, parsed, and a notice for each one that could not be (unknown ones counted)."""
    values, notices = {}, []
    unknown = 0
    for name, text in query.items():
        if name not in URL_STATE:
            unknown += 1
            continue
        try:
            values[name] = URL_STATE[name][0](text)
        except ValueError:
            notices.append(f"The link's `{name}` could not be read, so the default is used.")
    if unknown:
        notices.append(f"{unknown} unknown link parameter(s) were ignored.")
    return values, notices


def shown(value: object) -> str:
    """A link's value as a notice shows it: short, on one line, and inside a code span (never read as Markdown)."""
    text = " ".join(str(value).replace("`", "'").split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def settled(name: str, value: object, allowed: Collection, fallback: object, from_link: bool) -> tuple[object, str]:
    """`value` if it is one of `allowed`, else `fallback`; and the notice to give when a link's value was refused."""
    if value in allowed:
        return value, ""
    if not from_link:
        return fallback, ""
    return fallback, (f"The link's `{name}` value `{shown(value)}` is not available here, so `{shown(fallback)}` is "
                      "used instead.")


def url_params(state: Mapping[str, object]) -> dict[str, str]:
    """The query parameters of a view state: the core always, options only where they differ from the default."""
    params = {}
    for name, (_, default) in URL_STATE.items():
        value = state.get(name)
        if value is None or (value == default and name not in ALWAYS_IN_URL):
            continue
        if isinstance(value, bool):
            params[name] = "1" if value else "0"
        elif isinstance(value, list):
            params[name] = ",".join(str(item) for item in value)
        else:
            params[name] = str(value)
    return params


# ---------------------------------------------------------------------------------------------- session state


def notice(message: str) -> None:
    """Tell the user, at the top of the page, that part of their link (or slide) was not used. The notice stays
    through the page's own reruns (the browser reporting its size) until the user changes the view (restore)."""
    if message not in st.session_state.url_notices:
        st.session_state.url_notices.append(message)


def notice_next_run(message: str) -> None:
    """notice(), from a widget's callback: shown by the run the callback starts (restore() would drop a notice given
    before it, since the view has changed)."""
    st.session_state.setdefault("notices_next_run", []).append(message)


def reset_model_settings() -> list[str]:
    """Every setting a checkpoint switch does not keep (KEPT_ACROSS_CHECKPOINTS) back to its default; the names of
    those that had another value."""
    changed = []
    for name, (_, default) in URL_STATE.items():
        if name in KEPT_ACROSS_CHECKPOINTS or name not in st.session_state:
            continue
        if st.session_state[name] != default:
            changed.append(name)
        if default is None:
            del st.session_state[name]
        else:
            st.session_state[name] = default
    return changed


def set_by_callback(values: Mapping[str, object]) -> None:
    """Set view state from a widget's callback (None removes a value), as moving to a slide does, and hold it against
    the browser until the browser has it (hold_against_stale). A callback that comes before the browser has drawn an
    earlier one's values (keys pressed quickly) holds its values against those too: the browser may still send any of
    them back."""
    earlier = st.session_state.get("held") or {}
    held = {name: entry for name, entry in earlier.items() if name not in values}
    for name, value in values.items():
        before = st.session_state.get(name)
        if value is None:
            st.session_state.pop(name, None)
        else:
            st.session_state[name] = value
        superseded = [before]
        if name in earlier:  # the value an earlier callback set, and those it replaced
            superseded += [earlier[name][0], *earlier[name][1]]
        superseded = [old for index, old in enumerate(superseded) if old != value and old not in superseded[:index]]
        if superseded:
            held[name] = (value, superseded)
    st.session_state.held = held
    st.session_state.held_from = st.session_state.get("runs", 0) + 1  # the run this callback starts


def stale(name: str) -> bool:
    """Whether the browser has just sent back, for `name`, a value a callback replaced (set_by_callback): it had not
    yet drawn the new one, and the change is not the user's."""
    held = st.session_state.get("held") or {}
    return name in held and st.session_state.get(name) in held[name][1]


def hold_against_stale() -> None:
    """At the start of every run, before any widget is drawn: a value set by a callback wins over the one it
    replaced, if the browser sends that back. A rerun the browser asks for while the page still shows the previous
    state (a key pressed again, the screen probe reporting) carries the widgets' previous values, which would mix
    two states (one slide's title over another's figure, the previous checkpoint under the new input). A value is
    held until the browser sends the new one or another (the user's)."""
    runs = st.session_state.runs = st.session_state.get("runs", 0) + 1
    held = st.session_state.get("held") or {}
    if runs <= st.session_state.get("held_from", 0):
        return
    for name, (value, _) in list(held.items()):
        if stale(name):
            if value is None:
                st.session_state.pop(name, None)
            else:
                st.session_state[name] = value
        else:
            del held[name]


def restore() -> None:
    """On a session's first run, copy the link's values into session state, and every default that does not
    depend on the checkpoint. Whether a value fits the checkpoint is checked by settle() when its widget is drawn.
    On a later run, the notices are dropped once the view differs from the one they were shown with: the user
    acted, and has seen them."""
    if "url_pending" not in st.session_state:
        values, notices = parse_query(st.query_params.to_dict())
        st.session_state.update(values)
        st.session_state.url_pending = set(values)
        st.session_state.url_notices = notices
    elif url_params(st.session_state) != st.session_state.get("url_synced"):
        st.session_state.url_notices = []
    for message in st.session_state.pop("notices_next_run", []):
        notice(message)
    notice_dropped_link()
    for name, (_, default) in URL_STATE.items():
        if default is not None:
            st.session_state.setdefault(name, default)


def current_attention_names(attention_name: Callable[[str], str]) -> None:
    """Give the view's attention kind and switched-off heads (`ablate`: site:head) their own names, through
    `attention_name` (ui.passes'): a link or slide written with any spelling of them ('decoder.cross',
    'decoder.0.cross:1', 'decoder.cross_attn.0.1') shows the view its own names show. Called on every run once the
    link's and the slide's values are in, before any widget is drawn."""
    st.session_state.kind = attention_name(st.session_state.kind)
    st.session_state.ablate = [attention_name(item) for item in st.session_state.ablate]


def settle(name: str, allowed: Collection, fallback: object = None) -> object:
    """st.session_state[name] if it is one of `allowed`, else the fallback (URL_STATE's default unless given), with
    a notice if the link set it. Called before the widget `name` is drawn, so a value that no longer fits (a layer
    the newly picked checkpoint lacks) never reaches the widget."""
    if fallback is None:
        fallback = URL_STATE[name][1]
    value, message = settled(name, st.session_state.get(name, fallback), allowed, fallback,
                             name in st.session_state.url_pending)
    if message:
        notice(message)
    st.session_state[name] = value
    st.session_state.url_pending.discard(name)
    return value


def settle_all(name: str, allowed: Collection) -> list:
    """settle() for a multi-choice: keeps the allowed values of the list, drops the others."""
    values = st.session_state.get(name, URL_STATE[name][1])
    kept = [value for value in values if value in allowed]
    if len(kept) < len(values) and name in st.session_state.url_pending:
        notice(f"{len(values) - len(kept)} of the link's `{name}` do not fit this checkpoint and were left out.")
    st.session_state[name] = kept
    st.session_state.url_pending.discard(name)
    return kept


def draw(widget: Callable, label: str, name: str, options, fallback: object = None, **kwargs):
    """Settle `name` against `options`, then draw `widget(label, options, key=name, ...)` and return its value."""
    settle(name, options, fallback)
    return widget(label, options, key=name, **kwargs)


def sync() -> None:
    st.session_state.url_synced = url_params(st.session_state)
    st.query_params.from_dict(st.session_state.url_synced)
    probe_dropped_link()


# A link Streamlit does not read: it drops a query string longer than this, or of more parts, whole and silently (the
# page opens as a link without settings does). The browser still has it: a probe in the page measures the address the
# page was opened with (its navigation entry, which the address bar's later updates leave as it was) and reports one
# over either limit once; the next run shows a notice.
QUERY_LIMITS = {"chars": getattr(streamlit_query_params, "CLIENT_STATE_QUERY_STRING_MAX_LENGTH", 512 * 1024),
                "fields": getattr(streamlit_query_params, "CLIENT_STATE_QUERY_STRING_MAX_FIELDS", 1000)}
LINK_PROBE_JS = """
export default function(component) {
  const { setStateValue, data } = component;
  if (data.reported) return;
  const opened = performance.getEntriesByType('navigation')[0];
  const query = new URL(opened ? opened.name : window.location.href).search.slice(1);
  const fields = query ? query.split('&').length : 0;
  if (query.length > data.chars || fields > data.fields) setStateValue('dropped', {chars: query.length, fields});
}
"""
_link_probe = st.components.v2.component("atlas_link_probe", js=LINK_PROBE_JS)
LINK_PROBE_CSS = "<style>.st-key-link-probe { display: none; }</style>"  # measures, takes no room


def probe_dropped_link() -> None:
    """Mount the probe that reports a link Streamlit dropped (QUERY_LIMITS); it reports once a session."""
    st.html(LINK_PROBE_CSS)
    _link_probe(key="link-probe", data={**QUERY_LIMITS, "reported": bool(dropped_link())},
                on_dropped_change=lambda: None, height=0)


def dropped_link() -> dict | None:
    """What the probe reported of a link Streamlit dropped: its length in characters and its parts; None if none."""
    return (st.session_state.get("link-probe") or {}).get("dropped")


def notice_dropped_link() -> None:
    """The notice, once a session, that the page was opened with a link too long to read."""
    dropped = dropped_link()
    if dropped and not st.session_state.get("dropped_link_noticed"):
        st.session_state.dropped_link_noticed = True
        chars, fields = int(dropped.get("chars", 0)), int(dropped.get("fields", 0))
        notice(f"This page was opened with a link of {chars:,} characters in {fields:,} parts, more than the "
               f"{QUERY_LIMITS['chars']:,} characters or {QUERY_LIMITS['fields']:,} parts this server reads: none "
               "of it was used, so what shows is the default page, not the one shared.")
