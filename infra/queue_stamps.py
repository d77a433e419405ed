"""The headers a request's queueing time is read from: gunicorn's worker stamps its own
(after removing any the client sent), a proxy may stamp X-Request-Start. Standard library
only: gunicorn's master imports this with the worker class, before Django is set up."""

from __future__ import annotations

OWN_STAMP = "X-RAGTRAIL-QUEUED-AT"
PROXY_STAMP = "X-REQUEST-START"


def trusted_proxies(value: str) -> frozenset[str]:
    """The addresses whose X-Request-Start is believed (RAGTRAIL_TRUSTED_PROXIES: comma-separated)."""
    return frozenset(part.strip() for part in value.split(",") if part.strip())
