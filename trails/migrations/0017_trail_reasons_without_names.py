"""A trail's reason names a role, never a person or a key, and holds no operator's words:
those stay in the trail's history (who and why), where the operator pages show them and
erasure finds them. Rewrites the reasons written before in those words."""

from django.db import migrations

from infra.migrating import no_statement_timeout

# (LIKE pattern, the reason it becomes); the first that matches wins, so the key's comes first.
REWRITES = [
    ("rejected by key:%", "rejected by an agent's key"),
    ("rejected by %", "rejected by an operator"),
    ("sent back to pending by %", "sent back to pending by an operator"),
    ("rejection reversed by %", "rejection reversed by an operator"),
    (
        "back in service: % set aside the reports that held it",
        "back in service: an operator set aside the reports that held it",
    ),
]


def forget_names(apps, schema_editor) -> None:
    Trail = apps.get_model("trails", "Trail")
    table = Trail._meta.db_table
    wanted = [reason for _, reason in REWRITES]
    with schema_editor.connection.cursor() as cursor:
        for pattern, reason in REWRITES:
            marks = ", ".join(["%s"] * len(wanted))
            cursor.execute(
                f"UPDATE {table} SET reason = %s WHERE reason LIKE %s AND reason NOT IN ({marks})",
                [reason, pattern, *wanted],
            )
        # "reported not helpful by 2 reporters: key:…, key:…" keeps its count, not the keys.
        for trail_id, reason in list(
            Trail.objects.filter(reason__startswith="reported not helpful by ", reason__contains=": ").values_list(
                "id", "reason"
            )
        ):
            Trail.objects.filter(pk=trail_id).update(reason=reason.split(": ", 1)[0])


class Migration(migrations.Migration):
    dependencies = [("trails", "0016_history_keeps_state_before")]

    operations = [
        migrations.RunPython(no_statement_timeout, no_statement_timeout),
        migrations.RunPython(forget_names, migrations.RunPython.noop),
    ]
