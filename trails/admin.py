import uuid

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.html import format_html_join

from scopes import audit
from scopes.access import Access, granted_scopes
from scopes.admin import GrantedScopesAdmin, SuperusersOnlyAdmin
from scopes.audit import AuditEvent
from scopes.models import Scope
from trails.core.lifecycle import Actor
from trails.learning.thresholds import pin_thresholds, reset_learning
from trails.models import (
    Citation,
    EmbedderCalibration,
    PiiPattern,
    PurgeRun,
    Step,
    ThresholdChange,
    ToolPolicy,
    Trail,
    TrailStatus,
    writes,
)
from trails.serving.matching import matching_settings


@admin.register(Scope)
class ScopeAdmin(GrantedScopesAdmin):
    list_display = [
        "slug",
        "name",
        "matcher",
        "embedding_threshold",
        "lexical_threshold",
        "thresholds_in_use",
        "threshold_pinned",
        "token_budget",
        "active_ttl_days",
        "keep_raw_queries",
        "second_chance",
    ]
    search_fields = ["slug", "name"]
    readonly_fields = [
        "band_layout_in_use",
        "thresholds_in_use",
        "embedding_fitted_for",
        "threshold_flags",
        "threshold_history",
    ]
    actions = ["reset_learned_thresholds", "pin_configured_thresholds", "unpin_thresholds"]
    scope_path = ""

    def configurable(self, request, queryset):
        """The selected scopes this operator may configure (the others are left alone)."""
        return (
            queryset
            if request.user.is_superuser
            else queryset.filter(pk__in=granted_scopes(request.user, Access.CONFIGURE))
        )

    def get_deleted_objects(self, objs, request):
        # A scope's trails go through the deletion path in batches (Scope.delete), never listed row by row.
        scopes = list(objs)
        counts = {"scopes": len(scopes), "trails": Trail.objects.filter(scope__in=scopes).count()}
        allowed = all(self.has_delete_permission(request, scope) for scope in scopes)
        return [str(scope) for scope in scopes], counts, set() if allowed else {"scope"}, []

    def has_add_permission(self, request) -> bool:
        # A new tenant is a superuser's act: an operator would hold no grant to it.
        return request.user.is_superuser and super().has_add_permission(request)

    def get_readonly_fields(self, request, obj=None):
        # Whether the store keeps text is chosen at creation: turned off later, texts already
        # copied would stay; turned on, hash-only sections would have no text to serve.
        fields = [*self.readonly_fields, "keeps_text"] if obj is not None and obj.pk else list(self.readonly_fields)
        # The slug is every API path of the tenant, and unique across tenants: a rename is a superuser's
        # (an operator's attempt would tell them which other tenants' slugs exist).
        return fields if request.user.is_superuser else [*fields, "slug"]

    fieldsets = [
        (None, {"fields": ["slug", "name"]}),
        (
            "Matching",
            {
                "fields": [
                    "matcher",
                    "max_false_hit_rate",
                    "embedding_threshold",
                    "lexical_threshold",
                    "thresholds_in_use",
                    "threshold_pinned",
                    "threshold_flags",
                    "false_hit_reporters_to_pending",
                    "synonyms",
                    "band_count",
                    "band_rows",
                    "band_layout_in_use",
                    "threshold_history",
                ],
                "description": "Changing the false-hit rate or the matcher sets both thresholds from the shipped "
                "calibration (unless you set a threshold in the same save); 'both' gives each matcher half the rate. "
                "Saving a change of how questions are signed re-signs the scope's trails (large scopes in the background), "
                "so they stay findable, on every path that saves a scope. After a change of embedding model, run "
                "`manage.py reindex_scope --scope SLUG`. The scope's labels move the threshold in use within limits; "
                "pin the configured thresholds to turn that off.",
            },
        ),
        (
            "Second chance (after a miss)",
            {
                "fields": ["second_chance", "second_chance_margin", "second_chance_top"],
                "description": "After a miss, an agent may hand back the section ids its own first search returned "
                "(POST .../recalls/{id}/second-chance). With this on, a near candidate scoring at least the embedding "
                "threshold in use less the margin, whose cited sections are all among that many first results, is "
                "checked on read and served; the overview counts it apart from first-chance hits. Embedding-matching "
                "scopes only. Off: every such call answers a miss that says second chances are off. Each change is "
                "in the scope's audit log.",
            },
        ),
        ("Prefetch", {"fields": ["token_budget", "keeps_text"]}),
        ("Retention", {"fields": ["active_ttl_days", "pending_ttl_days", "event_retention_days", "keep_raw_queries"]}),
    ]

    def save_model(self, request: HttpRequest, obj: Scope, form, change: bool) -> None:
        fields = [name for name in form.changed_data if name in {f.name for f in Scope._meta.concrete_fields}]
        before = Scope.objects.filter(pk=obj.pk).values(*fields).first() if change and fields else None
        obj._changed_by, obj._audited = request.user.get_username(), True
        super().save_model(request, obj, form, change)  # the rules run on the save itself (trails.learning.thresholds)
        if before is not None:
            # The thresholds the rules set from a changed bound or matcher are changes of this save too.
            for name in getattr(obj, "_matching_changed", ()):
                before.setdefault(name, obj._matching_before.get(name))
            changed = audit.changes(before, {name: getattr(obj, name) for name in before})
            if changed:
                audit.record(
                    [obj],
                    request.user.get_username(),
                    AuditEvent.Kind.SETTINGS,
                    detail=changed,
                    what=", ".join(f"{name}: {v['before']} → {v['after']}" for name, v in changed.items()),
                )
        changed = getattr(obj, "_matching_changed", frozenset())
        if changed & {"max_false_hit_rate", "matcher"}:
            messages.info(
                request,
                f"Thresholds for a {obj.max_false_hit_rate:.1%} false-hit bound: "
                f"embedding {obj.embedding_threshold}, lexical {obj.lexical_threshold}.",
            )
        if getattr(obj, "resigning", ""):
            messages.info(request, f"Matching settings changed: {obj.resigning}.")

    @admin.display(description="Thresholds in use (moved by the scope's own labels, within limits)")
    def thresholds_in_use(self, scope: Scope) -> str:
        matching = matching_settings(scope)
        return f"embedding {matching.embedding_threshold}, lexical {matching.lexical_threshold}"

    @admin.display(description="Threshold history (newest 10)")
    def threshold_history(self, scope: Scope) -> str:
        if not scope.pk:
            return "-"
        rows = ThresholdChange.objects.filter(scope=scope).order_by("-created_at", "-id")[:10]
        return (
            format_html_join(
                "",
                "<div>{} {} {}: {} &rarr; {} {} {}</div>",
                (
                    (
                        c.created_at.strftime("%Y-%m-%d %H:%M"),
                        c.matcher or "settings",
                        c.get_kind_display(),
                        c.before,
                        c.after,
                        f"by {c.by}" if c.by else "",
                        c.evidence,
                    )
                    for c in rows
                ),
            )
            or "none yet"
        )

    @admin.display(description="Band layout in use (bands x rows)")
    def band_layout_in_use(self, scope: Scope) -> str:
        return matching_settings(scope).lexical_layout.label if scope.pk else "-"

    @admin.action(description="Reset learned thresholds (back to the configured ones; labels so far set aside)")
    def reset_learned_thresholds(self, request, queryset) -> None:
        queryset = self.configurable(request, queryset)
        for scope in queryset:
            reset_learning(scope, by=request.user.get_username())
        messages.info(request, f"Reset {queryset.count()} scope(s).")

    @admin.action(description="Pin the configured thresholds (learning off)")
    def pin_configured_thresholds(self, request, queryset) -> None:
        queryset = self.configurable(request, queryset)
        for scope in queryset:
            pin_thresholds(scope, by=request.user.get_username())
        messages.info(request, f"Pinned {queryset.count()} scope(s).")

    @admin.action(description="Unpin the thresholds (learning on, from new labels)")
    def unpin_thresholds(self, request, queryset) -> None:
        queryset = self.configurable(request, queryset)
        for scope in queryset:
            pin_thresholds(scope, by=request.user.get_username(), pinned=False)
        messages.info(request, f"Unpinned {queryset.count()} scope(s).")


