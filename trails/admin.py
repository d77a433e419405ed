from django.contrib import admin, messages

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
