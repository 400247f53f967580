"""The Across inputs view as a user meets it (AppTest): nothing runs until asked; then every picture is the library's
on the same corpus; a summary already on disk (another session, a restart, `python -m transformer.corpus cache`)
opens without asking and without running the model; a corpus this server lacks is named, and a summary of one's own
corpus is used instead."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import ui.passes
import ui.shared
import viz
from helpers import LOADABLE, ROOT
from transformer import corpus as corpus_command
from transformer import load_checkpoint
from transformer.analysis import corpus_summary as summaries
from transformer.analysis.corpus_sample import SAMPLE_FILE
from transformer.analysis.head_map import match_heads
from transformer.analysis.qk_space import nearest_keys
from transformer.io.checkpoint import read_config
from transformer.io.disk_cache import DiskCache
from transformer.model.sites import ATTENTION_KINDS

pytestmark = pytest.mark.slow  # every test runs the whole app (AppTest)
COUNT = 24


def ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def figure(at: AppTest, index: int = 0) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A disk cache of this test's own, and no summary in memory: each test starts as a fresh server."""
    monkeypatch.setenv("ATLAS_CACHE", str(tmp_path / "cache"))
    ui.shared.clear()
    yield DiskCache(tmp_path / "cache")
    ui.shared.clear()


@pytest.fixture
def opened(app, cache):
    """The view on the first test checkpoint, COUNT inputs asked for and read."""
    at = ok(app(view="corpus"))
    assert not at.get("plotly_chart")  # nothing runs until asked
    at.number_input(key="summary_count").set_value(COUNT).run()
    at.button(key="summary-run").click().run()
    return ok(at)


@pytest.fixture
def expected(app_checkpoints):
    checkpoint = load_checkpoint(app_checkpoints / LOADABLE[0])
    return checkpoint, summaries.summarise(checkpoint, summaries.corpus_pairs_list(checkpoint, COUNT))


def points(trace: dict) -> list:
    return [tuple(data) + (round(x, 5), round(y, 5)) for data, x, y in zip(trace["customdata"], trace["x"], trace["y"])]


def test_the_map_is_the_librarys_on_the_same_inputs(opened, expected):
    _, summary = expected
    frame = summary.map()
    drawn = sorted(point for trace in figure(opened)["data"] if trace.get("customdata")
                   and trace.get("legendgroup") not in ("roles", "chosen")  # not the rings, nor the chosen's square
                   for point in points(trace))
    assert drawn == sorted((kind, int(layer), int(head), round(x, 5), round(y, 5))
                           for kind, layer, head, x, y in frame[["kind", "layer", "head", "x", "y"]].itertuples(
                               index=False))
    assert f"over {COUNT} inputs" in figure(opened)["layout"]["title"]["text"]


def test_the_queries_and_keys_are_the_librarys_pca_picture(opened, expected):
    _, summary = expected
    opened.session_state["corpus_part"] = "qk"
    at = ok(opened.run())
    kind, layer, head = at.session_state["kind"], at.session_state["layer"], at.session_state["head"]
    picture = summary.picture((kind, layer, head))
    traces = [trace for trace in figure(at)["data"] if trace.get("customdata")]
    drawn = sorted((s, p, side, round(x, 4), round(y, 4)) for trace in traces
                   for (s, p, side), x, y in zip(trace["customdata"], trace["x"], trace["y"]))
    assert drawn == sorted((int(s), int(p), side, round(x, 4), round(y, 4)) for s, p, side, x, y in
                           picture[["sentence", "position", "side", "x", "y"]].itertuples(index=False))
    queries = picture[picture["side"] == "query"]
    nearest = nearest_keys(picture, causal=kind == "decoder.self_attn")
    share = (nearest.reindex(queries.index) == queries["argmax"]).mean()
    assert any(f"Here {share:.0%} of the queries" in caption.value for caption in at.caption)
    at.segmented_control(key="qk_colour").set_value("token class").run()
    classes = {trace["name"] for trace in figure(ok(at))["data"] if trace.get("legendgroup") == "classes"}
    assert classes == {viz.token_class(piece) for piece in picture["piece"]}


def test_the_neurons_table_is_the_librarys(opened, expected):
    _, summary = expected
    opened.session_state["corpus_part"] = "neurons"
    at = ok(opened.run())
    at.selectbox(key="corpus_neuron").set_value(7).run()
    shown = ok(at).dataframe[0].value
    expected = viz.neuron_examples_table(summary.neuron_examples(("encoder", 0), 7)).drop(columns="neuron")
    pd.testing.assert_frame_equal(shown.reset_index(drop=True), expected, check_exact=False, rtol=1e-5)


