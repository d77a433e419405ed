"""Room on each trails page for a hit's new row version, on PostgreSQL only.

Every prefetch updates its trail's hit_count and last_hit_at. Neither column is indexed,
so PostgreSQL can write the new version on the same page and skip every index (a HOT
update), but only where the page has room: bulk-filled pages at the default fillfactor
(100) have none, and at 100,000 trails only about a fifth of the updates were HOT, each
of the rest writing an entry in all seven of the table's indexes (benchmark_scale prints
the share). A trail row is about 1.6 kB, so 75 leaves one version's room on a page of
about five. The setting applies to pages written from now on; VACUUM FULL trails_trail
rewrites the old ones.
"""

from django.db import migrations

FILLFACTOR = 75


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE trails_trail SET (fillfactor = {FILLFACTOR})")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("ALTER TABLE trails_trail RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("trails", "0005_overview_indexes")]
    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor)]
