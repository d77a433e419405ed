"""Purging personal data: redaction re-signs, erasure by subject, deletion, and crash-safe reruns."""

from __future__ import annotations

import pytest

from tests.bypass import around_the_writer
from trails.models import PiiPattern, PurgeRun, RecallEvent, Trail, writes
from trails.upkeep import purge

QUERIES = [
    "Where do visitors park?",
    "Can jane.roe@example.org visit the ICU?",
    "Is patient PT-123456 on the general ward?",
    "What did Jane Roe ask about parking?",
    "Call me on +44 20 7946 0958 about visiting hours",
]


@pytest.fixture
def stored(api, scope, sections):
    scope.keep_raw_queries = True
    scope.save()
    PiiPattern.objects.create(scope=scope, name="patient id", pattern=r"\bPT-\d{6}\b")
    for query in QUERIES:
        assert api.record("hospital", query=query, cited=["parking"]).status_code == 201
    api.recall("hospital", query="Can jane.roe@example.org visit the ICU?")
    return scope


def queries() -> list[str]:
    return list(Trail.objects.order_by("id").values_list("query", flat=True))


def test_redaction_removes_personal_data_and_the_trail_matches_its_new_text(api, stored):
    run = PurgeRun.objects.create(scope=stored, rule="built-in and scope patterns", action="redact", requested_by="op")
    assert purge.preview(run)[0] == 3
    done = purge.run_purge(run.id, batch_size=2)
    assert (done.state, done.total, done.processed, done.matched) == ("done", 5, 5, 3)
    assert queries() == [
        "Where do visitors park?",
        "Can [redacted] visit the ICU?",
        "Is patient [redacted] on the general ward?",
        "What did Jane Roe ask about parking?",
        "Call me on [redacted] about visiting hours",
    ]
    assert RecallEvent.objects.get().query == "Can [redacted] visit the ICU?"
    assert api.recall("hospital", query="Can [redacted] visit the ICU?").json()["outcome"] == "prefetch"
    assert api.recall("hospital", query="Can jane.roe@example.org visit the ICU?").json()["outcome"] == "miss"


def test_an_erasure_request_deletes_the_subjects_trails_and_keeps_no_copy(stored):
    run = PurgeRun.objects.create(
        scope=stored, rule="erasure request", subject="Jane Roe", action="delete", requested_by="op"
    )
    done = purge.run_purge(run.id)
    # Her name also finds her e-mail (jane.roe@…): the words joined by a dot.
    assert done.matched == 2 and len(queries()) == 3
    assert not any("Jane Roe" in q or "jane.roe" in q for q in queries())
    assert done.subject == "" and "Jane Roe" not in str(PurgeRun.objects.values().get())


