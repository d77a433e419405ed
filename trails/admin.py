from django.contrib import admin

from trails.models import Citation, Step, Trail


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
