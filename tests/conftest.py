from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from scopes.models import ApiKey, Scope, Section


class ApiClient:
    """A JSON client for one API key."""

    def __init__(self, key: str) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {key}"}

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None):
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        kwargs = {"content_type": "application/json", "headers": self.headers}
        if data is not None:
            kwargs["data"] = data
        return getattr(self.client, method)(f"/api/v1{path}", **kwargs)

    def put_sections(self, scope: str, sections: dict[str, str]):
        return self.call(
            "put", f"/scopes/{scope}/sections", {"sections": [{"id": k, "text": v} for k, v in sections.items()]}
        )

    def record(self, scope: str, **body):
        body.setdefault("signal", "accepted")
        return self.call("post", f"/scopes/{scope}/trails", body)

    def recall(self, scope: str, **body):
        return self.call("post", f"/scopes/{scope}/recall", body)


@pytest.fixture(autouse=True, scope="session")
def _job_queue_elsewhere(tmp_path_factory):
    """A job a test queues goes to a folder of the test run, never to the checkout's .celery/,
    where the next `make run` worker would run it against the demo's database."""
    from ragtrail_site.celery import app

    if app.conf.broker_url.startswith("filesystem"):
        folder = str(tmp_path_factory.mktemp("job-queue"))
        app.conf.broker_transport_options = {
            **app.conf.broker_transport_options,
            "data_folder_in": folder,
            "data_folder_out": folder,
            "control_folder": folder,
        }


@pytest.fixture(autouse=True, scope="session")
def _flush_between_transactional_tests_empties_every_table():
    """Django's flush between transactional tests empties the trail-owned tables too (a TRUNCATE on
    PostgreSQL, a DELETE on SQLite): it is the tests' own reset, let through the one-writer gate."""
    from django.core.management.commands import flush

    from tests.bypass import around_the_writer

    handle = flush.Command.handle

    def handle_around_the_writer(self, *args, **options):
        with around_the_writer():
            return handle(self, *args, **options)

    flush.Command.handle = handle_around_the_writer
    yield
    flush.Command.handle = handle


@pytest.fixture(autouse=True)
def _refusals_of_this_test_only(monkeypatch):
    """Each test counts the last minutes' requests and refusals afresh: the tallies of the
    tests before it (same scope slugs, same minute) are not in its window."""
    import uuid

    from infra import refusals

    monkeypatch.setattr(refusals, "_away_until", [0.0])
    tag, key = uuid.uuid4().hex[:8], refusals._key
    monkeypatch.setattr(refusals, "_key", lambda slot, name, what: key(slot, f"{tag}-{name}", what))


@pytest.fixture(autouse=True)
def _demo_credentials_elsewhere(settings, tmp_path):
    """No test writes the checkout's own demo credentials: `make run` keeps printing the key
    the README promises (load_demo keeps them in RAGTRAIL_DEMO_CREDENTIALS)."""
    settings.RAGTRAIL_DEMO_CREDENTIALS = tmp_path / "demo-credentials.json"


# The recall/record behaviours are matcher-independent; these scopes match lexically
# so those tests run without a model. tests/trails/test_semantic.py covers embeddings.
@pytest.fixture
def scope(db) -> Scope:
    return Scope.objects.create(slug="hospital", name="Hospital", matcher="lexical")


@pytest.fixture
def other_scope(db) -> Scope:
    return Scope.objects.create(slug="other", name="Other", matcher="lexical")


@pytest.fixture
def api(scope: Scope) -> ApiClient:
    _, key = ApiKey.issue([scope], name="test")
    return ApiClient(key)


@pytest.fixture
def other_api(other_scope: Scope) -> ApiClient:
    _, key = ApiKey.issue([other_scope], name="other")
    return ApiClient(key)


VISITING = {
    "visiting/icu": "Intensive care visiting hours are 14:00 to 16:00, two visitors at a time.",
    "visiting/ward": "General ward visiting hours are 10:00 to 20:00.",
    "parking": "Visitors park in car park B; the first hour is free.",
}


