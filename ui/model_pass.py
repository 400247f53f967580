"""Pass: one model pass (or a lookup of a checkpoint) that a view asks for with `page.run(PASS, **args)`, declared in
the module of the feature that needs it, as a view is declared in its own module.

A declaration names its function as "module:function", imported by ui.passes (the one ui module that imports torch
or `transformer`: a view names the library's functions without importing them). The function's parameters say what
ui.passes gives it: `path, version` (a function of ui.passes, which loads what it needs itself), or `checkpoint`
or `model` (a library function: given the loaded checkpoint, or its model, inside one model turn sized for its
`src_ids` and `tgt_ids`). Then the view's arguments, and whatever else of the page's input it names
(ui.page.PAGE_INPUT). What comes back is made a `result`: returned as it is if it is one, else built from the fields of
that name (a dict's keys or an object's attributes), every tensor and array read-only, every list a tuple.

Here: the passes that several features and ui.passes itself ask for, and their results.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import NamedTuple

from .analysis import Analysis, Attention


@dataclass(frozen=True)
class Shared:
    """Kept for every session, keyed on every argument's content, within the passes' byte bound (ui.shared.PASSES)."""


@dataclass(frozen=True)
class Kept:
    """Kept for every session for `ttl` after it is computed, at most `max_entries` (ui.shared.Expiring): a lookup of
    a few small arguments asked for on every rerun. `on_release`: "module:function" called on each result let go."""

    ttl: datetime.timedelta
    max_entries: int
    on_release: str = ""


@dataclass(frozen=True)
class Fresh:
    """Computed on every call: a question about the disk as it is now, over results that are cached themselves."""


SHARED, FRESH = Shared(), Fresh()
HOUR = datetime.timedelta(hours=1)  # a loaded checkpoint is kept as long: what is read from it is too


@dataclass(frozen=True)
class Pass:
    name: str  # unique: keys its cache, and names it in errors
    function: str  # "module:function", called as the module's docstring says
    result: type | tuple[type, ...]  # what it returns to the view (one of these types, as isinstance reads them)
    cache: Shared | Kept | Fresh
    spinner: str = ""  # shown to the session that computes it


# ---------------------------------------------------------------------------------------------- every feature's

TRANSLATE = Pass("translate", "ui.passes:translate", Analysis, SHARED, "Running the model…")
TEACHER_FORCED = Pass("teacher-forced", "ui.passes:teacher_forced", Attention, SHARED, "Running the model…")


class CorpusFile(NamedTuple):
    error: str  # why the corpus could not be read ("" if it was); no file then
    parquet: str = ""
    sentences: int = 0


CORPUS_FILE = Pass("corpus file", "ui.passes:corpus_file", CorpusFile,
                   Kept(HOUR, max_entries=8, on_release="ui.passes:remove_corpus_file"),
                   "Running the checkpoint over the corpus…")


class Summary(NamedTuple):
    error: str  # why there is none ("" if there is)
    summary: object = None  # transformer.analysis.corpus_summary.CorpusSummary


SUMMARY = Pass("corpus summary", "ui.passes:summary", Summary, Kept(HOUR, max_entries=8), "Reading the corpus…")
SUMMARY_ON_DISK = Pass("corpus summary on disk", "ui.passes:summary_on_disk", bool, FRESH)
CORPUS_UNAVAILABLE = Pass("corpus unavailable", "ui.passes:corpus_unavailable", str, FRESH)  # why not ("" if it is)
