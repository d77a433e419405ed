"""Which operator may do what in which scope: the one check every operator page, CSV export
and Django admin change list asks.

An operator (a staff user) sees and acts on the scopes granted to them, at one of three
levels: view (pages, exports, replay), act (approve, reject, send back, purge) and configure
(thresholds and settings). A superuser holds every scope at every level. A scope not granted
at all is answered as if it did not exist (404), so one tenant's operator cannot learn
another tenant's slugs; a scope granted for viewing only refuses an action with 403.

Django's groups and permissions are per model, not per row, and the object-permission
libraries (django-guardian) store a row per object and permission; a scope's grant is one
row per (operator, scope) with an ordered level, which one indexed join answers.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Access(models.IntegerChoices):
    VIEW = 1, "View: pages, exports, replay"
    ACT = 2, "Act: approve, reject, send back, purge"
    CONFIGURE = 3, "Configure: thresholds and settings"


class OperatorGrant(models.Model):
    """One operator's access to one scope."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scope_grants")
    scope = models.ForeignKey("scopes.Scope", on_delete=models.CASCADE, related_name="operator_grants")
    access = models.PositiveSmallIntegerField(choices=Access.choices, default=Access.VIEW)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "scope"], name="operator_grant_once_per_scope")]
        verbose_name = "operator's scope"

    def __str__(self) -> str:
        return f"{self.user} · {self.scope} · {Access(self.access).name.lower()}"


def granted_scopes(user, access: int = Access.VIEW, with_scratch: bool = False) -> models.QuerySet:
    """The scopes this user holds at `access` or above (every scope for a superuser; none for
    an anonymous, inactive or non-staff user). The benchmarks' scratch scopes only
    `with_scratch` (opened by URL, never listed)."""
    scope_model = OperatorGrant._meta.get_field("scope").related_model  # scopes.models imports this module
    scopes = scope_model.objects.all() if with_scratch else scope_model.objects.filter(scratch=False)
    if not (user and user.is_authenticated and user.is_active and user.is_staff):
        return scopes.none()
    if user.is_superuser:
        return scopes
    return scopes.filter(operator_grants__user=user, operator_grants__access__gte=access)


def access_to(user, scope) -> int:
    """The level this user holds `scope` at (Access.CONFIGURE for a superuser), 0 for none;
    read once a request (kept on the user object), however often a page asks."""
    if not (user and user.is_authenticated and user.is_active):
        return 0
    if user.is_superuser:
        return Access.CONFIGURE
    known = user.__dict__.setdefault("_scope_access", {})
    if scope.pk not in known:
        known[scope.pk] = (
            OperatorGrant.objects.filter(user_id=user.pk, scope_id=scope.pk).values_list("access", flat=True).first()
            or 0
        )
    return known[scope.pk]


def may(user, scope, access: int) -> bool:
    """Whether this user holds `scope` at `access` or above."""
    return access_to(user, scope) >= access
