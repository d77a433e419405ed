"""manage.py check_anchors PATH --built SITE: whether every section id links to an anchor of the
built site (Sphinx's or MkDocs' HTML output), for a docs CI to run after its build."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from trails.management.commands.sync_sections import add_source_arguments, split_with_progress


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.ids.update(value for name, value in attrs if name == "id" and value)


def built_ids(html: Path) -> set[str]:
    """Every element id of a built page: the anchors a link to it can name."""
    reader = _Ids()
    reader.feed(html.read_text(encoding="utf-8", errors="replace"))
    return reader.ids


def built_page(site: Path, page: str) -> Path | None:
    """The HTML a page was built to: `page.html` (Sphinx's html builder), or `page/index.html`
    (MkDocs, Sphinx's dirhtml), an index page being its folder's `index.html`."""
    path = Path(page).with_suffix("")
    candidates = [site / f"{path}.html", site / path / "index.html"]
    if path.name == "index":
        candidates.append(site / path.parent / "index.html")
    return next((c for c in candidates if c.is_file()), None)


class Command(BaseCommand):
    help = (
        "Splits a documentation folder as sync_sections does and checks each section's link (its id's anchor, "
        "or the built anchor recorded beside it) against the ids in the built HTML: exits 2 when one is missing."
    )
    requires_system_checks: list = []

    def add_arguments(self, parser) -> None:
        add_source_arguments(parser)
        parser.add_argument("--built", required=True, help="the built site's folder (e.g. _build/html or site/)")
        parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")

    def handle(self, *args, path: str, format: str, include=(), exclude=(), max_tokens: int, built: str, **options):
        site = Path(built)
        if not site.is_dir():
            raise CommandError(f"--built: no such folder: {built}")
        _, sections = split_with_progress(
            self, path, format, list(include), list(exclude), max_tokens, options.get("quiet", False)
        )
        pages: dict[str, set[str] | None] = {}
        found, missing, unbuilt = 0, [], set()
        for section in sections:
            if "#" not in section.id:
                continue
            if section.path not in pages:
                html = built_page(site, section.path)
                pages[section.path] = built_ids(html) if html is not None else None
            ids = pages[section.path]
            if ids is None:
                unbuilt.add(section.path)
                continue
            link = section.anchor or section.id.split("#", 1)[1].split("~", 1)[0]
            if link in ids:
                found += 1
            else:
                missing.append((section.id, link))
        self.stdout.write(
            f"{found + len(missing):,} sections with an anchor on {len(pages) - len(unbuilt):,} built pages: "
            f"{found:,} link to an anchor of the built page, {len(missing):,} do not"
            + (f"; {len(unbuilt):,} pages not found in the built site" if unbuilt else "")
        )
        for section_id, link in missing[:50]:
            self.stdout.write(f"  not built: {section_id} (#{link})")
        if len(missing) > 50:
            self.stdout.write(f"  ... and {len(missing) - 50:,} more")
        if missing:
            raise SystemExit(2)
