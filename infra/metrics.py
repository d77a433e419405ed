"""The service's Prometheus metrics (prometheus-client), and the protected /metrics view.

Under gunicorn every worker is a process of its own: with PROMETHEUS_MULTIPROC_DIR set (the
production config sets it), prometheus-client writes each process's values to files there and
/metrics reads them all, so a scrape sees the whole service whichever worker answers it, the
Celery worker included when it shares the folder. Without it (a laptop, tests) the process's
own registry is read.

Labels are bounded sets only: outcome, matcher, the URL pattern (not the path), status, signal,
task name, the tool of a configured policy ("unlisted" otherwise). Scope slugs are not a label:
scopes are created at will, and a label per scope would grow the series without bound; what
differs by scope is on the operator pages, and the alerts that need scopes read gauges that
count them (scopes over their false-hit bound, scopes whose threshold is at its ceiling).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import time

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from infra import refusals

# Recall's budget is 500 ms by default: buckets that tell a healthy 5 ms from a budget-eating 400 ms.
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

HTTP_REQUESTS = Counter(
    "ragtrail_http_requests_total",
    "API requests answered, by URL pattern, method and status",
    ["route", "method", "status"],
)
HTTP_SECONDS = Histogram(
    "ragtrail_http_request_seconds", "API request time in the app, by URL pattern", ["route"], buckets=LATENCY_BUCKETS
)
RECALLS = Counter(
    "ragtrail_recalls_total", "Recalls answered (dry runs excluded), by outcome and matcher", ["outcome", "matcher"]
)
RECALL_LOOKUP_SECONDS = Histogram(
    "ragtrail_recall_lookup_seconds",
    "Recall's own work (sign, candidates, validation, the event write), without HTTP",
    buckets=LATENCY_BUCKETS,
)
SHED = Counter("ragtrail_shed_total", "Requests answered 503 to shed load or because a store was away", ["reason"])
QUEUE_WAIT = Histogram(
    "ragtrail_queue_wait_seconds",
    "Time an API request waited before the app (X-Request-Start)",
    buckets=LATENCY_BUCKETS,
)
RECORDS = Counter(
    "ragtrail_records_total", "Trails recorded, by the signal sent and the status given", ["signal", "status"]
)
FALSE_HIT_REPORTS = Counter("ragtrail_false_hit_reports_total", "Recalls reported not helpful (false hits)")
THRESHOLD_CHANGES = Counter(
    "ragtrail_threshold_changes_total", "Moves of a scope's threshold in use, by cause", ["cause"]
)
# Not in RECALLS: the recall it follows was counted there already, as a miss.
SECOND_CHANCES = Counter(
    "ragtrail_second_chances_total", "Second chances asked after a miss, by outcome (miss: none given)", ["outcome"]
)
STALE_MARKS = Counter("ragtrail_stale_marks_total", "Trails marked stale by recall (none of their sections unchanged)")
TOOL_LOOKUPS = Counter(
    "ragtrail_tool_result_lookups_total", "Tool-result cache lookups, by tool and result", ["tool", "result"]
)
TASK_RUNS = Counter("ragtrail_task_runs_total", "Background job runs, by task and end state", ["task", "state"])
TASK_LAST_SUCCESS = Gauge(
    "ragtrail_task_last_success_timestamp_seconds",
    "When each background job last succeeded",
    ["task"],
    multiprocess_mode="max",
)
MODEL_LOAD_SECONDS = Gauge(
    "ragtrail_model_load_seconds", "How long the embedding model took to load, per process", multiprocess_mode="max"
)
EMBEDDING_SECONDS = Histogram(
    "ragtrail_embedding_seconds",
    "Time the embedding model took for a call (cache misses only)",
    buckets=LATENCY_BUCKETS,
)
STORE_ERRORS = Counter("ragtrail_store_errors_total", "Database and cache errors, by store and kind", ["store", "kind"])
SCOPES_OVER_BOUND = Gauge(
    "ragtrail_scopes_over_false_hit_bound",
    "Scopes whose false-hit reports in the last hour exceed their bound (set by the roll-up)",
    multiprocess_mode="mostrecent",
)
SCOPES_AT_CEILING = Gauge(
    "ragtrail_scopes_threshold_at_ceiling",
    "Scopes whose learned threshold sits at its ceiling (set by the roll-up)",
    multiprocess_mode="mostrecent",
)
# One series per kind of flag the overview shows (a bounded label: ceiling, reporter).
SCOPES_FLAGGED = Gauge(
    "ragtrail_scopes_flagged",
    "Scopes flagged for an operator, by the flag's kind (set by the roll-up)",
    ["flag"],
    multiprocess_mode="mostrecent",
)


class _Off:
    """A metric that records nothing (RAGTRAIL_METRICS=off)."""

    def labels(self, *args, **kwargs):
        return self

    def inc(self, *args, **kwargs) -> None:
        pass

    observe = set = inc


if not settings.RAGTRAIL_METRICS:
    # For a service nobody scrapes, and the benchmark's baseline: every metric a no-op.
    for _name, _metric in list(globals().items()):
        if isinstance(_metric, (Counter, Gauge, Histogram)):
            globals()[_name] = _Off()


def registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        collected = CollectorRegistry()
        multiprocess.MultiProcessCollector(collected)
        return collected
    return REGISTRY


def _allowed(request: HttpRequest) -> bool:
    token = settings.RAGTRAIL_METRICS_TOKEN
    if token:
        presented = request.headers.get("Authorization", "")
        if presented.startswith("Bearer ") and hmac.compare_digest(presented[7:].encode(), token.encode()):
            return True
    if settings.RAGTRAIL_METRICS_ALLOW:
        try:
            client = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
        except ValueError:
            return False
        return any(client in network for network in settings.RAGTRAIL_METRICS_ALLOW)
    return False


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition, for a scraper with the bearer token or from an allowed network.
    With neither configured the endpoint does not exist (404): never public by default."""
    if not (settings.RAGTRAIL_METRICS_TOKEN or settings.RAGTRAIL_METRICS_ALLOW):
        raise Http404("metrics are off")
    if not _allowed(request):
        response = HttpResponse(
            "a metrics token (Authorization: Bearer ...) or an allowed address is required\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = "Bearer"
        return response
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)


