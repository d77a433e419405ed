from django.core.management.base import BaseCommand
from django.utils import timezone

from trails.upkeep.jobs import sweep_expired
from trails.upkeep.sync import reap_lost_sync_jobs


class Command(BaseCommand):
    help = (
        "Deletes expired trails and recall events past their scope's retention, in batches, and takes back "
        "docs sync jobs whose worker stopped. Safe to rerun."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch-size", type=int, default=5000)

    def handle(self, *args, batch_size: int, **options) -> None:
        deleted = sweep_expired(timezone.now(), batch_size)
        self.stdout.write(f"deleted {deleted['trails']} trails and {deleted['events']} recall events")
        reaped = reap_lost_sync_jobs(timezone.now())
        self.stdout.write(f"sync jobs of stopped workers: {reaped['requeued']} queued again, {reaped['failed']} failed")
