"""gunicorn settings for production: `gunicorn -c ragtrail_site/gunicorn_conf.py ragtrail_site.wsgi`.

Every value can be set from the environment (RAGTRAIL_BIND, RAGTRAIL_WORKERS, ...).
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import time

from infra.env import env_int, env_str

# Production: a unix socket behind nginx, which buffers slow clients (docs/production.md).
bind = env_str("RAGTRAIL_BIND", "127.0.0.1:8000")
# The socket is the owner's and its group's (nginx's user joins the group), nobody else's.
umask = 0o007


def _answers(path: str) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(0.5)
            probe.connect(path)
        return True
    except OSError:
        return False


# On unix:PATH gunicorn listens at PATH.listening; PATH is linked once a worker is warm (operating.md).
_public = bind.removeprefix("unix:") if bind.startswith("unix:") else None
if _public:
    os.makedirs(os.path.dirname(_public), exist_ok=True)
    if os.path.islink(_public) and not _answers(_public):
        os.unlink(_public)  # a previous run's link (a reload keeps a live one)
    bind = f"unix:{_public}.listening"
# gunicorn's control socket in this deployment's own state folder, not one $HOME shared by all.
_state_dir = env_str("RAGTRAIL_STATE_DIR", "") or os.path.join(os.path.dirname(os.path.dirname(__file__)), ".celery")
os.makedirs(_state_dir, exist_ok=True)
# Without a state folder of its own, one per port: servers of one checkout (tests, benchmarks) keep apart.
_own = env_str("RAGTRAIL_STATE_DIR", "") or _public
control_socket = os.path.join(_state_dir, "gunicorn.ctl" if _own else f"gunicorn-{bind.rsplit(':', 1)[-1]}.ctl")
# systemd (Type=notify) hears "ready" from the first warm worker, not from the master as it binds.
_notify_socket = os.environ.pop("NOTIFY_SOCKET", None)
# Recall is CPU-bound (a query embedding is ~5 ms of CPU in ONNX Runtime): one process per core, each
# with a few threads for the time spent waiting on PostgreSQL and Redis.
workers = env_int("RAGTRAIL_WORKERS", os.cpu_count() or 2)
# gthread, stamping when a request was queued for a thread: overload is shed with no proxy in
# front too (ragtrail_site/gunicorn_worker.py; a proxy's X-Request-Start, when sent, is kept).
worker_class = "ragtrail_site.gunicorn_worker.StampingThreadWorker"
threads = env_int("RAGTRAIL_THREADS", 4)
# A request past this is killed; the database and cache time out well before (settings).
timeout = env_int("RAGTRAIL_WORKER_TIMEOUT_S", 30)
graceful_timeout = 30
keepalive = 5
# Recycle workers now and then, so a slow leak cannot grow without bound.
max_requests = env_int("RAGTRAIL_MAX_REQUESTS", 100_000)
max_requests_jitter = max_requests // 10
accesslog = env_str("RAGTRAIL_ACCESS_LOG", "-")
# The path without its query string (%(U)s): queries and ids in URLs stay out of the log.
access_log_format = '%(h)s "%(m)s %(U)s %(H)s" %(s)s %(B)s %(M)sms'
errorlog = "-"
# Load the app (and so Django) once, then fork: workers share its memory.
preload_app = True

# Prometheus metrics from every worker process, read as one by /metrics (prometheus-client's
# multiprocess mode). The folder is set here, in the master, before the app (and so
# prometheus_client) is loaded, and the files of processes no longer running are removed:
# values of a previous run would be added in. A live process's files stay, so a restart of the
# web server keeps the Celery worker's (give it the same PROMETHEUS_MULTIPROC_DIR) and its
# jobs' last successes: no "never reported" alert on a healthy worker.
_metrics_dir = os.environ.setdefault(
    "PROMETHEUS_MULTIPROC_DIR",
    env_str("RAGTRAIL_METRICS_DIR", "")
    # On a unix socket, the deployment's own state folder (the systemd units' PrivateTmp keeps /tmp apart).
    or (os.path.join(_state_dir, "metrics") if bind.startswith("unix:") else "")
    or os.path.join(tempfile.gettempdir(), f"ragtrail-metrics-{bind.rsplit(':', 1)[-1]}"),
)
os.makedirs(_metrics_dir, exist_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


for _name in os.listdir(_metrics_dir):
    _pid = _name.removesuffix(".db").rsplit("_", 1)[-1]
    if _name.endswith(".db") and not (_pid.isdigit() and _running(int(_pid))):
        os.remove(os.path.join(_metrics_dir, _name))


def _link(target: str, path: str) -> None:
    # Made beside and renamed into place: the path is never missing once it was there.
    fresh = f"{path}.{os.getpid()}"
    os.symlink(target, fresh)
    os.replace(fresh, path)


def on_exit(server) -> None:
    if _public and os.path.islink(_public):
        os.unlink(_public)


def child_exit(server, worker) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def post_worker_init(worker) -> None:
    """Loads the embedding model as the worker starts, not on its first recall (~15 s)."""
    from django.conf import settings

    started = time.perf_counter()
    from trails.embedders import get_embedder
    from trails.embedders.base import EmbedderUnavailable

    try:
        embedder = get_embedder()
        embedder.embed("warm up")
    except EmbedderUnavailable as away:  # an endpoint away at start: lexical scopes serve, the first recall asks again
        logging.getLogger("gunicorn.error").warning("worker %s: %s", worker.pid, away.message)
    else:
        logging.getLogger("gunicorn.error").info(
            "worker %s: embedding model %s (%s) loaded in %.1f s",
            worker.pid,
            settings.RAGTRAIL_EMBEDDING_MODEL,
            embedder.name,
            time.perf_counter() - started,
        )
    if _public:
        _link(os.path.basename(_public) + ".listening", _public)
    if _notify_socket:
        from gunicorn import systemd

        os.environ["NOTIFY_SOCKET"] = _notify_socket
        systemd.sd_notify(f"READY=1\nSTATUS=worker {worker.pid} serving, its model warm", worker.log, True)
