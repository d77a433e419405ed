"""Documents split into sections at their headings, with stable ids (plain Python, no Django).

A section's id is `relative/path.ext#heading-slug`, the scheme of the shared Python FAQ data:
the heading in lower case, inline markup (backquotes, `*`, `_`) removed, `+` written as `plus`
(so "C" and "C++" differ), every other run of characters turned into one `-`. A heading that
repeats in a page gets `-2`, `-3`, ...; one whose id is still taken is refused, naming the
file and line.

What a section is (the FAQ's rule, for any documentation):
- the page title (the first heading, when no other heading shares its level) is no section;
  text under it before the next heading is the page's own section, id `relative/path.ext`;
- every other heading with text of its own is a section, running to the next heading at the
  same level or higher, so sub-headings inside an answer stay in it; a heading with no text
  of its own (a category) is none, its sub-headings are;
- a section's text is the source between its heading and its end, exactly as written (code
  blocks, directives, markup), without leading and trailing blank lines; a label target
  right above a heading (`.. _label:` in reStructuredText) starts that heading's section,
  never ends the one before; a Markdown page's front matter stays in the page's own section.

Headings are found by the format's own parser (docutils, markdown-it-py, Python's HTML
parser), never by regular expressions, so a `#` line in a code block is no heading.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

FORMATS = {".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".html": "html", ".htm": "html", ".jsonl": "jsonl"}
MAX_ID_LENGTH = 512  # the section store's limit


class SplitError(ValueError):
    """A document that cannot be split, naming the file and line at fault."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path, self.line, self.message = path, line, message
        super().__init__(f"{path}{f':{line}' if line else ''}: {message}")


@dataclass(frozen=True)
class SourceSection:
    id: str
    text: str
    path: str  # relative to the synced folder
    line: int  # where its heading (or the page) starts, 1-based
    hash: str | None = None  # only from a manifest (jsonl rows with "hash" and no "text")


@dataclass(frozen=True)
class Heading:
    level: int
    title: str  # the heading as written, markup included
    start: int  # first line of the heading block, 0-based
    body: int  # first line after the heading block, 0-based
    anchor: str | None = None  # an explicit id (HTML id attribute)


def slug(title: str) -> str:
    text = title.lower().replace("`", "").replace("*", "").replace("+", " plus ")
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def format_of(path: Path) -> str | None:
    return FORMATS.get(path.suffix.lower())


# --- headings, by each format's parser ---------------------------------------------------

def rst_headings(text: str, path: str) -> list[Heading]:
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    settings = get_default_settings(Parser)
    settings.report_level, settings.halt_level = 5, 5  # unknown roles and directives are the docs' own
    settings.file_insertion_enabled = False  # an include reads no other file
    settings.raw_enabled = False
    document = new_document(path, settings)
    Parser().parse(text, document)
    lines = text.splitlines()
    found = []
    for section in document.findall(nodes.section):
        title = section[0]
        if not isinstance(title, nodes.title) or title.line is None:
            continue
        underline = title.line - 1  # docutils gives the underline's line, 1-based
        start = underline - 1
        if start >= 1 and _adornment(lines[start - 1]) and lines[start - 1].strip()[0] == lines[underline].strip()[0]:
            start -= 1  # an overline
        level = 0
        parent = section.parent
        while isinstance(parent, nodes.section):
            level, parent = level + 1, parent.parent
        found.append(Heading(level, title.rawsource or title.astext(), start, underline + 1))
    return sorted(found, key=lambda h: h.start)


