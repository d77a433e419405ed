"""manage.py sync_sections --scope SLUG PATH: a scope's sections from a folder of documents."""

from __future__ import annotations

import json as jsonlib
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from infra.errors import Refused
from scopes.models import Scope
from scopes.splitting import FORMATS, MAX_TOKENS, SplitError, split_project
from trails.upkeep.sync import sync_sections


def add_source_arguments(parser) -> None:
    """The arguments that say which files are pages and how they are cut (shared with split_sections)."""
    parser.add_argument(
        "path", help="a Sphinx source folder (conf.py), an MkDocs project (mkdocs.yml), any folder, or one file"
    )
    parser.add_argument(
        "--format",
        default="auto",
        choices=["auto", *sorted(set(FORMATS.values()))],
        help="auto: as conf.py or mkdocs.yml say, else by file extension (a folder mixing formats is refused)",
    )
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="GLOB",
        help="read only pages matching (repeatable; ** crosses folders)",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="skip pages or folders matching (repeatable), on top of the project's own exclusions",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=MAX_TOKENS,
        help=f"cut a longer section at paragraphs into #anchor~2, ... (default {MAX_TOKENS}, the "
        "default prefetch budget; 0: never)",
    )


def split_with_progress(
    command: BaseCommand,
    path: str,
    format: str,
    include: list[str],
    exclude: list[str],
    max_tokens: int,
    quiet: bool = False,
):
    started, last = time.monotonic(), [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if not quiet and (done == total or now - last[0] >= 2.0):
            last[0] = now
            command.stderr.write(f"split {done:,} of {total:,} pages ({now - started:.0f} s)")

    try:
        project, sections = split_project(
            Path(path), format, include, exclude, progress=progress, max_tokens=max_tokens
        )
    except SplitError as problem:
        raise CommandError(str(problem)) from None
    for note in project.notes:
        if not quiet or note.startswith(WARNING):  # a warning says what is not read: never left out
            command.stderr.write(note)
    if not quiet:
        command.stderr.write(f"{len(sections):,} sections from {len({s.path for s in sections}):,} pages")
    return project, sections


WARNING = "warning: "


def warnings_of(project) -> list[str]:
    """The project's warnings (what the sync does not read), without their prefix."""
    return [note.removeprefix(WARNING) for note in project.notes if note.startswith(WARNING)]


class Command(BaseCommand):
    help = (
        "Syncs a scope's sections from documents: splits pages at headings and object descriptions (ids "
        "path#anchor, as Sphinx or MkDocs anchor them), writes only what changed, and prints what it did and "
        "how the served trails move. One transaction: on any error nothing is written."
    )

    def add_arguments(self, parser) -> None:
        add_source_arguments(parser)
        parser.add_argument("--scope", required=True, help="the scope's slug")
        parser.add_argument("--delete-missing", action="store_true", help="remove sections the source no longer holds")
        parser.add_argument("--dry-run", action="store_true", help="say what would change; write nothing")
        parser.add_argument(
            "--check",
            action="store_true",
            help="a dry run that exits 2 when something would change, 0 when not: for docs CI",
        )
        parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
        parser.add_argument(
            "--allow-removing-most",
            action="store_true",
            help="with --delete-missing, remove even more than half of the scope's sections",
        )
        parser.add_argument(
            "--exit-code",
            action="store_true",
            help="exit 2 when the sync changed something (or, with --dry-run, would), 0 when not",
        )
        parser.add_argument(
            "--source",
            default="",
            help="what is synced, shown to operators (e.g. a repository and commit); default: the path",
        )
        parser.add_argument(
            "--ids-to",
            metavar="FILE",
            help="write every section id and every moved trail id (JSON) to FILE; the printed "
            "summary lists at most 50 per kind",
        )
        parser.add_argument(
            "--quiet", action="store_true", help="no progress lines or notes on stderr (warnings are still printed)"
        )

    def handle(
        self,
        *args,
        path: str,
        scope: str,
        format: str,
        delete_missing: bool,
        dry_run: bool,
        json: bool,
        allow_removing_most: bool = False,
        exit_code: bool = False,
        check: bool = False,
        include=(),
        exclude=(),
        max_tokens: int = MAX_TOKENS,
        source: str = "",
        ids_to: str | None = None,
        quiet: bool = False,
        **options,
    ):
        found = Scope.objects.filter(slug=scope).first()
        if found is None:
            raise CommandError(f"no such scope: {scope}")
        project, sections = split_with_progress(self, path, format, list(include), list(exclude), max_tokens, quiet)
        dry_run = dry_run or check
        try:
            summary = sync_sections(
                found,
                sections,
                delete_missing=delete_missing,
                dry_run=dry_run,
                by="command",
                source=(source or str(path))[:500],
                allow_removing_most=allow_removing_most,
            )
        except Refused as refused:
            raise CommandError(f"{refused.field or 'sections'}: {refused.message}") from None
        if ids_to:
            Path(ids_to).write_text(_json_dumps(summary.as_json(complete=True)) + "\n", encoding="utf-8")
        if json:
            self.stdout.write(_json_dumps({**summary.as_json(), "warnings": warnings_of(project)}))
        else:
            for line in summary.lines():
                self.stdout.write(line)
        if summary.refusal:
            raise CommandError(summary.refusal)
        if (exit_code or check) and summary.changes_anything:
            raise SystemExit(2)


def _json_dumps(value) -> str:
    return jsonlib.dumps(value, ensure_ascii=False)
