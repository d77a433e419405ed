"""A trigram index for the trails table's text search, on PostgreSQL only.

The operator page's `query__icontains` is `UPPER(query::text) LIKE UPPER('%…%')`; without
an index it reads every trail of the scope (280 ms median at 100,000 trails in
benchmark_overview). pg_trgm is a trusted extension (PostgreSQL 13+): a database owner
may create it. Where it cannot be created the index is skipped and search still works.
"""

from django.db import migrations, transaction


def create(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            cursor.execute(
                "CREATE INDEX IF NOT EXISTS trail_query_trgm ON trails_trail USING gin (UPPER(query) gin_trgm_ops)"
            )
    except Exception as problem:  # noqa: BLE001 - no privilege for the extension: search works without the index
        print(f"\n  trails.0002: trigram index skipped ({problem}); the trails search reads every trail")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("DROP INDEX IF EXISTS trail_query_trgm")


class Migration(migrations.Migration):
    dependencies = [("trails", "0001_initial")]
    operations = [migrations.RunPython(create, drop)]
