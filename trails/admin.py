from django.contrib import admin, messages
from django.http import HttpRequest

from scopes.models import Scope
from trails.calibration import thresholds_for
from trails.matching import matching_settings
from trails.models import Citation, PiiPattern, PurgeRun, Step, ToolPolicy, Trail
from trails.reindex import reindex_scope

# Fields whose change alters how questions are signed or banded.
SIGNING_FIELDS = {"matcher", "embedding_threshold", "lexical_threshold", "synonyms", "band_count", "band_rows", "max_false_hit_rate"}
THRESHOLD_FIELDS = {"embedding_threshold", "lexical_threshold"}


@admin.register(Scope)
class ScopeAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "matcher", "embedding_threshold", "lexical_threshold", "token_budget", "active_ttl_days", "keep_raw_queries"]
    search_fields = ["slug", "name"]
    readonly_fields = ["band_layout_in_use", "thresholds_in_use"]
    fieldsets = [
        (None, {"fields": ["slug", "name"]}),
        ("Matching", {
            "fields": ["matcher", "max_false_hit_rate", "embedding_threshold", "lexical_threshold", "thresholds_in_use",
                       "false_hit_reports_to_pending", "synonyms", "band_count", "band_rows", "band_layout_in_use"],
            "description": "Changing the false-hit rate or the matcher sets both thresholds from the shipped "
            "calibration (unless you set a threshold in the same save); 'both' gives each matcher half the rate. Saving a change here re-signs the scope's trails, so they "
            "stay findable. After a change of embedding model, run `manage.py reindex_scope --scope SLUG`.",
        }),
        ("Prefetch", {"fields": ["token_budget"]}),
        ("Retention", {"fields": ["active_ttl_days", "pending_ttl_days", "event_retention_days", "keep_raw_queries"]}),
    ]

    def save_model(self, request: HttpRequest, obj: Scope, form, change: bool) -> None:
        if {"max_false_hit_rate", "matcher"} & set(form.changed_data) and not THRESHOLD_FIELDS & set(form.changed_data):
            for name, value in thresholds_for(obj.max_false_hit_rate, obj.matcher).items():
                setattr(obj, name, value)
            messages.info(request, f"Thresholds set for a {obj.max_false_hit_rate:.1%} false-hit bound: "
                          f"embedding {obj.embedding_threshold}, lexical {obj.lexical_threshold}.")
        super().save_model(request, obj, form, change)
        if change and set(form.changed_data) & SIGNING_FIELDS:
            count = reindex_scope(obj)
            messages.info(request, f"Re-signed {count} trail(s) for the new matching settings.")

    @admin.display(description="Thresholds in use (raised by the scope's own labels where they demand it)")
    def thresholds_in_use(self, scope: Scope) -> str:
        matching = matching_settings(scope)
        return f"embedding {matching.embedding_threshold}, lexical {matching.lexical_threshold}"

    @admin.display(description="Band layout in use (bands x rows)")
    def band_layout_in_use(self, scope: Scope) -> str:
        return matching_settings(scope).lexical_layout.label if scope.pk else "-"


class StepInline(admin.TabularInline):
    model = Step
    extra = 0
    readonly_fields = ["position", "tool", "args", "section_ids"]
    can_delete = False


class CitationInline(admin.TabularInline):
    model = Citation
    extra = 0
    readonly_fields = ["position", "section_id", "hash"]
    exclude = ["scope"]
    can_delete = False


@admin.register(Trail)
class TrailAdmin(admin.ModelAdmin):
    """Read-only rows; a status changes only through the vote rules (the actions below),
    so every change is in the trail's signal history."""

    list_display = ["public_id", "scope", "query", "status", "hit_count", "expires_at"]
    list_filter = ["scope", "status"]
    search_fields = ["query"]
    readonly_fields = [f.name for f in Trail._meta.fields]
    inlines = [StepInline, CitationInline]
    actions = ["approve", "reject", "reinstate"]

    def _apply(self, request, queryset, change) -> None:
        done, refused = 0, 0
        for trail in queryset.select_related("scope"):
            try:
                change(trail, request.user.get_username())
                done += 1
            except ValueError:
                refused += 1
        messages.info(request, f"{done} trail(s) changed" + (f"; {refused} refused by the vote rules" if refused else "") + ".")

    @admin.action(description="Approve the selected pending trails")
    def approve(self, request, queryset) -> None:
        self._apply(request, queryset, lambda trail, by: trail.vote("up", by=by))

    @admin.action(description="Reject the selected trails")
    def reject(self, request, queryset) -> None:
        self._apply(request, queryset, lambda trail, by: trail.vote("down", by=by))

    @admin.action(description="Reinstate the selected rejected trails (back to pending)")
    def reinstate(self, request, queryset) -> None:
        self._apply(request, queryset, lambda trail, by: trail.reinstate(by=by))


@admin.register(ToolPolicy)
class ToolPolicyAdmin(admin.ModelAdmin):
    list_display = ["tool", "scope", "cacheable", "ttl_s", "per_caller"]
    list_filter = ["scope", "cacheable"]
    search_fields = ["tool"]


@admin.register(PiiPattern)
class PiiPatternAdmin(admin.ModelAdmin):
    list_display = ["name", "scope", "pattern"]
    list_filter = ["scope"]


@admin.register(PurgeRun)
class PurgeRunAdmin(admin.ModelAdmin):
    """The purge audit log: read-only."""

    list_display = ["created_at", "scope", "rule", "action", "requested_by", "state", "matched", "processed", "finished_at"]
    list_filter = ["scope", "action", "state"]
    exclude = ["subject"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
