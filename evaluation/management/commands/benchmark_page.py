"""manage.py benchmark_page: docs/benchmarks.md's table of targets from docs/benchmark-results.json."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from evaluation import results


class Command(BaseCommand):
    help = "Rewrites docs/benchmarks.md's table of targets and latest figures from docs/benchmark-results.json."

    def handle(self, *args, **options) -> None:
        results.write_page()
        self.stdout.write(f"{results.PAGE.name}: {len(results.load())} targets")
