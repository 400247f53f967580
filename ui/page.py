"""Page: what every view is given. The checkpoint's config and card, the input and its analysis, how figures look,
and the passes a view may ask for beyond the analysis, each over this page's checkpoint and input."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

import viz

from . import passes
from .analysis import Analysis, Attention, BeamTreeView, DecodingSteps, Unavailable, first_difference
from .state import FINAL

# What the Across inputs view promises and bounds, as the library measured and set them (a view imports no transformer
# module: it reads them here).
MATCH_SENTENCES = passes.corpus_summary.MATCH_SENTENCES
NEURON_ORDERS = passes.corpus_summary.NEURON_ORDERS
SECONDS_FIXED = passes.corpus_summary.SECONDS_FIXED
SECONDS_PER_INPUT = passes.corpus_summary.SECONDS_PER_INPUT
TSNE_POINTS = passes.corpus_summary.TSNE_POINTS

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
    target: passes.Forced | None = None  # the teacher-forced target the analysis reads (ui.target), if any
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

    def translation(self, *, beam_size: int | None = None, snapshot: str = FINAL, ablated: tuple = (),
                    mode: str = "zero") -> Analysis:
        """This input translated again: by a training snapshot, or with heads switched off (Unavailable if the
        snapshot does not load)."""
        return passes.translate(self.path, self.version, self.text, beam_size or self.beam_size, snapshot, ablated,
                                mode)

    def forced(self, *, snapshot: str = FINAL, checkpoint: str | None = None, labels: tuple = (),
               ablated: tuple = (), mode: str = "zero") -> Attention:
        """A teacher-forced pass over exactly this analysis's ids, by a snapshot or another checkpoint (one of
        comparable_checkpoints()); label_probs holds each label's probability at its position."""
        analysis = self.analysis
        if snapshot == FINAL and checkpoint is None and not labels and not ablated:
            return analysis.attention  # the sidebar's own captured pass over exactly these ids
        path, version = ((self.path, self.version) if checkpoint is None else
                         (passes.checkpoint_path(checkpoint), passes.version_of(checkpoint)))
        return passes.teacher_forced(path, version, snapshot, analysis.src_ids, analysis.tgt_ids, tuple(labels),
                                     ablated, mode)

    def input_translation(self, text: str) -> Analysis:
        """`text` translated as the sidebar's input is (its decoding, no target, no padding): a minimal pair's side."""
        return passes.translate(self.path, self.version, text, self.beam_size)

    def probabilities_after(self, src_ids: tuple, tgt_ids: tuple, labels: tuple) -> tuple[float, ...]:
        """The probability of each of `labels` at its position, with `tgt_ids` teacher-forced after `src_ids`."""
        return passes.teacher_forced(self.path, self.version, FINAL, src_ids, tgt_ids, tuple(labels)).label_probs

    def source_ids(self) -> tuple[int, ...]:
        return tuple(i for i in self.analysis.src_ids if i != self.analysis.pad_id)

    def decoding(self, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0) -> DecodingSteps:
        """This input's source (padding left out) decoded step by step: greedy, or sampled with these settings."""
        return passes.decoding_steps(self.path, self.version, self.source_ids(), temperature, top_k, top_p, seed)

    def beam_tree(self, beam_size: int) -> BeamTreeView:
        """Beam search of this input's source with every hypothesis recorded, the card's penalties applied."""
        return passes.beam_tree_view(self.path, self.version, self.source_ids(), beam_size)

    def step_cross(self, prefix: tuple[int, ...]) -> np.ndarray:
        """(layers, heads, src_len) the cross-attention of the step that reads the decoder input `prefix` (<s> first)
        over this input's source: one teacher-forced pass, its last query row."""
        attention = passes.teacher_forced(self.path, self.version, FINAL, self.source_ids(), tuple(prefix))
        return attention.stack("decoder.cross_attn")[:, :, -1]

    def positional_table(self, side: str) -> np.ndarray:
        return passes.positional_table(self.path, self.version, side)

    def rotary_frequencies(self) -> tuple[np.ndarray, np.ndarray]:
        """A rotary model's angle per token of each dimension pair (d_head / 2,), as it turns (its rope_scaling
        applied) and before the scaling."""
        return passes.rotary_frequencies(self.path, self.version)

    def comparable_checkpoints(self) -> list[str]:
        """The other loadable checkpoints with this one's vocabularies: they read this input's ids as the same
        pieces, so their attention can be taken on exactly this sequence. Reads their tokenizers, loads none."""
        mine = passes.vocabulary(self.path, self.version)
        names = []
        for name, error in passes.folder_errors().items():
            if name == self.name or error:
                continue
            try:
                if passes.vocabulary(passes.checkpoint_path(name), passes.version_of(name)) == mine:
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

    def inside(self, kind: str, layer: int) -> passes.Inside:
        """One attention block's queries, keys, values, scores, weights, z and heads' results, and its layer's
        feed-forward neurons, from one captured pass over this analysis's ids."""
        return passes.inside(self.path, self.version, self.analysis.src_ids, self.analysis.tgt_ids, kind, layer)

    # ------------------------------------------------------------------------------------------ attribution views

    def default_translation(self) -> Analysis:
        """This input decoded as its card says (what the attribution views explain): the sidebar's own pass unless
        someone chose other decoding there."""
        return passes.translate(self.path, self.version, self.text, self.card.decoding.get("beam_size", 1))

    attribution_methods = passes.ATTRIBUTION_METHODS  # name -> its declaration (signed or not, note, citation)

    def explained(self, row: int | None = None) -> passes.Explained:
        """Every attribution method's (rows x source) array for this input's default decoding: output `row` alone
        (one row each), or every output piece (None)."""
        decoded = self.default_translation()
        methods = passes.explained(self.path, self.version, decoded.src_ids, decoded.tgt_ids, decoded.output_ids,
                                   row)
        return passes.Explained(methods, decoded.src_tokens, decoded.output_tokens)

    def contrastive(self) -> passes.Explained:
        """Contrastive attribution of log p(target) - log p(foil) at each position where the page's target and foil
        differ: (method, (positions, src_len)) pairs, rows labelled "target piece / foil piece"."""
        forced, decoded = self.target, self.default_translation()
        rows = tuple(t for t, (a, b) in enumerate(zip(forced.output_ids, forced.foil_ids)) if a != b)
        methods = passes.contrastive(self.path, self.version, decoded.src_ids, forced.tgt_ids, forced.output_ids,
                                     forced.foil_ids, rows) if rows else ()
        labels = tuple(f"{forced.output_tokens[t]} / {forced.foil_tokens[t]}" for t in rows)
        return passes.Explained(methods, decoded.src_tokens, labels)

    def lens(self) -> passes.Lens:
        """The logit lens of this input's default decoding: each decoder stage's top pieces."""
        decoded = self.default_translation()
        stages, pieces, probs = passes.lens(self.path, self.version, decoded.src_ids, decoded.tgt_ids,
                                            decoded.output_ids)
        return passes.Lens(stages, pieces, probs, decoded.src_tokens, decoded.tgt_tokens, decoded.output_tokens)

    def first_changed_piece(self, corrupted: str) -> int | None:
        """The first output position where `corrupted`'s own translation (decoded as this input's default one)
        differs from this input's; None where the two outputs are the same."""
        edited = passes.translate(self.path, self.version, corrupted, self.card.decoding.get("beam_size", 1))
        return first_difference(self.default_translation().output_tokens, edited.output_tokens)

    def patched(self, corrupted: str, position: int) -> passes.Patched:
        """Activation patching from this input (clean) into `corrupted`, measured at output `position`."""
        return passes.patched(self.path, self.version, self.text, corrupted, position)

    @staticmethod
    def faithfulness_table() -> pd.DataFrame | None:
        """The shipped checkpoints' faithfulness table, one row per method (None if none was saved)."""
        return passes.faithfulness_table(passes.faithfulness_version())

    # ------------------------------------------------------------------------------------------ heads across a corpus

    corpus_statistics = passes.CORPUS_STATISTICS  # name -> what it measures

    def corpus_unavailable(self) -> str:
        """Why this checkpoint cannot run over its corpus here ("" if it can): no corpus named, or not on disk."""
        return passes.corpus_unavailable(self.path, self.version)

    def corpus(self, count: int) -> passes.CorpusFile:
        """This checkpoint run over a corpus of `count` inputs (its generated inputs or its dev split's first
        sentences): whether it could be read, and how many sentences it held."""
        return passes.corpus_file(self.path, self.version, count)

    def corpus_ranking(self, count: int, statistic: str) -> pd.DataFrame:
        """Heads by their mean `statistic` over that corpus, highest first: kind, layer, head, mean, sentences."""
        return passes.corpus_ranking(self.path, self.version, count, statistic)

    def corpus_top(self, count: int, kind: str, layer: int, head: int, statistic: str) -> pd.DataFrame:
        """The sentences of that corpus where one head's `statistic` is highest: sentence, value, source, target."""
        return passes.corpus_top(self.path, self.version, count, kind, layer, head, statistic)

    # ------------------------------------------------------------------------------------------ across many inputs

    def summary(self, count: int, progress: Callable[[float], None] | None = None) -> passes.Summary:
        """This checkpoint's corpus summary of `count` inputs (transformer.analysis.corpus_summary), from the disk
        cache or computed; `progress(fraction)` after each chunk, where this session computes it."""
        token = passes.corpus_progress.set(progress)
        try:
            return passes.summary(self.path, self.version, count)
        finally:
            passes.corpus_progress.reset(token)

    def summary_on_disk(self, count: int) -> bool:
        """Whether that summary is cached already (it then opens without asking)."""
        return passes.summary_on_disk(self.path, self.version, count)

    def head_map(self, count: int) -> pd.DataFrame:
        """Every head of the model placed by how alike it attends over the corpus: kind, layer, head, x, y, role and
        its statistics."""
        return passes.head_map(self.path, self.version, count)

    def queries_keys(self, count: int, head: tuple[str, int, int], method: str) -> tuple[pd.DataFrame, float]:
        """One head's queries and keys over the corpus in 2-D, and the share of queries nearest their top key."""
        return passes.queries_keys_picture(self.path, self.version, count, head, method)

    def neuron_examples(self, count: int, stack: str, layer: int, neuron: int) -> pd.DataFrame:
        """One feed-forward neuron's top tokens over the corpus (viz.neuron_examples_table's rows)."""
        return self.summary(count).summary.neuron_examples((stack, layer), neuron)

    def matched_heads(self, count: int, other: str) -> pd.DataFrame:
        """This checkpoint's heads matched one-to-one to those of checkpoint `other` (one vocabulary)."""
        return passes.matched_heads(self.path, self.version, count, passes.checkpoint_path(other),
                                    passes.version_of(other))

    def matched_snapshot(self, count: int, snapshot: str) -> pd.DataFrame:
        """The final weights' heads matched one-to-one to those of training snapshot `snapshot`."""
        return passes.matched_snapshot(self.path, self.version, count, snapshot)

    def followed_head(self, count: int, head: tuple[str, int, int]) -> pd.DataFrame:
        """The head matched to `head` of the final weights in each training snapshot."""
        return passes.followed_head(self.path, self.version, count, head)
