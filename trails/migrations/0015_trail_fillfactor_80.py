"""Trail rows are about 680 bytes since vectors are int8 (0013): at fillfactor 75 a page took 8
of them (1,038 bytes of heap a trail at a million), at 80 it takes 9 (the disk per trail went
from 3,001 to 2,943 bytes) and still has room for two hit versions: every hit-count update
stayed HOT (708 of 708 at a million trails, benchmark_scale). PostgreSQL only; pages written
from now on (VACUUM FULL trails_trail rewrites the old ones)."""

from django.db import migrations


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE trails_trail SET (fillfactor = 80)")


def back_to_75(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE trails_trail SET (fillfactor = 75)")


class Migration(migrations.Migration):
    dependencies = [("trails", "0014_trail_rows_carry_their_scope")]
    operations = [migrations.RunPython(set_fillfactor, back_to_75)]
