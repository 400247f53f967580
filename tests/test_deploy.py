"""deploy/: the nginx config in front of stand-in app processes (sticky sessions, websockets, gzip), on 127.0.0.1.

The stand-ins are tiny HTTP servers that answer with their own port and the headers they were sent, so that each
request shows which process the proxy picked and what it forwarded; the real app behind the proxy runs in
`python -m benchmarks.load --via-proxy`.
"""
from __future__ import annotations

import gzip
import re
import shutil
import tempfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from deploy.local import compressed_static, nginx_config, nginx_proxy
from helpers import WAIT_S, wait_until

pytestmark = [pytest.mark.slow,  # real nginx and servers
              pytest.mark.skipif(not shutil.which("nginx") and not Path("/usr/sbin/nginx").exists(),
                                reason="no nginx (apt-get install nginx)")]
LONG_TEXT = "attention " * 500  # above gzip_min_length
RELEASE, HOLD_LOCK = threading.Event(), threading.Lock()


class StandIn(BaseHTTPRequestHandler):
    """Answers with its port and the headers it got; `/hold` stays open until RELEASE is set, as a tab's websocket
    does (the server counts those open in `holding`)."""

    def do_GET(self):  # http.server's name
        if self.path == "/hold":
            with HOLD_LOCK:
                self.server.holding += 1
            RELEASE.wait(timeout=WAIT_S)
        headers = {name.lower(): value for name, value in self.headers.items()}
        body = (f"port={self.server.server_port}\nupgrade={headers.get('upgrade')}\n"
                f"connection={headers.get('connection')}\n" + (LONG_TEXT if self.path == "/long" else "")).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    """nginx in front of two stand-ins, with a static folder of one script."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), StandIn) for _ in range(2)]
    for server in servers:
        server.holding = 0
    threads = [threading.Thread(target=server.serve_forever, daemon=True) for server in servers]
    for thread in threads:
        thread.start()
    source = tmp_path_factory.mktemp("source")
    source.chmod(0o755)  # the copy takes its folder modes, as from the installed package
    (source / "static" / "js").mkdir(parents=True)
    (source / "static" / "js" / "index.js").write_text("console.log('attention');\n" * 200)
    ports = [server.server_port for server in servers]
    # Not under pytest's folders, which only their user may enter: nginx started as root reads files as an
    # unprivileged worker (as deploy.local.proxied_app does).
    try:
        with tempfile.TemporaryDirectory(prefix="atlas-static-") as folder:
            static = Path(folder)
            static.chmod(0o755)
            compressed_static(static, source)
            with nginx_proxy(ports, tmp_path_factory.mktemp("nginx"), static) as (url, _):
                yield url, ports, static, servers
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def get(url: str, headers: dict[str, str] | None = None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=WAIT_S) as response:
        return response.headers, response.read()


def port_of(body: bytes) -> int:
    return int(body.decode().split("\n")[0].removeprefix("port="))


def test_config_fills_every_field(tmp_path):
    text = nginx_config([8501, 8502], "127.0.0.1:8080", tmp_path, tmp_path / "static")
    assert not re.search(r"\{\{[A-Z_]+\}\}", text)
    assert "server 127.0.0.1:8501;" in text and "server 127.0.0.1:8502;" in text
    assert '"127.0.0.1:8501" 127.0.0.1:8501;' in text and '"127.0.0.1:8502" 127.0.0.1:8502;' in text
    assert "listen 127.0.0.1:8080;" in text


def test_a_browser_sticks_to_one_process(proxy):
    url, ports, _, _ = proxy
    headers, body = get(url)
    first = port_of(body)
    cookie = headers["Set-Cookie"].split(";")[0]
    assert cookie == f"atlas_backend=127.0.0.1:{first}"  # names the process that answered
    # Every later request of that browser, the websocket included, reaches the process its first request did.
    assert {port_of(get(url + "any/path", {"Cookie": cookie})[1]) for _ in range(8)} == {first}


def test_new_browsers_spread_over_the_processes(proxy):
    url, ports, _, _ = proxy
    assert {port_of(get(url)[1]) for _ in range(8)} == set(ports)
    # A cookie that names no process (one that has gone) counts as none: the browser gets a process and its name.
    headers, body = get(url, {"Cookie": "atlas_backend=10.0.0.9:8501"})
    assert headers["Set-Cookie"].startswith(f"atlas_backend=127.0.0.1:{port_of(body)};")


def test_a_new_browser_goes_to_the_process_with_the_fewest_open_connections(proxy):
    """A request with no cookie is held open on one process; the next two new browsers both go to the other.
    (Round robin would send the second back to the first process, a hash of a random id either of them.)"""
    url, ports, _, servers = proxy
    RELEASE.clear()
    holder = threading.Thread(target=get, args=(url + "hold",))
    try:
        holder.start()
        wait_until(lambda: any(server.holding for server in servers), "a process holding the request")
        busy = next(server for server in servers if server.holding)
        other = next(port for port in ports if port != busy.server_port)
        assert [port_of(get(url)[1]) for _ in range(2)] == [other, other]
    finally:
        RELEASE.set()
        holder.join(timeout=WAIT_S)
        for server in servers:
            server.holding = 0


def test_websocket_upgrade_is_passed_on(proxy):
    url, _, _, _ = proxy
    _, body = get(url + "_stcore/stream", {"Upgrade": "websocket", "Connection": "Upgrade"})
    assert "upgrade=websocket" in body.decode() and "connection=upgrade" in body.decode()
    _, body = get(url)
    assert "upgrade=None" in body.decode() and "connection=close" in body.decode()


def test_static_files_come_precompressed_and_the_rest_gzipped_on_the_fly(proxy):
    url, _, static, _ = proxy
    original = (static / "static" / "js" / "index.js").read_bytes()
    headers, body = get(url + "static/js/index.js", {"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    assert body == (static / "static" / "js" / "index.js.gz").read_bytes()  # the file made once, not recompressed
    assert gzip.decompress(body) == original
    headers, body = get(url + "static/js/index.js")  # a client that cannot read gzip gets the file itself
    assert "Content-Encoding" not in headers and body == original
    headers, body = get(url + "long", {"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip" and LONG_TEXT in gzip.decompress(body).decode()
