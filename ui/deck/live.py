"""A live pack (`python -m ui.pack DECK OUT.html --live`): the packed deck (ui.deck.packing) in which each slide of the
Attention or Model view whose checkpoint a browser can run gets an input box. What is typed there runs the checkpoint
in the page: its ONNX graph (transformer/io/onnx_export.py, through ui.passes.browser_model) by ONNX Runtime Web's
WebAssembly build (npm's onnxruntime-web, pinned in package.json), read, encoded, decoded greedily and drawn by
ui/deck/live.js, which mirrors the Python it replaces and is tested equal to it (tests/test_live_pack*.py). The
slide's figure (the Attention view's one head, or the Model view's every layer x head as lines) is redrawn from the
page's own numbers and says so, with the output and the notices the app gives.

Nothing is fetched: the runtime's JavaScript (its bundle build, which holds its loader), its .wasm and each model are
inlined, the binaries gzipped and base64-written. A slide that stays static says why: another view (the page redraws
those two), settings the page does not draw (words, stages, a typed target, ...), or a checkpoint a browser
cannot run (ui.passes.browser_model's reason: a converted tokenizer, a model past MAX_BROWSER_MODEL_BYTES)."""
from __future__ import annotations

import base64
import gzip
import html
import json
import re
from pathlib import Path
from typing import NamedTuple

from .. import passes
from ..state import URL_STATE
from .packing import PackError, _script_json
from .parse import Deck

ROOT = Path(__file__).parents[2]
LIVE_JS = Path(__file__).with_name("live.js")
ORT_DIST = ROOT / "node_modules" / "onnxruntime-web" / "dist"
ORT_BUNDLE = "ort.wasm.bundle.min.mjs"  # the runtime with its WebAssembly loader in one module: no import of a .mjs
ORT_WASM = "ort-wasm-simd-threaded.wasm"
MAX_LIVE_PACK_BYTES = 40 * 2**20  # a live pack's budget: Plotly 4.6 MB, the runtime 4.9 MB, eng-fra's graph 19 MB
# The views whose figure live.js redraws (one head's heatmap; every layer x head of one kind as lines, as a deck's
# lecture mode draws the Model view), each with the link values its live slide may set: any other (words, stages, a
# typed target, padding, ...) draws what the page does not, and the slide stays as the app drew it.
LIVE_VIEWS = {
    "attention": frozenset({"checkpoint", "text", "view", "kind", "layer", "head", "lecture"}),
    "model": frozenset({"checkpoint", "text", "view", "kind", "lecture", "model_as"}),
}
MODEL_AS_LIVE = (None, "lines")  # the Model view's drawings live.js redraws: lines (a deck is in lecture mode)
ORT_LICENCE = """ONNX Runtime Web (onnxruntime-web {version}, https://github.com/microsoft/onnxruntime), inlined below.
MIT License. Copyright (c) Microsoft Corporation.
Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated
documentation files (the "Software"), to deal in the Software without restriction, including without limitation the
rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit
persons to whom the Software is furnished to do so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all copies or substantial portions of the
Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE
WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR
COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE."""


class LiveSlide(NamedTuple):
    checkpoint: str
    kind: str
    layer: int
    head: int
    site: str  # the captured pattern the figure shows: 'decoder.layers.1.cross_attn'
    view: str = "attention"  # a key of LIVE_VIEWS
    sites: tuple[str, ...] = ()  # the Model view's: every layer's pattern of `kind`, in layer order


def _inlined(data: bytes, element_id: str) -> str:
    """Binary bytes as the page holds them: gzipped, base64, in a script element live.js unpacks."""
    encoded = base64.b64encode(gzip.compress(data, compresslevel=9, mtime=0)).decode("ascii")
    return f'<script type="application/octet-stream" id="{element_id}">{encoded}</script>'


def runtime() -> tuple[str, bytes]:
    """ONNX Runtime Web's bundle, made a classic global (`globalThis.ort`) of an inline module, and its .wasm;
    PackError naming `npm ci` when node_modules lacks them."""
    try:
        bundle = (ORT_DIST / ORT_BUNDLE).read_text(encoding="utf-8")
        wasm = (ORT_DIST / ORT_WASM).read_bytes()
        version = json.loads((ORT_DIST.parent / "package.json").read_text(encoding="utf-8"))["version"]
    except (OSError, KeyError, ValueError):
        raise PackError(f"A live pack inlines ONNX Runtime Web from {ORT_DIST.relative_to(ROOT)}: run `npm ci` in "
                        f"{ROOT} first (package.json pins it).") from None
    exports = re.search(r"export\{([^}]*)\};?\s*(//# sourceMappingURL=\S*)?\s*$", bundle)
    if exports is None:
        raise PackError(f"{ORT_BUNDLE} does not end in the export list a live pack rewrites: another version?")
    pairs = (part.split(" as ") for part in exports[1].split(","))
    names = ",".join(f"{exported.strip()}:{local.strip()}" for local, exported in pairs)
    module = bundle[:exports.start()] + f"globalThis.ort={{{names}}};\n"
    licence = ORT_LICENCE.format(version=version).replace("*/", "* /")
    return f"/*\n{licence}\n*/\n{module}".replace("</script", "<\\/script"), wasm


