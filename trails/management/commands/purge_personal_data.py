from django.core.management.base import BaseCommand, CommandError

from scopes.models import Scope
from trails.core.pii import MAX_IDENTIFIERS, MAX_SUBJECT_CHARACTERS, identifier_problem, identifiers
from trails.models import PurgeRun
from trails.upkeep import purge


class Command(BaseCommand):
    help = (
        "Purges personal data (built-in rules and the scope's patterns, or --subject for an erasure "
        "request) from stored queries: redacts them, or deletes the trails with --delete. --preview only counts."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--scope", required=True)
        parser.add_argument("--subject", default="")
        parser.add_argument("--delete", action="store_true")
        parser.add_argument("--preview", action="store_true")
        parser.add_argument("--by", default="command line", help="who asked, for the audit record")

    def handle(self, *args, scope: str, subject: str, delete: bool, preview: bool, by: str, **options) -> None:
        found = Scope.objects.filter(slug=scope).first()
        if found is None:
            raise CommandError(f"no such scope: {scope}")
        if len(identifiers(subject)) > MAX_IDENTIFIERS or len(subject) > MAX_SUBJECT_CHARACTERS:
            raise CommandError(
                f"an erasure subject has at most {MAX_IDENTIFIERS} identifiers and {MAX_SUBJECT_CHARACTERS} characters"
            )
        for identifier in identifiers(subject):
            if problem := identifier_problem(identifier):
                raise CommandError(problem)
        run = PurgeRun.request(found, subject, delete, by)
        if preview:
            count, shown, unchecked, deleted = purge.preview(run)
            if run.action == PurgeRun.Action.DELETE:
                self.stdout.write(f"{count} trails would be deleted")
            else:
                self.stdout.write(f"{count - deleted} trails would be redacted")
                if deleted:
                    self.stdout.write(f"{deleted} trails would be deleted: their section ids hold the match")
            if unchecked:
                self.stdout.write(f"{unchecked} trails too long to check in a preview: the run checks them")
            others = {kind: n for kind, n in purge.preview_records(run).items() if n and kind != "trails"}
            if others:
                self.stdout.write("and: " + ", ".join(f"{n} {kind}" for kind, n in others.items()))
            for public_id, _, rules, contexts, doomed in shown:
                self.stdout.write(
                    f"  {public_id}: {', '.join(rules)}{' (deleted)' if doomed else ''}"
                    + "".join(f"\n    {shown_text}" for shown_text in contexts)
                )
            return
        run.save()
        done = purge.run_purge(run.id)
        if done.action == PurgeRun.Action.DELETE:
            self.stdout.write(f"purge {done.public_id}: {done.matched} of {done.processed} trails deleted")
        else:
            also = f", {done.deleted} deleted: their section ids held the match" if done.deleted else ""
            self.stdout.write(f"purge {done.public_id}: {done.redacted} of {done.processed} trails redacted{also}")
        for kind, (checked, changed) in (done.counts or {}).items():
            if kind != "trails" and changed:
                self.stdout.write(f"  {changed} of {checked} {kind} changed")
        left = ", ".join(f"{n} {kind}" for kind, n in (done.left or {}).items())
        self.stdout.write(f"still holding it: {left}" if left else "nothing left in any store")
