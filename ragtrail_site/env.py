"""Strict readers of environment settings: a malformed value stops start-up with its name."""
from __future__ import annotations

import os
from urllib.parse import parse_qs, unquote, urlparse


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


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(url: str, base_dir: str) -> dict:
    """Turns DATABASE_URL (sqlite:///path or postgres://user:pass@host:port/name) into Django's form."""
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = unquote(parsed.path)
        # sqlite:///db.sqlite3 is relative to the project, sqlite:////abs/path is absolute.
        if path.startswith("//"):
            path = path[1:]
        elif path.startswith("/"):
            path = os.path.join(base_dir, path[1:])
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path or os.path.join(base_dir, "db.sqlite3"),
            # WAL with NORMAL sync: a commit no longer waits on fsync, which otherwise
            # dominates every recall's event write on a laptop.
            "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", "transaction_mode": "IMMEDIATE"},
        }
    if parsed.scheme in {"postgres", "postgresql", "pgsql"}:
        options: dict = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        # Django turns psycopg's statement preparation off; recall's candidate read uses a
        # server-binding cursor that psycopg prepares after five runs (see trails.models).
        # Behind a transaction-pooling PgBouncer, set prepare_threshold= (empty) in the URL.
        threshold = options.pop("prepare_threshold", "5")
        options["prepare_threshold"] = int(threshold) if threshold else None
        # A database that is down or overloaded must fail a request fast (the API then
        # answers 503), not hold a worker: connect in seconds, no statement or lock wait
        # past its budget. The URL's own values win.
        options.setdefault("connect_timeout", os.environ.get("RAGTRAIL_DB_CONNECT_TIMEOUT_S", "3"))
        if "options" not in options:
            statement = os.environ.get("RAGTRAIL_DB_STATEMENT_TIMEOUT_MS", "5000")
            lock = os.environ.get("RAGTRAIL_DB_LOCK_TIMEOUT_MS", "2000")
            options["options"] = f"-c statement_timeout={int(statement)} -c lock_timeout={int(lock)}"
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": 60,
        }
    raise SettingError(f"DATABASE_URL scheme {parsed.scheme!r} is not supported (use sqlite or postgres)")
