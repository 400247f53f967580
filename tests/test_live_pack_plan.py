"""Which slides of a live pack run in the page and why the others stay static (ui.deck.live.Live); the runtime named
by `npm ci` when it is missing; the presenter's choice reaching the packing process; a live page within its budget."""
from __future__ import annotations

import pytest

import ui.deck.live as live_module
import ui.deck.presenter as presenter
from ui.deck.live import MAX_LIVE_PACK_BYTES, Live, LiveSlide, PackError, output_how, runtime
from ui.deck.packing import DrawnSlide, pack_html
from ui.deck.parse import Deck, Slide

SPEC = {"sites": ["decoder.layers.0.cross_attn", "decoder.layers.1.cross_attn"], "num_heads": 2,
        "stacks": "encoder-decoder", "decoding": {"beam_size": 4}}


def slide(**link) -> Slide:
    return Slide("a slide", "", "", link)


def test_only_attention_slides_of_a_runnable_checkpoint_at_a_head_it_has_go_live():
    deck = Deck("Deck", [
        slide(checkpoint="small", view="attention", kind="decoder.cross_attn", layer=1, head=1),
        slide(checkpoint="small", view="positional"),
        slide(checkpoint="small", view="attention", words=True),
        slide(checkpoint="big", view="attention"),
        slide(checkpoint="small", view="attention", kind="decoder.cross_attn", layer=2),
    ])
    live = Live(deck, {"small": (b"graph", SPEC), "big": "its model is 60 MB in float16"})
    assert live.plan[1] == LiveSlide("small", "decoder.cross_attn", 1, 1, "decoder.layers.1.cross_attn")
    assert "Attention view" in live.plan[2]
    assert "(words) are the live app's" in live.plan[3]
    assert "big cannot run in a browser (its model is 60 MB in float16)" in live.plan[4]
    assert "no head 0 at decoder.layers.2.cross_attn" in live.plan[5]
    assert 'form class="live" data-slide="1"' in live.side(1, "a <b>") and "a &lt;b&gt;" in live.side(1, "a <b>")
    assert live.side(4, "x").startswith('<p class="more">Drawn as the slide was set')


def test_the_output_line_says_the_page_decodes_greedily():
    assert output_how(SPEC) == "greedy (the card's beam search with 4 beams is the live app's)"
    assert output_how({**SPEC, "decoding": {}}) == "greedy"
    assert output_how({**SPEC, "stacks": "decoder-only"}).endswith("the input continued, greedy")


def test_a_missing_runtime_is_named_with_npm_ci(tmp_path, monkeypatch):
    monkeypatch.setattr(live_module, "ORT_DIST", tmp_path / "node_modules" / "onnxruntime-web" / "dist")
    monkeypatch.setattr(live_module, "ROOT", tmp_path)
    with pytest.raises(PackError, match="run `npm ci`"):
        runtime()


@pytest.mark.skipif(not live_module.ORT_DIST.is_dir(), reason="ONNX Runtime Web is not installed: run `npm ci`")
def test_the_runtime_is_inlined_as_a_global_with_its_licence_and_the_live_budget_holds(monkeypatch):
    bundle, wasm = runtime()
    assert bundle.startswith("/*\nONNX Runtime Web (onnxruntime-web 1.30.0") and "MIT License" in bundle
    assert "globalThis.ort={" in bundle and "export{" not in bundle[-2000:] and wasm[:4] == b"\0asm"
    deck = Deck("Deck", [slide(checkpoint="small", view="attention", kind="decoder.cross_attn", layer=1)])
    drawn = [DrawnSlide(1, "a slide", "", "", "text", (), ())]
    page = pack_html(deck, drawn, Live(deck, {"small": (b"graph", {**SPEC, "inputs": ["src", "tgt"]})}))
    assert len(page) <= MAX_LIVE_PACK_BYTES and page.count(b'id="live-onnx-small"') == 1
    monkeypatch.setattr(live_module, "MAX_LIVE_PACK_BYTES", 1000)
    monkeypatch.setattr(Live, "max_bytes", 1000)
    with pytest.raises(PackError, match="a live pack may take"):
        pack_html(deck, drawn, Live(deck, {"small": (b"graph", {**SPEC, "inputs": ["src", "tgt"]})}))


def test_the_presenters_choice_reaches_the_packing_process(monkeypatch):
    asked = []
    monkeypatch.setattr(presenter, "pack_in_process", lambda name, live=False: asked.append((name, live)) or b"")
    presenter.packed("some-deck", "content one", True)
    presenter.packed("some-deck", "content two")
    assert asked == [("some-deck", True), ("some-deck", False)]


