"""The documented deployment on one machine, for the tests and the benchmark that measure it
from outside: nginx with the repo's site file (deploy/nginx/ragtrail.conf) in front of
gunicorn on a unix socket, and the hostile clients the proxy is there to absorb."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "deploy" / "nginx" / "ragtrail.conf"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def nginx_available() -> bool:
    return shutil.which("nginx") is not None or Path("/usr/sbin/nginx").exists()


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (openssl), as a real one would sit in /etc/ssl/ragtrail."""
    cert, key = folder / "fullchain.pem", folder / "privkey.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


def site_config(socket_path: Path, http_port: int, https_port: int, cert: Path, key: Path) -> str:
    """The repo's site file with this machine's ports, socket, certificate and name: the
    only lines a deployment changes."""
    text = SITE.read_text(encoding="utf-8")
    for old, new in (
        ("    listen [::]:80;\n", ""),
        ("    listen [::]:443 ssl http2;\n", ""),
        ("listen 80;", f"listen 127.0.0.1:{http_port};"),
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;"),
        ("unix:/run/ragtrail/web.sock", f"unix:{socket_path}"),
        ("/etc/ssl/ragtrail/fullchain.pem", str(cert)),
        ("/etc/ssl/ragtrail/privkey.pem", str(key)),
        ("ragtrail.example.org", "127.0.0.1"),
        ("/var/log/nginx/ragtrail.access.log", str(socket_path.parent / "access.log")),
    ):
        assert old in text, f"deploy/nginx/ragtrail.conf no longer holds {old!r}"
        text = text.replace(old, new)
    return text


def main_config(folder: Path, site: Path) -> str:
    """nginx.conf as Debian's (worker connections, mime types), with its files in `folder`."""
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers open the root-owned socket
    temp = "".join(
        f"  {kind}_temp_path {folder / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        f"{user}daemon off;\nworker_processes 1;\npid {folder / 'nginx.pid'};\nerror_log {folder / 'error.log'} warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n  include /etc/nginx/mime.types;\n  default_type application/octet-stream;\n"
        f"  access_log off;\n{temp}  include {site};\n}}\n"
    )


@dataclass
class Deployment:
    folder: Path
    socket_path: Path
    http_port: int
    https_port: int
    web: subprocess.Popen
    nginx: subprocess.Popen

    @property
    def tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.folder / "fullchain.pem"))
        return context


def _wait(check, seconds: float, what: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {process.returncode}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not happen within {seconds:.0f} s")


def _unix_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(2)
        probe.connect(str(path))
    return True


def _tcp_answers(port: int) -> bool:
    socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return True


def _stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@contextmanager
def deployed(folder: Path, env: dict[str, str], workers: int = 2, wait: bool = True) -> Iterator[Deployment]:
    """gunicorn (the repo's config) on a unix socket in `folder`, nginx (the repo's site file)
    in front on two free ports; `env` is gunicorn's environment (database, cache, secret key)."""
    folder.mkdir(parents=True, exist_ok=True)
    # A short path: a unix socket's is at most 107 bytes.
    socket_path = Path(tempfile.mkdtemp(prefix="ragtrail-")) / "web.sock"
    cert, key = self_signed(folder)
    http_port, https_port = free_port(), free_port()
    site = folder / "ragtrail.conf"
    site.write_text(site_config(socket_path, http_port, https_port, cert, key), encoding="utf-8")
    (folder / "nginx.conf").write_text(main_config(folder, site), encoding="utf-8")
    web_env = {
        **env,
        "RAGTRAIL_BIND": f"unix:{socket_path}",
        "RAGTRAIL_WORKERS": str(workers),
        "RAGTRAIL_TRUSTED_PROXIES": "unix",
        "RAGTRAIL_HTTPS": "1",
        "RAGTRAIL_ALLOWED_HOSTS": "127.0.0.1",
        "RAGTRAIL_STATE_DIR": str(folder / "state"),
        "RAGTRAIL_DEBUG": "0",
    }
    web_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = open(folder / "web.log", "w")
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "ragtrail_site/gunicorn_conf.py", "ragtrail_site.wsgi"],
        cwd=ROOT,
        env=web_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    nginx = None
    try:
        nginx = subprocess.Popen(
            [shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(folder / "nginx.conf"), "-p", str(folder)],
            stdout=subprocess.DEVNULL,
            stderr=open(folder / "nginx.stderr", "w"),
        )
        _wait(lambda: _tcp_answers(https_port), 30, "nginx listening", nginx)
        if wait:  # the socket nginx opens appears once a worker has its model warm
            _wait(lambda: _unix_answers(socket_path), 120, "gunicorn answering on its socket", web)
        yield Deployment(folder, socket_path, http_port, https_port, web, nginx)
    finally:
        _stop(*([nginx] if nginx else []), web)
        log.close()
        shutil.rmtree(socket_path.parent, ignore_errors=True)