def output_how(spec: dict) -> str:
    """How the page makes its output, in the words of ui.page's output_how (the page decodes greedily only)."""
    if spec["stacks"] == "decoder-only":
        return "its next-token prediction: the input continued, greedy"
    beams = spec["decoding"].get("beam_size", 1)
    return "greedy" + (f" (the card's beam search with {beams} beams is the live app's)" if beams > 1 else "")


class Live:
    """What a live pack adds to packing.pack_html: each slide's box (or why it stays static) and the page's scripts."""

    max_bytes = MAX_LIVE_PACK_BYTES

    def __init__(self, deck: Deck, models: dict[str, tuple[bytes, dict] | str] | None = None) -> None:
        """`models`: checkpoint -> (graph, spec) or why a browser cannot run it (by default ui.passes.browser_model
        of each checkpoint the deck's Attention slides name)."""
        defaults = {name: default for name, (_, default) in URL_STATE.items()}
        self.plan: dict[int, LiveSlide | str] = {}
        self.models = {} if models is None else dict(models)
        for number, slide in enumerate(deck.slides, 1):
            state = {**defaults, **slide.state}
            checkpoint = str(state["checkpoint"] or "")
            view = state["view"]
            if view not in LIVE_VIEWS:
                self.plan[number] = ("Drawn as the slide was set: the page runs the model for the Attention view's "
                                     "one head and the Model view's lines; this view is the live app's.")
                continue
            others = set(slide.state) - LIVE_VIEWS[view]
            if view == "model" and state["model_as"] not in MODEL_AS_LIVE:
                others.add("model_as")
            if others:
                self.plan[number] = ("Drawn as the slide was set: its settings ("
                                     + ", ".join(sorted(others)) + ") are the live app's.")
                continue
            if checkpoint not in self.models:
                try:
                    self.models[checkpoint] = passes.browser_model(checkpoint)
                except (ValueError, passes.CheckpointError) as error:
                    self.models[checkpoint] = str(error)
            found = self.models[checkpoint]
            kind, layer, head = str(state["kind"]), int(state["layer"]), int(state["head"])
            if isinstance(found, str):
                self.plan[number] = f"Drawn as the slide was set: {checkpoint} cannot run in a browser ({found})."
                continue
            spec = found[1]
            sites = (passes.attention_site(kind, layer),)
            if view == "model":
                layer, head = 0, 0  # every layer and head: the window the app drew, which live.js reads off its figure
                stack = "encoder" if kind.startswith("encoder") else "decoder"
                sites = tuple(passes.attention_site(kind, n) for n in range(spec["layers"][stack])) or sites
            missing = [name for name in sites if name not in spec["sites"]]
            if missing or not 0 <= head < spec["num_heads"]:
                self.plan[number] = (f"Drawn as the slide was set: {checkpoint} has no head {head} at "
                                     f"{(missing or sites)[0]}.")
            else:
                self.plan[number] = LiveSlide(checkpoint, kind, layer, head, sites[0], view,
                                              sites if view == "model" else ())

    def live(self, number: int) -> LiveSlide | None:
        planned = self.plan.get(number)
        return planned if isinstance(planned, LiveSlide) else None

    def side(self, number: int, text: str) -> str:
        """The slide's input box (its text the slide's own), or the line that says why it stays static."""
        planned = self.plan[number]
        if isinstance(planned, str):
            return f'<p class="more">{html.escape(planned)}</p>'
        return (f'<form class="live" data-slide="{number}"><input type="text" value="{html.escape(text)}" '
                f'aria-label="Your own sentence" maxlength="1000"><button type="submit">Run here</button></form>'
                '<div class="live-out" hidden></div>'
                f'<p class="more">Type your own sentence: {html.escape(planned.checkpoint)} runs in this browser, '
                "offline, and the figure is redrawn from its numbers.</p>")

    def scripts(self) -> str:
        """The runtime, every live slide's model and its tables, live.js, and the call that starts them."""
        import plotly.colors

        import viz.theme
        from viz.head_view import HEAD_COLOURS

        used = sorted({slide.checkpoint for slide in self.plan.values() if isinstance(slide, LiveSlide)})
        if not used:
            return ""
        bundle, wasm = runtime()
        specs = {name: {**self.models[name][1], "how": output_how(self.models[name][1])} for name in used}
        config = {"models": specs, "maskColours": {"causal": viz.theme.css_colour(viz.theme.mask_rgba("causal"))},
                  "headColours": [plotly.colors.hex_to_rgb(colour) for colour in HEAD_COLOURS],
                  "slides": {number: slide._asdict() for number, slide in self.plan.items()
                             if isinstance(slide, LiveSlide)}}
        models = "".join(_inlined(self.models[name][0], html.escape(f"live-onnx-{name}")) for name in used)
        script = LIVE_JS.read_text(encoding="utf-8").replace("</script", "<\\/script")
        return (f'<script type="module">{bundle}</script>{_inlined(wasm, "live-ort-wasm")}{models}'
                f'<script type="application/json" id="live-config">{_script_json(config)}</script>'
                f"<script>{script}</script>"
                '<script type="module">AtlasLive.startPage(JSON.parse('
                'document.getElementById("live-config").textContent));</script>')
