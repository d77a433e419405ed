from django.contrib import admin

from scopes.models import Scope, new_policy_version
from trails.models import Citation, PiiPattern, PurgeRun, Step, ToolPolicy, Trail


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
    list_display = ["public_id", "scope", "query", "status", "hit_count", "expires_at"]
    list_filter = ["scope", "status"]
    search_fields = ["query"]
    readonly_fields = [f.name for f in Trail._meta.fields if f.name not in {"status"}]
    inlines = [StepInline, CitationInline]


@admin.register(ToolPolicy)
class ToolPolicyAdmin(admin.ModelAdmin):
    list_display = ["tool", "scope", "cacheable", "ttl_s", "per_caller"]
    list_filter = ["scope", "cacheable"]
    search_fields = ["tool"]

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        # Processes cache policies by the scope's version; a bump makes them reload.
        Scope.objects.filter(pk=obj.scope_id).update(tool_policy_version=new_policy_version())

    def delete_model(self, request, obj) -> None:
        super().delete_model(request, obj)
        Scope.objects.filter(pk=obj.scope_id).update(tool_policy_version=new_policy_version())


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
