"""The four promises, held by one stateful property test over every path at once.

A hypothesis state machine drives the real code through the API, Django admin, the
operator pages and the admin-level functions (purge, sweep, reinstate, scope
delete and recreate) with random sequences over three scopes. A model of what each
call must have done is checked after every step:

- no response carries another scope's data;
- every prefetched text is the section's current text, every section called valid has
  its current hash, and a hint's changed sections really changed;
- no pending, rejected, expired or stale trail is ever served, and trails go stale only
  when every section they cite changed;
- every status follows the lifecycle's declared table (trails.core.lifecycle): the model
  predicts each vote, report and operator action by the table's rule, never by the code's;
- a scope is calibrated whether created or edited with a matcher or bound, and a docs sync
  beside agents' votes and operator rejections (threads, PostgreSQL) refuses nothing;
- after a purge, no row of the scope (every text and JSON field of every model, found
  generically), no API answer and no operator page holds the purged value;
- a tool result is a hit only while the sections it lists are the versions it was
  computed from, and only in the scope incarnation that stored it.

Examples per run: RAGTRAIL_PROPERTY_EXAMPLES (300 on PostgreSQL as in CI, 30 on SQLite);
the longer run is `make test-properties` (5,000 examples).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection, connections, models
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from infra.hashing import section_hash
from scopes.models import ApiKey, Scope, Section, SectionRevision
from tests.bypass import around_the_writer
from tests.conftest import ApiClient
from trails.core import lifecycle as table
from trails.core.lifecycle import Actor, Reports, State
from trails.core.normalise import normalise_query
from trails.learning.shipped import thresholds_for
from trails.models import PurgeRun, Trail, TrailReport, TrailSignal, writes
from trails.upkeep import purge
from trails.upkeep.jobs import sweep_expired

pytestmark = pytest.mark.django_db(transaction=True)

SLUGS = ("alpha", "beta", "gamma")
# Few sections and versions, so that texts (and hashes) collide and come back often: the
# interesting sequences (a text changed and changed back, a recreated scope holding the
# same texts as its predecessor) then turn up in a few hundred examples.
SECTION_IDS = ("s1", "s2")
QUESTIONS = (
    "When are ICU visiting hours?",
    "Where do visitors park?",
    "Can children visit the general ward?",
    "How do I book a blood test appointment?",
)
NAME = "Bob Baker"  # purged by an erasure request
EMAIL = "ann.archer@example.org"  # purged by the built-in rules too
DIRTY_VALUES = (NAME, EMAIL)
TOOL = "search"
REFUSING_ANSWER = "The documents I found don't cover this."

scopes_st = st.sampled_from(SLUGS)
sections_st = st.sampled_from(SECTION_IDS)
versions_st = st.integers(0, 1)  # a text can come back to an earlier version (and hash)


def text_of(slug: str, section_id: str, version: int) -> str:
    # Every text carries its scope's marker, so a leak into another scope shows.
    return f"[{slug}] Section {section_id}, version {version}: visiting and parking rules."


@dataclass
class TrailModel:
    scope: str
    incarnation: int
    status: str  # pending, active, rejected, stale
    cited: dict[str, str]  # section id -> hash when recorded
    expired: bool = False
    query: str = ""
    partition: str = ""
    # The keys ("a", "b") that reported it not helpful since its last approval: two send it back.
    reporters: set = field(default_factory=set)
    # Pending because reports or an operator took it out of service (not waiting for a first approval).
    held: bool = False
    # Whether it has band keys: a trail rejected at record is stored unsigned until reinstated.
    signed: bool = True
    # (status, held) before an operator's rejection or send-back, while that is the latest
    # change: what an undo goes back to (any later change in the history clears it).
    undo_to: tuple | None = None

    def state(self) -> State:
        if self.expired:
            return State.EXPIRED
        return State.HELD if self.status == "pending" and self.held else State(self.status)

    def apply(self, action: str, actor: Actor, reporter: str = "") -> bool:
        """What the declared table says the action does to this trail; False where it refuses."""

        def decide(name: str, reporters: set, restores_to: State | None = None) -> table.Rule:
            return table.decide(
                name, actor, self.state(), reporters_after=len(reporters), reporters_to_hold=2, restores_to=restores_to
            )

        prior = (self.status, self.held)
        try:
            rule = decide(action, self.reporters)
        except table.ActionRefused:
            return False
        if rule.restores:
            if self.undo_to is None:
                return False
            status, held = self.undo_to
            rule = decide(action, self.reporters, State.HELD if status == "pending" and held else State(status))
            (self.status, self.held), self.undo_to = self.undo_to, None
            if rule.to_state is State.HELD:
                self.status, self.held = "pending", True
            return True
        action = rule.taken_as or action
        if rule.reports is Reports.COUNT:
            self.reporters = self.reporters | {reporter}
            rule = decide(action, self.reporters)
        elif rule.reports is Reports.ANSWER:
            self.reporters = set()
        if rule.to_state is not None:
            self.status = "pending" if rule.to_state in (State.PENDING, State.HELD) else rule.to_state.value
            self.held = rule.to_state is State.HELD
            self.undo_to = prior if actor is Actor.OPERATOR and action in (table.VOTE_DOWN, table.DEMOTE) else None
        if rule.expiry is not table.Expiry.KEEP:
            self.expired = False
        return True


@dataclass
class ScopeModel:
    incarnation: int = 0
    sections: dict[str, str] = field(default_factory=dict)
    cacheable: bool = False
    # tool args key -> (result, {section id: hash}, incarnation)
    entries: dict[str, tuple[str, dict[str, str], int]] = field(default_factory=dict)


class Totals:
    examples = 0
    steps = 0
    servable_checked = 0  # misses checked against an approved trail of the very question
    findable_checked = 0  # approved trails checked to be found by their own question


class Promises(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Totals.examples += 1
        cache.clear()
        Scope.objects.all().delete()
        ApiKey.objects.all().delete()
        User.objects.all().delete()
        self.scopes: dict[str, ScopeModel] = {}
        self.apis: dict[str, ApiClient] = {}
        # Three agents' keys per scope, "a", "b" and "c", each with the reporter it is counted as:
        # reports count per key, and two keys' reports hold a trail.
        self.keys: dict[str, dict[str, tuple[ApiClient, str]]] = {}
        self.trails: dict[str, TrailModel] = {}
        # Recalls that served a trail: recall id -> [scope, incarnation, trail id, judged already].
        self.served: dict[str, list] = {}
        self.admin = Client()
        self.admin.force_login(User.objects.create_superuser("root", password="x"))

    @initialize()
    def make_scopes(self) -> None:
        for slug in SLUGS:
            self._create_scope(slug, incarnation=0)
            for section_id in SECTION_IDS:
                self.put_section(slug, section_id, 0)

    def _create_scope(self, slug: str, incarnation: int) -> None:
        scope = Scope.objects.create(slug=slug, matcher="lexical")
        self.keys[slug] = {}
        for label in ("a", "b", "c"):
            key, raw = ApiKey.issue([scope], name=label)
            self.keys[slug][label] = (ApiClient(raw), f"key:{key.lookup}")
        self.apis[slug] = self.keys[slug]["a"][0]
        self.scopes[slug] = ScopeModel(incarnation=incarnation)
        # Every scope starts caching the tool, as the first one did: the cache paths are walked often.
        self.set_tool_policy(slug, True)

    # -- checks shared by the rules --------------------------------------------------

    def _call(self, slug: str, method: str, path: str, body=None, second: bool = False, key: str = ""):
        Totals.steps += 1
        client = self.keys[slug][key or ("b" if second else "a")][0]
        response = client.call(method, f"/scopes/{slug}{path}", body)
        assert response.status_code < 500, response.content[:500]
        text = response.content.decode()
        for other in SLUGS:
            assert other == slug or f"[{other}]" not in text, f"{other}'s data in {slug}'s answer: {text[:300]}"
        return response

    def _current_hash(self, slug: str, section_id: str) -> str | None:
        text = self.scopes[slug].sections.get(section_id)
        return section_hash(text) if text is not None else None

    def _all_changed(self, trail: TrailModel) -> bool:
        return all(self._current_hash(trail.scope, s) != h for s, h in trail.cited.items())

    # -- sections: API and Django admin ------------------------------------------------

    @rule(slug=scopes_st, section_id=sections_st, version=versions_st)
    def put_section(self, slug, section_id, version) -> None:
        text = text_of(slug, section_id, version)
        response = self._call(slug, "put", "/sections", {"sections": [{"id": section_id, "text": text}]})
        assert response.status_code == 200 and response.json()["hashes"][section_id] == section_hash(text)
        self.scopes[slug].sections[section_id] = text

    @rule(slug=scopes_st, section_id=sections_st, version=versions_st)
    def edit_section_in_admin(self, slug, section_id, version) -> None:
        Totals.steps += 1
        text = text_of(slug, section_id, version)
        existing = Section.objects.filter(scope__slug=slug, section_id=section_id).first()
        if existing is not None:
            response = self.admin.post(f"/admin/scopes/section/{existing.pk}/change/", {"text": text})
        else:
            scope = Scope.objects.get(slug=slug)
            response = self.admin.post(
                "/admin/scopes/section/add/", {"scope": scope.pk, "section_id": section_id, "text": text}
            )
        assert response.status_code == 302, response.content[:800]
        self.scopes[slug].sections[section_id] = text
        assert Section.objects.get(scope__slug=slug, section_id=section_id).hash == section_hash(text)

    @rule(slug=scopes_st, section_id=sections_st)
    def delete_section(self, slug, section_id) -> None:
        response = self._call(slug, "delete", f"/sections/{section_id}")
        exists = section_id in self.scopes[slug].sections
        assert response.status_code == (204 if exists else 404)
        self.scopes[slug].sections.pop(section_id, None)

    # -- record, votes, recall ---------------------------------------------------------

    @rule(
        slug=scopes_st,
        question=st.sampled_from(QUESTIONS),
        cited=st.lists(sections_st, min_size=1, max_size=2, unique=True),
        signal=st.booleans(),
        hashes=st.sampled_from(["none", "current", "old"]),
        dirty=st.sampled_from(["", "query", "partition", "args"]),
        dirty_value=st.sampled_from(DIRTY_VALUES),
        refusing=st.booleans(),
    )
    def record(self, slug, question, cited, signal, hashes, dirty, dirty_value, refusing) -> None:
        body = {
            "query": f"{question} {dirty_value}" if dirty == "query" else question,
            "partition": f"ward {dirty_value}" if dirty == "partition" else "",
            "cited": cited,
            "steps": [
                {
                    "tool": TOOL,
                    "args": {"q": question, **({dirty_value: [dirty_value]} if dirty == "args" else {})},
                    "section_ids": cited,
                }
            ],
        }
        if signal:
            body["signal"] = "accepted"
        if refusing:
            body["answer"] = REFUSING_ANSWER  # admission rejects it; an operator may reinstate it
        current = {s: self._current_hash(slug, s) for s in cited}
        if hashes == "current":
            body["hashes"] = {s: h for s, h in current.items() if h}
        elif hashes == "old":
            body["hashes"] = {s: section_hash("an older text") for s in cited}
        response = self._call(slug, "post", "/trails", body)
        if any(h is None for h in current.values()):
            assert response.status_code == 422
        elif hashes == "old":
            assert response.status_code == 409
        elif (twin := None if refusing else self._twin_of(slug, body["query"], body["partition"], current)) is not None:
            # The same question citing the same sections at the same hashes: the trail held is
            # answered, and a positive signal is the agent's up vote on it (never a new twin).
            assert response.status_code == 200, response.content
            answer = response.json()
            model = self.trails[twin]
            assert answer["trail_id"] == twin and answer["refreshed"], (answer, model)
            if signal:
                model.apply("up", Actor.AGENT, reporter=self.keys[slug]["a"][1])
            assert answer["status"] == model.status, (answer, model)
        else:
            assert response.status_code == 201, response.content
            answer = response.json()
            assert answer["status"] == ("rejected" if refusing else "active" if signal else "pending")
            self.trails[answer["trail_id"]] = TrailModel(
                slug,
                self.scopes[slug].incarnation,
                answer["status"],
                current,
                query=body["query"],
                partition=body["partition"],
                signed=not refusing,
            )

    def _twin_of(self, slug: str, query: str, partition: str, cited: dict[str, str]) -> str | None:
        """The latest recorded trail of this scope asking this question, normalised, in this
        partition, citing these sections in this order at these hashes, signed, not stale and not
        expired (an expired twin is no twin: the path is recorded anew)."""
        twins = [
            t
            for t, m in self.trails.items()
            if m.scope == slug
            and m.incarnation == self.scopes[slug].incarnation
            and normalise_query(m.query) == normalise_query(query)
            and m.partition == partition
            and list(m.cited.items()) == list(cited.items())
            and m.status != "stale"
            and not m.expired
            and m.signed
        ]
        return twins[-1] if twins else None

    def _live_trails(self):
        # In recording order: trail ids are random, and a replayed example must pick the same trail.
        return list(self.trails)

    @precondition(lambda self: self.trails)
    @rule(data=st.data(), vote=st.sampled_from(["up", "down"]), key=st.sampled_from(["a", "b", "c"]))
    def vote(self, data, vote, key) -> None:
        """An agent's vote, by one of three keys: "c" never reports, so its up votes come
        between the others' reports (and must not shield the trail from them)."""
        trail_id = data.draw(st.sampled_from(self._live_trails()))
        trail = self.trails[trail_id]
        was = trail.status
        response = self._call(trail.scope, "post", f"/trails/{trail_id}/feedback", {"vote": vote}, key=key)
        if not trail.apply(vote, Actor.AGENT, reporter=self.keys[trail.scope][key][1]):
            assert response.status_code == 409, (response.content, trail)
            return
        assert response.status_code == 200, (response.content, trail)
        # The API shows an approved trail past its expiry as "expired" (never served).
        assert response.json()["status"] == ("expired" if trail.expired else trail.status)
        if vote == "up" and was != "active":
            self._check_findable(trail_id)

    def _operator(self, trail_id: str, action: str, reason: str = "") -> bool:
        """An operator's action (as the pages and admin take it); the table says what follows.
        Returns whether it applied."""
        model = self.trails[trail_id]
        try:
            writes.act(Trail.objects.get(public_id=trail_id), action, Actor.OPERATOR, by="root", reason=reason)
        except table.ActionRefused:
            assert not model.apply(action, Actor.OPERATOR), (action, model)
            return False
        assert model.apply(action, Actor.OPERATOR), (action, model)
        return True

    @staticmethod
    def _reported(trail: TrailModel, reporter: str) -> None:
        # A verdict on a trail that expired after it was served stands, but the table
        # refuses the report (no action applies to an expired trail): nothing is counted.
        trail.apply(table.REPORT, Actor.AGENT, reporter=reporter)

    @precondition(
        lambda self: (
            connection.vendor == "postgresql"
            and any(m.status in ("pending", "rejected") and not m.expired for m in self.trails.values())
        )
    )
    @rule(data=st.data(), ups=st.integers(0, 3), downs=st.integers(1, 3))
    def racing_votes(self, data, ups, downs) -> None:
        """Votes racing on a trail not yet approved: the first applied decides (an approval,
        after which the downs are one key's reports; or a rejection, final for votes)."""
        trail_id = data.draw(
            st.sampled_from(
                [t for t, m in self.trails.items() if m.status in ("pending", "rejected") and not m.expired]
            )
        )
        trail = self.trails[trail_id]
        key = self.apis[trail.scope].headers["Authorization"].split()[1]
        barrier = threading.Barrier(ups + downs)
        codes: list[int] = []
        before = TrailSignal.objects.filter(trail__public_id=trail_id).count()
        expires_before = Trail.objects.get(public_id=trail_id).expires_at

        def cast(direction: str) -> None:
            try:
                client = ApiClient(key)
                barrier.wait()
                codes.append(
                    client.call(
                        "post", f"/scopes/{trail.scope}/trails/{trail_id}/feedback", {"vote": direction}
                    ).status_code
                )
            finally:
                connections.close_all()

        threads = [threading.Thread(target=cast, args=(d,)) for d in ["up"] * ups + ["down"] * downs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        Totals.steps += 1
        assert set(codes) <= {200, 409} and len(codes) == ups + downs, codes
        row = Trail.objects.get(public_id=trail_id)
        # The signals this race wrote, in the order they were applied (an agent's down vote
        # on an active trail is a report, and writes none).
        history = list(TrailSignal.objects.filter(trail=row).order_by("id").values_list("signal", flat=True))[before:]
        if trail.status in ("pending", "active") and history and history[0] == "up":
            # Approved first: the downs that followed were this one key's reports.
            assert row.status == "active" and "down" not in history, history
        elif trail.status == "rejected":
            # Rejected before the race: no vote moves it, and none rejects it again (each is a 409).
            assert row.status == "rejected" and history == [], history
        else:
            assert row.status == "rejected" and history.count("down") == 1, history
            assert "up" not in history[history.index("down") :], history
        # Which vote won is the race's. What follows must not depend on it: Hypothesis replays
        # choices and, seeing other rules enabled after the same ones, stops the run
        # (FlakyStrategyDefinition). So an operator settles the trail as rejected, and its
        # expiry is put back where it was before an approval renewed it (else a later sweep
        # deletes the trail or keeps it, by which vote won).
        if row.status != "rejected":
            writes.act(row, "down", Actor.OPERATOR, by="root", reason="settled after the race")
        with around_the_writer():
            Trail.objects.filter(pk=row.pk).update(expires_at=expires_before)
        trail.status, trail.held, trail.undo_to = "rejected", False, None
        # The reports of the race's down votes (one key's, if an approval came first) stay counted.
        trail.reporters = set(TrailReport.objects.filter(trail=row).values_list("reporter", flat=True))

    @precondition(lambda self: any(t.status == "rejected" for t in self.trails.values()))
    @rule(data=st.data(), approve=st.booleans())
    def operator_reinstates(self, data, approve) -> None:
        """Undoes a rejection (at record time or later), and perhaps approves at once."""
        Totals.steps += 1
        trail_id = data.draw(st.sampled_from([t for t, m in self.trails.items() if m.status == "rejected"]))
        if self._operator(trail_id, "reinstate"):  # refused once expired
            self.trails[trail_id].signed = True  # signed afresh as it leaves rejection
        if approve and self._operator(trail_id, "up"):
            self._check_findable(trail_id)

    def _check_findable(self, trail_id: str) -> None:
        """An approved trail is found by its own question: recall reads it as a candidate.
        (Served is another matter: a newer trail of the same question may win.)"""
        model = self.trails[trail_id]
        alike = [
            m
            for m in self.trails.values()
            if (m.scope, m.query, m.partition) == (model.scope, model.query, model.partition)
        ]
        answer = self._call(
            model.scope,
            "post",
            "/recall",
            {"query": model.query, "partition": model.partition, "dry_run": True, "explain": True},
        ).json()
        if len(alike) <= 10:  # an explanation lists the ten nearest candidates
            Totals.findable_checked += 1
            assert trail_id in {c["trail_id"] for c in answer["explanation"]["candidates"]}, (
                "approved but not found",
                model,
            )

    @precondition(lambda self: any(t.undo_to is not None for t in self.trails.values()))
    @rule(data=st.data())
    def operator_undoes(self, data) -> None:
        """Undoes the latest change where it was an operator's rejection or send-back: the
        trail goes back to exactly the state before it (a hold and its reports too)."""
        Totals.steps += 1
        trail_id = data.draw(st.sampled_from([t for t, m in self.trails.items() if m.undo_to is not None]))
        model = self.trails[trail_id]
        reporters = set(model.reporters)
        self._operator(trail_id, "undo")
        row = Trail.objects.get(public_id=trail_id)
        assert row.false_hit_reporters == len(reporters), (row.false_hit_reporters, model)
        if model.status == "active" and not model.expired:
            self._check_findable(trail_id)

    @precondition(lambda self: any(t.status == "active" for t in self.trails.values()))
    @rule(data=st.data())
    def operator_sends_back_to_pending(self, data) -> None:
        Totals.steps += 1
        trail_id = data.draw(st.sampled_from([t for t, m in self.trails.items() if m.status == "active"]))
        self._operator(trail_id, "demote", reason="checking it")

    @rule(
        slug=scopes_st,
        question=st.sampled_from(QUESTIONS),
        dirty_value=st.sampled_from(("",) + DIRTY_VALUES),
        dry_run=st.booleans(),
    )
    def recall(self, slug, question, dirty_value, dry_run) -> None:
        query = f"{question} {dirty_value}".strip()
        partitions = ["", f"ward {dirty_value}"] if dirty_value else [""]
        for partition in partitions:
            self._recall_and_check(slug, query, partition, dry_run)

    @rule(
        data=st.data(),
        slug=scopes_st,
        question=st.sampled_from(QUESTIONS),
        cited=st.lists(sections_st, min_size=1, max_size=2, unique=True),
        edit=st.sampled_from(["none", "one", "every"]),
        dry_run=st.booleans(),
    )
    def an_approved_question_comes_again(self, data, slug, question, cited, edit, dry_run) -> None:
        """An approved trail's own question, in its scope and partition, after none, one or
        every section it cites was edited (to the other version: changed, or back to the text
        it was recorded with). The trail is one approved before, or else one recorded with
        an accepted signal now. The random questions of `recall` rarely meet an approved
        trail (none of 310 examples of one run checked a miss against one); this walks the
        paths that decide prefetch, hint, miss and stale for it."""
        approved = [t for t, m in self.trails.items() if m.status == "active" and not m.expired]
        if not approved:
            for section_id in cited:  # record refuses a citation of a section that is not there
                if section_id not in self.scopes[slug].sections:
                    self.put_section(slug, section_id, 0)
            self.record(slug, question, cited, signal=True, hashes="none", dirty="", dirty_value=NAME, refusing=False)
            approved = [next(reversed(self.trails))]  # the trail just recorded
        model = self.trails[data.draw(st.sampled_from(approved))]
        its_sections = list(model.cited)
        for section_id in {"none": [], "one": its_sections[:1], "every": its_sections}[edit]:
            text = self.scopes[model.scope].sections.get(section_id)
            self.put_section(model.scope, section_id, 1 if text == text_of(model.scope, section_id, 0) else 0)
        self._recall_and_check(model.scope, model.query, model.partition, dry_run)

    def _recall_and_check(self, slug: str, query: str, partition: str, dry_run: bool) -> None:
        stale_before = {t for t, m in self.trails.items() if m.status == "stale"}
        response = self._call(slug, "post", "/recall", {"query": query, "partition": partition, "dry_run": dry_run})
        assert response.status_code == 200
        answer = response.json()
        if answer["outcome"] != "miss":
            self._check_served(slug, answer, stale_before)
            if not dry_run:
                self.served[answer["recall_id"]] = [slug, self.scopes[slug].incarnation, answer["trail_id"], False]
        else:
            self._check_nothing_servable(slug, query, partition)
        if not dry_run:
            self._learn_stale_marks(slug)

    def _check_nothing_servable(self, slug: str, query: str, partition: str) -> None:
        """A miss is right only if no approved, unexpired trail of this very question holds:
        an approved trail that is never served breaks the promise as surely as a stale one served."""
        same = [
            m
            for m in self.trails.values()
            if m.scope == slug
            and m.query == query
            and m.partition == partition
            and m.status == "active"
            and not m.expired
        ]
        # Recall validates at most three candidates of equal similarity; past that it may stop short.
        if 0 < len(same) <= 3:
            Totals.servable_checked += 1
            assert all(self._all_changed(m) for m in same), (
                "an approved trail of this question was not served",
                query,
                same,
            )

    @precondition(lambda self: self.served)
    @rule(data=st.data(), helpful=st.booleans(), second=st.booleans(), reason=st.sampled_from(("",) + DIRTY_VALUES))
    def feedback_on_a_recall(self, data, helpful, second, reason) -> None:
        self._feedback(data.draw(st.sampled_from(list(self.served))), helpful, second, reason)

    @precondition(lambda self: any(t.status == "active" for t in self.trails.values()))
    @rule(data=st.data(), times=st.integers(1, 3), second=st.booleans(), reason=st.sampled_from(("",) + DIRTY_VALUES))
    def agents_report_a_trail_again_and_again(self, data, times, second, reason) -> None:
        """Recalls an active trail's own question and reports each answer as not helpful."""
        trail_id = data.draw(st.sampled_from([t for t, m in self.trails.items() if m.status == "active"]))
        trail = self.trails[trail_id]
        for _ in range(times):
            stale_before = {t for t, m in self.trails.items() if m.status == "stale"}
            answer = self._call(
                trail.scope, "post", "/recall", {"query": trail.query, "partition": trail.partition}
            ).json()
            if answer["outcome"] != "miss":
                self._check_served(trail.scope, answer, stale_before)
                self.served[answer["recall_id"]] = [
                    trail.scope,
                    self.scopes[trail.scope].incarnation,
                    answer["trail_id"],
                    False,
                ]
                self._feedback(answer["recall_id"], False, second, reason)
            self._learn_stale_marks(trail.scope)

    def _feedback(self, recall_id: str, helpful: bool, second: bool, reason: str) -> None:
        slug, incarnation, trail_id, judged = self.served[recall_id]
        response = self._call(
            slug, "post", f"/recalls/{recall_id}/feedback", {"helpful": helpful, "reason": reason}, second=second
        )
        if incarnation != self.scopes[slug].incarnation:
            assert response.status_code == 404
            return
        if judged:
            assert response.status_code == 409
            return
        assert response.status_code == 200, response.content
        self.served[recall_id][3] = True
        trail = self.trails.get(trail_id)
        if helpful or trail is None:
            return
        self._reported(trail, self.keys[slug]["b" if second else "a"][1])
        assert response.json()["trail_status"] == trail.status
        assert response.json()["false_hit_reporters"] == len(trail.reporters), (response.json(), trail)

    @rule(slug=scopes_st, threshold=st.sampled_from([0.5, 0.6, 0.8]), through_admin=st.booleans())
    def change_matching(self, slug, threshold, through_admin) -> None:
        """An operator changes how questions are matched, in admin or from a shell: the
        trails are re-signed, so approved ones are still found (checked by recall)."""
        Totals.steps += 1
        scope = Scope.objects.get(slug=slug)
        if through_admin:
            form = {
                f: getattr(scope, f)
                for f in (
                    "slug",
                    "name",
                    "matcher",
                    "embedding_threshold",
                    "token_budget",
                    "active_ttl_days",
                    "pending_ttl_days",
                    "event_retention_days",
                    "max_false_hit_rate",
                    "false_hit_reporters_to_pending",
                    "second_chance_margin",
                    "second_chance_top",
                )
            }
            form.update({"lexical_threshold": threshold, "synonyms": "", "band_count": "", "band_rows": ""})
            assert self.admin.post(f"/admin/scopes/scope/{scope.pk}/change/", form).status_code == 302
        else:
            scope.lexical_threshold = threshold
            scope.save()
        assert Scope.objects.get(slug=slug).lexical_threshold == threshold

    @rule(
        matcher=st.sampled_from(["lexical", "embedding", "both"]),
        bound=st.sampled_from([0.005, 0.02, 0.05]),
        through_admin=st.booleans(),
    )
    def create_a_scope_with_a_matcher_or_bound(self, matcher, bound, through_admin) -> None:
        """A scope created with a matcher or bound gets the calibration's thresholds, as an edit would."""
        Totals.steps += 1
        if through_admin:
            form = {
                "slug": "fresh",
                "name": "Fresh",
                "matcher": matcher,
                "max_false_hit_rate": bound,
                # The add form's initial values: the model's defaults.
                "lexical_threshold": Scope._meta.get_field("lexical_threshold").default,
                "embedding_threshold": Scope._meta.get_field("embedding_threshold").default,
                "token_budget": 2000,
                "active_ttl_days": 30,
                "pending_ttl_days": 7,
                "event_retention_days": 30,
                "false_hit_reporters_to_pending": 2,
                "second_chance_margin": Scope._meta.get_field("second_chance_margin").default,
                "second_chance_top": Scope._meta.get_field("second_chance_top").default,
                "synonyms": "",
                "band_count": "",
                "band_rows": "",
            }
            response = self.admin.post("/admin/scopes/scope/add/", form)
            assert response.status_code == 302, response.content[:2000]
            fresh = Scope.objects.get(slug="fresh")
        else:
            fresh = Scope.objects.create(slug="fresh", matcher=matcher, max_false_hit_rate=bound)
        fresh.refresh_from_db()
        expected = thresholds_for(bound, matcher)
        assert {
            "lexical_threshold": fresh.lexical_threshold,
            "embedding_threshold": fresh.embedding_threshold,
        } == expected
        fresh.delete()

    @precondition(lambda self: connection.vendor == "postgresql" and len(self.trails) >= 2)
    @rule(data=st.data(), slug=scopes_st, version=versions_st)
    def sync_beside_votes_and_rejections(self, data, slug, version) -> None:
        """A docs release of a scope while an agent votes a trail down and an operator rejects
        another, in threads: the lock order queues them; none is refused or answers 5xx."""
        agent_target, operator_target = data.draw(
            st.lists(st.sampled_from(self._live_trails()), min_size=2, max_size=2, unique=True)
        )
        texts = {section_id: text_of(slug, section_id, version) for section_id in SECTION_IDS}
        body = {"sections": [{"id": i, "text": t} for i, t in texts.items()], "source": "release"}
        agent = self.trails[agent_target]
        key = self.keys[agent.scope]["a"]
        barrier = threading.Barrier(3)
        outcomes: dict[str, object] = {}

        def run(name: str, call) -> None:
            try:
                barrier.wait()
                outcomes[name] = call()
            except Exception as problem:  # noqa: BLE001 -- reported below, with its name
                outcomes[name] = problem
            finally:
                connections.close_all()

        calls = {
            "sync": lambda: self.keys[slug]["a"][0].call("post", f"/scopes/{slug}/section-syncs", body).status_code,
            "vote": lambda: (
                ApiClient(key[0].headers["Authorization"].split()[1])
                .call("post", f"/scopes/{agent.scope}/trails/{agent_target}/feedback", {"vote": "down"})
                .status_code
            ),
            "reject": lambda: self._refused_as_409(
                lambda: writes.act(
                    Trail.objects.get(public_id=operator_target), "down", Actor.OPERATOR, by="root", reason="release"
                )
            ),
        }
        threads = [threading.Thread(target=run, args=(name, call)) for name, call in calls.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        Totals.steps += 3
        assert outcomes["sync"] == 200, outcomes
        self.scopes[slug].sections.update(texts)
        expected_vote = 200 if agent.apply("down", Actor.AGENT, reporter=key[1]) else 409
        assert outcomes["vote"] == expected_vote, (outcomes, agent)
        expected_reject = 200 if self.trails[operator_target].apply("down", Actor.OPERATOR) else 409  # 409: expired
        assert outcomes["reject"] == expected_reject, (outcomes, self.trails[operator_target])

    @staticmethod
    def _refused_as_409(call) -> int:
        try:
            call()
        except table.ActionRefused:
            return 409
        return 200

    def _check_served(self, slug: str, answer: dict, stale_before: set[str]) -> None:
        trail = self.trails.get(answer["trail_id"])
        assert trail is not None and trail.scope == slug and trail.incarnation == self.scopes[slug].incarnation, answer
        assert trail.status == "active" and not trail.expired and answer["trail_id"] not in stale_before, (
            trail,
            answer,
        )
        sections = {s["id"]: s for s in answer["sections"]}
        assert set(sections) == set(trail.cited)
        for section_id, recorded in trail.cited.items():
            current = self._current_hash(slug, section_id)
            served = sections[section_id]
            if served["status"] == "valid":
                assert current == recorded, f"{section_id} called valid but changed"
                # A valid section's text, on a prefetch or a hint, is its current text (whole within the budget).
                assert served.get("text") in (None, self.scopes[slug].sections[section_id]), section_id
            else:
                assert current != recorded and served.get("text") is None
        if answer["outcome"] == "prefetch":
            for section_id, served in sections.items():
                # Within the budget (2,000 tokens) every text is whole: exactly the current one.
                assert served["status"] == "valid" and served["text"] == self.scopes[slug].sections[section_id]
        else:
            assert answer["outcome"] == "hint" and not self._all_changed(trail)
            assert any(s["status"] != "valid" for s in sections.values())

    def _learn_stale_marks(self, slug: str) -> None:
        """Stale marks come from recall; each must be deserved: every cited section changed."""
        ids = {
            str(i) for i in Trail.objects.filter(scope__slug=slug, status="stale").values_list("public_id", flat=True)
        }
        for trail_id in ids:
            trail = self.trails[trail_id]
            if trail.status != "stale":
                assert trail.status == "active" and self._all_changed(trail), trail
                trail.status, trail.undo_to = "stale", None

    # -- time ----------------------------------------------------------------------------

    @precondition(lambda self: self.trails)
    @rule(data=st.data())
    def time_passes_for_a_trail(self, data) -> None:
        Totals.steps += 1
        trail_id = data.draw(st.sampled_from(self._live_trails()))
        with around_the_writer():
            Trail.objects.filter(public_id=trail_id).update(expires_at=timezone.now() - timedelta(seconds=1))
        self.trails[trail_id].expired = True

    @rule(days=st.sampled_from([0, 8, 31]))
    def sweep_with_a_moved_clock(self, days) -> None:
        Totals.steps += 1
        moved = timezone.now() + timedelta(days=days)
        due = {str(i) for i in Trail.objects.filter(expires_at__lte=moved).values_list("public_id", flat=True)}
        sweep_expired(moved)
        assert not Trail.objects.filter(public_id__in=due).exists()
        for trail_id in due:
            self.trails.pop(trail_id)

    # -- tool results ----------------------------------------------------------------------

    @rule(slug=scopes_st, cacheable=st.booleans())
    def set_tool_policy(self, slug, cacheable) -> None:
        response = self._call(
            slug, "put", "/tool-policies", {"policies": [{"tool": TOOL, "cacheable": cacheable, "ttl_s": 600}]}
        )
        assert response.status_code == 200
        self.scopes[slug].cacheable = cacheable

    @rule(slug=scopes_st, section_id=sections_st, hashes=st.sampled_from(["none", "current", "old"]))
    def store_tool_result(self, slug, section_id, hashes) -> None:
        model = self.scopes[slug]
        text = model.sections.get(section_id)
        result = f"result computed from: {text}"
        body = {"tool": TOOL, "args": {"q": section_id}, "context": {}, "result": result, "section_ids": [section_id]}
        current = self._current_hash(slug, section_id)
        if hashes == "current" and current:
            body["hashes"] = {section_id: current}
        elif hashes == "old":
            body["hashes"] = {section_id: section_hash("an older text")}
        response = self._call(slug, "put", "/tool-results", body)
        if not model.cacheable:
            assert response.status_code == 200 and response.json()["stored"] is False
        elif text is None:
            assert response.status_code == 422
        elif hashes == "current":
            assert response.status_code == 200 and response.json()["stored"] is True
            model.entries[section_id] = (result, {section_id: current}, model.incarnation)
        else:
            assert response.status_code == (409 if hashes == "old" else 422)

    @rule(slug=scopes_st, section_id=sections_st)
    def look_up_tool_result(self, slug, section_id) -> None:
        model = self.scopes[slug]
        answer = self._call(
            slug, "post", "/tool-results/lookup", {"tool": TOOL, "args": {"q": section_id}, "context": {}}
        ).json()
        if answer["hit"]:
            assert model.cacheable and section_id in model.entries, answer
            result, read, incarnation = model.entries[section_id]
            assert incarnation == model.incarnation and answer["result"] == result
            assert all(self._current_hash(slug, s) == h for s, h in read.items()), (
                "a result of a changed section was served"
            )

    # -- purge, scope delete and recreate ---------------------------------------------------

    @rule(slug=scopes_st, value=st.sampled_from(DIRTY_VALUES + ("rules",)), delete=st.booleans())
    def purge(self, slug, value, delete) -> None:
        Totals.steps += 1
        scope = Scope.objects.get(slug=slug)
        run = PurgeRun.request(scope, "" if value == "rules" else value, delete, "root")
        run.state = PurgeRun.State.PREVIEWED
        purge.preview(run)
        run.save()
        purge.run_purge(run.id)
        purged = EMAIL if value == "rules" else value
        self._assert_gone(scope, purged)
        remaining = {str(i) for i in Trail.objects.filter(scope=scope).values_list("public_id", flat=True)}
        for trail_id in [t for t, m in self.trails.items() if m.scope == slug and t not in remaining]:
            self.trails.pop(trail_id)
        # A redaction rewrote the kept trails' questions and partitions (and re-signed them):
        # they are found by what they say now.
        said = {
            str(i): (q, p)
            for i, q, p in Trail.objects.filter(scope=scope).values_list("public_id", "query", "partition")
        }
        for trail_id, model in self.trails.items():
            if model.scope == slug:
                model.query, model.partition = said[trail_id]
        self.scopes[slug].entries.clear()

    def _assert_gone(self, scope: Scope, value: str) -> None:
        needle = value.lower()
        for model in [*apps.get_app_config("trails").get_models(), *apps.get_app_config("scopes").get_models()]:
            if model in (Scope, ApiKey, Section, SectionRevision):
                continue  # the scope's own documents and settings, not caller-written trail data
            names = {f.name for f in model._meta.get_fields()}
            rows = (
                model.objects.filter(scope=scope)
                if "scope" in names
                else model.objects.filter(trail__scope=scope)
                if "trail" in names
                else None
            )
            if rows is None:
                continue
            text_fields = [
                f.name
                for f in model._meta.concrete_fields
                if isinstance(f, (models.CharField, models.TextField, models.JSONField))
            ]
            for row in rows.values(*text_fields):
                assert needle not in json.dumps(row, default=str).lower(), (model.__name__, row)
        staff_pages = [f"/ops/{scope.slug}/trails/"] + [
            f"/ops/{scope.slug}/trails/{public_id}/"
            for public_id in Trail.objects.filter(scope=scope).values_list("public_id", flat=True)
        ]
        for url in staff_pages:
            assert needle not in self.admin.get(url).content.decode().lower(), url
        for public_id in Trail.objects.filter(scope=scope).values_list("public_id", flat=True):
            assert needle not in self._call(scope.slug, "get", f"/trails/{public_id}").content.decode().lower()

    @rule(slug=scopes_st)
    def delete_and_recreate_scope(self, slug) -> None:
        """The tenant goes, and comes back under the same slug with the same documents."""
        Totals.steps += 1
        documents, cached_calls = dict(self.scopes[slug].sections), list(self.scopes[slug].entries)
        Scope.objects.get(slug=slug).delete()
        for trail_id in [t for t, m in self.trails.items() if m.scope == slug]:
            self.trails.pop(trail_id)
        self._create_scope(slug, incarnation=self.scopes[slug].incarnation + 1)
        if documents:
            body = {"sections": [{"id": i, "text": t} for i, t in documents.items()]}
            assert self._call(slug, "put", "/sections", body).status_code == 200
            self.scopes[slug].sections = documents
        # The new tenant's agents make the same tool calls the old one's cached.
        for section_id in cached_calls:
            self.look_up_tool_result(slug, section_id)

    # -- after every step ---------------------------------------------------------------------

    @invariant()
    def statuses_follow_the_rules(self) -> None:
        rows = dict(Trail.objects.values_list("public_id", "status"))
        assert {str(k) for k in rows} == set(self.trails), "a trail appeared or vanished outside the rules"
        for public_id, status in rows.items():
            assert status == self.trails[str(public_id)].status, (public_id, status, self.trails[str(public_id)])


def examples() -> int:
    default = 300 if connection.vendor == "postgresql" else 30
    return int(os.environ.get("RAGTRAIL_PROPERTY_EXAMPLES", default))


def test_every_promise_holds_on_every_path(capsys):
    Totals.examples = Totals.steps = Totals.servable_checked = Totals.findable_checked = 0
    run_state_machine_as_test(
        Promises,
        settings=settings(
            max_examples=examples(),
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
    with capsys.disabled():
        print(
            f"\nstateful promises: {Totals.examples} examples, {Totals.steps} steps on {connection.vendor}, "
            f"{Totals.servable_checked} misses checked against an approved trail of the same question, "
            f"{Totals.findable_checked} approved trails checked findable"
        )
