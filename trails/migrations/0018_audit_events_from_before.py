"""The audit log starts with what the audit page showed before it existed: operators' acts on
trails, threshold moves, purges, docs syncs, keys set aside and settings changed in Django
admin, each written once as an event (the page no longer derives them from current state)."""

from django.db import migrations

from infra.migrating import no_statement_timeout

SIGNAL_KINDS = {
    "up": "approved",
    "down": "rejected",
    "demote": "sent back",
    "reinstate": "reinstated",
    "released": "released",
}


def backfill(apps, schema_editor) -> None:
    AuditEvent = apps.get_model("scopes", "AuditEvent")
    Scope = apps.get_model("scopes", "Scope")
    ApiKey = apps.get_model("scopes", "ApiKey")
    SectionSync = apps.get_model("scopes", "SectionSync")
    TrailSignal = apps.get_model("trails", "TrailSignal")
    ThresholdChange = apps.get_model("trails", "ThresholdChange")
    PurgeRun = apps.get_model("trails", "PurgeRun")
    slugs = dict(Scope.objects.values_list("id", "slug"))
    events = []

    def add(scope_id, at, who, kind, what="", link="", detail=None):
        if scope_id in slugs:
            events.append(
                AuditEvent(
                    scope_id=scope_id,
                    scope_slug=slugs[scope_id],
                    at=at,
                    who=(who or "")[:150],
                    kind=kind,
                    what=what[:500],
                    link=link[:300],
                    detail=detail or {},
                )
            )

    for s in (
        TrailSignal.objects.filter(source__in=["operator", "system"], signal__in=list(SIGNAL_KINDS))
        .exclude(source="system", signal__in=["up", "down", "demote", "reinstate"])
        .select_related("trail")
        .iterator()
    ):
        public_id = str(s.trail.public_id)
        add(
            s.scope_id,
            s.created_at,
            s.by,
            SIGNAL_KINDS[s.signal],
            f"trail {public_id}",
            f"/ops/{slugs.get(s.scope_id, '')}/trails/{public_id}/",
            {"trail": public_id},
        )
    for c in ThresholdChange.objects.iterator():
        moved = f": {c.before} → {c.after}" if c.before is not None and c.after is not None else ""
        add(
            c.scope_id,
            c.created_at,
            c.by or "the service",
            "threshold",
            f"{c.matcher or 'settings'} · {c.kind}{moved}",
            detail={"matcher": c.matcher, "cause": c.kind, "threshold": {"before": c.before, "after": c.after}},
        )
    for run in PurgeRun.objects.exclude(state="previewed").iterator():
        add(
            run.scope_id,
            run.finished_at or run.created_at,
            run.requested_by,
            "purge",
            f"{run.rule} · {run.action} · {run.matched} matched · {run.state}",
            f"/ops/{slugs.get(run.scope_id, '')}/purge/?run={run.public_id}",
        )
    for sync in SectionSync.objects.iterator():
        counts = sync.summary.get("sections", {})
        add(
            sync.scope_id,
            sync.created_at,
            sync.by,
            "docs sync",
            f"{counts.get('changed', 0)} changed, {counts.get('added', 0)} added, {counts.get('removed', 0)} removed",
            f"/ops/{slugs.get(sync.scope_id, '')}/syncs/",
            {"sync": sync.pk},
        )
    for key in ApiKey.objects.filter(set_aside_at__isnull=False).prefetch_related("scopes"):
        for scope in key.scopes.all():
            add(
                scope.pk,
                key.set_aside_at,
                key.set_aside_by,
                "key set aside",
                f"{key.name or key.lookup} (key:{key.lookup}): revoked, its reports and labels set aside",
                detail={"key": key.lookup},
            )
    try:
        LogEntry = apps.get_model("admin", "LogEntry")
        ContentType = apps.get_model("contenttypes", "ContentType")
    except LookupError:
        LogEntry = None
    if LogEntry is not None:
        scope_type = ContentType.objects.filter(app_label="scopes", model="scope").first()
        if scope_type is not None:
            for entry in LogEntry.objects.filter(content_type=scope_type).select_related("user").iterator():
                if entry.object_id and entry.object_id.isdigit():
                    add(
                        int(entry.object_id),
                        entry.action_time,
                        entry.user.username,
                        "settings changed",
                        entry.change_message[:500],
                    )
    AuditEvent.objects.bulk_create(events, batch_size=2000)


class Migration(migrations.Migration):
    dependencies = [
        ("trails", "0017_trail_reasons_without_names"),
        ("scopes", "0011_audit_events"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(no_statement_timeout, no_statement_timeout),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
