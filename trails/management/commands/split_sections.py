"""manage.py split_sections PATH: the sections a sync would read, as JSONL, without a database."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from infra.hashing import section_hash
from trails.management.commands.sync_sections import add_source_arguments, split_with_progress


class Command(BaseCommand):
    help = (
        "Writes the sections of a documentation folder as JSONL ({id, text} per line, or {id, hash} with "
        "--hashes), split exactly as sync_sections splits it, touching no database: for a docs CI that sends "
        "them to POST /api/v1/scopes/{scope}/section-syncs, or to see what a sync would read."
    )
    requires_system_checks: list = []

    def add_arguments(self, parser) -> None:
        add_source_arguments(parser)
        parser.add_argument("--out", metavar="FILE", help="write to FILE (default: stdout)")
        parser.add_argument(
            "--hashes", action="store_true", help="each section's hash instead of its text (a manifest)"
        )
        parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")

    def handle(
        self,
        *args,
        path: str,
        format: str,
        include=(),
        exclude=(),
        max_tokens: int,
        out: str | None = None,
        hashes: bool = False,
        quiet: bool = False,
        **options,
    ):
        _, sections = split_with_progress(self, path, format, list(include), list(exclude), max_tokens, quiet)
        rows = (
            json.dumps(
                {
                    "id": s.id,
                    **({"hash": section_hash(s.text)} if hashes else {"text": s.text}),
                    **({"anchor": s.anchor} if s.anchor else {}),
                },
                ensure_ascii=False,
            )
            for s in sections
        )
        if out:
            with open(out, "w", encoding="utf-8") as target:
                target.writelines(row + "\n" for row in rows)
        else:
            for row in rows:
                self.stdout.write(row)
