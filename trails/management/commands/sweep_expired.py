from django.core.management.base import BaseCommand
from django.utils import timezone

from trails.upkeep.jobs import sweep_expired


class Command(BaseCommand):
    help = "Deletes expired trails and recall events past their scope's retention, in batches. Safe to rerun."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch-size", type=int, default=5000)

    def handle(self, *args, batch_size: int, **options) -> None:
        deleted = sweep_expired(timezone.now(), batch_size)
        self.stdout.write(f"deleted {deleted['trails']} trails and {deleted['events']} recall events")
