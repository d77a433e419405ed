import secrets

from django.db import migrations, models

import scopes.models


def give_each_scope_its_own_token(apps, schema_editor):
    # A callable default fills existing rows with one value; each scope needs its own.
    Scope = apps.get_model("scopes", "Scope")
    for scope in Scope.objects.all():
        scope.cache_token = secrets.token_hex(16)
        scope.save(update_fields=["cache_token"])


class Migration(migrations.Migration):
    dependencies = [("scopes", "0004_sectionrevision")]

    operations = [
        migrations.AddField(model_name="scope", name="cache_token", field=models.CharField(editable=False, max_length=32, null=True)),
        migrations.RunPython(give_each_scope_its_own_token, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="scope",
            name="cache_token",
            field=models.CharField(default=scopes.models.new_cache_token, editable=False, max_length=32, unique=True),
        ),
    ]
