"""API keys: a bearer key grants a list of scopes and is stored only as a hash."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from functools import lru_cache
from typing import Iterable

from django.conf import settings
from django.db import connection, models
from django.utils import timezone

from infra.prepared import prepared_cursor

KEY_PREFIX = "rt_"


def _hash_secret(secret: str) -> str:
    # Keys are 190 random bits, so one fast salted hash is enough; the secret key
    # as salt keeps a leaked table from being checked against guessed keys.
    return hmac.new(settings.SECRET_KEY.encode(), secret.encode(), hashlib.sha256).hexdigest()


@lru_cache(maxsize=4)
def _scope_with_key_query(vendor: str) -> tuple[str, list[str], list[tuple]]:
    """The statement, the Scope fields it reads in order, and each field's converters (what
    the database returns becomes Python values the way the ORM does it: SQLite's datetimes
    are text, for one). Built once per database."""
    scope = ApiKey.scopes.field.related_model  # scopes.models.Scope (which imports this module)
    fields = scope._meta.concrete_fields
    sql = (
        "SELECT " + ", ".join(f"s.{f.column}" for f in fields) + ", k.id, k.secret_hash, k.name, k.writes_sections "
        f"FROM {scope._meta.db_table} s "
        f"JOIN {ApiKey.scopes.through._meta.db_table} g ON g.scope_id = s.id "
        f"JOIN {ApiKey._meta.db_table} k ON k.id = g.apikey_id "
        "WHERE s.slug = %s AND k.lookup = %s AND k.revoked_at IS NULL"
    )
    columns = [f.get_col(scope._meta.db_table) for f in fields]
    converters = [(col, connection.ops.get_db_converters(col) + col.get_db_converters(connection)) for col in columns]
    return sql, [f.attname for f in fields], converters


def _scope_with_granting_key(slug: str, lookup: str) -> tuple[models.Model, int, str, str, bool] | None:
    """The scope and the live key of this lookup that grants it, in one prepared query.

    Every API request runs it: written out, it skips the ORM's query building and, on
    PostgreSQL, planning (about 1 ms of a lexical recall's 5)."""
    sql, attnames, converters = _scope_with_key_query(connection.vendor)
    with prepared_cursor() as cursor:
        cursor.execute(sql, [slug, lookup])
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row[: len(attnames)])
    for i, (expression, field_converters) in enumerate(converters):
        for convert in field_converters:
            values[i] = convert(values[i], expression, connection)
    scope = ApiKey.scopes.field.related_model.from_db(connection.alias, attnames, values)
    return scope, row[-4], row[-3], row[-2], bool(row[-1])


class ApiKeyQuerySet(models.QuerySet):
    def authenticate(self, presented: str, scope_slug: str | None = None) -> "ApiKey | None":
        """Returns the live key matching a presented `rt_<lookup>_<secret>` string, or None.

        With the scope the request names, the key and that scope are read in one query
        where the key grants it (recall's common case: one round trip fewer); `grants`
        then answers for that scope without another.
        """
        if not presented.startswith(KEY_PREFIX):
            return None
        lookup, _, secret = presented[len(KEY_PREFIX) :].partition("_")
        if not lookup or not secret:
            return None
        if scope_slug:
            found = _scope_with_granting_key(scope_slug, lookup)
            if found is not None:
                scope, key_id, key_hash, key_name, writes_sections = found
                if not hmac.compare_digest(key_hash, _hash_secret(secret)):
                    return None
                key = ApiKey(
                    id=key_id, lookup=lookup, secret_hash=key_hash, name=key_name, writes_sections=writes_sections
                )
                key.granted = {scope_slug: scope}
                return key
        key = self.filter(lookup=lookup, revoked_at__isnull=True).first()
        if key is None or not hmac.compare_digest(key.secret_hash, _hash_secret(secret)):
            return None
        return key


class ApiKey(models.Model):
    """A bearer key for agents; it grants a list of scopes and is stored only as a hash."""

    name = models.CharField(max_length=200, blank=True)
    owner = models.CharField(max_length=200, blank=True, help_text="Who answers for this key (a team, a person).")
    lookup = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    scopes = models.ManyToManyField("scopes.Scope", related_name="api_keys")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Its reports and labels no longer count (scopes/keys.py): set with a revocation, reversible.
    set_aside_at = models.DateTimeField(null=True, blank=True)
    set_aside_by = models.CharField(max_length=150, blank=True)
    # Counted again after a set-aside: the trails it re-decided stay listed until an operator acknowledges.
    moved_unacknowledged_at = models.DateTimeField(null=True, blank=True)
    # Writing sections decides what recall validates against (a trail whose sections all changed goes
    # stale for good): an agent's key without it cannot switch a trail off through the store.
    writes_sections = models.BooleanField(
        default=True,
        help_text="May put, sync and delete the scopes' sections (a docs-sync key). Off for an agent's key: "
        "it then asks, records and reports only.",
    )

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{KEY_PREFIX}{self.lookup}_… {self.name}".strip()

    @property
    def reporter(self) -> str:
        """How its reports and labels name it (scopes.auth.reporter)."""
        return f"key:{self.lookup}"

    def assign_secret(self) -> str:
        """Gives an unsaved key its lookup and secret; returns the full key text, to show once."""
        secret = secrets.token_urlsafe(24)
        self.lookup = secrets.token_hex(6)
        self.secret_hash = _hash_secret(secret)
        return f"{KEY_PREFIX}{self.lookup}_{secret}"

    @classmethod
    def issue(
        cls, scopes: Iterable[models.Model], name: str = "", writes_sections: bool = True
    ) -> tuple["ApiKey", str]:
        """Creates a key for these scopes; returns it with the full key text, shown only now."""
        key = cls(name=name, writes_sections=writes_sections)
        full_key = key.assign_secret()
        key.save()
        key.scopes.set(list(scopes))
        return key, full_key

    def grants(self, scope_slug: str) -> models.Model | None:
        """Returns the scope with this slug if the key grants it, else None (never telling which)."""
        granted = self.__dict__.setdefault("granted", {})
        if scope_slug not in granted:  # else read with the key, or asked before, in the same request
            granted[scope_slug] = self.scopes.filter(slug=scope_slug).first()
        return granted[scope_slug]
