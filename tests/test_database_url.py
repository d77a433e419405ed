"""DATABASE_URL is read by dj-database-url, with ragtrail's defaults on top (issue 29)."""

from __future__ import annotations

import os

import pytest

from infra.env import SettingError, database_from_url

BASE = "/srv/ragtrail"


def test_sqlite_paths_are_relative_to_the_project_absolute_or_in_memory():
    assert database_from_url("sqlite:///db.sqlite3", BASE)["NAME"] == os.path.join(BASE, "db.sqlite3")
    assert database_from_url("sqlite:////var/lib/ragtrail.db", BASE)["NAME"] == "/var/lib/ragtrail.db"
    # Not a file named ":memory:" in the checkout.
    assert database_from_url("sqlite:///:memory:", BASE)["NAME"] == ":memory:"
    assert database_from_url("sqlite://", BASE)["NAME"] == ":memory:"


def test_postgres_url_with_escapes_options_and_the_timeouts_that_fail_fast():
    database = database_from_url("postgres://ann:p%40ss%2Fword@db.internal:6432/ragtrail?sslmode=require", BASE)
    assert (
        database["ENGINE"],
        database["USER"],
        database["PASSWORD"],
        database["HOST"],
        database["PORT"],
        database["NAME"],
    ) == ("django.db.backends.postgresql", "ann", "p@ss/word", "db.internal", "6432", "ragtrail")
    options = database["OPTIONS"]
    assert options["sslmode"] == "require" and options["prepare_threshold"] == 5 and options["connect_timeout"] == 3
    assert "statement_timeout=" in options["options"] and database["CONN_MAX_AGE"] == 60


def test_an_empty_prepare_threshold_turns_preparation_off_for_pgbouncer():
    assert database_from_url("postgresql://u@h/db?prepare_threshold=", BASE)["OPTIONS"]["prepare_threshold"] is None
    assert database_from_url("postgres://u@h/db?prepare_threshold=0", BASE)["OPTIONS"]["prepare_threshold"] == 0


def test_the_urls_own_options_win():
    options = database_from_url("postgres://u@h/db?connect_timeout=10&options=-c%20statement_timeout%3D100", BASE)[
        "OPTIONS"
    ]
    assert options["connect_timeout"] == 10 and options["options"] == "-c statement_timeout=100"


@pytest.mark.parametrize("url", ["mysql://a@b/c", "redis://localhost:6379/0", "not a url"])
def test_an_unsupported_url_stops_start_up_naming_it(url):
    with pytest.raises(SettingError, match="DATABASE_URL"):
        database_from_url(url, BASE)