access_log = logging.getLogger("ragtrail.access")
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _match(request: HttpRequest):
    match = getattr(request, "resolver_match", None)
    if match is None:
        # Shed before URL resolution: resolve here, so a 503 counts under its route too.
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return None
    return match


class MetricsMiddleware:
    """Counts and times every API request by its URL pattern (a bounded set), load-shed 503s
    included (it sits before the load-shedding middleware); with RAGTRAIL_LOG_FORMAT=json it
    also writes one access line per API request: method, route, status, duration, scope, and
    recall's outcome, never the path's values beyond the scope, the query string or the body."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        started = time.perf_counter()
        tokens = refusals.begin()
        try:
            response = self.get_response(request)
        finally:
            reason, let_in = refusals.end(tokens)
        elapsed = time.perf_counter() - started
        match = _match(request)
        route = match.route if match is not None and match.route else "unmatched"
        # Labels stay a bounded set whatever a client sends: a made-up method is "other".
        method = request.method if request.method in KNOWN_METHODS else "other"
        HTTP_REQUESTS.labels(route, method, str(response.status_code)).inc()
        HTTP_SECONDS.labels(route).observe(elapsed)
        refusals.tally(refusals.whose(let_in), response.status_code, reason)
        if access_log.isEnabledFor(logging.INFO):
            access_log.info(
                "request",
                extra={
                    "method": request.method,
                    "route": route,
                    "status": response.status_code,
                    "duration_ms": round(elapsed * 1000, 2),
                    "scope": (match.kwargs.get("scope") or match.kwargs.get("scope_slug") if match else None),
                    "outcome": getattr(request, "ragtrail_outcome", None),
                },
            )
        return response


def shed(reason: str) -> None:
    """A request answered 503 on purpose: counted by reason (the series the alerts read) and
    told to the request's tally, which keeps the last minutes by cause and scope."""
    SHED.labels(reason).inc()
    refusals.refused(reason)


