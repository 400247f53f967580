"""Attention Atlas figures: numpy arrays and token labels in, Plotly figures or pandas DataFrames out.

Pure functions; viz imports neither streamlit, torch nor the project's transformer package. Conventions (see
conventions.py): one head's attention is (q_len, k_len), rows queries and columns keys; a stack for one kind is
(layers, heads, q_len, k_len); masks are `blocked` dicts, reason -> bool (q_len, k_len), True = blocked, built by
mask_reasons(). Every figure takes theme=Theme(large=..., dark=...) and escapes the user text it shows.
"""
from .attention import (
                        compare_figure,
                        decoding_step_caption,
                        decoding_step_figure,
                        head_heatmap,
                        stages_figure,
                        values_shown,
)
from .attribution import attribution_figure, logit_lens_figure, patching_figure, token_attribution_figure
from .beam_tree import beam_tree_figure
from .conventions import CAUSAL, EOS_TOKEN, KINDS, PAD_TOKEN, PADDED_QUERY, PADDING, SLIDING_WINDOW, model_mask
from .export import tidy_frame, to_csv_bytes, to_html_bytes, to_parquet_bytes, toolbar_config
from .grid import fit_model_view, model_view
from .head_map import MAP_CAPTION, head_map_figure, head_matching_figure
from .head_view import head_view
from .labels import piece_text, safe_label
from .masks import mask_figure, mask_panels, mask_reasons
from .model_lines import fit_model_lines, model_lines
from .positional import (
                        default_pe_dims,
                        pe_curves,
                        pe_heatmap,
                        pe_similarity,
                        rotary_dim_names,
                        rotary_dims,
                        rotary_frequencies_figure,
                        rotary_score_figure,
                        rotary_scores,
                        rotary_wavelengths,
)
from .qk_space import neuron_examples_table, queries_keys_figure, token_class
from .rollout import decoder_source_rollout, encoder_rollout, rollout_figure
from .sampling import distribution_figure
from .stats import SCATTER_CAPTION, statistics_scatter
from .theme import Theme
from .training import loss_curve, snapshots_figure
from .words import PRODUCES_CAPTION, merge_blocked, merge_words, produces_labels, word_labels

__all__ = [
    "KINDS", "PADDING", "CAUSAL", "SLIDING_WINDOW", "PADDED_QUERY", "PAD_TOKEN", "EOS_TOKEN",
    "Theme", "toolbar_config", "safe_label", "piece_text",
    "mask_reasons", "model_mask", "mask_figure", "mask_panels",
    "head_heatmap", "stages_figure", "compare_figure", "decoding_step_figure", "decoding_step_caption",
    "beam_tree_figure", "distribution_figure",
    "values_shown", "model_view", "fit_model_view", "model_lines", "fit_model_lines", "head_view",
    "snapshots_figure", "loss_curve",
    "merge_words", "merge_blocked", "word_labels", "produces_labels", "PRODUCES_CAPTION",
    "pe_heatmap", "pe_curves", "pe_similarity", "default_pe_dims",
    "rotary_dims", "rotary_dim_names", "rotary_wavelengths", "rotary_scores", "rotary_frequencies_figure",
    "rotary_score_figure",
    "statistics_scatter", "SCATTER_CAPTION",
    "encoder_rollout", "decoder_source_rollout", "rollout_figure",
    "tidy_frame", "to_csv_bytes", "to_parquet_bytes", "to_html_bytes",
    "head_map_figure", "head_matching_figure", "MAP_CAPTION", "queries_keys_figure", "neuron_examples_table",
    "token_class",
    "attribution_figure", "token_attribution_figure", "patching_figure", "logit_lens_figure",
]
