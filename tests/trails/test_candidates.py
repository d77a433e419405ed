"""The candidate SQL (trails/serving/candidates.py) against the ORM query it replaces."""

from __future__ import annotations

import random
from datetime import timedelta

from django.utils import timezone

from scopes.models import Scope, Section
from tests.bypass import around_the_writer
from trails.core.banding import scoped_keys
from trails.core.hint import RecordedStep
from trails.core.validation import Citation as CoreCitation
from trails.core.validation import CurrentSection
from trails.models import BandKeys, Trail, TrailStatus
from trails.serving.candidates import Lookup, add_paths, candidates
from trails.serving.record import RecordInput, record


def orm_candidates(scope: Scope, partition: str, keys: list[int], now) -> dict:
    """What the SQL replaces, written plainly with the ORM: every field recall reads."""
    wanted = set(scoped_keys(keys, scope.id))
    sharing = [
        trail_id
        for trail_id, stored in BandKeys.objects.filter(scope=scope).values_list("trail_id", "keys")
        if wanted & set(stored)
    ]
    trails = Trail.objects.filter(
        scope=scope, partition=partition, status=TrailStatus.ACTIVE, expires_at__gt=now, id__in=sharing
    ).prefetch_related("citations", "steps")
    sections = {s.section_id: s for s in Section.objects.filter(scope=scope)}
    found = {}
    for trail in trails:
        citations = sorted(trail.citations.all(), key=lambda c: c.position)
        found[trail.id] = {
            "public_id": trail.public_id,
            "query": trail.query,
            "lexical_params": trail.lexical_params,
            "lexical_signature": bytes(trail.lexical_signature),
            "embedding_model": trail.embedding_model,
            "embedding": bytes(trail.embedding) if trail.embedding is not None else None,
            "path_tokens": trail.path_tokens,
            "citations": [CoreCitation(c.section_id, c.hash) for c in citations],
            "current": {
                c.section_id: CurrentSection(sections[c.section_id].hash, sections[c.section_id].text)
                for c in citations
                if c.section_id in sections
            },
            "steps": [
                (s.tool, s.args, tuple(s.section_ids)) for s in sorted(trail.steps.all(), key=lambda s: s.position)
            ],
        }
    return found


def as_dict(found) -> dict:
    return {
        c.id: {
            "public_id": c.public_id,
            "query": c.query,
            "lexical_params": c.lexical_params,
            "lexical_signature": c.lexical_signature,
            "embedding_model": c.embedding_model,
            "embedding": c.embedding,
            "path_tokens": c.path_tokens,
            "citations": c.citations,
            "current": c.current,
            "steps": [(s.tool, s.args, s.section_ids) for s in c.steps],
        }
        for c in found
    }


def test_the_candidate_sql_reads_what_the_orm_query_reads(db):
    rng = random.Random(7)
    scope = Scope.objects.create(slug="sql", matcher="lexical")
    other = Scope.objects.create(slug="sql-other", matcher="lexical")
    texts = {f"s{i}": f"section {i} text" for i in range(8)}
    Section.upsert(scope, texts)
    Section.upsert(other, texts)
    words = ["visiting", "hours", "parking", "icu", "ward", "cafe", "pharmacy", "chapel"]
    for n in range(60):
        target = scope if n % 5 else other
        cited = rng.sample(sorted(texts), rng.randint(1, 3))
        steps = [
            RecordedStep("search", {"q": rng.choice(words), "n": n}, cited[:1]),
            RecordedStep("read", {"id": cited[-1]}, cited[-1:]),
        ]
        record(
            target,
            RecordInput(
                query=" ".join(rng.sample(words, 4)),
                cited=cited,
                steps=steps,
                signal=rng.choice(["accepted", None]),
                partition=rng.choice(["", "", "east"]),
            ),
        )
    # Some trails expire, go stale, lose a section or see one change: the SQL must read each as the ORM does.
    now = timezone.now()
    ids = list(
        Trail.objects.filter(scope=scope).order_by("id").values_list("id", flat=True)
    )  # the same ones on every plan
    with around_the_writer():
        Trail.objects.filter(id__in=ids[:5]).update(expires_at=now - timedelta(seconds=1))
    with around_the_writer():
        Trail.objects.filter(id__in=ids[5:9]).update(status=TrailStatus.STALE)
    Section.upsert(scope, {"s1": "section 1 rewritten"})
    Section.objects.filter(scope=scope, section_id="s2").delete()
    # As a question has them (the scope stores them XOR its salt), in an order that does not depend on the scope's id.
    all_keys = sorted(
        {
            key
            for keys in BandKeys.objects.filter(scope=scope).values_list("keys", flat=True)
            for key in scoped_keys(keys, scope.id)
        }
    )
    checked = 0
    for _ in range(40):
        keys = rng.sample(all_keys, rng.randint(1, 8))
        for partition in ("", "east"):
            expected = orm_candidates(scope, partition, keys, now)
            assert as_dict(candidates(scope, partition, Lookup(keys), now)) == expected
            # Without paths, then with them added: the same rows.
            found = candidates(scope, partition, Lookup(keys), now, with_paths=False)
            assert all(not c.citations and not c.steps for c in found)
            add_paths(scope, found)
            assert as_dict(found) == expected
            checked += len(expected)
    assert checked > 50  # the comparison saw many candidates, not empty sets
