"""Operators per scope: an operator of tenant A never sees or changes tenant B, on any
operator page, export, the find box, the recall page or Django admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from scopes.access import Access
from scopes.models import ApiKey, Scope, Section
from tests.conftest import ApiClient, grant
from trails.core.lifecycle import Actor
from trails.models import PurgeRun, RecallEvent, Trail, writes

SECRET = "ACME-SECRET jane.roe@example.com"


@pytest.fixture
def tenants(db):
    """Two tenants, each with a trail, a served recall (query kept) and a purge run."""
    made = {}
    for slug in ("python-faq", "acme-support"):
        scope = Scope.objects.create(slug=slug, matcher="lexical", keep_raw_queries=True)
        Section.upsert(scope, {"s1": f"[{slug}] The first section."})
        api = ApiClient(ApiKey.issue([scope], name=slug)[1])
        question = f"How do I reset {SECRET}?" if slug == "acme-support" else "How do I copy a list?"
        trail_id = api.record(slug, query=question, cited=["s1"]).json()["trail_id"]
        recall_id = api.recall(slug, query=question).json()["recall_id"]
        run = PurgeRun.request(scope, "", False, "root")
        run.state = PurgeRun.State.DONE
        run.save()
        made[slug] = {"scope": scope, "trail": trail_id, "recall": recall_id, "run": str(run.public_id)}
    return made


def operator(scope: Scope, access: int = Access.CONFIGURE, model_permissions: bool = True) -> Client:
    """A staff user granted one scope; with every view/change permission of Django admin,
    so only the scope grant stands between them and the other tenant."""
    user = User.objects.create_user(f"op-{scope.slug}-{access}", password="x", is_staff=True)
    if model_permissions:
        user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["trails", "scopes"]))
    grant(user, scope, access=access)
    client = Client()
    client.force_login(user)
    return client


def urls_of(tenant: dict) -> dict[str, str]:
    slug = tenant["scope"].slug
    return {
        "overview": f"/ops/{slug}/",
        "tuning": f"/ops/{slug}/tuning/",
        "trails": f"/ops/{slug}/trails/",
        "trails csv": f"/ops/{slug}/trails/?format=csv",
        "trail": f"/ops/{slug}/trails/{tenant['trail']}/",
        "replay": f"/ops/{slug}/replay/",
        "replay a trail": f"/ops/{slug}/replay/?trail={tenant['trail']}",
        "replay a recall": f"/ops/{slug}/replay/?recall={tenant['recall']}",
        "recalls": f"/ops/{slug}/recalls/",
        "recalls csv": f"/ops/{slug}/recalls/?format=csv",
        "recall": f"/ops/{slug}/recalls/{tenant['recall']}/",
        "find": f"/ops/{slug}/find/?q={tenant['trail']}",
        "syncs": f"/ops/{slug}/syncs/",
        "purge": f"/ops/{slug}/purge/",
        "purge csv": f"/ops/{slug}/purge/?format=csv",
        "purge run": f"/ops/{slug}/purge/{tenant['run']}/",
        "audit": f"/ops/{slug}/audit/",
        "audit csv": f"/ops/{slug}/audit/?format=csv",
    }


def test_an_operator_of_one_tenant_reads_nothing_of_the_other_on_any_page(tenants):
    acme = operator(tenants["acme-support"]["scope"])
    python_faq = operator(tenants["python-faq"]["scope"])
    for name, url in urls_of(tenants["acme-support"]).items():
        answer = python_faq.get(url)
        assert answer.status_code == 404, (name, url, answer.status_code)
        assert "ACME" not in answer.content.decode() and "acme-support" not in answer.content.decode(), name
        assert acme.get(url).status_code in (200, 302), (name, url)
    # Nor does the other tenant's slug appear in the scope switcher or the landing redirect.
    page = python_faq.get("/ops/", follow=True).content.decode()
    assert "python-faq" in page and "acme-support" not in page


def test_an_operator_of_one_tenant_changes_nothing_of_the_other(tenants):
    acme = tenants["acme-support"]
    python_faq = operator(tenants["python-faq"]["scope"])
    slug, trail_id = acme["scope"].slug, acme["trail"]
    refused = [
        python_faq.post(f"/ops/{slug}/trails/{trail_id}/vote/", {"vote": "down"}),
        python_faq.post(f"/ops/{slug}/trails/vote/", {"vote": "down", "trail": [trail_id]}),
        python_faq.post(f"/ops/{slug}/thresholds/", {"action": "pin"}),
        python_faq.post(f"/ops/{slug}/purge/", {"subject": "Jane Roe", "action": "redact", "step": "preview"}),
        python_faq.post(f"/ops/{slug}/replay/", {"query": "How do I reset?"}),
    ]
    assert [r.status_code for r in refused] == [404] * 5
    assert Trail.objects.get(public_id=trail_id).status == "active"
    assert not Scope.objects.get(slug=slug).threshold_pinned
    assert PurgeRun.objects.filter(scope=acme["scope"]).count() == 1


def test_a_view_only_operator_may_look_but_not_act_or_configure(tenants):
    acme = tenants["acme-support"]
    viewer = operator(acme["scope"], access=Access.VIEW)
    slug = acme["scope"].slug
    assert viewer.get(f"/ops/{slug}/trails/{acme['trail']}/").status_code == 200
    assert viewer.post(f"/ops/{slug}/trails/{acme['trail']}/vote/", {"vote": "down"}).status_code == 403
    assert viewer.post(f"/ops/{slug}/thresholds/", {"action": "pin"}).status_code == 403
    assert (
        viewer.post(f"/ops/{slug}/purge/", {"subject": "x", "action": "redact", "step": "preview"}).status_code == 403
    )
    actor = operator(acme["scope"], access=Access.ACT)
    assert actor.post(f"/ops/{slug}/thresholds/", {"action": "pin"}).status_code == 403
    assert actor.post(f"/ops/{slug}/trails/{acme['trail']}/vote/", {"vote": "down"}).status_code == 302
    assert Trail.objects.get(public_id=acme["trail"]).status == "rejected"
    assert not Scope.objects.get(slug=slug).threshold_pinned
    # The trails table offers its buttons (Reinstate, the bulk bar) only to who may use them,
    # the full page and the htmx fragment alike.
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        assert 'value="reinstate"' in actor.get(f"/ops/{slug}/trails/", **headers).content.decode()
        assert 'name="vote"' not in viewer.get(f"/ops/{slug}/trails/", **headers).content.decode()


ADMIN_LISTS = [
    "/admin/trails/trail/",
    "/admin/scopes/scope/",
    "/admin/scopes/section/",
    "/admin/scopes/sectionsync/",
    "/admin/trails/purgerun/",
    "/admin/trails/toolpolicy/",
    "/admin/trails/piipattern/",
]


def test_django_admin_shows_an_operator_their_tenants_rows_only(tenants):
    python_faq = operator(tenants["python-faq"]["scope"])
    acme = tenants["acme-support"]
    for url in ADMIN_LISTS:
        page = python_faq.get(url)
        assert page.status_code == 200, url
        assert "acme-support" not in page.content.decode() and "ACME" not in page.content.decode(), url
    trail = Trail.objects.get(public_id=acme["trail"])
    # Found neither by its words, its public id nor its primary key; its pages answer as if it did not exist.
    for term in ("ACME", acme["trail"], str(trail.pk)):
        assert "jane.roe" not in python_faq.get("/admin/trails/trail/", {"q": term}).content.decode(), term
    assert (
        python_faq.get(f"/admin/trails/trail/{trail.pk}/change/").status_code == 302
    )  # admin: "doesn't exist" and back
    assert python_faq.get(f"/admin/scopes/scope/{acme['scope'].pk}/change/").status_code == 302
    # An admin action on the other tenant's trail changes nothing.
    python_faq.post("/admin/trails/trail/", {"action": "reject", "_selected_action": [trail.pk]})
    assert Trail.objects.get(pk=trail.pk).status == "active"
    # Keys: only those of the operator's own scopes; grants span tenants: superusers only.
    keys = python_faq.get("/admin/scopes/apikey/")
    assert keys.status_code == 200 and "acme-support" not in keys.content.decode()
    assert python_faq.get("/admin/scopes/operatorgrant/").status_code == 403


def test_a_scope_operator_suspends_a_key_of_their_scope_from_the_audit_page(tenants):
    from scopes.audit import AuditEvent

    scope, other = tenants["python-faq"]["scope"], tenants["acme-support"]["scope"]
    acting, looking = operator(scope, Access.ACT), operator(scope, Access.VIEW)
    own, _ = ApiKey.issue([scope], name="flooding")
    shared, _ = ApiKey.issue([scope, other], name="shared")
    page = acting.get(f"/ops/{scope.slug}/audit/").content.decode()
    assert f"/ops/{scope.slug}/keys/{own.pk}/suspend/" in page
    assert f"/ops/{scope.slug}/keys/{shared.pk}/suspend/" not in page and "a superuser may revoke it" in page
    assert "/suspend/" not in looking.get(f"/ops/{scope.slug}/audit/").content.decode()
    # View only: refused, the key untouched; a key reaching the other tenant: refused; the other's: not found.
    assert looking.post(f"/ops/{scope.slug}/keys/{own.pk}/suspend/").status_code == 403
    assert acting.post(f"/ops/{scope.slug}/keys/{shared.pk}/suspend/").status_code == 403
    theirs = ApiKey.objects.get(name="acme-support")
    assert acting.post(f"/ops/{scope.slug}/keys/{theirs.pk}/suspend/").status_code == 404
    assert not ApiKey.objects.filter(revoked_at__isnull=False).exists()
    # Unconfirmed, the page asks first and does nothing; confirmed, the key is refused from then on.
    asked = acting.post(f"/ops/{scope.slug}/keys/{own.pk}/suspend/")
    assert asked.status_code == 200 and "Suspend key flooding?" in asked.content.decode()
    assert not ApiKey.objects.filter(revoked_at__isnull=False).exists()
    assert acting.post(f"/ops/{scope.slug}/keys/{own.pk}/suspend/", {"confirm": "yes"}).status_code == 302
    own.refresh_from_db()
    assert own.revoked_at is not None and own.set_aside_at is None
    assert AuditEvent.objects.filter(scope=scope, kind=AuditEvent.Kind.KEY_REVOKED, who=f"op-{scope.slug}-2").exists()
    page = acting.get(f"/ops/{scope.slug}/audit/").content.decode()
    assert "revoked" in page and f"/ops/{scope.slug}/keys/{own.pk}/restore/" in page
    # Restored from the same table: let in again, audited; view access may not.
    assert looking.post(f"/ops/{scope.slug}/keys/{own.pk}/restore/").status_code == 403
    assert acting.post(f"/ops/{scope.slug}/keys/{own.pk}/restore/").status_code == 302
    own.refresh_from_db()
    assert own.revoked_at is None
    assert AuditEvent.objects.filter(scope=scope, kind=AuditEvent.Kind.KEY_RESTORED, who=f"op-{scope.slug}-2").exists()


def test_a_key_that_judged_another_tenants_trail_is_not_set_aside_by_this_tenants_operator(tenants):
    scope, other = tenants["python-faq"]["scope"], tenants["acme-support"]["scope"]
    key, secret = ApiKey.issue([other], name="moved")
    api = ApiClient(secret)
    recall = api.recall(other.slug, query=f"How do I reset {SECRET}?").json()
    assert recall["outcome"] == "prefetch"
    assert (
        api.call("post", f"/scopes/{other.slug}/recalls/{recall['recall_id']}/feedback", {"helpful": False}).status_code
        < 300
    )
    key.scopes.set([scope])  # moved to this tenant since: its report in the other still counts there
    acting = operator(scope, Access.ACT)
    assert f"/ops/{scope.slug}/keys/{key.pk}/suspend/" not in acting.get(f"/ops/{scope.slug}/audit/").content.decode()
    before = Trail.objects.get(public_id=tenants["acme-support"]["trail"])
    refused = acting.post(f"/ops/{scope.slug}/keys/{key.pk}/suspend/", {"confirm": "yes", "set_aside": "on"})
    assert refused.status_code == 403
    # Django admin's key actions refuse it too (they checked only the scopes it is granted now), and say so.
    for action in ("revoke_and_set_aside", "restore_reports", "revoke"):
        said = acting.post("/admin/scopes/apikey/", {"action": action, "_selected_action": [key.pk]}, follow=True)
        assert "Left as they were: moved" in said.content.decode(), action
    key.refresh_from_db()
    assert key.revoked_at is None and key.set_aside_at is None
    after = Trail.objects.get(pk=before.pk)
    assert (after.status, after.held_by, after.false_hit_reporters) == (
        before.status,
        before.held_by,
        before.false_hit_reporters,
    )


def test_a_key_whose_only_judgement_elsewhere_is_a_label_is_not_set_aside_by_this_tenants_operator(tenants):
    # A "helpful" verdict is a label of the other scope's threshold, no report or vote: setting the key aside moves it.
    scope, other = tenants["python-faq"]["scope"], tenants["acme-support"]["scope"]
    key, secret = ApiKey.issue([other], name="labeller")
    api = ApiClient(secret)
    recall = api.recall(other.slug, query=f"How do I reset {SECRET}?").json()
    feedback = f"/scopes/{other.slug}/recalls/{recall['recall_id']}/feedback"
    assert api.call("post", feedback, {"helpful": True}).status_code < 300
    key.scopes.set([scope])
    acting = operator(scope, Access.ACT)
    refused = acting.post(f"/ops/{scope.slug}/keys/{key.pk}/suspend/", {"confirm": "yes", "set_aside": "on"})
    assert refused.status_code == 403
    said = acting.post(
        "/admin/scopes/apikey/", {"action": "revoke_and_set_aside", "_selected_action": [key.pk]}, follow=True
    )
    assert "Left as they were: labeller" in said.content.decode()
    key.refresh_from_db()
    assert key.revoked_at is None and key.set_aside_at is None
    # A verdict that left no label (the recall had one already) still counts in that scope's false-hit figures.
    from tests.bypass import around_the_writer
    from trails.models import MatchLabel

    with around_the_writer():
        MatchLabel.objects.filter(reporter=key.reporter).delete()
    assert acting.post(f"/ops/{scope.slug}/keys/{key.pk}/suspend/", {"confirm": "yes"}).status_code == 403


def test_django_admin_needs_no_model_permission_and_offers_only_what_the_access_runs(tenants):
    from scopes.audit import AuditEvent

    scope, other = tenants["python-faq"]["scope"], tenants["acme-support"]["scope"]
    acting = operator(scope, Access.ACT, model_permissions=False)
    looking = operator(scope, Access.VIEW, model_permissions=False)
    for client in (acting, looking):
        assert "/admin/trails/trail/" in client.get("/admin/").content.decode()
        page = client.get("/admin/trails/trail/").content.decode()
        assert "How do I copy a list?" in page and "ACME" not in page
    assert 'value="reject"' in acting.get("/admin/trails/trail/").content.decode()
    assert 'value="reject"' not in looking.get("/admin/trails/trail/").content.decode()
    # Configuring a scope is for configure access: neither may change it, both may look.
    assert acting.get(f"/admin/scopes/scope/{scope.pk}/change/").status_code == 200
    assert 'name="embedding_threshold"' not in acting.get(f"/admin/scopes/scope/{scope.pk}/change/").content.decode()
    # A key flooding the operator's own scope: revoked and set aside by them, audited there;
    # a key that also reaches another tenant is not theirs to stop.
    own, _ = ApiKey.issue([scope], name="flooding")
    shared, _ = ApiKey.issue([scope, other], name="shared")
    listed = acting.get("/admin/scopes/apikey/").content.decode()
    assert "flooding" in listed and "shared" not in listed
    assert looking.get("/admin/scopes/apikey/").status_code == 403
    acting.post("/admin/scopes/apikey/", {"action": "revoke_and_set_aside", "_selected_action": [own.pk, shared.pk]})
    own.refresh_from_db(), shared.refresh_from_db()
    assert own.revoked_at is not None and own.set_aside_at is not None
    assert shared.revoked_at is None and shared.set_aside_at is None
    assert AuditEvent.objects.filter(scope=scope, kind=AuditEvent.Kind.KEY_SET_ASIDE, who=f"op-{scope.slug}-2").exists()
    # Editing or making keys stays a superuser's.
    assert acting.get(f"/admin/scopes/apikey/{own.pk}/change/").status_code == 200
    assert 'name="scopes"' not in acting.get(f"/admin/scopes/apikey/{own.pk}/change/").content.decode()
    assert acting.get("/admin/scopes/apikey/add/").status_code == 403


def test_an_operator_who_configures_a_scope_cannot_rename_it_or_learn_other_tenants_slugs(tenants):
    scope = tenants["python-faq"]["scope"]
    configuring = operator(scope, Access.CONFIGURE)
    page = configuring.get(f"/admin/scopes/scope/{scope.pk}/change/").content.decode()
    assert 'name="name"' in page and 'name="slug"' not in page
    # A post naming another tenant's slug neither renames the scope nor says that slug exists.
    form = {"name": "Python FAQ", "slug": "acme-support"}
    said = configuring.post(f"/admin/scopes/scope/{scope.pk}/change/", form, follow=True).content.decode()
    assert "already exists" not in said
    scope.refresh_from_db()
    assert scope.slug == "python-faq"


def test_a_staff_user_without_grants_sees_no_tenant(tenants):
    nobody = User.objects.create_user("nobody", password="x", is_staff=True)
    client = Client()
    client.force_login(nobody)
    assert client.get("/ops/", follow=True).status_code == 200
    for tenant in tenants.values():
        assert client.get(f"/ops/{tenant['scope'].slug}/").status_code == 404
    assert RecallEvent.objects.count() == 2  # both tenants' recalls are there, unseen


def test_grant_scope_gives_and_takes_an_operators_access(tenants):
    from io import StringIO

    from django.core.management import CommandError, call_command

    User.objects.create_user("ann", password="x", is_staff=True)
    out = StringIO()
    call_command("grant_scope", "ann", "--scope", "acme-support", "--access", "act", stdout=out)
    assert out.getvalue().strip() == "ann: act on acme-support"
    ann = Client()
    ann.force_login(User.objects.get(username="ann"))
    assert ann.get("/ops/acme-support/").status_code == 200 and ann.get("/ops/python-faq/").status_code == 404
    call_command("grant_scope", "ann", "--scope", "acme-support", "--revoke", stdout=StringIO())
    assert ann.get("/ops/acme-support/").status_code == 404
    with pytest.raises(CommandError, match="no such scope"):
        call_command("grant_scope", "ann", "--scope", "nope")


def test_an_erasure_names_every_identifier_counts_every_record_says_which_scopes_and_leaves_nothing(
    db, django_user_model
):
    """Jane Roe in two tenants the operator acts on: her name in a query, her e-mail in a
    feedback reason; the preview counts both kinds, names the other tenant, and after the run
    nothing in the scope matches any identifier."""
    from trails.upkeep.purge import purge_rules, records_matching

    scopes = {}
    for slug in ("python-faq", "acme-support"):
        scope = Scope.objects.create(slug=slug, matcher="lexical", keep_raw_queries=True)
        Section.upsert(scope, {"s1": "The first section."})
        api = ApiClient(ApiKey.issue([scope], name=slug)[1])
        api.record(slug, query="Jane Roe asks how to reset her password", cited=["s1"])
        served = api.recall(slug, query="Jane Roe asks how to reset her password").json()
        api.call(
            "post",
            f"/scopes/{slug}/recalls/{served['recall_id']}/feedback",
            {"helpful": False, "reason": "wrong answer for jane.roe@example.com"},
        )
        scopes[slug] = scope
    user = django_user_model.objects.create_user("dpo", password="x", is_staff=True)
    for scope in scopes.values():
        grant(user, scope, access=Access.ACT)
    dpo = Client()
    dpo.force_login(user)
    page = dpo.post(
        "/ops/python-faq/purge/", {"subject": "Jane Roe", "action": "redact", "step": "preview"}
    ).content.decode()
    assert "1 trails" in page and "1 recall queries" in page and "1 feedback reasons" in page  # her e-mail, by her name
    assert "acme-support: " in page and "preview there" in page
    run = PurgeRun.objects.get(scope=scopes["python-faq"], state=PurgeRun.State.PREVIEWED)
    done = dpo.post("/ops/python-faq/purge/", {"step": "run", "run": str(run.public_id)}, follow=True).content.decode()
    assert "nothing in this scope matches any more" in done
    rules = purge_rules(PurgeRun.request(scopes["python-faq"], "Jane Roe\njane.roe@example.com", False, "dpo"))
    assert not any(records_matching(scopes["python-faq"].pk, rules).values())
    assert sum(records_matching(scopes["acme-support"].pk, rules).values()) == 3  # untouched until purged there
    assert PurgeRun.objects.get(pk=run.pk).left == {} and PurgeRun.objects.get(pk=run.pk).subject == ""
    # The other tenant's button previews the same erasure there; run, nothing is left anywhere.
    there = page.split('action="/ops/acme-support/purge/"', 1)[1]
    subject = there.split('name="subject" value="', 1)[1].split('"', 1)[0]
    dpo.post("/ops/acme-support/purge/", {"subject": subject, "action": "redact", "step": "preview"})
    second = PurgeRun.objects.get(scope=scopes["acme-support"], state=PurgeRun.State.PREVIEWED)
    dpo.post("/ops/acme-support/purge/", {"step": "run", "run": str(second.public_id)})
    assert all(not any(records_matching(scope.pk, rules).values()) for scope in scopes.values())


def test_the_audit_page_says_who_did_what_in_the_scope_only(tenants, django_user_model):
    """Approvals, rejections, purges, threshold pins and admin changes, each with who; the other
    tenant's never; filters and CSV."""
    acme, python_faq = tenants["acme-support"], tenants["python-faq"]
    for tenant in (acme, python_faq):
        writes.act(
            Trail.objects.get(public_id=tenant["trail"]),
            "down",
            Actor.OPERATOR,
            by=f"op-of-{tenant['scope'].slug}",
            reason="wrong",
        )
    admin = User.objects.create_superuser("root", password="x")
    root = Client()
    root.force_login(admin)
    root.post(f"/ops/{acme['scope'].slug}/thresholds/", {"action": "pin"})
    page = root.get(f"/ops/{acme['scope'].slug}/audit/").content.decode()
    assert "op-of-acme-support" in page and "rejected" in page and "Pinned" in page and "purge" in page
    assert "op-of-python-faq" not in page
    only = root.get(f"/ops/{acme['scope'].slug}/audit/?kind=rejected").content.decode()
    assert "op-of-acme-support" in only and "Pinned" not in only
    csv = b"".join(root.get(f"/ops/{acme['scope'].slug}/audit/?format=csv&who=root").streaming_content).decode()
    assert "threshold" in csv and "op-of-acme-support" not in csv
    assert operator(python_faq["scope"]).get(f"/ops/{acme['scope'].slug}/audit/").status_code == 404


