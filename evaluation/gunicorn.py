"""The service under gunicorn with the production config, for the benchmarks that measure it from outside."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from django.conf import settings
from django.core.management.base import CommandError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(port: int, workers: int, extra_env: dict | None = None) -> subprocess.Popen:
    """gunicorn on this process's database, answering on 127.0.0.1:port once this returns."""
    env = {
        # The load generator stamps X-Request-Start as a proxy on this machine would (its
        # mode without a proxy sends none): trusted from here unless the caller says otherwise.
        "RAGTRAIL_TRUSTED_PROXIES": "127.0.0.1",
        **os.environ,
        **(extra_env or {}),
        "RAGTRAIL_BIND": f"127.0.0.1:{port}",
        "RAGTRAIL_WORKERS": str(workers),
        # Production settings: DEBUG off (its query log costs time), this process's key
        # (API keys are checked with it), and no worker recycling, so memory growth shows.
        "RAGTRAIL_DEBUG": "0",
        "RAGTRAIL_SECRET_KEY": settings.SECRET_KEY,
        "RAGTRAIL_MAX_REQUESTS": "0",
    }
    conf = Path(settings.BASE_DIR) / "ragtrail_site" / "gunicorn_conf.py"
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(conf), "ragtrail_site.wsgi"],
        env=env,
        cwd=settings.BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise CommandError(f"gunicorn exited with {server.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.5)
    return server


def stop(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()


@contextmanager
def running(workers: int = 2, extra_env: dict | None = None) -> Iterator[tuple[int, subprocess.Popen]]:
    port = free_port()
    server = start(port, workers, extra_env)
    try:
        yield port, server
    finally:
        stop(server)
