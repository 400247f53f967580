"""The sidebar's choices (checkpoint and its card, input, decoding, padding, figure format) and the output above
every view. Builds the Page the views are given."""
from __future__ import annotations

import pyarrow as pa
import streamlit as st

import viz

from . import passes, target
from .analysis import Analysis, first_difference
from .literal_text import plain, visible_name
from .model_pass import TRANSLATE
from .page import TYPED_TARGET, Page
from .shared import once
from .state import (
    DEFAULT_BEAM_SIZE,
    MAX_INPUT_CHARS,
    default_checkpoint,
    draw,
    notice_next_run,
    reset_model_settings,
    settle,
    stale,
)
from .warnings import AROUND
from .widgets import CAMERA, EMPTY_OUTPUT, PROBABILITY, TYPED_TARGET_HELP, folded, model_output, pieces_shown


def use_card_defaults() -> None:
    """A new checkpoint starts on its own decoding, with the settings that belonged to the previous model (its layers,
    heads, neurons, a corrupted sentence, ...) back to their defaults, and a line saying which. Its input: the
    sentence last typed for it (switching away and back brings it back), else the sentence typed now where the new
    checkpoint can read it (the same task, or no piece it does not know), else its own first example."""
    if stale("checkpoint"):  # the browser sent back the checkpoint a slide replaced: not the user's switch
        return
    checkpoint = passes.loaded(st.session_state.checkpoint).checkpoint
    shown = st.session_state.get("shown_checkpoint")
    before = passes.loaded(shown).checkpoint if shown else None
    text = st.session_state.get("text") or ""
    typed = st.session_state.setdefault("typed_texts", {})
    if before is not None and text not in before.card.examples:
        typed[shown] = text
    if checkpoint is not None:
        if st.session_state.checkpoint in typed:
            st.session_state.text = typed[st.session_state.checkpoint]
        elif not (shown in typed and typed[shown] == text and reads(checkpoint, before, text)):
            st.session_state.text = checkpoint.card.examples[0] if checkpoint.card.examples else ""
    for name in ("decoding", "beam"):
        st.session_state.pop(name, None)
    dropped = reset_model_settings()
    if dropped:
        notice_next_run(f"Switched to {visible_name(st.session_state.checkpoint)}: {', '.join(dropped)} belonged to "
                        "the previous model and are back to their defaults.")


def reads(checkpoint, before, text: str) -> bool:
    """Whether `checkpoint` can take `text`, typed for `before`: the same task, or every piece known to it."""
    if before is not None and checkpoint.card.task == before.card.task:
        return True
    tokenizer = checkpoint.src_tokenizer
    return bool(text.strip()) and tokenizer.unk_id is not None and tokenizer.unk_id not in tokenizer.encode(text)


def use_example() -> None:
    st.session_state.text = st.session_state.example
    st.session_state.example = None


def metric_text(value) -> str:
    """A card metric as the sidebar shows it: counts with thousands separators, scores to 4 significant digits."""
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}" if isinstance(value, float) else str(value)


def list_broken(errors: dict[str, str]) -> None:
    """Each folder that cannot be loaded, with why, as plain text (folder names and reasons are not Markdown)."""
    with st.sidebar.expander(f"{len(errors)} folder(s) cannot be loaded", expanded=not st.session_state.lecture):
        for name, error in errors.items():
            st.text(f"{name}: cannot be loaded: {error}")


def choose_checkpoint() -> str | None:
    """The checkpoint picker (loadable folders only) and the folders that cannot be loaded; None (after saying why)
    when no checkpoint can be used. Only the chosen checkpoint is loaded."""
    errors = passes.folder_errors()
    usable = [name for name, error in errors.items() if not error]
    if not usable:
        st.error(f"No loadable checkpoint in {plain(passes.checkpoints_dir())}. Train one with "
                 "`python -m transformer.train` (see the README), or point ATLAS_CHECKPOINTS at a folder of "
                 "checkpoints.")
    else:
        draw(st.sidebar.selectbox, "Checkpoint", "checkpoint", usable, default_checkpoint(usable),
             on_change=use_card_defaults, format_func=visible_name)
    broken = {name: error for name, error in errors.items() if error}
    if broken:
        list_broken(broken)
    if not usable:
        return None
    name = st.session_state.shown_checkpoint = st.session_state.checkpoint
    loaded = passes.loaded(name)
    if loaded.checkpoint is None:  # it passed the checks but its tensors did not (NaN, wrong shapes, ...)
        st.error("This checkpoint cannot be loaded; the others still can. Its folder may still be training.")
        st.text(f"{name}: cannot be loaded: {loaded.error}")
        return None
    return name


