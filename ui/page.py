"""Page: what every view is given. The checkpoint's config and card, the input and its analysis, how figures look,
and `run`: any pass a view declares (ui.model_pass), over this page's checkpoint and input."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import viz

from . import passes
from .analysis import Analysis, Attention, Unavailable
from .model_pass import SUMMARY, TEACHER_FORCED, TRANSLATE, Pass, Summary
from .state import FINAL

if TYPE_CHECKING:
    from .target import Forced

TYPED_TARGET = "Typed target, teacher-forced"  # what the decoder reads where a target replaced the model's output


def decoding_text(beam_size: int, decoding: dict) -> str:
    """How the output was decoded, penalties included: beam search takes them from the card, whatever its width."""
    if beam_size == 1:
        return "greedy"
    text = f"beam search with {beam_size} beams, length penalty {decoding.get('length_penalty', 0.6)}"
    coverage = decoding.get("coverage_penalty", 0.0)
    return text + (f", coverage penalty {coverage}" if coverage else "")


@dataclass(frozen=True)
class Page:
    name: str  # the checkpoint folder's name
    path: str
    version: int
    config: object  # the checkpoint's TransformerConfig (read only)
    card: object  # its ModelCard
    snapshot_names: tuple[str, ...]  # the card's training snapshots, earliest first
    text: str
    beam_size: int
    analysis: Analysis | None  # None while the input cannot be translated (empty)
    theme: viz.Theme
    lecture: bool
    image_format: str
    kinds: tuple[str, ...] = passes.ATTENTION_KINDS
    target: Forced | None = None  # the teacher-forced target the analysis reads (ui.target), if any
    own: Analysis | None = None  # with a target: the model's own output, which the target replaced in `analysis`

    def decoding_name(self, beam_size: int | None = None) -> str:
        """How the sidebar's output was decoded ("greedy", or beam search with its width and penalties), or an output
        decoded with `beam_size` beams."""
        return decoding_text(beam_size or self.beam_size, self.card.decoding)

    def output_how(self, beam_size: int | None = None) -> str:
        """How the model made its output: the decoding of a translation, or what a language or masked model does."""
        return {"encoder-only": "its masked-token prediction: each mask token replaced by the most likely token",
                "decoder-only": "its next-token prediction: the input continued, greedy"}.get(
            self.config.stacks, self.decoding_name(beam_size))

    def output_name(self, *, snapshot: str = FINAL, beam_size: int | None = None) -> str:
        """The name of an output of this input, in the words of the headline over every view and of every view that
        shows an output or draws its pieces: which checkpoint, at which training snapshot, decoded how. "Output of
        eng-fra, greedy"; "Output of eng-fra at step 500 (10%), beam search with 4 beams, length penalty 0.6".
        beam_size: decoded otherwise than the sidebar says (the attribution views explain the card's decoding)."""
        at = "" if snapshot == FINAL else f" at {self.snapshot_label(snapshot)}"
        return f"Output of {self.name}{at}, {self.output_how(beam_size)}"

    def decoder_reads(self) -> str:
        """What the decoder reads in every view, teacher-forced, named as the headline names it: the model's own
        output (output_name), or the target typed instead."""
        return TYPED_TARGET if self.target is not None else self.output_name()

    def layers(self, kind: str) -> int:
        return self.config.layers_of(kind)

    def site(self, kind: str, layer: int) -> str:
        """The attention site of `kind` in `layer`, as passes and links name it: 'decoder.layers.1.cross_attn'."""
        return passes.attention_site(kind, layer)

    def heads(self) -> range:
        return range(self.config.num_heads)

    def snapshots(self) -> list[str]:
        return [*self.snapshot_names, FINAL]

    def snapshot_label(self, snapshot: str) -> str:
        if snapshot == FINAL:
            last = [entry["step"] for entry in self.card.history if "step" in entry]
            return f"final (step {last[-1]})" if last else "final"
        info = next(entry for entry in self.card.snapshots if entry["name"] == snapshot)
        return f"step {info.get('step', '?')} ({info.get('fraction', 0):.0%})"

    # ------------------------------------------------------------------------------------------ passes

    def run(self, declared: Pass, **args):
        """The pass `declared` (ui.model_pass) over this page's checkpoint, with `args` and what else of this page's
        input its function asks for (PAGE_INPUT), through its one cache."""
        for name in passes.parameters(declared):
            if name in PAGE_INPUT and name not in args:
                args[name] = PAGE_INPUT[name](self)
        return passes.run(declared, self.path, self.version, **args)

    @staticmethod
    def library(reference: str):
        """The library's limit or registry named "module:name" (transformer.analysis.attribution:METHODS): a view
        reads it without importing the library."""
        return passes.library(reference)

    @staticmethod
    def folder(checkpoint: str) -> tuple[str, int]:
        """(path, version) of another checkpoint folder (one of comparable_checkpoints()), as passes take it."""
        return passes.checkpoint_path(checkpoint), passes.version_of(checkpoint)

    def forced(self, *, snapshot: str = FINAL, checkpoint: str | None = None, labels: tuple = (),
               ablated: tuple = (), mode: str = "zero") -> Attention:
        """A teacher-forced pass over exactly this analysis's ids, by a snapshot or another checkpoint (one of
        comparable_checkpoints()); label_probs holds each label's probability at its position."""
        analysis = self.analysis
        if snapshot == FINAL and checkpoint is None and not labels and not ablated:
            return analysis.attention  # the sidebar's own captured pass over exactly these ids
        path, version = (self.path, self.version) if checkpoint is None else self.folder(checkpoint)
        return passes.run(TEACHER_FORCED, path, version, snapshot=snapshot, src_ids=analysis.src_ids,
                          tgt_ids=analysis.tgt_ids, labels=tuple(labels), ablated=ablated, mode=mode)

    def source_ids(self) -> tuple[int, ...]:
        return tuple(i for i in self.analysis.src_ids if i != self.analysis.pad_id)

    def comparable_checkpoints(self) -> list[str]:
        """The other loadable checkpoints with this one's vocabularies: they read this input's ids as the same
        pieces, so their attention can be taken on exactly this sequence. Reads their tokenizers, loads none."""
        mine = passes.vocabulary(self.path, self.version)
        names = []
        for name, error in passes.folder_errors().items():
            if name == self.name or error:
                continue
            try:
                if passes.vocabulary(*self.folder(name)) == mine:
                    names.append(name)
            except passes.CheckpointError:  # changed since it was checked: offered again once it passes
                continue
        return names

    def config_of(self, checkpoint: str):
        """Another loadable checkpoint's config."""
        loaded = passes.loaded(checkpoint)
        if loaded.checkpoint is None:
            raise Unavailable(loaded.error)
        return loaded.checkpoint.config

    def default_translation(self) -> Analysis:
        """This input decoded as its card says (what the attribution views explain): the sidebar's own pass unless
        someone chose other decoding there."""
        return self.run(TRANSLATE, beam_size=self.card.decoding.get("beam_size", 1))

    def summary(self, count: int, progress: Callable[[float], None] | None = None) -> Summary:
        """This checkpoint's corpus summary of `count` inputs (transformer.analysis.corpus_summary), from the disk
        cache or computed; `progress(fraction)` after each chunk, where this session computes it."""
        token = passes.corpus_progress.set(progress)
        try:
            return self.run(SUMMARY, count=count)
        finally:
            passes.corpus_progress.reset(token)


# What of the page's input a pass's function gets where its parameters name it and the view gives none.
PAGE_INPUT: dict[str, Callable[[Page], object]] = {
    "text": lambda page: page.text,
    "beam_size": lambda page: page.beam_size,
    "src_ids": lambda page: page.analysis.src_ids,
    "tgt_ids": lambda page: page.analysis.tgt_ids,
}
