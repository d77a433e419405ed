"""Drops four single-column foreign-key indexes that another index already leads with.

Each cost a write on the hot paths (every recall inserts an event; every record inserts a
trail's citations and steps) and served no read the longer index does not: recall events
by scope (recallevent_scope_time), citations by scope (citation_scope_section), citations
and steps by trail (their (trail, position) unique constraints). The trails' own scope
index stays: without it the trails page read slower (benchmark_overview).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scopes", "0004_hashes_only_scopes"),
        ("trails", "0006_trail_fillfactor"),
    ]

    operations = [
        migrations.AlterField(
            model_name="citation",
            name="scope",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="scopes.scope"
            ),
        ),
        migrations.AlterField(
            model_name="citation",
            name="trail",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="citations", to="trails.trail"
            ),
        ),
        migrations.AlterField(
            model_name="recallevent",
            name="scope",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="recall_events",
                to="scopes.scope",
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="trail",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="steps", to="trails.trail"
            ),
        ),
    ]
