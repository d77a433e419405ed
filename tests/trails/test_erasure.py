"""Erasure: every spelling of a person found, every copy reached, the result true, the cost bounded."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scopes.models import Section, SectionSync
from scopes.revisions import SectionRevision
from tests.bypass import around_the_writer
from trails.core import pii
from trails.core.fold import fold_text
from trails.core.lifecycle import Actor
from trails.models import PurgeRun, RecallEvent, Trail, TrailSignal, writes
from trails.upkeep import purge

SUBJECT = "Jane Doe\nIşık Yılmaz\nŁukasz Nowak\nSøren Kierkegaard"
FOLDED_NAMES = ["jane doe", "isik yilmaz", "lukasz nowak", "soren kierkegaard"]
# Fifteen spellings of the four names: the six an erasure used to leave first.
SPELLINGS = [
    "Ja\u200dne Doe",  # zero-width joiner
    "Ja\u200bne Doe",  # zero-width space
    "Ja\u00adne Doe",  # soft hyphen
    "IŞIK YILMAZ",
    "Lukasz Nowak",
    "Soren Kierkegaard",
    "JANE DOE",
    "Jane\u00a0Doe",  # no-break space
    "Ｊａｎｅ Ｄｏｅ",  # full width
    unicodedata.normalize("NFD", "Işık Yılmaz"),
    "İşık Yılmaz",
    "Isik Yilmaz",
    "ŁUKASZ NOWAK",
    "SØREN KIERKEGAARD",
    "søren kierkegaard",
]
BYSTANDER = "Mary Major"
TOPICS = [
    "park the car",
    "visit the ICU",
    "bring flowers",
    "find the canteen",
    "charge a phone",
    "meet the surgeon",
    "collect the letters",
    "pay the invoice",
    "borrow a wheelchair",
    "see the chaplain",
    "leave a coat",
    "get a taxi",
    "buy a newspaper",
    "join the choir",
    "wait for results",
]


def texts_everywhere(scope) -> list[str]:
    """Every text a name can sit in, across the stores an erasure covers."""
    texts = []
    for trail in Trail.objects.filter(scope=scope):
        texts += [trail.query, trail.normalised_query, trail.partition, trail.reason]
    for event in RecallEvent.objects.filter(scope=scope):
        texts += [event.query, event.partition, event.feedback_reason]
    texts += list(TrailSignal.objects.filter(trail__scope=scope).values_list("reason", flat=True))
    texts += list(SectionSync.objects.filter(scope=scope).values_list("source", flat=True))
    texts += list(Section.objects.filter(scope=scope).values_list("text", flat=True))
    texts += list(SectionRevision.objects.filter(scope_id=scope.id).values_list("text", flat=True))
    return texts


def holding(texts: list[str], names: list[str]) -> list[str]:
    return [text for text in texts if any(name in fold_text(text) for name in names)]


@pytest.fixture
def planted(api, scope, sections):
    scope.keep_raw_queries = True
    scope.save()
    for spelling, topic in zip(SPELLINGS, TOPICS):
        query = f"Can {spelling} {topic}, asks {BYSTANDER}?"
        assert api.record("hospital", query=query, cited=["parking"]).status_code == 201
        body = api.recall("hospital", query=query).json()
        assert body["outcome"] == "prefetch", body
        reason = f"{spelling} says this is wrong; {BYSTANDER} agrees"
        assert (
            api.call(
                "post", f"/scopes/hospital/recalls/{body['recall_id']}/feedback", {"helpful": False, "reason": reason}
            ).status_code
            == 200
        )
        trail = Trail.objects.get(scope=scope, query=query)
        writes.act(trail, "down", Actor.OPERATOR, by="ann", reason=f"{spelling} asked to, with {BYSTANDER}")
        SectionSync.objects.create(
            scope=scope, by="command", source=f"branch of {spelling} and {BYSTANDER}", summary={}
        )
    # Documentation naming them, then changed: the old text is kept as a revision.
    Section.upsert(scope, {"staff": f"Ask {SPELLINGS[0]} or {SPELLINGS[4]} at reception; {BYSTANDER} at night."})
    Section.upsert(scope, {"staff": f"Ask {SPELLINGS[5]} or {SPELLINGS[3]} at reception; {BYSTANDER} at night."})
    return scope


def test_fifteen_spellings_of_four_names_are_gone_from_every_store_and_the_bystander_stays(planted):
    assert len(holding(texts_everywhere(planted), FOLDED_NAMES)) >= 5 * len(SPELLINGS)
    run = PurgeRun.request(planted, SUBJECT, delete=False, requested_by="op")
    run.state = PurgeRun.State.PREVIEWED
    assert purge.preview(run)[0] == len(SPELLINGS)
    records = purge.preview_records(run)
    # The kept revision, and the text the redaction will replace (kept as a revision, then redacted).
    assert records["section texts"] == 1 and records["kept section revisions"] == 2
    assert records["feedback reasons"] == records["trail history reasons"] == records["docs sync sources"] == 15
    run.save()
    done = purge.run_purge(run.id)
    assert done.left == {}
    assert holding(texts_everywhere(planted), FOLDED_NAMES) == []
    assert len(holding(texts_everywhere(planted), ["mary major"])) >= 5 * len(SPELLINGS)
    # The audit counts what the run checked and changed in every store, not trails alone.
    assert done.counts["trails"] == [15, 15] and done.counts["docs sync sources"] == [15, 15]
    assert done.counts["kept section revisions"][1] == 2  # the old text and the one the redaction replaced
    assert done.changed == 15 + 15 + 15 + 15 + 15 + 1 + 2 and done.checked >= done.changed


def test_an_erasure_of_history_and_sync_sources_alone_counts_them_in_its_audit(api, scope, sections):
    from scopes.audit import AuditEvent

    api.record("hospital", query="Where do visitors park?", cited=["parking"])
    writes.act(Trail.objects.get(), "down", Actor.OPERATOR, by="ann", reason="Jane Doe asked")
    SectionSync.objects.create(scope=scope, by="command", source="branch jane-doe-fixes", summary={})
    run = PurgeRun.request(scope, "Jane Doe", delete=False, requested_by="op")
    run.save()
    done = purge.run_purge(run.id)
    assert done.counts["trail history reasons"][1] == 1 and done.counts["docs sync sources"][1] == 1
    assert done.changed == 2
    what = AuditEvent.objects.filter(kind=AuditEvent.Kind.PURGE).latest("id").what
    assert "1 of 1 trail history reasons" in what and "1 of 1 docs sync sources" in what


def test_a_section_whose_id_holds_the_name_is_said_to_be_left(scope):
    Section.upsert(scope, {"people/jane-doe": "Our head nurse.", "parking": "Car park B."})
    run = PurgeRun.request(scope, "Jane Doe", delete=False, requested_by="op")
    run.save()
    done = purge.run_purge(run.id)
    assert done.left == {"section ids (rename at the source)": 1}
    assert "nothing left" not in str(done.left)


def test_documentation_text_is_redacted_through_the_store_and_citing_trails_are_flagged(api, scope):
    Section.upsert(scope, {"parking": "Visitors park in car park B; ask Jane Doe for a permit."})
    api.record("hospital", query="Where do visitors park?", cited=["parking"])
    run = PurgeRun.request(scope, "Jane Doe", delete=False, requested_by="op")
    run.save()
    purge.run_purge(run.id)
    section = Section.objects.get(scope=scope, section_id="parking")
    assert section.text == "Visitors park in car park B; ask [redacted] for a permit."
    # The section changed under its citing trail, as after a sync: a recall says so.
    assert api.recall("hospital", query="Where do visitors park?").json()["outcome"] != "prefetch" or (
        Trail.objects.get().stale_at is not None
    )


def test_every_process_forgets_the_questions_it_holds_once_a_purge_finished(scope, settings):
    from trails import memory
    from trails.core import budget
    from trails.embedders import CachedEmbedder
    from trails.embedders.hashing import Embedder

    settings.RAGTRAIL_FORGET_CHECK_SECONDS = 0
    cached = CachedEmbedder(Embedder("hashing"), 100)
    memory.check()  # this process has seen every purge so far
    cached.embed_many(["Where does Jane Doe park?"])
    budget.counted("Jane Doe works nights")
    memory.check()
    assert cached._vectors and budget._memo
    run = PurgeRun.request(scope, "Jane Doe", delete=False, requested_by="op")
    run.save()
    # Another process ran the purge: this one learns of it at its next request or task.
    run.finish()
    memory.check()
    assert not cached._vectors and not budget._memo


def test_a_subject_of_more_identifiers_than_one_person_has_is_refused():
    from trails.views.forms import PurgeForm

    form = PurgeForm({"subject": "\n".join(f"name{n}" for n in range(pii.MAX_IDENTIFIERS + 1)), "action": "redact"})
    assert not form.is_valid() and "at most" in str(form.errors["subject"])
    assert PurgeForm({"subject": "Jane Doe\njane@example.org", "action": "redact"}).is_valid()


def test_a_text_is_folded_once_however_many_identifiers_the_subject_has(monkeypatch):
    calls = []
    real = pii.fold
    monkeypatch.setattr(pii, "fold", lambda text, **kw: calls.append(text) or real(text, **kw))
    rules = pii.rules_for(subject="\n".join(f"Name{n} Person{n}" for n in range(pii.MAX_IDENTIFIERS)), builtin=False)
    calls.clear()
    assert pii.find("Where does Name7 Person7 park?", rules) == [("subject", 11, 24)]
    assert calls == ["Where does Name7 Person7 park?"]


LETTERS = "abcdefghijklmnoprstuvyz"
ACCENTED = {
    "a": "áàâäãåą",
    "c": "çćč",
    "e": "éèêëę",
    "i": "íìîïı",
    "l": "ł",
    "n": "ñń",
    "o": "óòôöõø",
    "s": "śšş",
    "u": "úùûü",
    "z": "źżž",
}
IGNORABLES = ["\u200b", "\u200c", "\u200d", "\u00ad", "\u2060", "\ufeff"]


def _variant(name: str, data) -> str:
    """One spelling of a name: case, accents, ignorable characters, width, composition."""
    out = []
    for char in name:
        if char in ACCENTED and data.draw(st.booleans()):
            char = data.draw(st.sampled_from(ACCENTED[char]))
        if data.draw(st.booleans()):
            char = char.upper()
        if char.isascii() and char.isalpha() and data.draw(st.integers(0, 5)) == 0:
            char = chr(ord(char) + 0xFEE0)  # full width
        out.append(char)
        if char != " " and data.draw(st.integers(0, 4)) == 0:
            out.append(data.draw(st.sampled_from(IGNORABLES)))
    return unicodedata.normalize(data.draw(st.sampled_from(["NFC", "NFD"])), "".join(out))


word = st.text(alphabet=LETTERS, min_size=3, max_size=8)


@pytest.mark.django_db
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=word, last=word, other=word, data=st.data())
def test_any_spelling_of_a_name_planted_in_every_store_is_gone_and_another_name_stays(first, last, other, data):
    from django.db import transaction

    from scopes.models import Scope
    from trails.serving.record import RecordInput, record

    if other in (first, last):
        other += "x"
    spelling = _variant(f"{first} {last}", data)
    bystander = f"{other} {last}"
    text = f"ask {spelling} and {bystander} about it"
    with transaction.atomic():
        scope = Scope.objects.create(slug="property", matcher="lexical", keep_raw_queries=True)
        Section.upsert(scope, {"s": text})
        Section.upsert(scope, {"s": text + " again"})
        SectionSync.objects.create(scope=scope, by="command", source=text, summary={})
        with around_the_writer():
            RecallEvent.objects.create(scope=scope, outcome="miss", latency_ms=1, query=text, feedback_reason=text)
        record(scope, RecordInput(query=text, cited=["s"], partition=text[:200], signal="up"))
        writes.act(Trail.objects.get(scope=scope), "down", Actor.OPERATOR, by="ann", reason=text)
        run = PurgeRun.request(scope, f"{first.title()} {last.title()}", delete=False, requested_by="op")
        run.save()
        done = purge.run_purge(run.id)
        assert done.left == {}
        stored = texts_everywhere(scope)
        assert holding(stored, [f"{first} {last}"]) == []
        assert len(holding(stored, [bystander])) >= 10
        transaction.set_rollback(True)


def test_trails_signed_under_the_older_fold_are_brought_up_and_match_again(api, scope, sections):
    from trails.upkeep.reindex import catch_up_fold

    for query in ("Where does Søren park?", "Where do visitors park?"):
        assert api.record("hospital", query=query, cited=["parking"]).status_code == 201
    with around_the_writer():
        Trail.objects.update(lexical_params="minhash:128:1")  # as stored before the fold had a number
    # Not compared lexically meanwhile, and no error either.
    assert api.recall("hospital", query="Where does Søren park?").json()["outcome"] == "miss"
    assert catch_up_fold() == (1, 1)
    assert set(Trail.objects.values_list("lexical_params", flat=True)) == {"minhash:128:1:fold3"}
    assert Trail.objects.get(query="Where does Søren park?").normalised_query == "where does soren park"
    assert api.recall("hospital", query="Where does Soren park?").json()["outcome"] == "prefetch"
    assert api.recall("hospital", query="Where do visitors park?").json()["outcome"] == "prefetch"
    assert catch_up_fold() == (0, 0)


def test_the_purge_page_counts_documentation_and_says_what_is_left_per_store(api, scope):
    import re

    from django.contrib.auth.models import User
    from django.test import Client

    staff = Client()
    staff.force_login(User.objects.create_user("olga", password="x", is_staff=True, is_superuser=True))
    Section.upsert(scope, {"people/jane-doe": "Our head nurse.", "parking": "Ask JANE DOE for a permit."})
    api.record("hospital", query="Where does Jane Doe park?", cited=["parking"])
    html = staff.post(
        "/ops/hospital/purge/", {"step": "preview", "action": "redact", "subject": "Jane Doe"}
    ).content.decode()
    assert re.search(r"1 trails, .*1 section texts, 1 section ids \(rename at the source\)", html)
    run_id = re.search(r'name="run" value="([0-9a-f-]+)"', html).group(1)
    page = staff.get(staff.post("/ops/hospital/purge/", {"step": "run", "run": run_id})["Location"]).content.decode()
    assert "Still holding it afterwards: 1 section ids (rename at the source)." in page
    assert "nothing in this scope matches" not in page
    assert Section.objects.get(scope=scope, section_id="parking").text == "Ask [redacted] for a permit."


def test_a_trail_too_long_to_check_in_a_preview_is_said_unchecked_and_the_run_still_redacts_it(
    api, scope, sections, monkeypatch
):
    monkeypatch.setattr(purge, "PREVIEW_FOLD_CAP", 200)
    assert api.record("hospital", query="Where does Jane Doe park?", cited=["parking"]).status_code == 201
    long_query = "Ωμέγα " * 50 + "J\u0332ane Doe asked"
    assert api.record("hospital", query=long_query, cited=["parking"]).status_code == 201
    run = PurgeRun.request(scope, "Jane Doe", delete=False, requested_by="op")
    run.state = PurgeRun.State.PREVIEWED
    assert purge.preview(run)[::2] == (1, 1)  # one found, one not checked: never "nothing"
    run.save()
    done = purge.run_purge(run.id)
    assert done.left == {}
    assert not any("jane" in fold_text(q) for q in Trail.objects.values_list("query", flat=True))


def test_sync_summaries_naming_the_person_are_counted_and_redacted(api, scope, sections):
    from scopes.models import SectionSyncJob

    base = dict(sections)

    def sync(texts):
        sent = {"sections": [{"id": k, "text": v} for k, v in texts.items()], "delete_missing": True}
        return api.call("post", "/scopes/hospital/section-syncs", {**sent, "source": "git main"})

    assert sync({**base, "staff/jane-doe": "Ask at reception."}).status_code == 200
    assert sync({**base, "staff/reception": "Ask at reception."}).status_code == 200  # renamed at the source
    SectionSyncJob.objects.create(scope=scope, summary={"removed_ids": ["staff/jane_doe"]}, state="done")
    run = PurgeRun.request(scope, "Jane Doe", delete=False, requested_by="op")
    run.state = PurgeRun.State.PREVIEWED
    purge.preview(run)
    records = purge.preview_records(run)
    assert records["docs sync summaries"] == 2 and records["docs sync job summaries"] == 1
    run.save()
    done = purge.run_purge(run.id)
    assert done.left == {}
    assert done.counts["docs sync summaries"][1] == 2
    summaries = list(SectionSync.objects.values_list("summary", flat=True))
    summaries += list(SectionSyncJob.objects.values_list("summary", flat=True))
    assert summaries and not any("jane" in str(summary).lower() for summary in summaries)