class ReadOnlyInline(admin.TabularInline):
    """A recorded path's rows: shown, never added to or deleted (a trail is recorded whole)."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class StepInline(ReadOnlyInline):
    model = Step
    readonly_fields = ["position", "tool", "args", "section_ids"]


class CitationInline(ReadOnlyInline):
    model = Citation
    readonly_fields = ["position", "section_id", "hash"]
    exclude = ["scope"]


@admin.register(Trail)
class TrailAdmin(GrantedScopesAdmin):
    """Read-only rows; a status changes only through the vote rules (the actions below),
    so every change is in the trail's signal history."""

    list_display = ["public_id", "scope", "query", "status", "held_by", "hit_count", "expires_at"]
    list_filter = ["scope", "status"]
    search_fields = ["query"]
    # The signature and the embedding are bytes for matching, nothing a person reads.
    exclude = ["lexical_signature", "embedding"]
    readonly_fields = [f.name for f in Trail._meta.fields if f.name not in ("lexical_signature", "embedding")]
    inlines = [StepInline, CitationInline]
    actions = ["approve", "reject", "reinstate", "delete_stale_or_expired"]
    action_access = dict.fromkeys(actions, Access.ACT)

    def get_search_results(self, request, queryset, search_term):
        """The query text, a trail's public id (what the API, the pages and the logs show) or
        its primary key (what database logs and admin URLs show)."""
        queryset, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        # Only among the rows this operator may see (get_queryset), never the whole table.
        if term.isdigit():
            return queryset | self.get_queryset(request).filter(pk=int(term)), duplicates
        try:
            public_id = uuid.UUID(term)
        except ValueError:
            return queryset, duplicates
        return queryset | self.get_queryset(request).filter(public_id=public_id), duplicates

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # trails are recorded through the API, with their signal

    def has_change_permission(self, request, obj=None) -> bool:
        # A trail's page is for reading: a Save would write the loaded row back outside the one writer.
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request, obj=None) -> bool:
        # Django's delete view and "delete selected" would remove active trails outside the
        # lifecycle, with no history: deleting is the table's action (stale or expired only).
        return False

    def _act(self, request, queryset, action: str, only: str | None = None) -> None:
        outside = not_named = 0
        if only is not None:  # the status the action's name says ("pending"): no other is touched
            not_named, queryset = queryset.exclude(status=only).count(), queryset.filter(status=only)
        if not request.user.is_superuser:
            # Acting needs act access to the trail's scope; the others selected are left alone, and said so.
            allowed = queryset.filter(scope__in=granted_scopes(request.user, Access.ACT))
            outside, queryset = queryset.count() - allowed.count(), allowed
        changed, skipped = writes.act_on_many(queryset, action, Actor.OPERATOR, by=request.user.get_username())
        skipped += not_named
        messages.info(
            request,
            f"{changed} trail(s) changed"
            + (f"; {skipped} left as they were (the action does not apply to their status)" if skipped else "")
            + (f"; {outside} left alone (your access to their scope is view only)" if outside else "")
            + ".",
        )

    @admin.action(description="Approve the selected pending trails")
    def approve(self, request, queryset) -> None:
        self._act(request, queryset, "up", only=TrailStatus.PENDING)

    @admin.action(description="Reject the selected trails")
    def reject(self, request, queryset) -> None:
        self._act(request, queryset, "down")

    @admin.action(description="Reinstate the selected rejected trails (back to pending)")
    def reinstate(self, request, queryset) -> None:
        self._act(request, queryset, "reinstate")

    @admin.action(description="Delete the selected stale or expired trails")
    def delete_stale_or_expired(self, request, queryset) -> None:
        self._act(request, queryset, "delete")


@admin.register(ToolPolicy)
class ToolPolicyAdmin(GrantedScopesAdmin):
    list_display = ["tool", "scope", "cacheable", "ttl_s", "per_caller"]
    list_filter = ["scope", "cacheable"]
    search_fields = ["tool"]


@admin.register(PiiPattern)
class PiiPatternAdmin(GrantedScopesAdmin):
    list_display = ["name", "scope", "pattern"]
    list_filter = ["scope"]


@admin.register(PurgeRun)
class PurgeRunAdmin(GrantedScopesAdmin):
    """The purge audit log: read-only."""

    list_display = [
        "created_at",
        "scope",
        "rule",
        "action",
        "requested_by",
        "state",
        "matched",
        "processed",
        "finished_at",
    ]
    list_filter = ["scope", "action", "state"]
    exclude = ["subject"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # an audit log is append-only


@admin.register(EmbedderCalibration)
class EmbedderCalibrationAdmin(SuperusersOnlyAdmin):
    """Thresholds fitted per embedder: written by `manage.py calibrate_embedder`, read here."""

    list_display = ["model", "scope", "source", "created_at"]
    readonly_fields = ["model", "scope", "source", "fit", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
