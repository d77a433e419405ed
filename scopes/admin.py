from django.contrib import admin, messages
from django.http import HttpRequest

from scopes import audit
from scopes.access import Access, OperatorGrant, granted_scopes, may
from scopes.audit import AuditEvent
from scopes.keys import operable, restore, revoke, set_aside
from scopes.models import ApiKey, Section, SectionSync

# Scope's own admin is registered by the trails app (trails/admin.py): its matching
# settings are what trails signs and bands with, and a lower app never imports an upper one.


class GrantedScopesAdmin(admin.ModelAdmin):
    """An admin whose rows belong to a scope: an operator who is not a superuser sees, finds
    and picks only the rows of the scopes granted to them (scopes.access), changes, adds or
    deletes one only with `change_access` to its scope, and is offered only the actions their
    access runs somewhere (`action_access`). The grants decide: a staff user needs no Django
    model permission by hand."""

    # The path from a row to its scope ("" for a Scope itself).
    scope_path = "scope"
    change_access = Access.CONFIGURE
    # The access each action needs (by name); change_access where not named.
    action_access: dict[str, int] = {}

    def scope_of(self, obj):
        return obj if not self.scope_path else getattr(obj, self.scope_path)

    def get_queryset(self, request: HttpRequest):
        rows = super().get_queryset(request)
        if request.user.is_superuser:
            return rows
        return rows.filter(
            **{f"{self.scope_path + '__' if self.scope_path else ''}pk__in": granted_scopes(request.user)}
        )

    def get_list_filter(self, request: HttpRequest):
        # The scope filter lists the scopes of the rows shown, never every tenant's slug.
        return [
            ("scope", admin.RelatedOnlyFieldListFilter) if name == "scope" else name
            for name in super().get_list_filter(request)
        ]

    def formfield_for_foreignkey(self, db_field, request: HttpRequest, **kwargs):
        if db_field.name == "scope" and not request.user.is_superuser:
            kwargs["queryset"] = granted_scopes(request.user, self.change_access)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def _granted(self, request: HttpRequest, access: int, obj=None) -> bool:
        if obj is not None:
            return may(request.user, self.scope_of(obj), access)
        return granted_scopes(request.user, access).exists()

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser or self._granted(request, Access.VIEW)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.is_superuser or self._granted(request, Access.VIEW, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser or self._granted(request, self.change_access)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.is_superuser or self._granted(request, self.change_access, obj)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.is_superuser or self._granted(request, self.change_access, obj)

    def get_actions(self, request: HttpRequest):
        actions = super().get_actions(request)
        if request.user.is_superuser:
            return actions
        return {
            name: action
            for name, action in actions.items()
            if self._granted(request, self.action_access.get(name, self.change_access))
        }


class SuperusersOnlyAdmin(admin.ModelAdmin):
    """Rows that span scopes or grant access (API keys, operators' grants): superusers only."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.is_superuser

    has_add_permission = has_module_permission

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.is_superuser

    has_delete_permission = has_change_permission


@admin.register(OperatorGrant)
class OperatorGrantAdmin(SuperusersOnlyAdmin):
    list_display = ["user", "scope", "access"]
    list_filter = ["scope", "access"]
    search_fields = ["user__username", "scope__slug"]

    def save_model(self, request: HttpRequest, obj: OperatorGrant, form, change: bool) -> None:
        before = OperatorGrant.objects.filter(pk=obj.pk).select_related("scope").first() if change else None
        super().save_model(request, obj, form, change)
        if before is not None and before.scope_id != obj.scope_id:
            _grant_audit(request, before, None)
        _grant_audit(request, obj, before.access if before is not None and before.scope_id == obj.scope_id else None)

    def delete_model(self, request: HttpRequest, obj: OperatorGrant) -> None:
        _grant_audit(request, obj, obj.access, removed=True)
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for grant in queryset.select_related("scope", "user"):
            _grant_audit(request, grant, grant.access, removed=True)
        super().delete_queryset(request, queryset)


def _grant_audit(request: HttpRequest, grant: OperatorGrant, before: int | None, removed: bool = False) -> None:
    level = lambda access: Access(access).name.lower() if access else "none"  # noqa: E731
    after = None if removed else grant.access
    if before == after:
        return
    audit.record(
        [grant.scope],
        request.user.get_username(),
        AuditEvent.Kind.ACCESS,
        what=f"{grant.user.get_username()}: {level(before)} → {level(after)}",
        detail={"user": grant.user.get_username(), "access": {"before": level(before), "after": level(after)}},
    )


@admin.register(ApiKey)
class ApiKeyAdmin(SuperusersOnlyAdmin):
    """Keys are made, edited and deleted by superusers. An operator with act access to every
    scope a key is granted sees it and may revoke it, set its reports aside (a flood) or
    count them again: each audited in those scopes."""

    list_display = ["__str__", "name", "owner", "writes_sections", "created_at", "revoked_at", "set_aside_at"]
    filter_horizontal = ["scopes"]
    readonly_fields = ["lookup", "created_at", "set_aside_at", "set_aside_by"]
    fields = [
        "name",
        "owner",
        "scopes",
        "writes_sections",
        "lookup",
        "created_at",
        "revoked_at",
        "set_aside_at",
        "set_aside_by",
    ]
    actions = ["revoke", "revoke_and_set_aside", "restore_reports"]

    @staticmethod
    def _operated(request: HttpRequest):
        """The keys whose every scope this operator may act on."""
        acting = granted_scopes(request.user, Access.ACT)
        beyond = ApiKey.scopes.through.objects.exclude(scope__in=acting).values("apikey_id")
        return ApiKey.objects.filter(scopes__in=acting).exclude(pk__in=beyond).distinct()

    def get_queryset(self, request: HttpRequest):
        rows = super().get_queryset(request)
        return rows if request.user.is_superuser else rows.filter(pk__in=self._operated(request).values("pk"))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser or granted_scopes(request.user, Access.ACT).exists()

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        if request.user.is_superuser:
            return True
        return self.has_module_permission(request) and (
            obj is None or self._operated(request).filter(pk=obj.pk).exists()
        )

    def save_model(self, request: HttpRequest, obj: ApiKey, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # A new key gets its secret here and it is shown once; only its hash is kept.
        full_key = obj.assign_secret()
        super().save_model(request, obj, form, change)
        messages.warning(request, f"New API key (shown only now, copy it): {full_key}")

    @staticmethod
    def _operable(request: HttpRequest, queryset) -> list[ApiKey]:
        """The selected keys this operator may act on: every scope a key's standing reaches
        (granted, or judged: its trails decided again) among theirs, as on the keys page. The
        others are named and left as they were."""
        keys = list(queryset)
        if request.user.is_superuser:
            return keys
        acting = set(granted_scopes(request.user, Access.ACT).values_list("pk", flat=True))
        allowed = [key for key in keys if operable(key, acting)]
        refused = [key.name or key.lookup for key in keys if key not in allowed]
        if refused:
            messages.error(
                request,
                f"Left as they were: {', '.join(refused)}. They reach or judged scopes you may not act on: "
                "a superuser may act on them.",
            )
        return allowed

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset) -> None:
        if keys := self._operable(request, queryset):
            messages.info(request, f"Revoked {revoke(keys, by=request.user.get_username())} key(s).")

    @admin.action(description="Revoke and set aside their reports and labels (a flood)")
    def revoke_and_set_aside(self, request: HttpRequest, queryset) -> None:
        if not (keys := self._operable(request, queryset)):
            return
        for key in keys:
            set_aside(key, by=request.user.get_username())
        messages.info(
            request,
            f"Revoked {len(keys)} key(s) and set their reports and labels aside: the scopes' "
            "verdicts and the trails' report counts no longer count them (reversible).",
        )

    @admin.action(description="Count their reports and labels again")
    def restore_reports(self, request: HttpRequest, queryset) -> None:
        if not (keys := self._operable(request, queryset)):
            return
        for key in keys:
            restore(key, by=request.user.get_username())
        messages.info(request, f"The reports and labels of {len(keys)} key(s) count again (the keys stay revoked).")


@admin.register(Section)
class SectionAdmin(GrantedScopesAdmin):
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
class SectionSyncAdmin(GrantedScopesAdmin):
    """Section syncs are written by syncs only (manage.py sync_sections, the API): read-only here."""

    list_display = ["__str__", "scope", "by", "source", "created_at"]
    list_filter = ["scope"]
    readonly_fields = ["scope", "created_at", "by", "source", "summary"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
