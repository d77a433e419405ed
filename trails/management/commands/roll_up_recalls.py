from datetime import timedelta

from django.core.management.base import BaseCommand
from django.utils import timezone

from trails.upkeep.jobs import roll_up


class Command(BaseCommand):
    help = "Recounts recall events into hourly buckets for the last N hours. Rerunning gives the same counts."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--hours", type=int, default=2)

    def handle(self, *args, hours: int, **options) -> None:
        end = timezone.now()
        buckets = roll_up(end - timedelta(hours=hours), end)
        self.stdout.write(f"{buckets} hourly buckets over the last {hours} hours")
