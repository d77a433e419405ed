from django.core.management.base import BaseCommand, CommandError

from scopes.models import Scope
from trails.upkeep.reindex import reindex_scope


class Command(BaseCommand):
    help = "Re-signs a scope's trails (after a change of matcher, threshold, synonyms or embedding model). Resumable."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--scope", required=True)
        parser.add_argument("--batch-size", type=int, default=500)
        parser.add_argument("--after-id", type=int, default=0, help="resume after this trail id")

    def handle(self, *args, scope: str, batch_size: int, after_id: int, **options) -> None:
        found = Scope.objects.filter(slug=scope).first()
        if found is None:
            raise CommandError(f"no such scope: {scope}")
        count = reindex_scope(
            found, batch_size, after_id, lambda done, last: self.stderr.write(f"{done} trails, last id {last}")
        )
        self.stdout.write(f"re-signed {count} trails in {found.slug}")