def test_heads_are_matched_with_a_twin_and_followed_through_snapshots(opened, expected, app_checkpoints):
    checkpoint, summary = expected
    opened.session_state["corpus_part"] = "match"
    at = ok(opened.run())
    options = at.selectbox(key="match_with").options
    assert LOADABLE[1] in options
    at.selectbox(key="match_with").set_value(LOADABLE[1]).run()
    matched = ok(at).dataframe[0].value
    twin = load_checkpoint(app_checkpoints / LOADABLE[1])
    library = match_heads(checkpoint, twin, summary.pairs)
    pd.testing.assert_frame_equal(matched.reset_index(drop=True), library, check_exact=False, rtol=1e-6)
    assert len(figure(at)["data"]) > len(library)  # a line per match, and the two columns of heads
    if checkpoint.card.snapshots:
        at.selectbox(key="match_with").set_value("snapshots").run()
        followed = ok(at).dataframe[0].value
        assert list(followed["snapshot"]) == [s["name"] for s in checkpoint.card.snapshots] + ["final"]


def test_a_summary_on_disk_opens_without_asking_or_running_the_model(app, opened, monkeypatch):
    ui.shared.clear()  # a restarted server: nothing in memory, the disk cache kept
    monkeypatch.setattr(summaries, "summarise", lambda *a, **k: pytest.fail("the summary was computed again"))
    at = ok(app(view="corpus", summary_count=str(COUNT)))
    assert at.get("plotly_chart") and not [b for b in at.button if b.key == "summary-run"]


def test_the_cache_command_writes_what_the_app_opens_at_once(app, cache, app_checkpoints, capsys):
    corpus_command.main(["cache", str(app_checkpoints / LOADABLE[0]), "--count", "12", "--cache", str(cache.folder)])
    assert "12 sentences summarised" in capsys.readouterr().out
    assert cache.entries()
    at = ok(app(view="corpus", summary_count="12", lecture="1"))
    assert at.get("plotly_chart") and not [b for b in at.button if b.key == "summary-run"]


def test_a_corpus_not_on_this_server_is_named_and_ones_own_summary_is_used(app, cache, tmp_path, monkeypatch):
    root = tmp_path / "checkpoints"
    shutil.copytree(ROOT / "checkpoints" / "eng-fra", root / "eng-fra",
                    ignore=shutil.ignore_patterns("snapshots", SAMPLE_FILE))  # no sample of its own either
    card = json.loads((root / "eng-fra" / "card.json").read_text())
    card["training"].update(data=["tatoeba=/nowhere/eng-fra.tsv"], dev_data=[])
    card["snapshots"] = []
    (root / "eng-fra" / "card.json").write_text(json.dumps(card))
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(root))
    at = ok(app(view="corpus", text="She is reading a book.", summary_count="10"))
    assert any("Not on this server: its dev split is read from /nowhere/eng-fra.tsv" in info.value for info in at.info)
    assert not at.get("plotly_chart")
    checkpoint = load_checkpoint(root / "eng-fra")
    own = [("The cat sleeps.", "Le chat dort."), ("I like tea.", "J'aime le thé.")] * 5
    summaries.corpus_summary(checkpoint, pairs=own, cache=cache)  # as `cache --data OWN.tsv --count 10` does
    ui.shared.clear()
    at = ok(app(view="corpus", text="She is reading a book.", summary_count="10"))
    assert "over 10 inputs" in figure(at)["layout"]["title"]["text"]


def test_a_t_sne_picture_is_computed_once_and_kept(opened, cache, monkeypatch):
    opened.session_state["corpus_part"] = "qk"
    at = ok(opened.run())
    at.segmented_control(key="projection").set_value("tsne").run()
    drawn = figure(ok(at))
    assert drawn["layout"]["title"]["text"].endswith("(t-SNE)")
    ui.shared.clear()  # a restarted server reads it back from the disk cache
    monkeypatch.setattr(summaries, "projected", lambda *a, **k: pytest.fail("the t-SNE picture was computed again"))
    at = ok(at.run())
    assert figure(at)["data"][0]["x"] == drawn["data"][0]["x"]


def test_the_neurons_open_on_the_strongest_and_can_be_ordered_by_selectivity(opened, expected):
    _, summary = expected
    opened.session_state["corpus_part"] = "neurons"
    at = ok(opened.run())
    layer = next(iter(summary.neurons))
    strongest = summary.neuron_order(layer, "strongest")
    assert at.selectbox(key="corpus_neuron").value == strongest["neuron"].iloc[0]
    assert strongest["strongest"].is_monotonic_decreasing
    assert any("strongest first" in caption.value for caption in at.caption)
    at.segmented_control(key="neuron_order").set_value("selective").run()
    selective = summary.neuron_order(layer, "selective")
    options = ok(at).selectbox(key="corpus_neuron").options  # "17 · 3.21 · 1 token, top 'la'"
    assert [int(option.split(" · ")[0]) for option in options] == list(selective["neuron"])
    assert at.selectbox(key="corpus_neuron").value == selective["neuron"].iloc[0]  # the new order's first
    assert selective["tokens"].is_monotonic_increasing
    assert any("most selective first" in caption.value for caption in at.caption)


