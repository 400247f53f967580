"""The ui package without Streamlit running: URL state, the typed analysis of a pass, and the import rules."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import viz
from helpers import PAD, imported_modules, random_batch, reaches, small_model
from transformer import ATTENTION_KINDS, capture
from ui.analysis import Analysis
from ui.page import decoding_text
from ui.passes import attention_of
from ui.state import ALWAYS_IN_URL, URL_STATE, parse_query, settled, url_params
from ui.views import BY_KEY, VIEWS

ROOT = Path(__file__).parents[1]


# ---------------------------------------------------------------------------------------------- URL state


def test_a_link_is_parsed_by_each_parameters_own_parser():
    values, notices = parse_query({"layer": "1", "average": "yes", "ablate": "a:1,,b:2", "pe_dims": "0,5",
                                   "text": "<b>x</b>"})
    assert values == {"layer": 1, "average": True, "ablate": ["a:1", "b:2"], "pe_dims": [0, 5], "text": "<b>x</b>"}
    assert not notices


def test_unreadable_and_unknown_parameters_give_notices_that_do_not_repeat_them():
    values, notices = parse_query({"layer": "abc", "masks": "maybe", "<script>": "1", "colour": "red"})
    assert values == {}
    assert notices == ["The link's `layer` could not be read, so the default is used.",
                       "The link's `masks` could not be read, so the default is used.",
                       "2 unknown link parameter(s) were ignored."]


def test_settled_keeps_an_allowed_value_whatever_it_is():
    assert settled("layer", 1, range(2), 0, from_link=True) == (1, "")
    assert settled("layer", 3, range(4), 0, from_link=False) == (3, "")


def test_settled_names_the_refused_value_and_what_is_used_instead():
    value, message = settled("layer", 5, range(2), 0, from_link=True)
    assert value == 0
    assert message == "The link's `layer` value `5` is not available here, so `0` is used instead."
    assert settled("layer", 5, range(2), 0, from_link=False) == (0, "")  # not the link's: no notice


def test_a_refused_value_is_shown_short_and_on_one_line():
    _, message = settled("kind", "`x`\n" + "y" * 500, ("encoder.self_attn",), "encoder.self_attn", from_link=True)
    assert "\n" not in message and message.count("`") == 6 and len(message) < 150


def test_url_params_write_the_core_always_and_options_only_when_not_default():
    state = {name: default for name, (_, default) in URL_STATE.items()}
    state.update(checkpoint="c", text="t", layer=0, head=0)
    assert url_params(state) == {"checkpoint": "c", "text": "t", "view": "attention", "kind": "decoder.cross_attn",
                                 "layer": "0", "head": "0"}
    assert set(ALWAYS_IN_URL) <= set(url_params(state))
    state.update(average=True, ablate=["a:1", "b:2"], pe_dims=[0, 5], head_b=3)
    assert {name: url_params(state)[name] for name in ("average", "ablate", "pe_dims", "head_b")} == {
        "average": "1", "ablate": "a:1,b:2", "pe_dims": "0,5", "head_b": "3"}


def test_url_params_and_parse_query_round_trip():
    state = {"checkpoint": "c", "text": "a,b", "view": "heads", "kind": "encoder.self_attn", "layer": 1, "head": 2,
             "masks": False, "ablate": ["decoder.layers.0.cross_attn:1"], "pe_dims": [3], "beam": 5}
    assert parse_query(url_params(state)) == (state, [])


# ---------------------------------------------------------------------------------------------- analysis


@pytest.fixture(scope="module")
def padded_analysis() -> Analysis:
    """An Analysis of one captured pass of a small model over a padded source (5 real + 2 pads) and decoder input
    (4 real + 1 pad)."""
    model = small_model()
    src, tgt = random_batch(model.config, [5], [4])
    src = torch.cat([src, torch.full((1, 2), PAD)], dim=1)  # (1, 7)
    tgt = torch.cat([tgt, torch.full((1, 1), PAD)], dim=1)  # (1, 5)
    with torch.no_grad(), capture(model) as record:
        model(src, tgt)
    src_ids, tgt_ids = tuple(src[0].tolist()), tuple(tgt[0].tolist())
    return Analysis(text="", src_ids=src_ids, tgt_ids=tgt_ids,
                    src_tokens=tuple(viz.PAD_TOKEN if i == PAD else f"s{i}" for i in src_ids),
                    tgt_tokens=tuple(viz.PAD_TOKEN if i == PAD else f"t{i}" for i in tgt_ids),
                    src_typed=(), output_tokens=(), output_ids=(), probs=(), warnings=(), pad_id=PAD,
                    attention=attention_of(record))


def test_tokens_follow_each_kinds_query_and_key_side(padded_analysis):
    src, tgt = list(padded_analysis.src_tokens), list(padded_analysis.tgt_tokens)
    assert padded_analysis.tokens("encoder.self_attn") == (src, src)
    assert padded_analysis.tokens("decoder.self_attn") == (tgt, tgt)
    assert padded_analysis.tokens("decoder.cross_attn") == (tgt, src)
    assert padded_analysis.kinds == ATTENTION_KINDS


def test_blocked_read_off_the_models_mask_equals_the_masks_built_from_pads(padded_analysis):
    src_pad = np.array(padded_analysis.src_ids) == PAD
    tgt_pad = np.array(padded_analysis.tgt_ids) == PAD
    sides = {"encoder.self_attn": (src_pad, src_pad), "decoder.self_attn": (tgt_pad, tgt_pad),
             "decoder.cross_attn": (tgt_pad, src_pad)}
    for kind, (query_pad, key_pad) in sides.items():
        expected = viz.mask_reasons(len(query_pad), len(key_pad), key_is_pad=key_pad, query_is_pad=query_pad,
                                    causal=kind == "decoder.self_attn")
        blocked = padded_analysis.blocked(kind)
        assert blocked.keys() == expected.keys(), kind
        for reason in expected:
            np.testing.assert_array_equal(blocked[reason], expected[reason], err_msg=f"{kind} {reason}")


def test_an_unpadded_encoder_masks_nothing(padded_analysis):
    model = small_model()
    src, tgt = random_batch(model.config, [5], [4])
    with torch.no_grad(), capture(model) as record:
        model(src, tgt)
    plain = dataclasses.replace(padded_analysis, src_ids=tuple(src[0].tolist()), tgt_ids=tuple(tgt[0].tolist()),
                                attention=attention_of(record))
    assert plain.blocked("encoder.self_attn") == {} and plain.blocked("decoder.cross_attn") == {}
    assert list(plain.blocked("decoder.self_attn")) == [viz.CAUSAL]
    assert not plain.padded() and padded_analysis.padded()


def test_head_is_one_head_or_the_mean_of_a_layer(padded_analysis):
    stack = padded_analysis.stack("decoder.cross_attn")
    assert stack.shape == (2, 4, 5, 7)  # (layers, heads, q_len, k_len)
    np.testing.assert_array_equal(padded_analysis.head("decoder.cross_attn", 1, 3), stack[1, 3])
    np.testing.assert_allclose(padded_analysis.head("decoder.cross_attn", 1, None), stack[1].mean(axis=0))
    np.testing.assert_array_equal(padded_analysis.head("encoder.self_attn", 0, 2, part="scores"),
                                  padded_analysis.stack("encoder.self_attn", part="scores")[0, 2])


def test_the_analysis_cannot_be_changed(padded_analysis):
    with pytest.raises(dataclasses.FrozenInstanceError):
        padded_analysis.text = "changed"
    for part in ("weights", "scores"):
        with pytest.raises(ValueError, match="read-only"):
            padded_analysis.stack("encoder.self_attn", part)[0, 0, 0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        padded_analysis.attention.of("decoder.self_attn").allowed[0, 0] = False


# ---------------------------------------------------------------------------------------------- structure


@pytest.mark.parametrize("path", sorted((ROOT / "ui" / "views").glob("*.py")), ids=lambda path: path.name)
def test_views_cannot_reach_the_model(path):
    assert not reaches(imported_modules(path), ("torch", "transformer", "ui.passes"))


def test_only_passes_imports_torch_or_transformer():
    importing = {path.relative_to(ROOT).as_posix() for path in (ROOT / "ui").rglob("*.py")
                 if reaches(imported_modules(path), ("torch", "transformer"))}
    assert importing == {"ui/passes.py"}
    assert not reaches(imported_modules(ROOT / "ui" / "passes.py"), ("ui.views", "ui.view", "ui.widgets"))
    assert not reaches(imported_modules(ROOT / "app.py"), ("torch", "transformer"))



def test_no_two_ui_modules_share_a_name_nor_one_the_readmes_example_view():
    """A ui module is known by its name in imports, docs and tracebacks: two named alike, or one named like the view
    the README's "Adding a view" has a reader create, would be taken for each other."""
    names = [path.stem for path in (ROOT / "ui").rglob("*.py") if path.stem != "__init__"]
    adding_a_view = (ROOT / "README.md").read_text(encoding="utf-8").split("### Adding a view", 1)[1].split("\n#", 1)[0]
    examples = set(re.findall(r"`ui/views/(\w+)\.py`", adding_a_view)) - {"__init__"}
    assert examples and len(names) == len(set(names)) and not examples & set(names)

