"""Loads the demo scope: the Python FAQ sections and a few recorded trails."""

from __future__ import annotations

import json
import random
import secrets
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from scopes.demo import faq_questions, faq_sections
from scopes.models import ApiKey, Scope, Section
from trails.core.hint import RecordedStep
from trails.models import Trail
from trails.serving.recall import recall
from trails.serving.record import RecordInput, record
from trails.upkeep.jobs import roll_up

DEMO_SCOPE = "python-faq"
DEMO_TRAILS = 25
DEMO_RECALLS = 300


class Command(BaseCommand):
    help = (
        "Creates the python-faq demo scope with the FAQ at v3.6.0 and a few accepted trails, "
        "a fresh demo API key and an admin login. --revision new moves the sections to v3.11.0 "
        "so recalls show hints and misses."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--revision", choices=["old", "new"], default="old")
        parser.add_argument(
            "--no-credentials", action="store_true", help="do not issue a key or set the admin password"
        )
        parser.add_argument("--no-trails", action="store_true", help="load the sections and credentials only")
        parser.add_argument(
            "--credentials-only",
            action="store_true",
            help="print the demo's key, login and a Try: line, changing nothing else (make run prints them last)",
        )
        parser.add_argument("--no-print", action="store_true", help="issue the credentials without printing them")

    def handle(
        self,
        *args,
        revision: str,
        no_credentials: bool,
        no_trails: bool = False,
        credentials_only: bool = False,
        no_print: bool = False,
        **options,
    ) -> None:
        if credentials_only:
            self._print_credentials(Scope.objects.get(slug=DEMO_SCOPE))
            return
        scope, _ = Scope.objects.get_or_create(
            slug=DEMO_SCOPE, defaults={"name": "Python FAQ (demo)", "keep_raw_queries": True}
        )
        texts = faq_sections(revision)
        summary = Section.replace_all(scope, texts)
        self.stdout.write(
            f"sections at {revision}: {summary['created']} created, {summary['updated']} updated, {summary['unchanged']} unchanged"
        )

        if revision == "old" and not no_trails and not Trail.objects.filter(scope=scope).exists():
            # One transaction: a demo that fails half way leaves nothing for the rerun to skip.
            with transaction.atomic():
                # Recorded eight days ago, so the week of demo recalls below comes after them.
                recorded_at = timezone.now() - timedelta(days=8)
                questions = [q for q in faq_questions() if q["present_in"] == ["old", "new"]]
                step = max(1, len(questions) // DEMO_TRAILS)
                for index in range(0, min(len(questions), step * DEMO_TRAILS), step):
                    q = questions[index]
                    # Every third trail also cites the next entry, as an answer drawing on two
                    # sections would; after --revision new some of these come back as hints.
                    cited = [q["section_id"]] + (
                        [questions[index + 1]["section_id"]] if index % 3 == 0 and index + 1 < len(questions) else []
                    )
                    record(
                        scope,
                        RecordInput(
                            query=q["question"],
                            steps=[
                                RecordedStep("search", {"query": q["question"]}, cited),
                                *(RecordedStep("read", {"id": section_id}, [section_id]) for section_id in cited),
                            ],
                            cited=cited,
                            signal="accepted",
                            idempotency_key=f"demo:{q['section_id']}",
                        ),
                        now=recorded_at,
                    )
                self.stdout.write(f"trails recorded: {Trail.objects.filter(scope=scope).count()}")
                self._pending_and_traffic(scope, questions)

        if no_credentials:
            return
        demo_credentials(scope)
        if not no_print:
            self._print_credentials(scope)

    def _print_credentials(self, scope: Scope) -> None:
        user, password, key = demo_credentials(scope)
        recorded = list(Trail.objects.filter(scope=scope).order_by("id").values_list("query", flat=True)[:9])
        example = recorded[-1] if recorded else "How do I convert between tuples and lists?"
        body = json.dumps({"query": example}).replace("'", "'\\''")
        host = settings.RAGTRAIL_DEMO_HOST
        self.stdout.write(
            "\n"
            f"  API key for scope {DEMO_SCOPE}: {key}\n"
            f"  Operator pages at /ops/ and admin at /admin/: {user.username} / {password}\n"
            f"  Try: curl -s -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\\n"
            f"         -d '{body}' http://{host}/api/v1/scopes/{DEMO_SCOPE}/recall\n"
        )

    def _pending_and_traffic(self, scope: Scope, questions: list[dict]) -> None:
        """A few trails awaiting approval (one with an e-mail address, for the purge page) and a
        week of recalls, rolled up, so the operator pages have something to show."""
        rng = random.Random(7)
        unrecorded = [q for q in questions if not Trail.objects.filter(scope=scope, query=q["question"]).exists()]
        for q, prefix in zip(unrecorded[1::40], ["", "I'm ana@example.org: ", ""]):
            record(
                scope,
                RecordInput(
                    query=prefix + q["question"],
                    cited=[q["section_id"]],
                    steps=[RecordedStep("read", {"id": q["section_id"]}, [q["section_id"]])],
                ),
                now=timezone.now() - timedelta(hours=rng.randrange(1, 48)),
            )
        recorded = list(Trail.objects.filter(scope=scope, status="active").values_list("query", flat=True))
        asked = [q["question"] for q in unrecorded]
        now = timezone.now()
        # In time order, so each trail's last hit is its latest.
        for minutes_ago in sorted((rng.randrange(7 * 24 * 60) for _ in range(DEMO_RECALLS)), reverse=True):
            query = rng.choice(recorded) if rng.random() < 0.6 else rng.choice(asked)
            # Agents rarely repeat a question word for word.
            query = rng.choice(["{}", "{} Thanks!", "Quick question: {}", "{} (Python 3)"]).format(query)
            recall(scope, query, now=now - timedelta(minutes=minutes_ago))
        roll_up(now - timedelta(days=8), now)
        self.stdout.write(f"demo traffic: {DEMO_RECALLS} recalls over the last 7 days, rolled up")


def demo_credentials(scope: Scope) -> tuple:
    """The demo's admin user, its password and API key: the same on every run.

    They are kept in a local file (RAGTRAIL_DEMO_CREDENTIALS, ignored by git), so a second
    `make run` never rotates what a running demo uses. Only what the demo made itself is
    touched: an `admin` account made by someone else is left alone (the demo then uses
    `demo-admin`), and no other key is revoked or deleted.

    Returns:
        (user, password, full API key).
    """
    path = Path(settings.RAGTRAIL_DEMO_CREDENTIALS)
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    users = get_user_model().objects
    user = users.filter(username=saved.get("username", ""), pk=saved.get("user_id")).first()
    password = saved.get("password") or secrets.token_urlsafe(9)
    if user is not None and not user.check_password(password):
        user.set_password(password)  # the demo's own account: back to the password the file keeps
        user.save(update_fields=["password"])
    if user is None:
        username = "admin" if not users.filter(username="admin").exists() else "demo-admin"
        if users.filter(username=username).exists():
            username = f"demo-admin-{secrets.token_hex(3)}"
        user = users.create_user(username, password=password, is_staff=True, is_superuser=True)
    key_text = saved.get("api_key", "")
    key = ApiKey.objects.authenticate(key_text) if key_text else None
    if key is None or not key.scopes.filter(pk=scope.pk).exists():
        key, key_text = ApiKey.issue([scope], name="demo")
    path.write_text(
        json.dumps({"username": user.username, "user_id": user.pk, "password": password, "api_key": key_text})
    )
    path.chmod(0o600)
    return user, password, key_text