SHIPPED = ("reverse", "reverse-1layer", "dates", "induction", "eng-fra", "english-lm")


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("lecture", ["", "1"])
def test_every_shipped_checkpoint_shows_all_four_parts_on_a_fresh_clone(name, lecture, cache, tmp_path,
                                                                        monkeypatch):
    """A fresh clone has no ../shared/data: the cards' corpus paths lead nowhere from its folder. Each shipped
    checkpoint still reads its inputs (its own sample, or its task's generator) and shows the map (every head
    named), queries and keys, matched heads and neurons."""
    (tmp_path / "clone").mkdir()
    monkeypatch.chdir(tmp_path / "clone")
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(ROOT / "checkpoints"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params.update(checkpoint=name, view="corpus", summary_count="20", lecture=lecture)
    at = ok(at.run())
    assert not at.info, [info.value for info in at.info]  # nothing "not on this server"
    at.button(key="summary-run").click().run()
    drawn = figure(ok(at))
    heads = {tuple(data) for trace in drawn["data"] if trace.get("legendgroup") not in ("roles", "chosen")
             for data in trace.get("customdata") or []}
    assert len(drawn["layout"]["annotations"]) == len(heads) > 0  # each head named on the map
    assert "near = alike" in drawn["layout"]["xaxis"]["title"]["text"]
    for part in ("qk", "match", "neurons"):
        at.session_state["corpus_part"] = part
        at = ok(at.run())
        assert at.get("plotly_chart") or at.dataframe, part


def test_chromium_opens_every_part_for_every_shipped_checkpoint_on_a_fresh_clone(tmp_path):
    """`streamlit run` where the cards' ../shared/data leads nowhere, headless Chromium a person's clicks: for every
    shipped checkpoint the Read button (clicked at its centre), then each part drawn without an exception; the map
    also on a 1280 x 720 projector, whole."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")
    from benchmarks.chromium import RUN_S, launch_chromium, wait_for_rerun
    from deploy.server import streamlit_server

    clone = tmp_path / "clone"  # the server's working folder: ../shared does not exist from here
    clone.mkdir()
    drawn = '.js-plotly-plot, [data-testid="stDataFrame"], [data-testid="stException"]'
    with streamlit_server(ROOT / "checkpoints", tmp_path / "server.log", script=ROOT / "app.py", root=clone,
                          env={"ATLAS_CACHE": str(tmp_path / "cache")}) as (url, _), \
            sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        for lecture, size, parts in (("", (1400, 900), ("map", "qk", "match", "neurons")),
                                     ("&lecture=1", (1280, 720), ("map",))):
            page = browser.new_page(viewport={"width": size[0], "height": size[1]})
            for name in SHIPPED:
                for part in parts:
                    page.goto(f"{url}?checkpoint={name}&view=corpus&corpus_part={part}&summary_count=40{lecture}")
                    # The page's first run, and the one its width report starts, have ended.
                    page.wait_for_selector('[data-testid="stMainBlockContainer"][data-measured-width]')
                    wait_for_rerun(page, settle_s=0, start_s=0.3)
                    read = page.get_by_role("button", name="Read 40 inputs")
                    if read.count():
                        box = read.bounding_box()
                        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                    page.wait_for_selector(drawn, timeout=300_000)
                    wait_for_rerun(page, settle_s=0, start_s=0)
                    where = f"{name} {part} {'lecture' if lecture else 'laptop'}"
                    assert not page.locator('[data-testid="stException"]').count(), where
                    assert page.locator('.js-plotly-plot, [data-testid="stDataFrame"]').count(), where
                    if part == "map":
                        config = read_config(ROOT / "checkpoints" / name)
                        heads = config.num_heads * sum(config.layers_of(kind) for kind in ATTENTION_KINDS)
                        try:  # each head named, once Plotly has drawn the map's annotations
                            page.wait_for_function(f"() => document.querySelectorAll("
                                                   f"'.js-plotly-plot g.annotation').length === {heads}",
                                                   timeout=RUN_S * 1000)
                        except sync_api.TimeoutError:
                            pytest.fail(f"{where}: {page.locator('.js-plotly-plot g.annotation').count()} heads named "
                                        f"of {heads}")
                        figure = page.locator(".js-plotly-plot").first.bounding_box()
                        assert figure["y"] + figure["height"] <= size[1] + 1 or not lecture, where  # whole
            page.close()
        browser.close()