def show_card(checkpoint) -> None:
    """The checkpoint's card, folded under the input and the decoding: the input box stands on the first screen of
    every page and after every checkpoint switch, the card's table one click away."""
    card, config = checkpoint.card, checkpoint.config
    pieces, around = checkpoint.input_room()
    with st.sidebar.expander(f"Model card · {plain(card.task)}", expanded=False):
        st.text(card.description)
        st.caption(f"{card.parameters or checkpoint.model.num_parameters():,} parameters · "
                   + (f"{config.num_encoder_layers}+{config.num_decoder_layers} layers · " if config.cross_attention
                      else f"{config.stacks}, {config.num_encoder_layers or config.num_decoder_layers} layers · ")
                   + f"{config.num_heads} heads · "
                   f"d_model {config.d_model} · max_len {config.max_len} tokens (input: at most {pieces} pieces "
                   f"{AROUND[around]})")
        if card.metrics:  # a static table: its long metric names wrap in the narrow sidebar instead of hiding values
            metrics = tuple(plain(metric.replace("_", " ")) for metric in card.metrics)  # st.table's cells are Markdown
            values = tuple(plain(metric_text(value)) for value in card.metrics.values())
            st.table(once(arrow_table, ("metric", metrics), ("value", values)), hide_index=True)
        st.text(f"Data: {card.data}")


def choose_input(examples: list[str], card_beam_size: int, headline) -> tuple[str, int]:
    """The input text (typed, or one of the card's examples) and the beam size (1 = greedy; unless a link says
    otherwise, as the card's `decoding` says). Lecture mode has the input box in `headline`, beside the view picker:
    a student's sentence is typed in place, with the sidebar folded away."""
    sidebar = st.sidebar
    lecture = st.session_state.lecture
    st.session_state.setdefault("text", examples[0] if examples else "")
    if len(st.session_state.text) > MAX_INPUT_CHARS:  # Streamlit cuts typed text to max_chars, but not a link's
        st.session_state.text = st.session_state.text[:MAX_INPUT_CHARS]
        st.warning(f"The input is longer than {MAX_INPUT_CHARS} characters: only the first {MAX_INPUT_CHARS} are used.")
    # persist_state: a run stopped by a rerun before its messages left never showed the browser this widget; the
    # next run then sends it with the sentence, not its empty default (which the browser would send back).
    (headline if lecture else sidebar).text_input(
        "Input", key="text", max_chars=MAX_INPUT_CHARS, persist_state="session",
        label_visibility="collapsed" if lecture else "visible",
        help="Press Enter to run. Pieces the model does not know are shown as <unk>.")
    if examples:
        sidebar.selectbox("Examples from the model card", examples, index=None, key="example",
                          on_change=use_example, placeholder="Pick an example…")
    decoding = draw(sidebar.segmented_control, "Decoding", "decoding", ("greedy", "beam"),
                    "beam" if card_beam_size > 1 else "greedy", required=True)
    if decoding == "greedy":
        return st.session_state.text, 1
    most = passes.library("transformer.inference.decoding:MAX_BEAM_SIZE")
    settle("beam", range(2, most + 1), max(card_beam_size, DEFAULT_BEAM_SIZE))
    return st.session_state.text, sidebar.slider("Beam size", 2, most, key="beam")


def choose_padding(analysis: Analysis, max_len: int) -> tuple[int, int]:
    """How many pad ids to append to the source and decoder input (room left below max_len)."""
    amounts = []
    with st.sidebar.expander("Padding", expanded=bool(st.session_state.get("pad_src") or
                                                      st.session_state.get("pad_tgt"))):
        st.caption("Append pad tokens, as a batch with a longer sentence would: the padding masks appear and the "
                   "outputs on real positions do not change.")
        for name, side, label in (("pad_src", "src", "source"), ("pad_tgt", "tgt", "decoder input")):
            room = max_len - len(analysis.ids(side))
            settle(name, range(room + 1))
            if room:
                amounts.append(st.slider(f"Pad tokens after the {label}", 0, room, key=name, persist_state="session"))
            else:
                st.caption(f"The {label} already has max_len tokens: no room for padding.")
                amounts.append(0)
    return amounts[0], amounts[1]


