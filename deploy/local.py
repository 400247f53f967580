"""K `streamlit run app.py` processes behind nginx, all on 127.0.0.1: to try the deployment, and for the benchmarks.

    python -m deploy.local --processes 2 [--listen 127.0.0.1:8080] [--checkpoints checkpoints]

starts the K app processes on free ports, writes an nginx config from deploy/nginx.conf.template into a scratch
folder (sticky sessions, websockets, gzip), starts nginx in the foreground on 127.0.0.1:8080, and stops everything
on Ctrl-C. Needs the `nginx` binary (Debian: apt-get install nginx); no root, nothing outside the scratch folder.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import streamlit

from deploy.server import ROOT, ServerError, free_port, streamlit_server, wait_until_healthy
from ui.turns import cores

TEMPLATE = Path(__file__).with_name("nginx.conf.template")
MIME_TYPES = Path("/etc/nginx/mime.types")
STREAMLIT_STATIC = Path(streamlit.__file__).parent / "static"  # index.html, and static/ with the scripts
COMPRESSIBLE = {".js", ".css", ".html", ".json", ".svg", ".txt", ".map", ".ttf"}  # woff2 and images are compressed
STOP_S = 10


@dataclass(frozen=True)
class Deployment:
    url: str  # the proxy's address, what browsers open
    app_urls: list[str]  # the app processes behind it, each on its own port
    app_pids: list[int]
    nginx_pid: int


def compressed_static(out: Path, source: Path = STREAMLIT_STATIC) -> Path:
    """A copy of Streamlit's static files in `out` with a `.gz` (level 9) next to each that compresses, for nginx's
    gzip_static; returns `out`. Seconds of CPU once, instead of compressing 11 MB for every new browser."""
    shutil.copytree(source, out, dirs_exist_ok=True)
    for path in out.rglob("*"):
        if path.suffix in COMPRESSIBLE and path.is_file():
            path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))
    return out


def nginx_config(app_ports: list[int], listen: str, prefix: Path, static_root: Path) -> str:
    """The template with its fields filled in: the app processes (the upstream's servers, and the cookie value that
    sticks a browser to each), where nginx listens, its scratch folder and the compressed copy of Streamlit's static
    files."""
    addresses = [f"127.0.0.1:{port}" for port in app_ports]
    fields = {"SERVERS": "\n".join(f"        server {address};" for address in addresses),
              "STICKY": "\n".join(f'        "{address}" {address};' for address in addresses),
              "LISTEN": listen, "PREFIX": str(prefix), "MIME_TYPES": str(MIME_TYPES), "STATIC_ROOT": str(static_root)}
    text = TEMPLATE.read_text()
    for name, value in fields.items():
        text = text.replace("{{" + name + "}}", value)
    return text


@contextlib.contextmanager
def nginx_proxy(app_ports: list[int], prefix: Path, static_root: Path,
                listen: str | None = None) -> Iterator[tuple[str, int]]:
    """(URL, pid) of nginx in front of the apps on 127.0.0.1:`app_ports`, listening on `listen` (127.0.0.1 and a
    free port if None); its config, logs and temporary files in `prefix`. Stopped on exit."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        raise ServerError("no nginx binary (Debian: apt-get install nginx)")
    prefix.mkdir(parents=True, exist_ok=True)
    listen = listen or f"127.0.0.1:{free_port()}"
    config = prefix / "nginx.conf"
    config.write_text(nginx_config(app_ports, listen, prefix, static_root))
    log = prefix / "stderr.log"
    with open(log, "w") as output:
        proxy = subprocess.Popen([nginx, "-p", str(prefix), "-c", str(config), "-g", "daemon off;"],
                                 stdout=output, stderr=subprocess.STDOUT)
    try:
        url = f"http://{listen.replace('0.0.0.0', '127.0.0.1')}/"
        wait_until_healthy(url, proxy, log, "nginx")
        yield url, proxy.pid
    finally:
        proxy.terminate()
        try:
            proxy.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait(timeout=STOP_S)


def app_environment(processes: int, environ=os.environ) -> dict[str, str]:
    """What each of `processes` app processes gets in its environment besides the server's own.

    One cookie secret for all of them: the XSRF cookie one process sets is then valid in every other. And each runs
    the model in its share of the cores (ui.turns), unless $ATLAS_MODEL_TURNS says otherwise: on 2 cores, two
    processes that each ran one pass at a time served more than two that each ran two (docs/performance.md)."""
    return {"STREAMLIT_SERVER_COOKIE_SECRET": secrets.token_hex(16),
            "ATLAS_MODEL_TURNS": environ.get("ATLAS_MODEL_TURNS") or str(max(1, cores() // processes))}


@contextlib.contextmanager
def proxied_app(processes: int, checkpoints: Path | str, workdir: Path, listen: str | None = None,
                threads: int = 1) -> Iterator[Deployment]:
    """`processes` app processes behind nginx listening on `listen` (127.0.0.1 and a free port if None); stopped
    on exit. Logs and the generated nginx.conf go to `workdir`."""
    env = app_environment(processes)
    with contextlib.ExitStack() as stack:
        apps = [stack.enter_context(streamlit_server(checkpoints, workdir / f"streamlit-{i}.log", threads, env))
                for i in range(processes)]
        # Its own folder, readable by all: nginx started as root reads files as an unprivileged worker.
        static = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="atlas-static-")))
        static.chmod(0o755)
        ports = [int(app_url.rsplit(":", 1)[1].strip("/")) for app_url, _ in apps]
        url, nginx_pid = stack.enter_context(nginx_proxy(ports, workdir / "nginx", compressed_static(static), listen))
        yield Deployment(url, [app_url for app_url, _ in apps], [process.pid for _, process in apps], nginx_pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.local", description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="app processes behind the proxy (default 2)")
    parser.add_argument("--listen", default="127.0.0.1:8080", help="where nginx listens (default 127.0.0.1:8080; "
                        "0.0.0.0:8080 in a container)")
    parser.add_argument("--checkpoints", type=Path, default=ROOT / "checkpoints", help="the folder the app serves")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per app process (default 1)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` stops the processes too, as Ctrl-C does
    with tempfile.TemporaryDirectory(prefix="atlas-deploy-") as scratch:
        with proxied_app(args.processes, args.checkpoints, Path(scratch), args.listen, args.threads) as deployment:
            print(f"{args.processes} app processes behind nginx at {deployment.url} (logs in {scratch}); Ctrl-C stops")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
