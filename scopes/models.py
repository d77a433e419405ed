"""Scopes (the unit of isolation), their API keys and their section stores."""

from __future__ import annotations

from datetime import timedelta
from typing import Iterable

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.utils import timezone

from infra.errors import Invalid
from infra.hashing import section_hash
from scopes.saving import KeptWrites, ScopeQuerySet, new_cache_token, new_policy_version  # noqa: F401
from scopes.store_writes import (  # noqa: F401
    STORE_FIELDS,
    _hashes_given,
    _refuse_write_around_the_store,
    _store_writing,
    sections_changed,
)


class Matcher(models.TextChoices):
    LEXICAL = "lexical", "Lexical (MinHash of words)"
    EMBEDDING = "embedding", "Embedding (sentence model)"
    BOTH = "both", "Both: either may match"


class Scope(KeptWrites, models.Model):
    """A tenant, permission group or document set: nothing is matched across scopes.

    Its matching fields are settings only; what they mean for matching (parameters,
    band layouts, lexicon, thresholds in use) is the trails app's `matching_settings`.
    """

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # A scope the evaluation or a benchmark made for itself: the operator pages leave it out.
    scratch = models.BooleanField(default=False, editable=False)

    lexical_threshold = models.FloatField(
        default=0.5,
        validators=[MinValueValidator(0.05), MaxValueValidator(0.99)],
        help_text="Estimated Jaccard similarity of word shingles a stored question needs to match.",
    )
    band_count = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Override of the LSH bands derived from the threshold."
    )
    band_rows = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Override of the rows per band derived from the threshold."
    )
    # The threshold defaults keep a 2 % false-hit bound at 95 % confidence on the fit split
    # of the Quora dev pairs (trails/learning/calibration.json; README, "How matching works").
    matcher = models.CharField(max_length=16, choices=Matcher.choices, default=Matcher.EMBEDDING)
    embedding_threshold = models.FloatField(
        default=0.9425,
        validators=[MinValueValidator(0.5), MaxValueValidator(0.999)],
        help_text="Cosine similarity a stored question needs to match by embedding (after the look-alike guard).",
    )
    synonyms = models.TextField(
        blank=True,
        help_text="One group of equivalent terms per line, separated by commas, e.g. "
        "'ICU, intensive care, critical care'. The look-alike guard counts each group as one term.",
    )
    token_budget = models.PositiveIntegerField(
        default=2000, validators=[MinValueValidator(1)], help_text="Default token budget of a prefetch."
    )
    active_ttl_days = models.PositiveIntegerField(default=30, validators=[MinValueValidator(1)])
    pending_ttl_days = models.PositiveIntegerField(default=7, validators=[MinValueValidator(1)])
    event_retention_days = models.PositiveIntegerField(default=90, validators=[MinValueValidator(1)])
    # A fresh random token on every policy change: processes cache policies under it,
    # and a token (unlike a counter) never repeats for a recreated scope.
    tool_policy_version = models.CharField(max_length=32, default=new_policy_version, editable=False)
    # Cached tool results and their counters are keyed by the scope's id and this random
    # token, never by its slug: a scope deleted and created again with the same slug
    # (or a reused id on SQLite) can never read the first one's entries.
    cache_token = models.CharField(max_length=32, default=new_cache_token, unique=True, editable=False)
    keeps_text = models.BooleanField(
        default=True,
        help_text="Keep the sections' text. Off: the store keeps section ids and hashes only (for text "
        "that may not be copied into ragtrail): sync ids and hashes, and a prefetch names the valid sections and "
        "their hashes for the agent to read from its own index. Set when the scope is created.",
    )
    keep_raw_queries = models.BooleanField(
        default=False, help_text="Keep the query text of recall events (otherwise only outcomes and scores)."
    )
    max_false_hit_rate = models.FloatField(
        default=0.02,
        validators=[MinValueValidator(0.001), MaxValueValidator(0.2)],
        help_text="The false-hit rate the scope accepts. Changing it sets both thresholds to the "
        "lowest whose 95 % upper confidence bound on the calibration pairs is within it.",
    )
    false_hit_reporters_to_pending = models.PositiveSmallIntegerField(
        default=2,
        # One agent, however many reports it sends, never demotes a trail on its own.
        validators=[MinValueValidator(2)],
        help_text="How many different API keys must report a trail's recalls as not helpful before it goes "
        "back to pending approval (an operator can send it back at once from the trail's page).",
    )
    # Moved by the scope's own labels (trails/learning/thresholds.py): up where they show with
    # confidence that the bound is broken, down where they show it holds lower; None: the
    # configured threshold stands. Every move is a ThresholdChange row with its evidence.
    learned_lexical_threshold = models.FloatField(null=True, blank=True, editable=False)
    learned_embedding_threshold = models.FloatField(null=True, blank=True, editable=False)
    # The embedder the embedding threshold was fitted for ("": the shipped model's); recall refuses others.
    embedding_fitted_for = models.CharField(max_length=200, blank=True, default="", editable=False)
    threshold_pinned = models.BooleanField(
        default=False,
        help_text="Learning off: the configured thresholds are used as they are, whatever the labels say.",
    )
    # The second chance (docs/second-chance.md): its defaults are what evaluate_second_chance fitted.
    second_chance = models.BooleanField(
        default=False,
        help_text="After a miss, serve a near candidate whose cited sections the agent's own first search "
        "returned (POST .../recalls/{id}/second-chance). Off: such a call answers a miss and says why.",
    )
    second_chance_margin = models.FloatField(
        default=0.05,
        validators=[MinValueValidator(0.0), MaxValueValidator(0.2)],
        help_text="How far under the embedding threshold in use a near candidate may score.",
    )
    second_chance_top = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(50)],
        help_text="Every section the near candidate cites must be among this many first search results.",
    )
    # Labels older than this are not read: an operator's reset starts the evidence afresh.
    labels_since = models.DateTimeField(null=True, blank=True, editable=False)
    # Why the scope waits for an operator ("ceiling", "reporter:key:…"), comma-separated; "" when it does not.
    threshold_flags = models.CharField(max_length=300, blank=True, default="", editable=False)

    class Meta:
        ordering = ["slug"]

    objects = ScopeQuerySet.as_manager()

    def __str__(self) -> str:
        return self.slug

    @property
    def uses_lexical(self) -> bool:
        return self.matcher in (Matcher.LEXICAL, Matcher.BOTH)

    @property
    def uses_embedding(self) -> bool:
        return self.matcher in (Matcher.EMBEDDING, Matcher.BOTH)

    def expiry_for(self, active: bool, now=None) -> "timezone.datetime":
        now = now or timezone.now()
        return now + timedelta(days=self.active_ttl_days if active else self.pending_ttl_days)


