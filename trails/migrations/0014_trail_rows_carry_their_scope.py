# Steps and history rows carry their trail's scope (the key every table a trail owns can be
# partitioned or distributed by); the trails' scope index becomes (scope, id).
import django.db.models.deletion
from django.db import migrations, models

from infra.migrating import no_statement_timeout


def copy_scope(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for table in ("trails_step", "trails_trailsignal"):
            cursor.execute(
                f"UPDATE {table} SET scope_id = (SELECT t.scope_id FROM trails_trail t WHERE t.id = {table}.trail_id)"
            )


class Migration(migrations.Migration):
    dependencies = [
        ("scopes", "0008_key_owner_and_set_aside"),
        ("trails", "0013_band_keys_one_row_a_trail"),
    ]

    operations = [
        migrations.RunPython(no_statement_timeout, no_statement_timeout),
        migrations.AddField(
            model_name="step",
            name="scope",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="scopes.scope",
            ),
        ),
        migrations.AddField(
            model_name="trailsignal",
            name="scope",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="scopes.scope",
            ),
        ),
        migrations.RunPython(copy_scope, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="step",
            name="scope",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="scopes.scope"
            ),
        ),
        migrations.AlterField(
            model_name="trailsignal",
            name="scope",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="scopes.scope"
            ),
        ),
        migrations.AlterField(
            model_name="trail",
            name="scope",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="trails", to="scopes.scope"
            ),
        ),
        migrations.AddIndex(
            model_name="trail",
            index=models.Index(fields=["scope", "id"], name="trail_scope_id"),
        ),
    ]
