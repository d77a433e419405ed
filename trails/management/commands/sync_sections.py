"""manage.py sync_sections --scope SLUG PATH: a scope's sections from a folder of documents."""
from __future__ import annotations

import json as jsonlib
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from infra.errors import Refused
from scopes.models import Scope
from scopes.splitting import FORMATS, SplitError, split_tree
from trails.upkeep.sync import sync_sections


class Command(BaseCommand):
    help = ("Syncs a scope's sections from a folder (or one file) of Markdown, reStructuredText, HTML or JSONL: "
            "splits pages at headings (ids path#heading-slug), writes only what changed, and prints what it did "
            "and how the served trails move. One transaction: on any error nothing is written.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", help="a folder or a file")
        parser.add_argument("--scope", required=True, help="the scope's slug")
        parser.add_argument("--format", default="auto", choices=["auto", *sorted(set(FORMATS.values()))],
                            help="auto (by file extension) refuses a folder mixing formats")
        parser.add_argument("--delete-missing", action="store_true", help="remove sections the source no longer holds")
        parser.add_argument("--dry-run", action="store_true", help="say what would change; write nothing")
        parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
        parser.add_argument("--allow-removing-most", action="store_true",
                            help="with --delete-missing, remove even more than half of the scope's sections")
        parser.add_argument("--exit-code", action="store_true",
                            help="exit 2 when the sync changed something (or, with --dry-run, would), 0 when not: for CI")

    def handle(self, *args, path: str, scope: str, format: str, delete_missing: bool, dry_run: bool, json: bool,
               allow_removing_most: bool = False, exit_code: bool = False, **options):
        found = Scope.objects.filter(slug=scope).first()
        if found is None:
            raise CommandError(f"no such scope: {scope}")
        try:
            sections = split_tree(Path(path), format)
        except SplitError as problem:
            raise CommandError(str(problem)) from None
        try:
            summary = sync_sections(found, sections, delete_missing=delete_missing, dry_run=dry_run, by="command",
                                    source=str(path), allow_removing_most=allow_removing_most)
        except Refused as refused:
            raise CommandError(f"{refused.field or 'sections'}: {refused.message}") from None
        if json:
            self.stdout.write(_json_dumps(summary.as_json()))
        else:
            for line in summary.lines():
                self.stdout.write(line)
        if summary.refusal:
            raise CommandError(summary.refusal)
        if exit_code and summary.changes_anything:
            raise SystemExit(2)


def _json_dumps(value) -> str:
    return jsonlib.dumps(value, ensure_ascii=False)
