from django.core.management.base import BaseCommand, CommandError

from scopes.models import Scope
from trails.upkeep.reindex import reindex_scope


class Command(BaseCommand):
    help = (
        "Re-signs a scope's trails, or every scope's (after a change of matcher, threshold, synonyms, embedding "
        "model, or of how questions are read). Resumable."
    )

    def add_arguments(self, parser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--scope")
        which.add_argument("--all", action="store_true", help="every scope, one after another")
        parser.add_argument("--batch-size", type=int, default=500)
        parser.add_argument("--after-id", type=int, default=0, help="resume after this trail id (with --scope)")

    def handle(self, *args, scope: str | None, all: bool, batch_size: int, after_id: int, **options) -> None:
        if all and after_id:
            raise CommandError("--after-id resumes one scope: give it with --scope")
        if all:
            scopes = list(Scope.objects.order_by("slug"))
        else:
            scopes = list(Scope.objects.filter(slug=scope))
            if not scopes:
                raise CommandError(f"no such scope: {scope}")
        for found in scopes:
            count = reindex_scope(
                found,
                batch_size,
                after_id,
                lambda done, last, slug=found.slug: self.stderr.write(f"{slug}: {done} trails, last id {last}"),
            )
            self.stdout.write(f"re-signed {count} trails in {found.slug}")