@contextmanager
def through_proxy(deployment: Deployment) -> Iterator[None]:
    """evaluation.loadgen's clients speak TLS to nginx and stamp nothing (nginx does)."""
    from evaluation.loadgen import Connection

    saved = Connection.tls, Connection.proxy_stamp
    Connection.tls, Connection.proxy_stamp = deployment.tls, False
    try:
        yield
    finally:
        Connection.tls, Connection.proxy_stamp = saved


def post(deployment: Deployment, path: str, key: str, body: dict) -> int:
    """A JSON POST through nginx, as an agent sends it; its status."""
    conn = http.client.HTTPSConnection("127.0.0.1", deployment.https_port, context=deployment.tls, timeout=30)
    try:
        conn.request(
            "POST", path, json.dumps(body), {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        )
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


# The hostile clients: each holds one connection and sends as slowly as the server allows.


@dataclass(frozen=True)
class Target:
    """Where hostile clients connect: nginx's TLS port, or gunicorn alone on plain TCP."""

    port: int
    tls: ssl.SSLContext | None = None

    @classmethod
    def of(cls, deployment: Deployment) -> "Target":
        return cls(deployment.https_port, deployment.tls)


def _connect(target: Target) -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", target.port), timeout=30)
    return target.tls.wrap_socket(raw, server_hostname="127.0.0.1") if target.tls else raw


def _head(path: str, key: str | None, length: int | None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if key:
        lines.append(f"Authorization: Bearer {key}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


KINDS = ("slow-headers", "slow-body", "lying-length")


def hostile(target: Target, kind: str, path: str, key: str | None, stop: threading.Event, every_s: float = 2.0):
    """One client until `stop`, reconnecting whenever the server drops it:
    "slow-headers" (its request line and headers a byte every `every_s`), "slow-body" (whole
    headers, then its body a byte at a time), "lying-length" (a Content-Length far past what it
    sends, then nothing)."""
    body = b'{"query": "Where do visitors park?"}'
    while not stop.is_set():
        try:
            with _connect(target) as conn:
                if kind == "slow-headers":
                    for byte in _head(path, key, len(body)):
                        conn.sendall(bytes([byte]))
                        if stop.wait(every_s):
                            return
                elif kind == "slow-body":
                    conn.sendall(_head(path, key, len(body)))
                    for byte in body:
                        conn.sendall(bytes([byte]))
                        if stop.wait(every_s):
                            return
                else:  # lying-length
                    conn.sendall(_head(path, key, 1_000_000) + body[:10])
                    conn.settimeout(every_s)
                    while not stop.is_set():
                        try:
                            if not conn.recv(4096):
                                break  # the server gave up on it: come back
                        except socket.timeout:
                            continue
        except (OSError, ssl.SSLError):
            if stop.wait(0.2):
                return


@contextmanager
def attackers(target: Deployment | Target, path: str, key: str | None, each: int = 8) -> Iterator[None]:
    """`each` clients of every hostile kind, keyless and as many keyed, running while the block runs."""
    target = Target.of(target) if isinstance(target, Deployment) else target
    stop = threading.Event()
    threads = [
        threading.Thread(target=hostile, args=(target, kind, path, who, stop), daemon=True)
        for kind in KINDS
        for who in (None, key)
        for _ in range(each)
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)  # every one of them connected and sending
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