def test_an_operator_who_configures_sets_and_pins_the_threshold_from_the_what_if(tenants):
    from trails.models import ThresholdChange

    acme = tenants["acme-support"]
    slug = acme["scope"].slug
    configurer, actor = operator(acme["scope"]), operator(acme["scope"], access=Access.ACT)
    page = configurer.get(f"/ops/{slug}/tuning/?threshold=0.91").content.decode()
    assert (
        'id="set-threshold"' in page
        and 'id="set-threshold"' not in actor.get(f"/ops/{slug}/tuning/?threshold=0.91").content.decode()
    )
    body = {"action": "set", "matcher": "lexical", "threshold": "0.91", "pin": "1"}
    assert actor.post(f"/ops/{slug}/thresholds/", body).status_code == 403
    assert configurer.post(f"/ops/{slug}/thresholds/", body).status_code == 302
    scope = Scope.objects.get(slug=slug)
    assert scope.lexical_threshold == 0.91 and scope.threshold_pinned
    assert ThresholdChange.objects.filter(scope=scope, kind="pinned").exists()
    assert configurer.post(f"/ops/{slug}/thresholds/", {**body, "threshold": "7"}).status_code == 302
    assert Scope.objects.get(slug=slug).lexical_threshold == 0.91  # refused, nothing changed


def test_a_refusal_says_its_real_reason(tenants, django_user_model):
    """A view-only operator asked to act is told their access level, not a missing token."""
    acme = tenants["acme-support"]
    viewer = operator(acme["scope"], access=Access.VIEW)
    refused = viewer.post(f"/ops/{acme['scope'].slug}/trails/{acme['trail']}/vote/", {"vote": "down"})
    page = refused.content.decode()
    assert refused.status_code == 403 and "is view; this needs act" in page and "security token" not in page
    plain = Client()
    plain.force_login(django_user_model.objects.create_user("not-staff", password="x"))
    page = plain.get(f"/ops/{acme['scope'].slug}/").content.decode()
    assert "needs a staff account" in page and "security token" not in page
