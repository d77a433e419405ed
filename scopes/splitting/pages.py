"""One page's sections, from the headings and object descriptions its format's reader found.

Every line of a page belongs to exactly one place: the page's own text (before the first
heading, and the title's), the heading above it (up to the next heading of any level, so a
parent's introduction is its own section and each sub-heading another), or an object
description with content of its own (a Sphinx `.. attribute::` block), nested ones cut out of
their parent. A section's text is its lines exactly as written, the runs it owns joined by a
blank line; a heading's line itself is not in it, the lines above it that belong to it
(labels, targets, `.. module::`) are. A heading with no text of its own is no section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Callable

from scopes.splitting.anchors import numbered_unique


@dataclass(frozen=True)
class Heading:
    level: int
    title: str  # as written, markup included
    start: int  # first line of the heading block, 0-based
    body: int  # first line after the heading block
    anchor: str  # what the tool anchors it as (an explicit label or id wins)
    explicit: bool = False
    above: int | None = None  # first line above it that belongs to it (labels, targets), if any
    # The anchor the built site gives it, when the tool's is unstable (docutils' `idN` for a
    # repeated or digit-only title): the id keeps a stable anchor, this one is recorded beside.
    built: str | None = None
    placeless: bool = False  # a title with no letters or digits to make an anchor of


@dataclass(frozen=True)
class Described:
    """An object description with content of its own (`.. method:: filter()` and its block)."""

    start: int
    end: int  # exclusive
    anchor: str
    built: str | None = None  # Sphinx's `id0` for a repeated object description


@dataclass(frozen=True)
class Part:
    fragment: str | None  # None: the page's own section
    text: str
    line: int  # 1-based
    built: str | None = None  # the built site's anchor, where it differs from the fragment


class _VisibleText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.seen = False

    def handle_data(self, data):
        self.seen = self.seen or bool(data.strip())


# Lines a built page shows nothing for: a label (`.. _x:`, MyST's `(x)=`), a one-line comment
# (rst's `.. a remark`, MyST's `% a remark`), a Markdown rule.
_SHOWS_NOTHING = {
    "rst": re.compile(r"\.\. _([^:`]+|`[^`]+`):|\.\.(?:\s+(?![\[|_])(?![\w:.+-]+::).*)?"),
    "myst": re.compile(r"\(\S+\)=|%.*|-{3,}|\*{3,}|_{3,}|<!--.*-->"),
    "markdown": re.compile(r"-{3,}|\*{3,}|_{3,}|<!--.*-->"),
}


def has_content(text: str, fmt: str) -> bool:
    """Whether a stretch of source says anything a reader sees: not only labels, rules or one-line
    comments (a section of those would be cited and served empty); an indented line (code) always
    counts; for HTML, text (not bare tags)."""
    if fmt != "html":
        shows_nothing = _SHOWS_NOTHING.get(fmt)
        return any(
            line.strip()
            and (line.startswith(("    ", "\t")) or not (shows_nothing and shows_nothing.fullmatch(line.strip())))
            for line in text.split("\n")
        )
    reader = _VisibleText()
    reader.feed(text)
    reader.close()
    return reader.seen


def _runs(owned: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for line in owned:
        if runs and runs[-1][1] == line:
            runs[-1] = (runs[-1][0], line + 1)
        else:
            runs.append((line, line + 1))
    return runs


def _text(lines: list[str], owned: list[int]) -> str:
    pieces = []
    for begin, end in _runs(owned):
        body = lines[begin:end]
        while body and not body[0].strip():
            body.pop(0)
        while body and not body[-1].strip():
            body.pop()
        if body:
            pieces.append("\n".join(body))
    return "\n\n".join(pieces)


def _title(headings: list[Heading], fmt: str) -> Heading | None:
    """The page's title, whose text is the page's own section, whatever the levels of the
    headings after it: Sphinx's first section title (reStructuredText, MyST); in Markdown and
    HTML the first heading when it is an h1, as MkDocs takes a page's title (a page opening
    with `##` has none: adding a `# Title` above later moves no id)."""
    if not headings:
        return None
    return headings[0] if fmt in ("rst", "myst") or headings[0].level == 0 else None


def assemble(
    lines: list[str],
    headings: list[Heading],
    described: list[Described],
    fmt: str,
    unique: Callable[[str, set[str]], str],
) -> list[Part]:
    """The page's parts in reading order (see the module's docstring)."""
    headings = sorted(headings, key=lambda h: h.start)
    starts = [h.above if h.above is not None else h.start for h in headings]
    owner: list[tuple[str, int] | None] = [None] * len(lines)
    for index, heading in enumerate(headings):
        end = starts[index + 1] if index + 1 < len(headings) else len(lines)
        for line in range(starts[index], end):
            owner[line] = ("h", index)
    for index, block in enumerate(sorted(described, key=lambda d: (d.start, -d.end))):
        for line in range(block.start, min(block.end, len(lines))):
            owner[line] = ("o", index)
    described = sorted(described, key=lambda d: (d.start, -d.end))
    title = _title(headings, fmt)

    owned: dict[tuple[str, int] | None, list[int]] = {}
    for line, who in enumerate(owner):
        if title is not None and who == ("h", 0):
            if headings[0].start <= line < headings[0].body:
                continue
            who = None  # the title's text is the page's own
        elif who is not None and who[0] == "h" and headings[who[1]].start <= line < headings[who[1]].body:
            continue  # the heading's own line(s)
        owned.setdefault(who, []).append(line)

    parts: list[Part] = []
    page_text = _text(lines, owned.get(None, []))
    if has_content(page_text, fmt):
        parts.append(Part(None, page_text, (title.start + 1) if title else 1))
    # Explicit anchors are taken first, as the tools do: a derived one never steals them.
    taken = {h.anchor for h in headings if h.explicit} | {d.anchor for d in described}
    fragments = heading_ids(headings, title, taken, unique)
    claimed = {anchor for anchor, _ in fragments.values()}
    places = [("h", i, h.start) for i, h in enumerate(headings)] + [("o", i, d.start) for i, d in enumerate(described)]
    for kind, index, start in sorted(places, key=lambda p: p[2]):
        if kind == "h":
            heading = headings[index]
            if heading is title:
                continue
            body = [line for line in owned.get(("h", index), []) if line >= heading.body]
            if not has_content(_text(lines, body), fmt):
                continue  # a category: its sub-headings are the sections
            anchor, built = fragments[index]
            parts.append(Part(anchor, _text(lines, owned[("h", index)]), heading.start + 1, built))
        else:
            text = _text(lines, owned.get(("o", index), []))
            if not text:
                continue
            anchor, built = described[index].anchor, described[index].built
            anchor = anchor if anchor not in claimed else unique(anchor, taken | claimed)
            claimed.add(anchor)
            parts.append(Part(anchor, text, start + 1, built if built != anchor else None))
    return parts


def heading_ids(
    headings: list[Heading], title: Heading | None, taken: set[str], unique: Callable[[str, set[str]], str]
) -> dict[int, tuple[str, str | None]]:
    """Each heading's anchor in the id (and the built site's, where that differs), by index.

    A title repeated on the page, with no letters to make an anchor of, or under a release (a
    parent titled by a version: `24.1.0`, `[1.0.0] - 2017-06-20`) is anchored where it stands:
    under its parent heading's anchor (`24-1-0/stable-style`), numbered only among its
    siblings, so releases added above it move none of them, nor a release's category's first
    repeat (the tools number such titles down the page: that anchor is recorded beside).
    Under the page's title, or with no parent, a repeat is numbered down the page. A title's
    other anchors depend on itself alone."""
    counts: dict[str, int] = {}
    for heading in headings:
        if not heading.explicit and heading is not title:
            counts[heading.anchor] = counts.get(heading.anchor, 0) + 1
    found: dict[int, tuple[str, str | None]] = {}
    claimed: set[str] = set()
    open_above: list[tuple[int, str | None, bool]] = []  # (level, anchor, a release) of those holding it
    for index, heading in enumerate(headings):
        while open_above and open_above[-1][0] >= heading.level:
            open_above.pop()
        parent, in_release = open_above[-1][1:] if open_above else (None, False)
        if heading is title:
            open_above.append((heading.level, None, False))
            continue
        built = heading.built
        placed = heading.placeless or counts.get(heading.anchor, 0) > 1 or heading.anchor in taken or in_release
        if heading.explicit:
            anchor = heading.anchor
            if anchor in claimed:
                # An explicit id given twice is kept twice by the tool (links reach the first):
                # the id is made unique, the link is the given id.
                built, anchor = built or anchor, unique(anchor, taken | claimed)
        elif placed and parent:
            anchor = numbered_unique(f"{parent}/{'section' if heading.placeless else heading.anchor}", taken | claimed)
        else:
            anchor = unique(heading.anchor, taken | claimed)
        claimed.add(anchor)
        found[index] = (anchor, built if built and built != anchor else None)
        open_above.append((heading.level, anchor, is_release(heading.title)))
    return found


VERSION = re.compile(r"\d+\.\d+")
LETTER = re.compile(r"[^\W\d_]")


def is_release(title: str) -> bool:
    """Whether a heading names a release: a version number and no words (`24.1.0`, `v2.0`,
    `[1.0.0] - 2017-06-20`, `24.1.0 (2024-01-26)`)."""
    return bool(VERSION.search(title)) and not LETTER.search(re.sub(r"(?<![^\W\d_])v(?=\d)", "", title))