def test_benchmarks_use_deploy_and_not_the_other_way():
    """deploy/ runs the app; benchmarks/ measures it: the two folders import in one direction only."""
    for path in (ROOT / "deploy").glob("*.py"):
        assert not reaches(imported_modules(path), ("benchmarks",)), path.name
    assert any(reaches(imported_modules(path), ("deploy",)) for path in (ROOT / "benchmarks").glob("*.py"))


def test_the_registry_has_one_view_per_module_each_with_its_own_key():
    modules = {path.stem for path in (ROOT / "ui" / "views").glob("*.py")} - {"__init__"}
    assert len(VIEWS) == len(modules) == len(BY_KEY)
    assert {view.render.__module__.rsplit(".", 1)[1] for view in VIEWS} == modules
    assert all(view.label for view in VIEWS)


def test_app_is_a_short_entry():
    assert len((ROOT / "app.py").read_text(encoding="utf-8").splitlines()) <= 100


def test_the_output_caption_names_the_cards_penalties():
    """A researcher comparing the output with `python -m transformer.evaluate` needs every setting that chose it."""
    eng_fra = {"beam_size": 4, "length_penalty": 1.2, "coverage_penalty": 0.1}
    assert decoding_text(4, eng_fra) == "beam search with 4 beams, length penalty 1.2, coverage penalty 0.1"
    assert decoding_text(3, {}) == "beam search with 3 beams, length penalty 0.6"  # the search's own default
    assert decoding_text(1, eng_fra) == "greedy"  # greedy has no penalties to name


