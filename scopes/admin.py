from django.contrib import admin, messages
from django.http import HttpRequest

from scopes.models import ApiKey, Section, SectionSync


# Scope's own admin is registered by the trails app (trails/admin.py): its matching
# settings are what trails signs and bands with, and a lower app never imports an upper one.


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


@admin.register(SectionSync)
class SectionSyncAdmin(admin.ModelAdmin):
    """Section syncs are written by syncs only (manage.py sync_sections, the API): read-only here."""

    list_display = ["__str__", "scope", "by", "source", "created_at"]
    list_filter = ["scope"]
    readonly_fields = ["scope", "created_at", "by", "source", "summary"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
