"""manage.py benchmark_page: the table of targets in docs/benchmarks.md and docs/how-we-know.md from docs/benchmark-results.json."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from evaluation import results


class Command(BaseCommand):
    help = "Rewrites the table of targets and latest figures in docs/benchmarks.md and docs/how-we-know.md from docs/benchmark-results.json."

    def handle(self, *args, **options) -> None:
        results.write_pages()
        for page in results.PAGES:
            self.stdout.write(f"{page.name}: {len(results.load())} targets")
