"""The headers a request's queueing time is read from: gunicorn's worker stamps its own
(after removing any the client sent), a proxy may stamp X-Request-Start. Standard library
only: gunicorn's master imports this with the worker class, before Django is set up."""

from __future__ import annotations

OWN_STAMP = "X-RAGTRAIL-QUEUED-AT"
PROXY_STAMP = "X-REQUEST-START"


def trusted_proxies(value: str) -> frozenset[str]:
    """The addresses whose X-Request-Start is believed (RAGTRAIL_TRUSTED_PROXIES: comma-separated)."""
    return frozenset(part.strip() for part in value.split(",") if part.strip())


# How RAGTRAIL_TRUSTED_PROXIES names a peer on gunicorn's unix socket (which has no address):
# only what may open the socket (the proxy, by its file permissions) connects there.
UNIX = "unix"


def peer_of(address: object) -> str | None:
    """A connection's peer as RAGTRAIL_TRUSTED_PROXIES names it: its IP, or "unix"."""
    if isinstance(address, (tuple, list)) and address:
        return str(address[0])
    if isinstance(address, (str, bytes)):
        return UNIX
    return None