def count_task_runs() -> None:
    """Counts every Celery task's runs by end state, and stamps its last success (for the
    'roll-up or sweep has not run' alerts). Connected once, at app ready."""
    from celery.signals import task_postrun

    def counted(sender=None, task=None, state=None, **kwargs) -> None:
        name = getattr(task, "name", None) or getattr(sender, "name", "unknown")
        TASK_RUNS.labels(name, state or "UNKNOWN").inc()
        if state == "SUCCESS":
            TASK_LAST_SUCCESS.labels(name).set(time.time())
            # The worker's heartbeat for the operator pages, through the shared cache (Redis in
            # production); a cache that is away never fails a job.
            try:
                from django.core.cache import caches

                caches["heartbeats"].set(f"rt:task-last-success:{name}", time.time(), None)
            except Exception:  # noqa: BLE001 -- any cache failure: the heartbeat is best effort
                pass

    task_postrun.connect(counted, weak=False, dispatch_uid="ragtrail.metrics.task_runs")

    from celery.signals import before_task_publish

    def sent(sender=None, **kwargs) -> None:
        # Only beat sends the heartbeat: its sending is beat's own pulse, apart from the worker's.
        if sender == HEARTBEAT_TASK:
            try:
                from django.core.cache import caches

                caches["heartbeats"].set(BEAT_SENT, time.time(), None)
            except Exception:  # noqa: BLE001 -- best effort, as above
                pass

    before_task_publish.connect(sent, weak=False, dispatch_uid="ragtrail.metrics.beat_sent")

    from celery.signals import beat_embedded_init, beat_init

    def started(embedded: bool) -> None:
        # Beat sends each job one period after it starts: a job not run since is not late before then.
        # Embedded (`worker --beat`, as `make run` starts it), beat stops with the worker: say the worker.
        try:
            from django.core.cache import caches

            caches["heartbeats"].set_many({BEAT_STARTED: time.time(), BEAT_EMBEDDED: embedded}, None)
        except Exception:  # noqa: BLE001 -- best effort, as above
            pass

    beat_init.connect(
        lambda sender=None, **kwargs: started(False), weak=False, dispatch_uid="ragtrail.metrics.beat_started"
    )
    beat_embedded_init.connect(
        lambda sender=None, **kwargs: started(True), weak=False, dispatch_uid="ragtrail.metrics.beat_embedded_started"
    )


HEARTBEAT_TASK = "trails.tasks.heartbeat_task"
BEAT_SENT = "rt:beat-sent-heartbeat"
BEAT_STARTED = "rt:beat-started"
BEAT_EMBEDDED = "rt:beat-embedded"


def beat_last_sent() -> float | None:
    """When beat last sent the heartbeat, as it told the shared cache (None: never heard from)."""
    from django.core.cache import caches

    try:
        return caches["heartbeats"].get(BEAT_SENT)
    except Exception:  # noqa: BLE001 -- a cache that is away: unknown
        return None


def beat_started() -> float | None:
    """When beat last started, as it told the shared cache (None: unknown)."""
    from django.core.cache import caches

    try:
        return caches["heartbeats"].get(BEAT_STARTED)
    except Exception:  # noqa: BLE001 -- a cache that is away: unknown
        return None


def beat_embedded() -> bool:
    """Whether beat last started inside a worker (`worker --beat`), as it told the shared cache."""
    from django.core.cache import caches

    try:
        return bool(caches["heartbeats"].get(BEAT_EMBEDDED))
    except Exception:  # noqa: BLE001 -- a cache that is away: unknown, as a beat of its own
        return False


ROLLED_UP = "rt:rolled-up-to"


def stamp_rolled_up(until: float) -> None:
    """The roll-up counted recalls up to `until` (a timestamp), whoever ran it."""
    from django.core.cache import caches

    try:
        caches["heartbeats"].set(ROLLED_UP, until, None)
    except Exception:  # noqa: BLE001 -- best effort, as the heartbeats
        pass


def rolled_up_until() -> float | None:
    """Until when the last roll-up counted recalls (None: no roll-up has run)."""
    from django.core.cache import caches

    try:
        return caches["heartbeats"].get(ROLLED_UP)
    except Exception:  # noqa: BLE001 -- a cache that is away: unknown
        return None


def last_successes(tasks: list[str]) -> dict[str, float | None]:
    """When each background job last succeeded, as the worker told the shared cache."""
    from django.core.cache import caches

    try:
        found = caches["heartbeats"].get_many([f"rt:task-last-success:{task}" for task in tasks])
    except Exception:  # noqa: BLE001 -- a cache that is away: unknown, not an error page
        found = {}
    return {task: found.get(f"rt:task-last-success:{task}") for task in tasks}