def test_the_dates_checkpoint_ships_its_notice_table_and_a_task_notice_the_page_lacks_stays_static(monkeypatch):
    """The dates task's notice (years outside its training range) goes to the page as a table live.js reads
    (tests/test_live_pack_tokenizer.py proves the wording equal); a task notice live.js does not implement keeps its
    checkpoint static, saying why."""
    from transformer.data import tasks
    from ui import passes

    _, spec = passes.browser_model("dates")
    table = spec["task_notices"]["years_out_of_range"]
    assert (table["first"], table["last"]) == (1900, 2099) and ord("0") in table["digit_zeros"]
    assert passes.browser_model("reverse")[1]["task_notices"] == {}
    monkeypatch.setitem(tasks.INPUT_CAVEATS, "dates", lambda text: [])
    with pytest.raises(ValueError, match=r"its task \(dates\) warns about inputs in a way the page does not"):
        passes.browser_model("dates")


def test_a_model_view_slide_goes_live_with_every_layer_of_its_kind_when_drawn_as_lines():
    spec = {**SPEC, "sites": ["encoder.layers.0.self_attn", "encoder.layers.1.self_attn"],
            "layers": {"encoder": 2, "decoder": 2}}
    deck = Deck("Deck", [slide(checkpoint="small", view="model", kind="encoder.self_attn"),
                         slide(checkpoint="small", view="model", kind="encoder.self_attn", model_as="heatmaps"),
                         slide(checkpoint="small", view="model", kind="decoder.self_attn"),
                         slide(checkpoint="small", view="model", kind="encoder.self_attn", layer=1)])
    live = Live(deck, {"small": (b"graph", spec)})
    assert live.plan[1] == LiveSlide("small", "encoder.self_attn", 0, 0, "encoder.layers.0.self_attn", "model",
                                     ("encoder.layers.0.self_attn", "encoder.layers.1.self_attn"))
    assert "(model_as) are the live app's" in live.plan[2]
    assert "no head 0 at decoder.layers.0.self_attn" in live.plan[3]
    assert "(layer) are the live app's" in live.plan[4]


@pytest.mark.slow
@pytest.mark.skipif(not live_module.ORT_DIST.is_dir(), reason="ONNX Runtime Web is not installed: run `npm ci`")
def test_the_command_packs_a_live_deck(tmp_path, monkeypatch, capsys):
    """`python -m ui.pack DECK OUT.html --live`: the Attention slide gets its box and its model, the other says why
    it stays as drawn; without --live the same deck packs as before, with neither."""
    import ui.pack

    decks = tmp_path / "decks"
    decks.mkdir()
    (decks / "two.toml").write_text('[[slides]]\ntitle = "reverse"\n[slides.link]\ncheckpoint = "reverse"\n'
                                    'view = "attention"\nkind = "decoder.cross_attn"\nlayer = 1\n'
                                    '[[slides]]\ntitle = "positions"\n[slides.link]\ncheckpoint = "reverse"\n'
                                    'view = "positional"\n', encoding="utf-8")
    monkeypatch.setenv("ATLAS_DECKS", str(decks))
    ui.pack.main(["two", str(tmp_path / "live.html"), "--live"])
    ui.pack.main(["two", str(tmp_path / "static.html")])
    assert "models, exported for the browser" in capsys.readouterr().out
    live, static = ((tmp_path / name).read_text(encoding="utf-8") for name in ("live.html", "static.html"))
    assert live.count('<form class="live"') == 1 and 'id="live-onnx-reverse"' in live and "MIT License" in live
    assert "the page runs the model for the Attention view" in live
    assert "live-onnx" not in static and '<form class="live"' not in static


@pytest.mark.slow
def test_the_live_box_beside_the_download_needs_the_runtime(monkeypatch, tmp_path):
    """The sidebar's Live box is offered where ONNX Runtime Web is installed; elsewhere it is greyed out, saying
    `npm ci` installs it, and the button packs the static deck."""
    from streamlit.testing.v1 import AppTest

    from ui.deck.packing import APP

    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(APP.parent / "checkpoints"))
    monkeypatch.setenv("ATLAS_DECKS", str(APP.parent / "decks"))
    for installed in [False, *([True] if live_module.ORT_DIST.is_dir() else [])]:
        monkeypatch.setattr(presenter, "ORT_DIST", live_module.ORT_DIST if installed else tmp_path / "absent")
        app = AppTest.from_file(str(APP), default_timeout=300)
        app.query_params.update({"checkpoint": "reverse"})
        app.run()
        assert not app.exception
        box = app.checkbox(key="deck-pack-live")
        assert box.proto.disabled is not installed
        assert ("npm ci" in box.proto.help) is not installed
