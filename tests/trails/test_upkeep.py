"""Retention sweep and hourly roll-up: exact rows, and the same result when rerun."""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db.models import Count

from scopes.models import SectionRevision
from tests.bypass import around_the_writer
from tests.conftest import VISITING
from trails.core.budget import count_tokens
from trails.models import BandKeys, Citation, RecallEvent, RecallStat, SimilarityStat, Step, Trail
from trails.upkeep.jobs import roll_up, sweep_expired

NOW = datetime(2026, 11, 30, 12, 30, tzinfo=dt_timezone.utc)


def record(api, query: str, **extra) -> Trail:
    body = api.record(
        "hospital",
        query=query,
        cited=["parking"],
        steps=[{"tool": "read", "args": {}, "section_ids": ["parking"]}],
        **extra,
    ).json()
    return Trail.objects.get(public_id=body["trail_id"])


def test_sweep_deletes_exactly_the_expired_trails_and_old_events(api, scope, sections):
    keep = record(api, "Where do visitors park?")
    expired = record(api, "Is parking free for visitors?")
    pending_expired = record(api, "Can staff park in car park B?", signal=None)
    with around_the_writer():
        Trail.objects.filter(id__in=[expired.id, pending_expired.id]).update(expires_at=NOW - timedelta(seconds=1))
    with around_the_writer():
        Trail.objects.filter(id=keep.id).update(expires_at=NOW + timedelta(days=1))
    api.recall("hospital", query="Is parking free for visitors?")
    with around_the_writer():
        old, recent = (
            RecallEvent.objects.create(scope=scope, created_at=NOW - timedelta(days=91), outcome="miss", latency_ms=1),
            RecallEvent.objects.create(scope=scope, created_at=NOW - timedelta(days=89), outcome="miss", latency_ms=1),
        )

    api.put_sections(
        "hospital", {"parking": "Visitors park in car park C.", "visiting/ward": "Ward visits 9:00 to 21:00."}
    )

    assert sweep_expired(NOW, batch_size=1) == {"trails": 2, "events": 1, "revisions": 1, "purge_runs": 0}
    # The old parking text stays while a trail cites it; the ward text nobody cited goes.
    assert list(SectionRevision.objects.values_list("section_id", "text")) == [("parking", VISITING["parking"])]
    assert list(Trail.objects.values_list("id", flat=True)) == [keep.id]
    assert set(BandKeys.objects.values_list("trail_id", flat=True)) == {keep.id}
    assert (
        set(Citation.objects.values_list("trail_id", flat=True))
        == set(Step.objects.values_list("trail_id", flat=True))
        == {keep.id}
    )
    assert not RecallEvent.objects.filter(id=old.id).exists() and RecallEvent.objects.filter(id=recent.id).exists()
    assert sweep_expired(NOW) == {"trails": 0, "events": 0, "revisions": 0, "purge_runs": 0}


def test_roll_up_matches_a_direct_count_and_reruns_the_same(scope):
    for minutes, outcome, similarity in [
        (0, "prefetch", 0.9),
        (5, "prefetch", 0.7),
        (59, "miss", None),
        (61, "hint", 0.995),
        (62, "prefetch", 1.0),
        (130, "miss", None),
    ]:
        with around_the_writer():
            RecallEvent.objects.create(
                scope=scope,
                created_at=NOW.replace(minute=0) + timedelta(minutes=minutes),
                outcome=outcome,
                similarity=similarity,
                latency_ms=1,
                matcher="lexical" if similarity else "",
            )
    start, end = NOW - timedelta(hours=1), NOW + timedelta(hours=2)
    assert roll_up(start, end) == 5
    first = sorted(RecallStat.objects.values_list("hour", "outcome", "count"))
    assert roll_up(start, end) == 5
    assert sorted(RecallStat.objects.values_list("hour", "outcome", "count")) == first
    twelve = NOW.replace(minute=0)
    assert first == [
        (twelve, "miss", 1),
        (twelve, "prefetch", 2),
        (twelve + timedelta(hours=1), "hint", 1),
        (twelve + timedelta(hours=1), "prefetch", 1),
        (twelve + timedelta(hours=2), "miss", 1),
    ]
    direct = RecallEvent.objects.values("outcome").annotate(n=Count("id"))
    rolled = {o: sum(c for _, oo, c in first if oo == o) for o in ("prefetch", "hint", "miss")}
    assert rolled == {row["outcome"]: row["n"] for row in direct}
    assert abs(sum(RecallStat.objects.filter(outcome="prefetch").values_list("similarity_sum", flat=True)) - 2.6) < 1e-9
    assert sorted(SimilarityStat.objects.values_list("hour", "bin", "count")) == [
        # 0.995 and an exact 1.0 share the top bin.
        (twelve, 70, 1),
        (twelve, 90, 1),
        (twelve + timedelta(hours=1), 99, 2),
    ]


def test_recall_counts_the_calls_and_tokens_a_prefetch_spared_and_roll_up_sums_them(api, scope, sections):
    steps = [
        {"tool": "search", "args": {"q": "parking"}, "section_ids": ["parking", "visiting/ward"]},
        {"tool": "read", "args": {"id": "parking"}, "section_ids": ["parking"]},
    ]
    api.record("hospital", query="Where do visitors park?", cited=["parking"], steps=steps)
    trail = Trail.objects.get()
    # Both steps' sections, as the agent read them: parking twice and the ward once.
    assert trail.path_tokens == 2 * count_tokens(VISITING["parking"]) + count_tokens(VISITING["visiting/ward"])

    served = api.recall("hospital", query="Where do visitors park?").json()
    event = RecallEvent.objects.get()
    assert (served["outcome"], event.calls_saved, event.tokens_saved) == (
        "prefetch",
        2,
        trail.path_tokens - served["tokens"],
    )

    api.put_sections("hospital", {"visiting/ward": "Ward visits 9:00 to 21:00."})
    api.record(
        "hospital",
        query="When can I visit the general ward?",
        cited=["visiting/ward", "parking"],
        steps=[
            {"tool": "read", "args": {"id": "parking"}, "section_ids": ["parking"]},
            {"tool": "read", "args": {"id": "visiting/ward"}, "section_ids": ["visiting/ward"]},
        ],
    )
    api.put_sections("hospital", {"visiting/ward": "Ward visits 8:00 to 22:00."})
    hint = api.recall("hospital", query="When can I visit the general ward?").json()
    event = RecallEvent.objects.latest("id")
    # The hint starts the agent at the second step: one call spared, no tokens counted.
    assert (hint["outcome"], event.calls_saved, event.tokens_saved) == ("hint", 1, 0)

    roll_up(event.created_at - timedelta(hours=1), event.created_at + timedelta(hours=1))
    assert sum(RecallStat.objects.values_list("calls_saved", flat=True)) == 3
    assert sum(RecallStat.objects.values_list("tokens_saved", flat=True)) == trail.path_tokens - served["tokens"]