class SectionQuerySet(models.QuerySet):
    def current(self, scope: Scope, section_ids: Iterable[str]) -> dict[str, "Section"]:
        """Returns the scope's sections with these ids, by id; absent ids are not in the store."""
        return {s.section_id: s for s in self.filter(scope=scope, section_id__in=list(section_ids))}

    # The generic write paths (admin actions, shell code, bulk helpers) are closed or
    # routed through the store's rule, so no path can change a text without its hash.
    def update(self, **kwargs):
        _refuse_write_around_the_store(kwargs)
        return super().update(**kwargs)

    def bulk_update(self, objs, fields, batch_size=None):
        _refuse_write_around_the_store(fields)
        return super().bulk_update(objs, fields, batch_size=batch_size)

    def bulk_create(self, objs, *args, **kwargs):
        objs = list(objs)
        for section in objs:
            if not _hashes_given.get():
                section.hash = section_hash(section.text)
        return super().bulk_create(objs, *args, **kwargs)

    def delete(self):
        """Deletes these sections, keeping their last texts and flagging the trails citing them."""
        with transaction.atomic():
            doomed = list(self.select_for_update())
            if not doomed:
                return 0, {}
            now = timezone.now()
            SectionRevision.keep(doomed, now)
            deleted = super(SectionQuerySet, Section.objects.filter(pk__in=[s.pk for s in doomed])).delete()
            by_scope: dict[int, list[str]] = {}
            for section in doomed:
                by_scope.setdefault(section.scope_id, []).append(section.section_id)
            for scope_id, section_ids in by_scope.items():
                sections_changed.send(Section, scope=Scope(pk=scope_id), section_ids=section_ids, at=now)
        return deleted


