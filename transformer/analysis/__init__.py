"""Analyses over captured passes: attribution, forced targets, the logit lens, patching, induction and heads
across a corpus. Imports model, io, data and inference."""
