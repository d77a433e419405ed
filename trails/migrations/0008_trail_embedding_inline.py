"""Keeps a trail's embedding in its row, on PostgreSQL only.

A 1.5 kB embedding took the row past PostgreSQL's 2 kB TOAST threshold, so it was kept out of
line: reading a candidate cost a probe of the TOAST index and a TOAST page besides the trail's
own page, four page reads where two do. At a million trails, where a recall reads up to its
nearest candidates, that was a third of the candidate read (benchmark_scale --interleaved: 1M
against 10k, p50 1.91x -> 1.61x, same store before and after). STORAGE MAIN with a row target
of 4 kB keeps it inline uncompressed (float32 does not compress); a longer row still moves its
longest text out first. The heap grows (two rows a page at fillfactor 75: 4.3 GB a million
trails, from 1.3 GB plus 1.7 GB of TOAST), and hit-count updates stayed HOT (710 of 710).
The settings apply to rows written from now on; VACUUM FULL trails_trail rewrites the old ones.
"""

from django.db import migrations

ROW_TARGET_BYTES = 4080


def keep_inline(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("ALTER TABLE trails_trail ALTER COLUMN embedding SET STORAGE MAIN")
            cursor.execute(f"ALTER TABLE trails_trail SET (toast_tuple_target = {ROW_TARGET_BYTES})")


def keep_out_of_line(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("ALTER TABLE trails_trail ALTER COLUMN embedding SET STORAGE EXTENDED")
            cursor.execute("ALTER TABLE trails_trail RESET (toast_tuple_target)")


class Migration(migrations.Migration):
    dependencies = [("trails", "0007_fewer_indexes_on_hot_writes")]
    operations = [migrations.RunPython(keep_inline, keep_out_of_line)]
