"""Documents split into sections with the ids their documentation tool anchors them by
(plain Python, no Django).

A section's id is `relative/path.ext#anchor`, the file's real name and the anchor a reader of
the built site links to: for reStructuredText as Sphinx anchors it (an explicit label or a
target above the heading wins, else the title as docutils makes ids of it, roles and escapes
resolved; object descriptions by their full name), for Markdown as MkDocs does (an
`{#anchor}` wins, else the toc extension's slug; a repeat gets `_1`), for HTML the heading's
`id`, else its text in lower case with `-`. An anchor depends on the heading (or its label)
alone, so a heading moved under a new parent keeps its id; but a title repeated on the page
(or with no letters) is anchored under its parent heading's (`24-1-0/fixes`), where releases
added above it do not renumber it, the tool's numbered anchor recorded beside (pages.py).

What a section is (see pages.py): the page's own text (before the first heading, and the
title's when the page has one), every heading with text of its own up to the next heading of
any level, and every object description with content of its own. A section's text is the
source exactly as written. Headings are found by the format's own parser (docutils,
markdown-it-py, Python's HTML parser), never by regular expressions, so a `#` line in a code
block is no heading. Which files are pages is the project's own rule (see projects.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scopes.splitting import generated, includes, markdown_includes, markup, rst
from scopes.splitting.anchors import mkdocs_unique, numbered_unique
from scopes.splitting.files import NotRegularFile, read_regular
from scopes.splitting.pages import assemble
from scopes.splitting.projects import (
    FORMATS,
    Project,
    ProjectError,
    pages,
    read_project,
)

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
# A section longer than this many tokens (the scope's default prefetch budget) is cut at
# paragraphs into pieces `#anchor`, `#anchor~3fa0c2`, ... (see piece_suffix): a prefetch then
# carries whole pieces.
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
    # The built site's anchor where it is unstable and the id keeps a stable one instead
    # (docutils' `idN` for a repeated or digit-only title): links are made with this.
    anchor: str | None = None


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


def _units(text: str, max_tokens: int) -> list[tuple[str, int, str]]:
    """The text as (unit, tokens, separator before it): paragraphs, and the lines of a
    paragraph that alone is longer than `max_tokens`."""
    from infra.tokens import count_tokens

    units: list[tuple[str, int, str]] = []
    for block in _blocks(text):
        size = count_tokens(block)
        if size <= max_tokens:
            units.append((block, size, "\n\n"))
            continue
        for number, line in enumerate(block.split("\n")):
            units.append((line, count_tokens(line) + 1, "\n\n" if number == 0 else "\n"))
    return units


def _ends_a_piece(unit: str) -> bool:
    """Whether a piece may end after this unit: decided by the unit's own text (about one
    in six), so the cuts after an edit fall where they fell before it."""
    return int(hashlib.sha256(unit.strip().encode("utf-8")).hexdigest()[:8], 16) % 6 == 0


def cut_to_size(text: str, max_tokens: int) -> list[str]:
    """The text as pieces of at most `max_tokens` tokens each (a single line longer than
    that stays whole), cut at paragraphs (at lines inside a longer one).

    The cuts are content-defined: a piece ends after a unit whose text says so once it holds
    a quarter of the budget, or where the next unit would not fit. A row added near the top
    of a long table then changes the piece it lands in, not every piece after it."""
    from infra.tokens import count_tokens

    if not max_tokens or count_tokens(text) <= max_tokens:
        return [text]
    pieces: list[list[tuple[str, str]]] = [[]]
    size = 0
    units = _units(text, max_tokens)
    for index, (unit, tokens, separator) in enumerate(units):
        pieces[-1].append((unit, separator))
        size += tokens
        following = units[index + 1][1] if index + 1 < len(units) else 0
        if index + 1 < len(units) and (
            size + following > max_tokens or (size >= max_tokens // 4 and _ends_a_piece(unit))
        ):
            pieces.append([])
            size = 0
    return ["".join((sep if n else "") + unit for n, (unit, sep) in enumerate(piece)) for piece in pieces if piece]


def piece_suffix(piece: str, taken: set[str]) -> str:
    """A later piece's id suffix, from its first line's text: it keeps its id (and its
    trails) when an edit elsewhere in the section moves the pieces around it."""
    first = next((line for line in piece.split("\n") if line.strip()), piece)
    return numbered_unique(hashlib.sha256(" ".join(first.split()).encode("utf-8")).hexdigest()[:6], taken)


def sections_of_page(
    path: str,
    text: str,
    fmt: str,
    domain: rst.SphinxDomain | None = None,
    max_tokens: int = MAX_TOKENS,
    slugify: Callable[[str], str] | None = None,
    myst_extensions: frozenset[str] = frozenset(),
    attr_list: bool = True,
) -> list[SourceSection]:
    """The sections of one page (`path` relative to the synced folder, with `/`); `fmt` is
    rst, markdown (MkDocs' anchors, `slugify` its configured toc slugify), myst (Markdown in a
    Sphinx project: docutils' anchors) or html."""
    if fmt == "jsonl":
        return _jsonl_sections(path, text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if fmt in ("markdown", "myst"):
        text = without_front_matter(text)
    lines = text.split("\n")
    described = []
    if fmt == "rst":
        headings, described, silent = rst.read(text, path, domain)
        for start, end in silent:  # rendering nothing, they are no section's text
            lines[start:end] = [""] * len(lines[start:end])
        unique = numbered_unique
    elif fmt == "markdown":
        headings = markup.markdown_headings(text, slugify, attr_list)
        unique = mkdocs_unique
    elif fmt == "myst":
        headings = markup.myst_headings(text, myst_extensions)
        unique = numbered_unique
    elif fmt == "html":
        headings = markup.html_headings(text)
        unique = numbered_unique
    else:
        raise SplitError(path, None, f"unknown format {fmt!r}")
    sections = []
    for part in assemble(lines, headings, described, fmt, unique):
        first_id = path if part.fragment is None else f"{path}#{part.fragment}"
        taken: set[str] = set()
        for number, text_part in enumerate(cut_to_size(part.text, max_tokens), 1):
            # A later piece links to its section's anchor on the built site.
            section_id, anchor = first_id, part.built
            if number > 1:
                section_id, anchor = f"{first_id}~{piece_suffix(text_part, taken)}", part.built or part.fragment
            problem = unreadable_id(section_id)
            if problem:
                raise SplitError(path, part.line, f"the id {section_id[:80]!r} {problem}")
            sections.append(SourceSection(section_id, text_part, path, part.line, anchor=anchor))
    return sections


def without_front_matter(text: str) -> str:
    """A Markdown page's YAML front matter (`---` lines around it, at the very top) blanked:
    it is the page's metadata, not text of its sections. Its lines stay, as blank ones, so
    line numbers hold."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return text
    for end in range(1, len(lines)):
        if lines[end].rstrip() in ("---", "..."):
            return "\n" * end + "\n" + "\n".join(lines[end + 1 :])
    return text


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
        text = read_regular(file)
    except NotRegularFile as problem:
        raise SplitError(relative, None, f"{problem}: refused") from None
    except (OSError, UnicodeDecodeError) as problem:
        raise SplitError(relative, None, f"cannot be read as UTF-8 text: {problem}") from None
    return notebook_text(text, relative) if file.suffix.lower() == ".ipynb" else text


def notebook_text(text: str, relative: str) -> str:
    """A Jupyter notebook (myst_nb reads them) as the MyST text of its cells: Markdown cells as
    written, code cells as ```{code-cell}``` blocks with their source; outputs are not read
    (they are what running the code printed, not what the docs say)."""
    try:
        notebook = json.loads(text)
        cells = notebook["cells"]
        language = ((notebook.get("metadata") or {}).get("kernelspec") or {}).get("language") or "python"
    except (ValueError, KeyError, TypeError, AttributeError):
        raise SplitError(relative, None, "not a Jupyter notebook (JSON with cells)") from None
    pieces = []
    for cell in cells:
        source = cell.get("source", "") if isinstance(cell, dict) else ""
        source = "".join(source) if isinstance(source, list) else str(source)
        if cell.get("cell_type") == "markdown":
            pieces.append(source.rstrip("\n"))
        elif cell.get("cell_type") == "code" and source.strip():
            pieces.append(f"```{{code-cell}} {language}\n{source.rstrip()}\n```")
    return "\n\n".join(pieces) + "\n"


def _pulled_in(project: Project, file: Path, relative: str, text: str, fmt: str, made: generated.BuildTimeText) -> str:
    """The page with what it includes (see includes.py)."""
    boundary = project.boundary or project.root
    spent = includes.Expansion()  # one budget for everything the page pulls in
    made.read(text, relative, fmt, project.domain.directives)  # the page's own lines first, where they stand
    try:
        if fmt in ("rst", "myst"):
            includes.name_unread(text, relative, project.warn)
            text = includes.expand_includes(text, file, project.root, boundary, project.warn, fmt, spent)
        if fmt == "markdown" and project.markdown_includes is not None:
            text = markdown_includes.expand_markdown_includes(
                text, project.markdown_includes, boundary, project.warn, spent
            )
        if fmt == "markdown" and project.snippets is not None:
            if project.snippets.auto_append:  # as pymdownx.snippets appends them: a block at the end
                text += "\n\n--8<--\n" + "\n\n".join(project.snippets.auto_append) + "\n--8<--\n"
            text = markdown_includes.expand_snippets(text, project.snippets, boundary, project.warn, spent=spent)
    except includes.IncludeError as problem:
        raise SplitError(relative, problem.line, problem.message) from None
    made.read(text, relative, fmt, project.domain.directives)  # then what it includes
    return text


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
    made = generated.BuildTimeText()
    for number, file in enumerate(files, 1):
        relative = file.relative_to(project.root).as_posix()
        page_format = project.format_of(file)
        text = _pulled_in(project, file, relative, _read(file, relative), page_format, made)
        for section in sections_of_page(
            relative,
            text,
            page_format,
            project.domain,
            max_tokens,
            project.slugify,
            project.myst_extensions,
            project.attr_list,
        ):
            if section.id in seen:
                first = seen[section.id]
                raise SplitError(
                    relative, section.line, f"the id {section.id!r} is also made at {first.path}:{first.line}"
                )
            seen[section.id] = section
            sections.append(section)
        if progress:
            progress(number, len(files))
    for warning in made.warnings():
        project.warn(warning)
    return project, sections


def split_tree(
    root: Path, fmt: str = "auto", include: list[str] = (), exclude: list[str] = (), max_tokens: int = MAX_TOKENS
) -> list[SourceSection]:
    """Every section of a folder (or of one file), in path order: see split_project."""
    return split_project(root, fmt, include, exclude, max_tokens=max_tokens)[1]
