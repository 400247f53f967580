"""Take the screenshots of the README and docs/ again from the shipped checkpoints:
`python docs/screenshots.py` (or only some: `python docs/screenshots.py screenshot-induction.png`).

Each is a link to the app (checkpoint, view and input in its query), opened in headless Chromium at the viewport the
README's image has, against `streamlit run` on 127.0.0.1; look at them before committing."""
from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from benchmarks.chromium import launch_chromium  # noqa: E402
from deploy.server import streamlit_server  # noqa: E402

SETTLE_MS = 15_000  # the first pass, its figures and Plotly's drawing, on 2 CPU cores
SHOTS = {  # file name: (viewport, link)
    "screenshot-attention.png": ((1400, 1150), {"view": "attention", "kind": "encoder.self_attn", "text": (
        "When the teacher opened the wooden door, the students quietly walked into the bright classroom.")}),
    "screenshot-model-view.png": ((1600, 1330), {"view": "model", "kind": "encoder.self_attn",
                                                 "text": "She is reading a good book."}),
    "screenshot-decoding.png": ((1400, 1000), {"view": "decoding", "step": 2,
                                               "text": "The children are playing in the garden."}),
    "screenshot-inside.png": ((1280, 720), {"view": "inside", "kind": "decoder.cross_attn", "layer": 1, "head": 1,
                                            "query": 2, "inside_step": 2, "lecture": 1, "text": (
        "When the teacher opened the wooden door, the students quietly walked into the bright classroom.")}),
    "screenshot-induction.png": ((1400, 1400), {"checkpoint": "induction", "view": "training",
                                                "kind": "decoder.self_attn", "layer": 1, "head": 3, "lecture": 1,
                                                "text": "xq7 bnz tt0 kz9 xq7 bnz"}),
}


def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(SHOTS))
    if unknown:
        raise SystemExit(f"no screenshot named {', '.join(unknown)}; the shots are {', '.join(SHOTS)}")
    docs = ROOT / "docs"
    with streamlit_server(ROOT / "checkpoints", docs / "streamlit.log") as (url, _), sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        for name, ((width, height), link) in SHOTS.items():
            if names and name not in names:
                continue
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(f"{url}?{urlencode({'checkpoint': 'eng-fra', **link})}")
            page.wait_for_timeout(SETTLE_MS)
            page.screenshot(path=str(docs / name))
            page.close()
        browser.close()
    (docs / "streamlit.log").unlink()


if __name__ == "__main__":
    main(sys.argv[1:])