class Section(models.Model):
    """One section of a scope's documents, as the store holds it now."""

    # No index of its own: the unique (scope, section_id) index leads with it, and a
    # second one tempted the planner to read a scope's every section per citation.
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="sections", db_index=False)
    section_id = models.CharField(max_length=512)
    text = models.TextField()
    hash = models.CharField(max_length=64)
    updated_at = models.DateTimeField(default=timezone.now)
    # When the section first came into the store (unknown, null, for sections stored before
    # this was kept: those count as long settled): the wipe guard counts removals of
    # settled sections across syncs (trails/upkeep/sync.py).
    first_stored_at = models.DateTimeField(null=True, blank=True)
    # The built site's anchor where it is not the id's fragment (docutils' unstable `idN`):
    # where a link to the section goes. Not content: a change moves no trail.
    anchor = models.CharField(max_length=512, blank=True, default="")

    objects = SectionQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "section_id"], name="section_unique_in_scope")]

    def __str__(self) -> str:
        return f"{self.scope.slug}:{self.section_id}"

    def remove(self) -> None:
        """Deletes the section, keeping its last text for the trails that cite it."""
        Section.objects.filter(pk=self.pk).delete()

    def delete(self, *args, **kwargs):
        return Section.objects.filter(pk=self.pk).delete()

    def save(self, *args, **kwargs) -> None:
        """Saves one section through `upsert` (hash, old revision, flags), whoever calls it:
        Django admin, a shell, a fixture. A changed id or scope is a removal and a new section."""
        if self.pk is not None:
            before = Section.objects.filter(pk=self.pk).values_list("scope_id", "section_id").first()
            if before is not None and before != (self.scope_id, self.section_id):
                with transaction.atomic():
                    Section.objects.filter(pk=self.pk).delete()
                    self.pk = None
                    self._upsert_self()
                return
        self._upsert_self()

    def _upsert_self(self) -> None:
        Section.upsert(self.scope, {self.section_id: self.text}, self.updated_at if self.pk is None else None)
        stored = Section.objects.get(scope_id=self.scope_id, section_id=self.section_id)
        self.pk, self.hash, self.updated_at = stored.pk, stored.hash, stored.updated_at
        self._state.adding = False

    @classmethod
    def upsert(cls, scope: Scope, texts: dict[str, str], now=None) -> dict:
        """Writes sections by id, hashing each text; unchanged texts are left untouched.

        This is the one write path of the store: it keeps each replaced text as a
        revision and sends `sections_changed` (the trails citing them are flagged)
        in the same transaction.

        Returns:
            {"created", "updated", "unchanged": counts, "changed_ids": ids created or
            updated, in request order, "hashes": {id: hash} for every id sent}.
        """
        if not scope.keeps_text:
            raise Invalid(
                "hashes_only",
                "this scope keeps section ids and hashes only, never their text: sync ids "
                "and hashes (POST .../section-syncs or manage.py sync_sections)",
                field="sections",
            )
        hashes = {section_id: section_hash(text) for section_id, text in texts.items()}
        return cls._upsert(scope, texts, hashes, now or timezone.now())

    @classmethod
    def set_anchors(cls, scope: Scope, anchors: dict[str, str]) -> None:
        """Records each section's built anchor (blank: its id's fragment), where it differs."""
        held = dict(cls.objects.filter(scope=scope).exclude(anchor="").values_list("section_id", "anchor"))
        moved: dict[str, list[str]] = {}
        for section_id, anchor in anchors.items():
            if held.get(section_id, "") != anchor:
                moved.setdefault(anchor, []).append(section_id)
        for anchor, ids in moved.items():
            cls.objects.filter(scope=scope, section_id__in=ids).update(anchor=anchor)

    @classmethod
    def upsert_hashes(cls, scope: Scope, hashes: dict[str, str], now=None) -> dict:
        """upsert for a scope that keeps hashes only (Scope.keeps_text off): each section is
        its id and the hash of the text the source holds; no text is stored."""
        if scope.keeps_text:
            raise Invalid("invalid", "this scope keeps the sections' text: send their text", field="sections")
        given = _hashes_given.set(True)
        try:
            return cls._upsert(scope, dict.fromkeys(hashes, ""), dict(hashes), now or timezone.now())
        finally:
            _hashes_given.reset(given)

    @classmethod
    def _upsert(cls, scope: Scope, texts: dict[str, str], hashes: dict[str, str], now) -> dict:
        token = _store_writing.set(True)
        try:
            with transaction.atomic():
                summary = cls._write(scope, texts, hashes, now)
                sections_changed.send(cls, scope=scope, section_ids=summary["changed_ids"], at=now)
        finally:
            _store_writing.reset(token)
        return summary

    @classmethod
    def _write(cls, scope: Scope, texts: dict[str, str], hashes: dict[str, str], now) -> dict:
        """upsert's writes, inside its transaction."""
        existing = {
            s.section_id: s for s in cls.objects.select_for_update().filter(scope=scope, section_id__in=list(texts))
        }
        created, updated, replaced = [], [], []
        for section_id, text in texts.items():
            current = existing.get(section_id)
            if current is None:
                created.append(
                    cls(
                        scope=scope,
                        section_id=section_id,
                        text=text,
                        hash=hashes[section_id],
                        updated_at=now,
                        first_stored_at=now,
                    )
                )
            elif current.hash != hashes[section_id]:
                replaced.append(
                    Section(scope_id=current.scope_id, section_id=section_id, hash=current.hash, text=current.text)
                )
                current.text, current.hash, current.updated_at = text, hashes[section_id], now
                updated.append(current)
        cls.objects.bulk_create(created, batch_size=500)
        cls.objects.bulk_update(updated, ["text", "hash", "updated_at"], batch_size=500)
        SectionRevision.keep(replaced, now)
        changed = {s.section_id for s in created} | {s.section_id for s in updated}
        return {
            "created": len(created),
            "updated": len(updated),
            "unchanged": len(texts) - len(changed),
            "changed_ids": [section_id for section_id in texts if section_id in changed],
            "hashes": hashes,
        }

    @classmethod
    def replace_all(cls, scope: Scope, texts: dict[str, str], now=None) -> dict:
        """Makes the scope's store hold exactly these sections: upserts them and removes the
        rest, keeping the removed texts for the trails that cite them.

        Returns:
            upsert's summary, plus "removed_ids".
        """
        with transaction.atomic():
            summary = cls.upsert(scope, texts, now)
            removed = cls.objects.filter(scope=scope).exclude(section_id__in=list(texts))
            summary["removed_ids"] = list(removed.values_list("section_id", flat=True))
            removed.delete()
        return summary


# API keys (scopes/api_keys.py), imported here so Django finds the model.
# Operators' grants live beside the scopes they grant (scopes/access.py); imported here so
# Django finds the model.
from scopes.access import Access, OperatorGrant  # noqa: E402,F401
from scopes.api_keys import KEY_PREFIX, ApiKey, ApiKeyQuerySet  # noqa: E402,F401
from scopes.audit import AuditEvent  # noqa: E402,F401

# A section's earlier texts (scopes/revisions.py), imported here so Django finds the model.
from scopes.revisions import SectionRevision  # noqa: E402

# A scope's syncs and sync jobs (scopes/syncs.py), imported here so Django finds the models.
from scopes.syncs import SectionSync, SectionSyncJob  # noqa: E402,F401