def test_a_purge_that_crashed_halfway_ends_the_same_when_rerun(stored, monkeypatch):
    run = PurgeRun.objects.create(scope=stored, rule="built-in and scope patterns", action="redact", requested_by="op")
    real = writes.purge_trails
    calls = {"n": 0}

    def crash_on_second_batch(*args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("worker killed")
        return real(*args)

    monkeypatch.setattr(writes, "purge_trails", crash_on_second_batch)
    with pytest.raises(RuntimeError):
        purge.run_purge(run.id, batch_size=2)
    halfway = PurgeRun.objects.get(id=run.id)
    assert halfway.state == "running" and halfway.processed == 2
    monkeypatch.setattr(writes, "purge_trails", real)
    done = purge.run_purge(run.id, batch_size=2)
    assert (done.state, done.processed, done.matched) == ("done", 5, 3)
    crashed_result = queries()
    # Running it again changes nothing, and equals a run that never crashed.
    assert purge.run_purge(run.id).matched == 3 and queries() == crashed_result
    assert crashed_result[1:3] == ["Can [redacted] visit the ICU?", "Is patient [redacted] on the general ward?"]


def test_purge_command_previews_then_redacts(stored):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("purge_personal_data", "--scope", "hospital", "--preview", stdout=out)
    assert out.getvalue().startswith("3 trails would be redacted") and not PurgeRun.objects.exists()
    out = StringIO()
    call_command("purge_personal_data", "--scope", "hospital", "--by", "alice", stdout=out)
    assert "3 of 5 trails redacted" in out.getvalue()
    assert PurgeRun.objects.get().requested_by == "alice"
    # The audit log says what was done in words: the queries were redacted.
    from scopes.audit import AuditEvent

    done = AuditEvent.objects.filter(kind=AuditEvent.Kind.PURGE, what__contains="done:").get().what
    assert "3 of 5 trails queries redacted" not in done and "3 of 5 trails' queries redacted" in done


def test_an_erasure_finds_a_name_in_what_operators_and_syncs_wrote_and_leaves_nothing(stored):
    from scopes.models import SectionSync

    trail = Trail.objects.filter(scope=stored).first()
    # A reason as older versions wrote it, and a sync that said where it read its texts.
    with around_the_writer():
        Trail.objects.filter(pk=trail.pk).update(reason="rejected by ann: Zoë Åberg complained by phone")
    SectionSync.objects.create(scope=stored, by="command", source="branch zoe-aberg-fixes by Zoe Aberg", summary={})
    SectionSync.objects.create(scope=stored, by="command", source="Parking rules by Parkinson", summary={})
    run = PurgeRun.request(stored, "zoe aberg\nPark", delete=False, requested_by="op")
    assert purge.preview_records(run)["trail reasons"] == 1 and purge.preview_records(run)["docs sync sources"] == 1
    run.save()
    done = purge.run_purge(run.id)
    assert done.left == {}
    assert "Åberg" not in Trail.objects.get(pk=trail.pk).reason
    sources = sorted(SectionSync.objects.filter(scope=stored).values_list("source", flat=True))
    # "Park" is no word of "Parking" nor of "Parkinson": that sync keeps its words.
    assert sources == ["Parking rules by Parkinson", "branch [redacted]-fixes by [redacted]"]


def test_an_erasure_finishes_where_redacting_makes_a_full_length_text_longer_than_its_column(stored):
    # Any agent key could write a 500-character reason ending in the name and stop the erasure there.
    from scopes.models import SectionSync

    event = RecallEvent.objects.filter(scope=stored).first()
    with around_the_writer():  # as the feedback endpoint writes it: a reason of 500 characters, its most
        RecallEvent.objects.filter(pk=event.pk).update(feedback_reason="y" * 491 + " Jane Roe")
    SectionSync.objects.create(scope=stored, by="command", source="x" * 491 + " jane-roe", summary={})
    run = PurgeRun.request(stored, "Jane Roe", delete=False, requested_by="op")
    run.save()
    done = purge.run_purge(run.id)
    assert done.state == PurgeRun.State.DONE and done.left == {}
    reason = RecallEvent.objects.get(pk=event.pk).feedback_reason
    source = SectionSync.objects.get(scope=stored, source__startswith="x").source
    assert len(reason) == len(source) == 500 and "Roe" not in reason and "roe" not in source


@pytest.mark.parametrize(
    "action,started",
    [
        ("redact", "started: 3 previewed trails to be redacted, or deleted where their section ids hold the match"),
        ("delete", "started: 3 previewed trails to be deleted"),
    ],
)
def test_the_audit_log_says_in_a_sentence_what_a_confirmed_purge_will_do(stored, action, started):
    import re

    from django.contrib.auth.models import User
    from django.test import Client

    from scopes.audit import AuditEvent

    staff = Client()
    staff.force_login(User.objects.create_user("olga", password="x", is_staff=True, is_superuser=True))
    preview = staff.post("/ops/hospital/purge/", {"step": "preview", "action": action, "subject": ""}).content.decode()
    run_id = re.search(r'name="run" value="([0-9a-f-]+)"', preview).group(1)
    staff.post("/ops/hospital/purge/", {"step": "run", "run": run_id})
    said = AuditEvent.objects.filter(kind=AuditEvent.Kind.PURGE, what__contains="started:").get().what
    assert said == f"built-in rules and scope patterns · {started}"


def test_a_trail_citing_a_section_whose_id_holds_the_name_is_previewed_and_reported_as_deleted(api, scope):
    import re

    from django.contrib.auth.models import User
    from django.test import Client

    from scopes.audit import AuditEvent

    assert api.put_sections("hospital", {"people/mila-kovac": "Ward manager."}).status_code in (200, 201)
    trail_id = api.record("hospital", query="Who runs the ward?", cited=["people/mila-kovac"]).json()["trail_id"]
    staff = Client()
    staff.force_login(User.objects.create_user("olga", password="x", is_staff=True, is_superuser=True))
    html = staff.post(
        "/ops/hospital/purge/", {"step": "preview", "action": "redact", "subject": "Mila Kovač"}
    ).content.decode()
    assert "<span data-preview-deleted>1</span> trail would be deleted" in html and "would be redacted" not in html
    assert "Deleted, not redacted: that trail's section ids (cited, or returned by a step) hold the match" in html
    assert ">Delete 1 trail (its section ids hold the match) and redact the other records</button>" in html
    run_id = re.search(r'name="run" value="([0-9a-f-]+)"', html).group(1)
    page = staff.get(staff.post("/ops/hospital/purge/", {"step": "run", "run": run_id})["Location"]).content.decode()
    assert (
        "Done: <strong data-purge-count>0</strong> of 1 trails redacted, <strong data-purge-deleted>1</strong> "
        "deleted (its section ids held the match: a citation cannot be redacted)" in page
    )
    assert not Trail.objects.filter(public_id=trail_id).exists()
    done = AuditEvent.objects.filter(kind=AuditEvent.Kind.PURGE, what__contains="done:").get().what
    assert "done: 0 of 1 trails' queries redacted, 1 deleted (its section ids held the match" in done


def test_the_purge_command_counts_trails_it_deletes_for_their_section_ids_apart_from_those_it_redacts(stored, api):
    from io import StringIO

    from django.core.management import call_command

    api.put_sections("hospital", {"people/jane-roe": "Ward manager."})
    api.record("hospital", query="Who runs the ward?", cited=["people/jane-roe"])
    out = StringIO()
    call_command("purge_personal_data", "--scope", "hospital", "--subject", "Jane Roe", "--preview", stdout=out)
    assert out.getvalue().startswith(
        "2 trails would be redacted\n1 trails would be deleted: their section ids hold the match\n"
    )
    out = StringIO()
    call_command("purge_personal_data", "--scope", "hospital", "--subject", "Jane Roe", stdout=out)
    assert ": 2 of 6 trails redacted, 1 deleted: their section ids held the match\n" in out.getvalue()