def _adornment(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= 2 and len(set(stripped)) == 1 and not stripped[0].isalnum()


def markdown_headings(text: str, path: str) -> tuple[list[Heading], int]:
    """The headings, and where the front matter ends (0 without one)."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.front_matter import front_matter_plugin

    tokens = MarkdownIt("commonmark").use(front_matter_plugin).parse(text)
    front = 0
    found = []
    for index, token in enumerate(tokens):
        if token.type == "front_matter" and token.map:
            front = token.map[1]
        elif token.type == "heading_open" and token.map:
            inline = tokens[index + 1]
            found.append(Heading(int(token.tag[1:]) - 1, inline.content, token.map[0], token.map[1]))
    return found, front


class _HtmlHeadings(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[int, int, str, str | None, int]] = []  # level, start line, text, id, end line
        self._open: tuple[int, int, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if re.fullmatch(r"h[1-6]", tag) and self._open is None:
            self._open = (int(tag[1]) - 1, self.getpos()[0], dict(attrs).get("id"))
            self._text = []

    def handle_endtag(self, tag):
        if self._open is not None and tag == f"h{self._open[0] + 1}":
            level, line, anchor = self._open
            self.found.append((level, line, " ".join("".join(self._text).split()), anchor, self.getpos()[0]))
            self._open = None

    def handle_data(self, data):
        if self._open is not None:
            self._text.append(data)


def html_headings(text: str, path: str) -> list[Heading]:
    parser = _HtmlHeadings()
    parser.feed(text)
    parser.close()
    # A heading's body starts on the line after its closing tag (headings sit on lines of their own).
    return [Heading(level, title, line - 1, end, anchor) for level, line, title, anchor, end in parser.found]


# --- sections from headings ---------------------------------------------------------------

LABEL = re.compile(r"^\.\. _[^:]+:\s*$")


def _own_start(lines: list[str], heading: Heading, fmt: str) -> int:
    """Where a heading's section starts: label targets right above it belong to it."""
    start = heading.start
    if fmt != "rst":
        return start
    cursor = start - 1
    while cursor >= 0 and (LABEL.match(lines[cursor]) or (not lines[cursor].strip() and cursor - 1 >= 0 and LABEL.match(lines[cursor - 1]))):
        if LABEL.match(lines[cursor]):
            start = cursor
        cursor -= 1
    return start


class _VisibleText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.seen = False

    def handle_data(self, data):
        self.seen = self.seen or bool(data.strip())


def _has_content(text: str, fmt: str) -> bool:
    """Whether a stretch of source says anything: for HTML, text a reader sees (not bare tags)."""
    if fmt != "html":
        return bool(text.strip())
    reader = _VisibleText()
    reader.feed(text)
    reader.close()
    return reader.seen


def _text(lines: list[str], begin: int, end: int, labels: list[str]) -> str:
    body = lines[begin:end]
    while body and not body[0].strip():
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    if labels:
        body = labels + ([""] if body else []) + body
    return "\n".join(body)


def sections_of_page(path: str, text: str, fmt: str) -> list[SourceSection]:
    """The sections of one page (`path` relative to the synced folder, with `/`)."""
    if fmt == "jsonl":
        return _jsonl_sections(path, text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    front = 0
    if fmt == "rst":
        headings = rst_headings(text, path)
    elif fmt == "markdown":
        headings, front = markdown_headings(text, path)
    elif fmt == "html":
        headings = html_headings(text, path)
    else:
        raise SplitError(path, None, f"unknown format {fmt!r}")
    starts = [_own_start(lines, h, fmt) for h in headings]
    sections: list[SourceSection] = []
    first_start = starts[0] if starts else len(lines)
    title = headings[0] if headings and sum(h.level == headings[0].level for h in headings) == 1 else None
    if title is None:
        # No page title: text before the first heading (front matter included) is the page's own.
        intro = _text(lines, 0, first_start, [])
        if _has_content(intro, fmt):
            sections.append(SourceSection(path, intro, path, 1))
    taken: dict[str, int] = {}
    repeats: dict[str, int] = {}
    inside_until = -1  # headings before this index are inside a section already taken
    for index, heading in enumerate(headings):
        next_heading = next((j for j in range(index + 1, len(headings)) if headings[j].level <= heading.level), None)
        if index < inside_until:
            continue
        first_sub = index + 1 if index + 1 < len(headings) else None
        own_end = starts[first_sub] if first_sub is not None else len(lines)
        labels = [line for line in lines[starts[index]:heading.start] if LABEL.match(line)]
        own_text = _text(lines, heading.body, own_end, [])
        if heading is title:
            # Front matter or text above the title belongs to the page's own section too.
            page_own = _text(lines, 0, starts[index], [])
            own = "\n\n".join(part for part in (page_own, _text(lines, heading.body, own_end, labels)) if part.strip())
            if _has_content(own, fmt):
                sections.append(SourceSection(path, own, path, heading.start + 1))
            continue
        if not _has_content(own_text, fmt):
            continue  # a category heading: its sub-headings are the sections
        end = starts[next_heading] if next_heading is not None else len(lines)
        base = heading.anchor or slug(heading.title)
        if not base:
            raise SplitError(path, heading.start + 1, f"heading {heading.title!r} has no letters or digits to make an id of")
        repeats[base] = repeats.get(base, 0) + 1
        fragment = base if repeats[base] == 1 else f"{base}-{repeats[base]}"
        section_id = f"{path}#{fragment}"
        if section_id in taken:
            raise SplitError(path, heading.start + 1, f"heading {heading.title!r} makes the id {section_id!r}, "
                                                      f"already made by the heading on line {taken[section_id]}")
        if len(section_id) > MAX_ID_LENGTH:
            raise SplitError(path, heading.start + 1, f"the id {section_id[:80]}… is {len(section_id)} characters; "
                                                      f"the store takes {MAX_ID_LENGTH}")
        taken[section_id] = heading.start + 1
        inside_until = next_heading if next_heading is not None else len(headings)
        sections.append(SourceSection(section_id, _text(lines, heading.body, end, labels), path, heading.start + 1))
    return sections


def _jsonl_sections(path: str, text: str) -> list[SourceSection]:
    """Rows of {"id", "text"} (a full set) or {"id", "hash"} (a manifest of hashes)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as problem:
            raise SplitError(path, number, f"not JSON: {problem}") from None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row["id"]:
            raise SplitError(path, number, 'each row needs an "id" (a string) and a "text" or a "hash"')
        if isinstance(row.get("text"), str):
            found.append(SourceSection(row["id"], row["text"], path, number))
        elif isinstance(row.get("hash"), str) and re.fullmatch(r"[0-9a-f]{64}", row["hash"]):
            found.append(SourceSection(row["id"], "", path, number, hash=row["hash"]))
        else:
            raise SplitError(path, number, 'each row needs a "text" (a string) or a "hash" (64 hex digits)')
        if len(row["id"]) > MAX_ID_LENGTH:
            raise SplitError(path, number, f"the id is {len(row['id'])} characters; the store takes {MAX_ID_LENGTH}")
    return found


def split_tree(root: Path, fmt: str = "auto") -> list[SourceSection]:
    """Every section of a folder (or of one file), in path order.

    Raises:
        SplitError: an unreadable file, a duplicate id (in a page or across pages), an id
            too long, or (with fmt "auto") a folder mixing formats.
    """
    root = Path(root)
    if not root.exists():
        raise SplitError(str(root), None, "no such file or folder")
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    base = root.parent if root.is_file() else root
    if fmt == "auto":
        kinds = {format_of(p) for p in files} - {None}
        if len(kinds) > 1:
            raise SplitError(str(root), None, f"mixed formats ({', '.join(sorted(kinds))}): pass --format to choose one")
        chosen = [p for p in files if format_of(p)]
    else:
        chosen = [p for p in files if format_of(p) == fmt or (root.is_file())]
    sections: list[SourceSection] = []
    seen: dict[str, SourceSection] = {}
    for file in chosen:
        relative = file.relative_to(base).as_posix()
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as problem:
            raise SplitError(relative, None, f"cannot be read as UTF-8 text: {problem}") from None
        for section in sections_of_page(relative, text, fmt if fmt != "auto" else format_of(file)):
            if section.id in seen:
                first = seen[section.id]
                raise SplitError(relative, section.line, f"the id {section.id!r} is also made at {first.path}:{first.line}")
            seen[section.id] = section
            sections.append(section)
    return sections
