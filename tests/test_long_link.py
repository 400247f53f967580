"""A link Streamlit does not read (its query string over 512 KiB, or over 1,000 parts) is dropped whole by Streamlit
before the app sees it; the page then opens as the default one, with a notice that says why: in a real browser
against `streamlit run` (a link of 1,001 parts: one over 128 KB is refused by the HTTP server itself, with its own
"400: Bad Request" page, before any of the app runs), and through AppTest for the notice's words. A link under the
limits opens as it was written, without that notice."""
from __future__ import annotations

import pytest

from benchmarks.chromium import CHROMIUM, RUN_S, launch_chromium, wait_for_rerun
from deploy.server import ServerError, streamlit_server
from helpers import APP
from ui.state import QUERY_LIMITS

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM.exists(),
                                                   reason="needs Debian's chromium at /usr/bin/chromium")]
DROPPED = "more than the 524,288 characters or 1,000 parts this server reads: none of it was used"


def opened(url: str, tmp_path, checkpoints) -> str:
    """The page's text once `url` (a path and query on the server) has been opened and drawn."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs python playwright")
    try:
        with streamlit_server(checkpoints, tmp_path / "streamlit.log") as (server, _), \
                sync_api.sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(RUN_S * 1000)
                page.goto(server + url)
                page.wait_for_selector(".js-plotly-plot")
                wait_for_rerun(page, settle_s=3.0)  # the probe's report reruns the page once
                page.screenshot(path=str(tmp_path / "link.png"))
                return page.inner_text("body")
            finally:
                browser.close()
    except ServerError as error:
        pytest.fail(str(error))


def test_a_link_of_too_many_parts_opens_the_default_page_with_a_notice(app_checkpoints, tmp_path):
    assert QUERY_LIMITS == {"chars": 512 * 1024, "fields": 1000}  # Streamlit's own, read from it
    query = "&".join(["checkpoint=tiny-twin"] + ["view=attention"] * 1000)
    body = opened("?" + query, tmp_path, app_checkpoints)
    assert f"This page was opened with a link of {len(query):,} characters in 1,001 parts, {DROPPED}" in body, \
        body[:2000]


def test_the_probes_report_of_a_long_link_is_one_notice(app_checkpoints, monkeypatch):
    """The report the probe sends for a link over 512 KiB (a server behind a proxy that takes such a request line)."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(app_checkpoints))
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["link-probe"] = {"dropped": {"chars": 600_000, "fields": 3}}
    at.run()
    assert [warning.value for warning in at.warning if "opened with a link" in warning.value] == [
        f"This page was opened with a link of 600,000 characters in 3 parts, {DROPPED}, so what shows is the default "
        "page, not the one shared."]


def test_a_link_under_the_limit_has_no_such_notice(app_checkpoints, tmp_path):
    body = opened("?view=attention&text=abc", tmp_path, app_checkpoints)
    assert "This page was opened with a link" not in body