def show_output(page: Page, headline) -> None:
    """The output with its warnings, and (outside lecture mode) every piece with its id or probability. In lecture
    mode the output is plain text in `headline` (beside the view picker), under the input box."""
    analysis = page.analysis
    if page.lecture and analysis.warnings:  # one line, the rest on demand: a projector has no height to spare
        with st.expander(folded(analysis.warnings, "warnings"), icon="⚠️", key="warnings"):
            st.warning(" ".join(analysis.warnings))
    else:
        for warning in analysis.warnings:
            st.warning(warning, icon="⚠️")
    named = page.output_name()  # in the words of every view that shows it
    if page.lecture:  # the sidebar is folded away: under the input box (choose_input), the output as plain text
        # The output first (its text is cut to two lines, the rest on hover), its name under it in small type.
        if page.own is None:
            headline.text(f"→  {analysis.text or EMPTY_OUTPUT}")
            headline.caption(plain(named))
        else:  # never the typed target after an arrow that reads as the model's answer
            headline.text(f"Typed target (teacher-forced): {analysis.text}")
            headline.caption(f"{plain(named)}: {plain(page.own.text or EMPTY_OUTPUT)}")
        return
    output = st.container()
    if page.own is not None:
        output.caption(f"{TYPED_TARGET}: every view shows the attention while the decoder reads it, not the model's "
                       "own output")
        with output:
            model_output(analysis.text, TYPED_TARGET_HELP)
        output.caption(f"{plain(named)}: {difference(page.own, analysis)}")
        with output:
            model_output(page.own.text)
    else:
        output.caption(plain(named))
        with output:
            model_output(analysis.text)
    # Drawn only while open: a first page without tables loads no table scripts (1.2 MB) before its first figure.
    pieces = st.expander("Pieces and probabilities", key="pieces", on_change="rerun")
    if not pieces.open:
        return
    with pieces:
        left, right = st.columns(2)
        pads = len(analysis.src_tokens) - len(analysis.src_typed)
        # Arrow tables built once for every session (ui.shared): converting a frame is most of a table's cost.
        left.dataframe(once(arrow_table, ("source piece", pieces_shown(analysis.src_tokens)), ("id", analysis.src_ids),
                            ("typed", analysis.src_typed + ("",) * pads)), hide_index=True)
        right.dataframe(once(arrow_table, ("output piece", pieces_shown(analysis.output_tokens)),
                             ("probability", analysis.probs)),
                        hide_index=True, column_config={"probability": PROBABILITY})


def difference(own: Analysis, forced: Analysis) -> str:
    """Where the model's own output first parts from the typed target, piece by piece."""
    mine, typed = own.output_tokens, forced.output_tokens
    at = first_difference(mine, typed)
    if at is None:
        return "the same pieces as the typed target"

    def piece(tokens: tuple[str, ...]) -> str:
        return f"“{plain(viz.piece_text(tokens[at]))}”" if at < len(tokens) else "its end"

    return f"it parts from the typed target at piece {at}, {piece(mine)} where the target has {piece(typed)}"


def arrow_table(*columns: tuple[str, tuple]) -> pa.Table:
    return pa.table({name: list(values) for name, values in columns})


def figure_theme(space: tuple[int, int | None]) -> viz.Theme:
    """Dark figures on a dark page; elsewhere the switch decides, which a link's dark=1 turns on: a lecturer's
    prepared link shows dark figures whatever theme the room's browser reports. space: the (width, height) the
    figures are laid out for (ui.screen)."""
    width, height = space
    dark = st.context.theme.type == "dark" or st.sidebar.toggle("Dark figures", key="dark", persist_state="session")
    return viz.Theme(large=st.session_state.lecture, dark=dark, width=width, height=height)


def build_page(headline, space: tuple[int, int | None]) -> Page | None:
    """Everything the sidebar decides, as the Page the views get; None when no checkpoint can be used. `headline`:
    where lecture mode writes the input and its output (a container beside the view picker); space: the (width,
    height) figures are laid out for (ui.screen)."""
    name = choose_checkpoint()
    if name is None:
        return None
    checkpoint = passes.loaded(name).checkpoint
    text, beam_size = choose_input(checkpoint.card.examples, checkpoint.card.decoding.get("beam_size", 1), headline)
    show_card(checkpoint)
    path, version = passes.checkpoint_path(name), passes.version_of(name)
    try:
        analysis = passes.run(TRANSLATE, path, version, text=text, beam_size=beam_size)
    except ValueError as error:  # nothing to read (empty, spaces, invisible characters): translate says what to do
        st.info(str(error))
        analysis = None
    forced = own = None
    if analysis is not None:
        own = analysis
        analysis, forced = target.choose(path, version, analysis)
        analysis = passes.padded(path, version, analysis, *choose_padding(analysis, checkpoint.pass_len))
    image_format = settle("image", tuple(CAMERA))
    st.sidebar.segmented_control("Figure download format", tuple(CAMERA), key="image", required=True,
                                 help="What the camera button in each figure's toolbar saves; html: a button "
                                      "under each figure saves it as one interactive HTML file that works "
                                      "offline (hover and zoom as here).")
    page = Page(name=name, path=path, version=version, config=checkpoint.config, card=checkpoint.card,
                snapshot_names=tuple(checkpoint.snapshot_names()), text=text, beam_size=beam_size, analysis=analysis,
                theme=figure_theme(space), lecture=st.session_state.lecture, image_format=image_format,
                target=forced, own=own if forced is not None else None, kinds=checkpoint.config.kinds)
    if analysis is not None:
        show_output(page, headline)
        target.show(page)
    return page
