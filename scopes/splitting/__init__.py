"""Documents split into sections with the ids their documentation tool anchors them by
(plain Python, no Django).

A section's id is `relative/path.ext#anchor`, the file's real name and the anchor a reader of
the built site links to: for reStructuredText as Sphinx anchors it (an explicit label or a
target above the heading wins, else the title as docutils makes ids of it, roles and escapes
resolved; object descriptions by their full name), for Markdown as MkDocs does (an
`{#anchor}` wins, else the toc extension's slug; a repeat gets `_1`), for HTML the heading's
`id`, else its text in lower case with `-`. A repeated reStructuredText or HTML anchor gets
`-2`, `-3`, ... An anchor depends on the heading (or its label) alone, never on its parent,
so a heading moved under a new parent keeps its id.

What a section is (see pages.py): the page's own text (before the first heading, and the
title's when the page has one), every heading with text of its own up to the next heading of
any level, and every object description with content of its own. A section's text is the
source exactly as written. Headings are found by the format's own parser (docutils,
markdown-it-py, Python's HTML parser), never by regular expressions, so a `#` line in a code
block is no heading. Which files are pages is the project's own rule (see projects.py).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scopes.splitting import markup, rst
from scopes.splitting.anchors import mkdocs_unique, numbered_unique
from scopes.splitting.pages import assemble
from scopes.splitting.projects import FORMATS, Project, ProjectError, pages, read_project

__all__ = [
    "FORMATS",
    "MAX_ID_LENGTH",
    "SourceSection",
    "SplitError",
    "sections_of_page",
    "split_project",
    "split_tree",
    "unreadable_id",
]

MAX_ID_LENGTH = 512  # the section store's limit
INCLUDE = re.compile(r"^(?P<indent>[ \t]*)\.\. include::[ \t]*(?P<target>\S.*?)[ \t]*$")
MAX_INCLUDE_DEPTH = 8
# A section longer than this many tokens (the scope's default prefetch budget) is cut at
# paragraphs into parts `#anchor`, `#anchor~2`, ...: a prefetch then carries whole parts.
MAX_TOKENS = 2000


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


def unreadable_id(section_id: str) -> str | None:
    """Why an id cannot be stored, read and deleted like any other, or None."""
    if not section_id:
        return "is empty"
    if len(section_id) > MAX_ID_LENGTH:
        return f"is {len(section_id)} characters; the store takes {MAX_ID_LENGTH}"
    bad = next((c for c in section_id if ord(c) < 32 or 127 <= ord(c) < 160), None)
    if bad is not None:
        return f"holds the control character {bad!r}"
    return None


def _blocks(text: str) -> list[str]:
    """The text in paragraphs: cut at blank lines followed by an unindented line, never inside
    a fenced code block."""
    blocks, current, fenced = [], [], False
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        current.append(line)
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if not fenced and not line.strip() and following.strip() and not following[0].isspace():
            blocks.append("\n".join(current).strip("\n"))
            current = []
    if current:
        blocks.append("\n".join(current).strip("\n"))
    return [b for b in blocks if b.strip()]


def cut_to_size(text: str, max_tokens: int) -> list[str]:
    """The text as parts of at most `max_tokens` tokens each, cut at paragraphs (at lines
    where one paragraph alone is longer)."""
    from infra.tokens import count_tokens

    if not max_tokens or count_tokens(text) <= max_tokens:
        return [text]
    pieces: list[tuple[str, int]] = []
    for block in _blocks(text):
        size = count_tokens(block)
        if size <= max_tokens:
            pieces.append((block, size))
            continue
        lines, run, run_size = block.split("\n"), [], 0
        for line in lines:
            line_size = count_tokens(line) + 1
            if run and run_size + line_size > max_tokens:
                pieces.append(("\n".join(run), run_size))
                run, run_size = [], 0
            run.append(line)
            run_size += line_size
        if run:
            pieces.append(("\n".join(run), run_size))
    parts, current, current_size = [], [], 0
    for block, size in pieces:
        if current and current_size + size > max_tokens:
            parts.append("\n\n".join(current))
            current, current_size = [], 0
        current.append(block)
        current_size += size + 1
    if current:
        parts.append("\n\n".join(current))
    return parts


def sections_of_page(
    path: str, text: str, fmt: str, domain: rst.SphinxDomain | None = None, max_tokens: int = MAX_TOKENS
) -> list[SourceSection]:
    """The sections of one page (`path` relative to the synced folder, with `/`)."""
    if fmt == "jsonl":
        return _jsonl_sections(path, text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    described = []
    if fmt == "rst":
        headings, described = rst.read(text, path, domain)
        unique = numbered_unique
    elif fmt == "markdown":
        headings = markup.markdown_headings(text)
        unique = mkdocs_unique
    elif fmt == "html":
        headings = markup.html_headings(text)
        unique = numbered_unique
    else:
        raise SplitError(path, None, f"unknown format {fmt!r}")
    sections = []
    for part in assemble(lines, headings, described, fmt, unique):
        first_id = path if part.fragment is None else f"{path}#{part.fragment}"
        for number, text_part in enumerate(cut_to_size(part.text, max_tokens), 1):
            section_id = first_id if number == 1 else f"{first_id}~{number}"
            problem = unreadable_id(section_id)
            if problem:
                raise SplitError(path, part.line, f"the id {section_id[:80]!r} {problem}")
            sections.append(SourceSection(section_id, text_part, path, part.line))
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
        problem = unreadable_id(row["id"])
        if problem:
            raise SplitError(path, number, f"the id {row['id'][:80]!r} {problem}")
        if isinstance(row.get("text"), str):
            found.append(SourceSection(row["id"], row["text"], path, number))
        elif isinstance(row.get("hash"), str) and re.fullmatch(r"[0-9a-f]{64}", row["hash"]):
            found.append(SourceSection(row["id"], "", path, number, hash=row["hash"]))
        else:
            raise SplitError(path, number, 'each row needs a "text" (a string) or a "hash" (64 hex digits)')
    return found


def _read(file: Path, relative: str) -> str:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as problem:
        raise SplitError(relative, None, f"cannot be read as UTF-8 text: {problem}") from None
    return text


def expand_includes(text: str, file: Path, relative: str, root: Path, depth: int = 0) -> str:
    """`.. include::` replaced by the included file's text, as Sphinx reads it: a change in
    the included file is a change of the sections that include it. Only files inside the
    synced folder are read; `<standard>` includes stay as written."""
    if ".. include::" not in text:
        return text
    if depth >= MAX_INCLUDE_DEPTH:
        raise SplitError(relative, None, f"includes nest deeper than {MAX_INCLUDE_DEPTH}")
    real_root = Path(os.path.realpath(root))
    lines = text.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        found = INCLUDE.match(lines[index])
        if not found or found.group("target").startswith("<"):
            out.append(lines[index])
            index += 1
            continue
        indent, target = found.group("indent"), found.group("target")
        options: dict[str, str] = {}
        index += 1
        while index < len(lines) and re.match(rf"^{re.escape(indent)}[ \t]+:[\w-]+:", lines[index]):
            name, _, value = lines[index].strip()[1:].partition(":")
            options[name] = value.strip()
            index += 1
        included = (root / target.lstrip("/")) if target.startswith("/") else (file.parent / target)
        real = Path(os.path.realpath(included))
        if real_root not in real.parents:
            raise SplitError(relative, index, f"includes {target}, outside the synced folder: refused")
        if any(part.startswith(".") for part in real.relative_to(real_root).parts):
            # The page walk skips hidden files and folders (.env, .git): an include reads none either.
            raise SplitError(relative, index, f"includes {target}, a hidden file the sync never reads: refused")
        try:
            body = real.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as problem:
            raise SplitError(relative, index, f"includes {target}, which cannot be read: {problem}") from None
        body = body.replace("\r\n", "\n")
        if "start-after" in options and options["start-after"] in body:
            body = body.split(options["start-after"], 1)[1]
        if "end-before" in options and options["end-before"] in body:
            body = body.split(options["end-before"], 1)[0]
        body_lines = body.split("\n")
        if "start-line" in options or "end-line" in options:
            try:
                body_lines = body_lines[
                    int(options.get("start-line") or 0) : int(options["end-line"]) if options.get("end-line") else None
                ]
            except ValueError:
                pass
        nested = (
            expand_includes("\n".join(body_lines), real, relative, root, depth + 1)
            if "literal" not in options
            else "\n".join(body_lines)
        )
        out.extend(f"{indent}{line}" if line else line for line in nested.split("\n"))
    return "\n".join(out)


def split_project(
    root: Path,
    fmt: str = "auto",
    include: list[str] = (),
    exclude: list[str] = (),
    progress: Callable[[int, int], None] | None = None,
    max_tokens: int = MAX_TOKENS,
) -> tuple[Project, list[SourceSection]]:
    """The project at `root` (see projects.py) and every section of its pages, in path order.

    Raises:
        SplitError: an unreadable file, a symbolic link leaving the folder, a duplicate id
            across pages, an id that cannot be stored, or a plain folder mixing formats.
    """
    root = Path(root)
    try:
        project = read_project(root, fmt)
        files = pages(project, list(include), list(exclude), single=root if root.is_file() else None)
    except ProjectError as problem:
        raise SplitError(problem.path, None, problem.message) from None
    sections: list[SourceSection] = []
    seen: dict[str, SourceSection] = {}
    for number, file in enumerate(files, 1):
        relative = file.relative_to(project.root).as_posix()
        text = _read(file, relative)
        page_format = project.format_of(file)
        if page_format == "rst":
            text = expand_includes(text, file, relative, project.root)
        for section in sections_of_page(relative, text, page_format, project.domain, max_tokens):
            if section.id in seen:
                first = seen[section.id]
                raise SplitError(
                    relative, section.line, f"the id {section.id!r} is also made at {first.path}:{first.line}"
                )
            seen[section.id] = section
            sections.append(section)
        if progress:
            progress(number, len(files))
    return project, sections


def split_tree(
    root: Path, fmt: str = "auto", include: list[str] = (), exclude: list[str] = (), max_tokens: int = MAX_TOKENS
) -> list[SourceSection]:
    """Every section of a folder (or of one file), in path order: see split_project."""
    return split_project(root, fmt, include, exclude, max_tokens=max_tokens)[1]