@pytest.fixture
def sections(scope: Scope) -> dict[str, str]:
    Section.upsert(scope, VISITING)
    return dict(VISITING)


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Runs what a block left for after its commit (labels, learning, re-signing) when the
    block ends, as a real commit would: the test's own transaction never commits."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def grant(user, *scopes: Scope, access: int = 3) -> None:
    """Gives an operator access to these scopes (3: configure, which includes view and act)."""
    from scopes.access import OperatorGrant

    for scope in scopes:
        OperatorGrant.objects.update_or_create(user=user, scope=scope, defaults={"access": access})


def service_env(**more: str) -> dict[str, str]:
    """The environment of a process a test starts (gunicorn, a worker, a command): the
    test database, this run's Redis prefix and job queue, the broker, and nothing of the
    caller's own RAGTRAIL_/CELERY_ settings unless given in `more`."""
    import os

    from django.db import connection

    db = connection.settings_dict
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGTRAIL_", "CELERY_"))}
    env.update(
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        RAGTRAIL_TEST_RUN=os.environ["RAGTRAIL_TEST_RUN"],
        RAGTRAIL_CACHE_PREFIX=os.environ["RAGTRAIL_CACHE_PREFIX"],
        RAGTRAIL_JOB_QUEUE=os.environ["RAGTRAIL_JOB_QUEUE"],
    )
    if os.environ.get("RAGTRAIL_CACHE_URL"):
        env["RAGTRAIL_CACHE_URL"] = os.environ["RAGTRAIL_CACHE_URL"]
    env.update(more)
    return env


def broker_for_tests() -> str:
    """The Redis broker tests' workers use: RAGTRAIL_TEST_BROKER, else the test cache's Redis
    (RAGTRAIL_CACHE_URL) on database 3; jobs go to this run's own queue either way."""
    import os
    from urllib.parse import urlsplit

    if os.environ.get("RAGTRAIL_TEST_BROKER"):
        return os.environ["RAGTRAIL_TEST_BROKER"]
    cache = urlsplit(os.environ.get("RAGTRAIL_CACHE_URL") or "redis://127.0.0.1:6379/1")
    return f"{cache.scheme}://{cache.netloc}/3"


def pytest_sessionstart(session) -> None:
    """Drops the test databases runs left behind when they could not drop their own (a
    connection still open at teardown): those whose run's process is gone. A run still going
    (another copy of the suite) keeps its database."""
    import os
    import re

    from django.conf import settings

    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("postgresql"):
        return
    import psycopg

    mine = re.compile(rf"^test_{re.escape(db['NAME'])}_(\d+)$")
    try:
        with psycopg.connect(
            # The maintenance database, as Django's test database creation uses.
            host=db["HOST"] or None,
            port=db["PORT"] or None,
            user=db["USER"],
            dbname="postgres",
            autocommit=True,
        ) as connection:
            names = [row[0] for row in connection.execute("SELECT datname FROM pg_database")]
            for name in names:
                found = mine.match(name)
                if found and not os.path.exists(f"/proc/{found.group(1)}"):
                    connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error:
        pass  # a leftover stays; this run's own database is made under its own name regardless


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """The test databases as pytest-django makes them; at teardown, their DROP runs without the
    service's statement and lock timeouts (on a loaded machine a 5 s DROP left an invalid
    database that broke the next run)."""
    yield
    from django.db import connections

    for connection in connections.all():
        options = connection.settings_dict.get("OPTIONS", {})
        if "options" in options:
            options["options"] = no_timeouts(options["options"])


def no_timeouts(options: str) -> str:
    """libpq's `options` with statement_timeout and lock_timeout off."""
    import re

    return re.sub(r"-c (statement_timeout|lock_timeout)=\d+", r"-c \1=0", options)