def test_importing_the_app_sets_no_library_state():
    """Importing a module changes no process-wide setting of a library (plotly's JSON engine and template, numpy's
    error handling, torch's threads and default dtype): a program that imports ui, viz or transformer keeps its own.
    In a fresh interpreter, after Streamlit (which brings its own plotly template), as nothing has imported ours yet."""
    import subprocess
    import sys

    settings = ("(pio.json.config.default_engine, pio.templates.default, np.geterr(), torch.get_num_threads(), "
                "torch.get_default_dtype())")
    code = (f"import numpy as np, plotly.io as pio, streamlit, torch; before = {settings}; "
            "import app, ui.frame, ui.pack, viz, transformer, transformer.analysis.head_map; "
            f"after = {settings}; assert before == after, (before, after)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_charts_are_written_by_the_json_engine_as_orjson_would_write_them(monkeypatch):
    """A page picks plotly.io's json engine (orjson's first walks every cell in Python): the same figure, down to
    its NaN cells, its escaped labels and its non-ASCII pieces."""
    import json

    import plotly.io as pio

    from ui.widgets import write_charts_with_the_json_engine

    monkeypatch.setattr(pio.json.config, "default_engine", pio.json.config.default_engine)  # put back after
    write_charts_with_the_json_engine()
    assert pio.json.config.default_engine == "json"
    pytest.importorskip("orjson")
    tokens = ["▁<b>x</b>", "▁&amp;", "▁été", *(f"▁t{i}" for i in range(9))]
    weights = np.random.default_rng(0).random((12, 12)).astype(np.float32)
    scores = np.where(np.tril(np.ones((12, 12), bool)), weights, np.nan)
    for fig in (viz.head_heatmap(weights, tokens, tokens, scores=scores, show_values=True, title="<i>été</i>"),
                viz.stages_figure(scores, {"causal": ~np.tril(np.ones((12, 12), bool))}, weights, tokens, tokens)):
        written = pio.to_json(fig, validate=False)
        assert json.loads(written) == json.loads(pio.to_json(fig, validate=False, engine="orjson"))
