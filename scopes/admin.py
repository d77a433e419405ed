from django.contrib import admin, messages
from django.http import HttpRequest

from scopes.models import ApiKey, Scope, Section


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
            "stay findable. After a change of embedding model, run `manage.py ragtrail_reindex --scope SLUG`.",
        }),
        ("Prefetch", {"fields": ["token_budget"]}),
        ("Retention", {"fields": ["active_ttl_days", "pending_ttl_days", "event_retention_days", "keep_raw_queries"]}),
    ]

    def save_model(self, request: HttpRequest, obj: Scope, form, change: bool) -> None:
        if {"max_false_hit_rate", "matcher"} & set(form.changed_data) and not THRESHOLD_FIELDS & set(form.changed_data):
            from trails.calibration import thresholds_for

            for name, value in thresholds_for(obj.max_false_hit_rate, obj.matcher).items():
                setattr(obj, name, value)
            messages.info(request, f"Thresholds set for a {obj.max_false_hit_rate:.1%} false-hit bound: "
                          f"embedding {obj.embedding_threshold}, lexical {obj.lexical_threshold}.")
        super().save_model(request, obj, form, change)
        if change and set(form.changed_data) & SIGNING_FIELDS:
            from trails.reindex import reindex_scope

            count = reindex_scope(obj)
            messages.info(request, f"Re-signed {count} trail(s) for the new matching settings.")

    @admin.display(description="Thresholds in use (raised by the scope's own labels where they demand it)")
    def thresholds_in_use(self, scope: Scope) -> str:
        return f"embedding {scope.embedding_threshold_in_use}, lexical {scope.lexical_threshold_in_use}"

    @admin.display(description="Band layout in use (bands x rows)")
    def band_layout_in_use(self, scope: Scope) -> str:
        return scope.band_layout.label if scope.pk else "-"


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["__str__", "name", "created_at", "revoked_at"]
    filter_horizontal = ["scopes"]
    readonly_fields = ["lookup", "created_at"]
    fields = ["name", "scopes", "lookup", "created_at", "revoked_at"]
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: ApiKey, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # A new key gets its secret here and it is shown once; only its hash is kept.
        full_key = obj.assign_secret()
        super().save_model(request, obj, form, change)
        messages.warning(request, f"New API key (shown only now, copy it): {full_key}")

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset) -> None:
        from django.utils import timezone

        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        messages.info(request, f"Revoked {count} key(s).")


@admin.register(Section)
class SectionAdmin(admin.ModelAdmin):
    """Saves and deletes go through the section store's write path (Section.save/delete):
    the text is hashed, the old text kept, and the trails citing it flagged."""

    list_display = ["section_id", "scope", "hash", "updated_at"]
    list_filter = ["scope"]
    search_fields = ["section_id"]
    readonly_fields = ["hash", "updated_at"]

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        # Moving a section to another id or scope is a delete and a new section: done by API.
        return [*self.readonly_fields, "scope", "section_id"] if obj is not None else self.readonly_fields
