"""Thresholds belong to the embedder they were fitted for.

An embedding threshold is a cosine, and cosines differ between models: 0.9425 keeps a 2 %
false-hit bound for the shipped all-MiniLM-L6-v2 and means nothing for another model. So every
scope records the embedder its embedding threshold was fitted for (`Scope.embedding_fitted_for`,
"" for the shipped calibration's model), `manage.py calibrate_embedder` fits and stores
thresholds per embedder (`EmbedderCalibration`), and recall refuses semantic matching while
another embedder serves (`check_calibrated`).
"""

from __future__ import annotations

from django.db import transaction

from infra.errors import StoreUnavailable
from scopes.models import Scope
from trails.embedders import get_embedder, standing_in
from trails.learning import shipped
from trails.models import EmbedderCalibration


class NotCalibrated(StoreUnavailable):
    """The scope's embedding threshold was fitted for another embedder than the one serving."""

    def __init__(self, scope: Scope, fitted_for: str, serving: str) -> None:
        super().__init__(
            "embedder_not_calibrated",
            f"scope {scope.slug}'s embedding threshold was fitted for {fitted_for}, not for the embedder serving "
            f"({serving}): run `manage.py calibrate_embedder` for it",
            fitted_for=fitted_for,
            serving=serving,
        )


def fitted_for(scope: Scope) -> str:
    """The embedder the scope's embedding threshold was fitted for."""
    return scope.embedding_fitted_for or shipped.shipped()["embedding_model"]


def check_calibrated(scope: Scope) -> None:
    """Raises NotCalibrated when the scope matches by embedding with thresholds of another embedder
    than the one serving. A stand-in put in place by `trails.embedders.serving` (the lab's and
    the tests' batch embedders) is not asked: its callers set thresholds of their own."""
    if not scope.uses_embedding or standing_in():
        return
    serving = get_embedder().name
    if fitted_for(scope) != serving:
        raise NotCalibrated(scope, fitted_for(scope), serving)


def calibration_for(model: str, scope: Scope | None = None) -> dict | None:
    """The fit for an embedder: the scope's own, else the one for every scope, else the shipped
    file where it was made for this embedder; None where nothing was fitted for it."""
    rows = {
        row.scope_id: row.fit
        for row in EmbedderCalibration.objects.filter(model=model, scope__in=[scope] if scope else [])
        | EmbedderCalibration.objects.filter(model=model, scope__isnull=True)
    }
    if scope is not None and scope.pk in rows:
        return rows[scope.pk]
    if None in rows:
        return rows[None]
    return shipped.shipped() if model == shipped.shipped()["embedding_model"] else None


def scope_fit(scope: Scope) -> dict:
    """The fit the scope's embedding threshold came from (the shipped one where none is stored)."""
    return calibration_for(fitted_for(scope), scope) or shipped.shipped()


def matcher_fit(scope: Scope, matcher: str) -> dict | None:
    """The fit a matcher's limits and rates are read from: the scope's embedder's for embedding,
    the shipped one (None) for lexical matching, which has no model."""
    return scope_fit(scope) if matcher == "embedding" else None


def embedding_threshold_for(scope: Scope, fit: dict) -> float:
    """The scope's embedding threshold from a fit, for its bound and matcher (a scope matching by
    both gives each matcher half its bound)."""
    share = scope.max_false_hit_rate / 2 if scope.matcher == "both" else scope.max_false_hit_rate
    return shipped.threshold_for("embedding", share, fit)


def stored_embedder() -> tuple[str, dict] | None:
    """The serving embedder's name and fit, where one is stored for every scope (None otherwise:
    scopes then take the shipped calibration). The embedder is loaded only when some fit is stored."""
    if not EmbedderCalibration.objects.filter(scope__isnull=True).exists():
        return None
    name = get_embedder().name
    fit = calibration_for(name)
    return (name, fit) if fit is not None else None


def stored_fit(model: str, scope: Scope | None = None) -> dict | None:
    """The fit stored for exactly this embedder and scope (None where none is)."""
    row = EmbedderCalibration.objects.filter(model=model, scope=scope).first()
    return row.fit if row else None


def store(model: str, fit: dict, source: str, scope: Scope | None = None) -> EmbedderCalibration:
    """Keeps a fit for an embedder (replacing the one before for the same embedder and scope)."""
    with transaction.atomic():
        EmbedderCalibration.objects.filter(model=model, scope=scope).delete()
        return EmbedderCalibration.objects.create(model=model, scope=scope, fit=fit, source=source[:300])


def apply(scope: Scope, model: str, fit: dict, by: str) -> tuple[float, float]:
    """Sets the scope's embedding threshold from the fit and records it was fitted for `model`,
    saved as any change of the threshold is (recorded, learning restarted, trails re-signed).
    Returns the threshold before and after."""
    before = scope.embedding_threshold
    scope.embedding_threshold = embedding_threshold_for(scope, fit)
    scope.embedding_fitted_for = model
    scope._changed_by = by
    scope.save()
    return before, scope.embedding_threshold
