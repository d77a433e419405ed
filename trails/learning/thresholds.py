"""A scope's thresholds in use, and every path that moves them.

- Configured: from the shipped calibration for the scope's false-hit bound and matcher
  (`apply_matching_change`, run on every save of a Scope, whoever saves it).
- Learned: from the scope's own labels (MatchLabel), up or down, within a floor, a
  ceiling and a bounded step per reporter (`learn_thresholds`; the rule itself is
  trails.core.calibration.learned_threshold).
- Operator: reset the learned threshold (the evidence starts afresh) or pin the
  configured one (learning off).

Every move is a ThresholdChange row with its evidence; a demand past the ceiling, or
one reporter held back, flags the scope for an operator (`Scope.threshold_flags`).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import Max, Sum
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver
from django.utils import timezone

from infra import metrics
from scopes import audit
from scopes.audit import AuditEvent
from scopes.keys import set_aside_reporters
from scopes.models import Scope
from trails.core.calibration import Label, LearnedThreshold, learned_threshold
from trails.learning import embedder_calibration
from trails.learning import shipped as calibration
from trails.models import MatchLabel, RecallEvent, RecallStat, ThresholdChange

logger = logging.getLogger(__name__)

# The newest labels a scope's threshold is learned from: bounded work per label.
LABELS_READ = 5000
MATCHERS = ("lexical", "embedding")


def used_matchers(scope: Scope) -> list[str]:
    return [m for m, used in (("lexical", scope.uses_lexical), ("embedding", scope.uses_embedding)) if used]


def bound_for(scope: Scope) -> float:
    """Each matcher's share of the scope's bound: a scope matching by both serves a hit
    that either finds, so each gets half (as the configured thresholds do)."""
    return scope.max_false_hit_rate / 2 if scope.matcher == "both" else scope.max_false_hit_rate


def scope_labels(scope: Scope, matcher: str) -> tuple[list[Label], datetime | None]:
    """The scope's labels for one matcher since its last reset, newest first, and when the
    oldest of them was given (None without labels)."""
    rows = MatchLabel.objects.filter(scope=scope, matcher=matcher)
    set_aside = set_aside_reporters()
    if set_aside:
        rows = rows.exclude(reporter__in=list(set_aside))  # a revoked key's, set aside (scopes/keys.py)
    if scope.labels_since is not None:
        rows = rows.filter(created_at__gte=scope.labels_since)
    read = list(
        rows.order_by("-created_at").values_list("similarity", "false_hit", "reporter", "created_at")[:LABELS_READ]
    )
    return [Label(similarity, false_hit, reporter) for similarity, false_hit, reporter, _ in read], (
        read[-1][3] if read else None
    )


def questions_asked(scope: Scope, since: datetime | None) -> int:
    """Recalls of the scope since a moment: the hourly roll-up for the hours it holds, the
    raw events after them (so a busy scope's count is never a scan of its events)."""
    if since is None:
        return 0
    start = since.replace(minute=0, second=0, microsecond=0)
    last_hour = RecallStat.objects.filter(scope=scope, hour__gte=start).aggregate(last=Max("hour"))["last"]
    if last_hour is None:
        return RecallEvent.objects.filter(scope=scope, created_at__gte=since).count()
    rolled = (
        RecallStat.objects.filter(scope=scope, hour__gte=start, hour__lt=last_hour).aggregate(n=Sum("count"))["n"] or 0
    )
    return rolled + RecallEvent.objects.filter(scope=scope, created_at__gte=last_hour).count()


def decide(scope: Scope, matcher: str) -> LearnedThreshold:
    """What the scope's labels decide for one matcher now (nothing is written)."""
    configured = getattr(scope, f"{matcher}_threshold")
    labels, oldest = scope_labels(scope, matcher)
    fit = embedder_calibration.matcher_fit(scope, matcher)
    return learned_threshold(
        labels,
        questions_asked(scope, oldest),
        configured,
        calibration.grid_for(matcher, fit),
        bound_for(scope),
        calibration.limits_for(matcher, configured, fit),
        getattr(scope, f"learned_{matcher}_threshold"),
    )


def in_use(scope: Scope, matcher: str) -> float:
    learned = getattr(scope, f"learned_{matcher}_threshold")
    return learned if learned is not None else getattr(scope, f"{matcher}_threshold")


def describe_flag(flag: str) -> str:
    """An operator's reading of one of Scope.threshold_flags ("embedding:ceiling", "embedding:reporter:key:…")."""
    matcher, _, reason = flag.partition(":")
    if reason == "ceiling":
        return (
            f"The {matcher} labels demand a threshold past its ceiling (where fewer than half the paraphrases would "
            "still match): it is held at the ceiling or below. Look at the reports, then reset or pin."
        )
    if reason.startswith("reporter:"):
        return (
            f"One reporter ({reason.removeprefix('reporter:')}) would move the {matcher} threshold further than one "
            "reporter may on its own: it is held within a step of what the others' labels say."
        )
    return flag


def learn_thresholds(scope: Scope, now: datetime | None = None) -> dict[str, LearnedThreshold]:
    """Recomputes the scope's learned thresholds from its labels and stores any move.

    Runs under a lock on the scope's row, so labels arriving together are learned from
    one after the other and the stored result is the one of all of them. A pinned
    scope learns nothing.

    Returns:
        The decision per matcher the scope uses (empty when pinned).
    """
    with transaction.atomic():
        locked = Scope.objects.select_for_update(no_key=True).get(pk=scope.pk)
        if locked.threshold_pinned:
            return {}
        at = now or timezone.now()
        decisions = {matcher: decide(locked, matcher) for matcher in used_matchers(locked)}
        learned = {matcher: None for matcher in MATCHERS}
        learned.update({matcher: decision.threshold for matcher, decision in decisions.items()})
        flags = ",".join(f"{matcher}:{flag}" for matcher, decision in decisions.items() for flag in decision.flags)
        changes = []
        for matcher in MATCHERS:
            before, after = getattr(locked, f"learned_{matcher}_threshold"), learned[matcher]
            if before != after:
                changes.append(
                    ThresholdChange(
                        scope=locked,
                        matcher=matcher,
                        kind=ThresholdChange.Kind.LEARNED,
                        before=in_use(locked, matcher),
                        after=after if after is not None else getattr(locked, f"{matcher}_threshold"),
                        evidence=decisions[matcher].evidence() if matcher in decisions else {},
                        created_at=at,
                    )
                )
        new_flags = set(flags.split(",")) - set(locked.threshold_flags.split(",")) - {""}
        if new_flags:
            for flag in sorted(new_flags):
                matcher = flag.split(":", 1)[0]
                changes.append(
                    ThresholdChange(
                        scope=locked,
                        matcher=matcher,
                        kind=ThresholdChange.Kind.FLAGGED,
                        before=in_use(locked, matcher),
                        after=learned[matcher] or getattr(locked, f"{matcher}_threshold"),
                        evidence={**decisions[matcher].evidence(), "flag": flag.split(":", 1)[1]},
                        created_at=at,
                    )
                )
            logger.warning("scope %s flagged for an operator: %s", locked.slug, ", ".join(sorted(new_flags)))
        if changes or flags != locked.threshold_flags:
            Scope.objects.filter(pk=locked.pk).update(
                learned_lexical_threshold=learned["lexical"],
                learned_embedding_threshold=learned["embedding"],
                threshold_flags=flags[:300],
            )
            ThresholdChange.objects.bulk_create(changes)
            _counted(changes, locked)
    scope.learned_lexical_threshold, scope.learned_embedding_threshold = learned["lexical"], learned["embedding"]
    scope.threshold_flags = flags[:300]
    return decisions


def _counted(changes: list, scope: Scope | None = None) -> None:
    """Counts the moves and writes each in the scope's audit log (in the caller's transaction)."""
    for change in changes:
        metrics.THRESHOLD_CHANGES.labels(str(change.kind)).inc()
        if scope is not None:
            moved = (
                f": {change.before} → {change.after}" if change.before is not None and change.after is not None else ""
            )
            audit.record(
                [scope],
                change.by or "the service",
                AuditEvent.Kind.THRESHOLD,
                at=change.created_at,
                what=f"{change.matcher or 'settings'} · {change.get_kind_display()}{moved}",
                detail={
                    "matcher": change.matcher,
                    "cause": change.kind,
                    "threshold": {"before": change.before, "after": change.after},
                },
            )


def _operator_move(scope: Scope, kind: str, by: str, now: datetime | None, **fields) -> None:
    with transaction.atomic():
        locked = Scope.objects.select_for_update(no_key=True).get(pk=scope.pk)
        at = now or timezone.now()
        _counted(
            ThresholdChange.objects.bulk_create(
                [
                    ThresholdChange(
                        scope=locked,
                        matcher=matcher,
                        kind=kind,
                        before=in_use(locked, matcher),
                        after=getattr(locked, f"{matcher}_threshold"),
                        by=by[:150],
                        created_at=at,
                    )
                    for matcher in used_matchers(locked)
                ]
            ),
            locked,
        )
        values = {
            "learned_lexical_threshold": None,
            "learned_embedding_threshold": None,
            "threshold_flags": "",
            **fields,
        }
        values = {name: (at if value is _NOW else value) for name, value in values.items()}
        Scope.objects.filter(pk=locked.pk).update(**values)
    for name, value in values.items():
        setattr(scope, name, value)


_NOW = object()


def reset_learning(scope: Scope, by: str, now: datetime | None = None) -> None:
    """Back to the configured thresholds; labels so far are set aside (the evidence starts afresh)."""
    _operator_move(scope, ThresholdChange.Kind.RESET, by, now, labels_since=_NOW)


def pin_thresholds(scope: Scope, by: str, pinned: bool = True, now: datetime | None = None) -> None:
    """Pins the configured thresholds (learning off), or unpins them: learning resumes
    from the labels given since the pin."""
    if pinned:
        _operator_move(scope, ThresholdChange.Kind.PINNED, by, now, threshold_pinned=True)
    else:
        _operator_move(scope, ThresholdChange.Kind.UNPINNED, by, now, threshold_pinned=False, labels_since=_NOW)


def accept_learned(scope: Scope, by: str) -> list[str]:
    """Makes the learned thresholds the configured ones (an operator agrees with the labels):
    saved as any change of the configured threshold is (recorded, learning restarted, trails
    re-signed). Returns the matchers whose threshold was accepted."""
    accepted = []
    for matcher in used_matchers(scope):
        learned = getattr(scope, f"learned_{matcher}_threshold")
        if learned is not None and learned != getattr(scope, f"{matcher}_threshold"):
            setattr(scope, f"{matcher}_threshold", learned)
            accepted.append(matcher)
    if accepted:
        scope._changed_by = by
        scope.save()
    return accepted


# -- matching changes, on every path that saves a Scope -------------------------------------

# Fields whose change alters how questions are signed or banded: the trails are re-signed.
SIGNING_FIELDS = frozenset(
    {
        "matcher",
        "embedding_threshold",
        "lexical_threshold",
        "synonyms",
        "band_count",
        "band_rows",
        "embedding_fitted_for",
    }
)
BOUND_FIELDS = frozenset({"max_false_hit_rate", "matcher"})
THRESHOLD_FIELDS = frozenset({"embedding_threshold", "lexical_threshold"})
MATCHING_FIELDS = SIGNING_FIELDS | BOUND_FIELDS


@receiver(pre_save, sender=Scope, dispatch_uid="trails.learning.thresholds.matching_change")
def apply_matching_change(sender, instance: Scope, raw: bool = False, **kwargs) -> None:
    """Before any save of a scope (admin, shell, a command, the evaluation): a changed bound
    or matcher sets both thresholds from the calibration (unless a threshold was changed
    in the same save), and a changed threshold or bound drops what was learned against
    the old one. What changed is kept on the instance for `after_matching_change`."""
    instance._matching_changed = frozenset()
    if raw:
        return
    before = Scope.objects.filter(pk=instance.pk).values(*MATCHING_FIELDS).first() if instance.pk is not None else None
    if before is None:
        calibrate_new_scope(instance)
        return
    changed = {name for name in MATCHING_FIELDS if before[name] != getattr(instance, name)}
    if changed & BOUND_FIELDS and not changed & THRESHOLD_FIELDS:
        fit = embedder_calibration.scope_fit(instance)
        for name, value in calibration.thresholds_for(instance.max_false_hit_rate, instance.matcher, fit).items():
            setattr(instance, name, value)
        changed |= {name for name in THRESHOLD_FIELDS if before[name] != getattr(instance, name)}
    # A threshold learned against another bound, threshold or model's cosines means nothing now.
    if changed & (THRESHOLD_FIELDS | BOUND_FIELDS | {"embedding_fitted_for"}):
        instance.learned_lexical_threshold = instance.learned_embedding_threshold = None
        instance.threshold_flags = ""
    instance._matching_changed = frozenset(changed)
    instance._matching_before = before


def calibrate_new_scope(scope: Scope) -> None:
    """A scope being created gets the calibration's thresholds for its bound and matcher, as
    an edit of either would set them; thresholds given at creation (different from the
    model's defaults, which are the calibration's for the default bound and matcher) stand."""
    defaults = {name: Scope._meta.get_field(name).default for name in THRESHOLD_FIELDS}
    if any(getattr(scope, name) != value for name, value in defaults.items()):
        return
    # The serving embedder's own fit where one is stored (manage.py calibrate_embedder).
    stored = embedder_calibration.stored_embedder()
    for name, value in calibration.thresholds_for(
        scope.max_false_hit_rate, scope.matcher, stored and stored[1]
    ).items():
        setattr(scope, name, value)
    if stored is not None:
        scope.embedding_fitted_for = stored[0]


@receiver(post_save, sender=Scope, dispatch_uid="trails.learning.thresholds.after_matching_change")
def after_matching_change(sender, instance: Scope, created: bool, raw: bool = False, **kwargs) -> None:
    """After the save: records the change (trails.upkeep.reindex re-signs where signing changed)."""
    changed = getattr(instance, "_matching_changed", frozenset())
    if raw or created or not changed:
        return
    before = instance._matching_before
    metrics.THRESHOLD_CHANGES.labels(ThresholdChange.Kind.CONFIGURED).inc()
    evidence = {name: {"before": before[name], "after": getattr(instance, name)} for name in sorted(changed)}
    ThresholdChange.objects.create(
        scope=instance,
        matcher="",
        kind=ThresholdChange.Kind.CONFIGURED,
        by=getattr(instance, "_changed_by", "")[:150],
        evidence=evidence,
    )
    if not getattr(instance, "_audited", False):  # Django admin writes its own, with every field it changed
        audit.record(
            [instance],
            getattr(instance, "_changed_by", "") or "a command or the shell",
            AuditEvent.Kind.SETTINGS,
            what=", ".join(f"{name}: {v['before']} → {v['after']}" for name, v in evidence.items()),
            detail=evidence,
        )
