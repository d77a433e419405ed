"""Strict readers of environment settings: a malformed value stops start-up with its name."""

from __future__ import annotations

import os
from urllib.parse import parse_qs, urlparse

import dj_database_url


class SettingError(ValueError):
    pass


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingError(f"{name} must be true or false, got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingError(f"{name} must be a whole number, got {raw!r}") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SettingError(f"{name} must be a number, got {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(
    url: str, base_dir: str, connect_timeout_s: int = 3, statement_timeout_ms: int = 5000, lock_timeout_ms: int = 2000
) -> dict:
    """Turns DATABASE_URL (sqlite:///path or postgres://user:pass@host:port/name?options)
    into Django's form, read by dj-database-url, with ragtrail's defaults added (the
    timeouts apply to PostgreSQL where the URL sets none of its own)."""
    engine = urlparse(url).scheme
    if engine not in {"sqlite", "postgres", "postgresql", "pgsql"}:
        raise SettingError(f"DATABASE_URL scheme {engine!r} is not supported (use sqlite or postgres)")
    try:
        database = dj_database_url.parse(url)
    except ValueError as problem:
        raise SettingError(f"DATABASE_URL cannot be read: {problem}") from None
    if engine == "sqlite":
        name = database["NAME"] or "db.sqlite3"
        # sqlite:///db.sqlite3 is relative to the project (not to where a command runs),
        # sqlite:////abs/path is absolute, sqlite:///:memory: is a database in memory.
        if name != ":memory:" and not os.path.isabs(name):
            name = os.path.join(base_dir, name)
        database["NAME"] = name
        # WAL with NORMAL sync: a commit no longer waits on fsync, which otherwise
        # dominates every recall's event write on a laptop.
        database["OPTIONS"] = {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
        }
        return database
    options = database.setdefault("OPTIONS", {})
    # Django turns psycopg's statement preparation off; recall's candidate read uses a
    # server-binding cursor that psycopg prepares after five runs (see trails.serving.candidates).
    # Behind a transaction-pooling PgBouncer, set prepare_threshold= (empty) in the URL
    # (an empty value, which dj-database-url drops, so it is read here).
    threshold = parse_qs(urlparse(url).query, keep_blank_values=True).get("prepare_threshold", ["5"])[-1]
    options.pop("prepare_threshold", None)
    options["prepare_threshold"] = int(threshold) if threshold else None
    # A database that is down or overloaded must fail a request fast (the API then
    # answers 503), not hold a worker: connect in seconds, no statement or lock wait
    # past its budget. No JIT: a recall's candidate read is planned at a cost past
    # jit_above_cost (the planner's count of key rows is a guess) and runs in about a
    # millisecond; compiling it took 10 ms of 12 at a million trails. No statement of this
    # service runs long enough to gain from JIT. The URL's own values win.
    options.setdefault("connect_timeout", connect_timeout_s)
    if "options" not in options:
        options["options"] = f"-c statement_timeout={statement_timeout_ms} -c lock_timeout={lock_timeout_ms} -c jit=off"
    database["PORT"] = str(database.get("PORT") or "")
    database["CONN_MAX_AGE"] = 60
    # A kept connection the server dropped (a database restart) is replaced before a request uses it.
    database["CONN_HEALTH_CHECKS"] = True
    return database
