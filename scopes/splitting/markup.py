"""Markdown headings as MkDocs anchors them (or, in a Sphinx project, as MyST and docutils
do), and HTML headings by their ids or text."""

from __future__ import annotations

import html
import re
from dataclasses import replace
from html.parser import HTMLParser
from typing import Callable

from scopes.splitting.anchors import docutils_id, faq_slug, mkdocs_slug, mkdocs_unique
from scopes.splitting.pages import Heading

# Python-Markdown's attr_list on a heading (its HEADER_RE): `## Title {#anchor .class}`, read
# from the text after the heading's last inline element (a code span's `{x}` is no attribute list).
ATTR_LIST = re.compile(r"[ ]+\{:?[ ]*([^}\n ][^\n]*)\}[ ]*$")
# The id it sets: `#anchor` or `id="anchor"` (attr_list takes both; the last one wins there, rarely two).
ATTR_ID = re.compile(r"""(?:^|\s)(?:#([^\s#.}"'=]+)|id=(?:"([^"]*)"|'([^']*)'|([^\s}"']+)))""")
MYST_ROLE_NAME = re.compile(r"\{[\w:.+-]+\}$")
# A MyST target, `(label)=` on a line of its own: anchors what follows as `.. _label:` does.
MYST_TARGET = re.compile(r"^\s{0,3}\(([^()\s][^()]*)\)=\s*$")


def _inline_text(inline, myst: bool = False) -> str:
    """A heading's text as the toc extension sees it: markup and raw HTML dropped (for MyST,
    a role's name too: {py:class}`Foo` shows Foo)."""
    parts = []
    children = list(inline.children or [])
    for index, child in enumerate(children):
        following = children[index + 1] if index + 1 < len(children) else None
        if myst and child.type == "text" and following is not None and following.type == "code_inline":
            parts.append(MYST_ROLE_NAME.sub("", child.content))
            continue
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(child.content)
    return html.unescape("".join(parts))


def _attributes(inline) -> re.Match | None:
    """attr_list's `{...}` ending a heading: in the text after its last inline element only."""
    children = list(inline.children or [])
    tail = []
    while children and children[-1].type == "text":
        tail.insert(0, children.pop().content)
    return ATTR_LIST.search("".join(tail)) if tail else None


def markdown_headings(text: str, slugify: Callable[[str], str] | None = None, attr_list: bool = True) -> list[Heading]:
    """The headings as MkDocs anchors them (front matter, read as such, is none); `slugify` is
    the project's configured toc slugify, `attr_list` whether the project enables attr_list.
    Each records the toc's own anchor (`_1`, `_2` down the page for a repeat) as built."""
    found = []
    for token, inline in _heading_tokens(text):
        shown, explicit = _inline_text(inline), None
        attributes = _attributes(inline) if attr_list else None
        if attributes:
            given = ATTR_ID.search(attributes.group(1))
            if given:
                explicit = next((value for value in given.groups() if value), None)  # `{id=""}`: none given
            shown = shown[: len(shown) - len(attributes.group(0))] if shown.endswith(attributes.group(0)) else shown
        anchor = explicit or (slugify(shown.strip()) if slugify else mkdocs_slug(" ".join(shown.split())))
        found.append(
            Heading(
                int(token.tag[1:]) - 1,
                inline.content,
                token.map[0],
                token.map[1],
                anchor,
                explicit is not None,
                placeless=not anchor,
            )
        )
    # toc.unique over every heading in page order, the explicit ids taken first.
    used = {h.anchor for h in found if h.explicit}
    return [h if h.explicit else replace(h, built=mkdocs_unique(h.anchor, used)) for h in found]


def myst_headings(text: str, extensions: frozenset[str] = frozenset()) -> list[Heading]:
    """The headings of a MyST page as Sphinx builds them: docutils ids of the titles (a
    repeated or digit-only title is `idN` in the built site: the id keeps the title's slug,
    numbered, and the built anchor is recorded beside it); a `(label)=` above wins.
    `extensions` are the project's myst_enable_extensions: `colon_fence` makes `:::` blocks
    (a heading in one is no section), `smartquotes` and `replacements` change the title's
    text before docutils makes its id (`doesn't` → `doesn’t` → `doesnt`)."""
    lines = text.split("\n")
    headings = list(_heading_tokens(text, extensions, myst=True))
    title_of = {token.map[0]: " ".join(_inline_text(inline, True).split()) for token, inline in headings}
    labels_of: dict[int, list[int]] = {}  # a heading's start -> the target lines above it
    for number, line in enumerate(lines):
        if MYST_TARGET.match(line):
            follower = next((n for n in range(number + 1, len(lines)) if lines[n].strip()), None)
            while follower is not None and MYST_TARGET.match(lines[follower]):
                follower = next((n for n in range(follower + 1, len(lines)) if lines[n].strip()), None)
            if follower in title_of:
                labels_of.setdefault(follower, []).append(number)
    # docutils gives ids in page order, labels and titles alike (Sphinx's auto_id_prefix "id").
    ids: set[str] = set()
    built_of: dict[int, str] = {}
    counter = 0
    events = sorted([(n, "label") for found in labels_of.values() for n in found] + [(s, "heading") for s in title_of])
    for line, kind in events:
        if kind == "label":
            ids.add(docutils_id(MYST_TARGET.match(lines[line]).group(1)))
            continue
        base = docutils_id(title_of[line])
        if not base or base in ids:
            counter += 1
            while f"id{counter}" in ids:
                counter += 1
            base = f"id{counter}"
        built_of[line] = base
        ids.add(base)
    found = []
    for token, inline in headings:
        start, level = token.map[0], int(token.tag[1:]) - 1
        if start in labels_of:
            first = min(labels_of[start])
            anchor = docutils_id(MYST_TARGET.match(lines[first]).group(1))
            found.append(Heading(level, inline.content, start, token.map[1], anchor, True, first, anchor))
            continue
        title, built = title_of[start], built_of[start]
        own = docutils_id(title) or faq_slug(title)
        anchor = built if built == docutils_id(title) else (own or "section")
        found.append(Heading(level, inline.content, start, token.map[1], anchor, False, None, built, not own))
    return found


def _heading_tokens(text: str, extensions: frozenset[str] = frozenset(), myst: bool = False):
    from markdown_it import MarkdownIt
    from mdit_py_plugins.colon_fence import colon_fence_plugin
    from mdit_py_plugins.front_matter import front_matter_plugin

    typography = [rule for rule in ("smartquotes", "replacements") if myst and rule in extensions]
    parser = MarkdownIt("commonmark", {"typographer": bool(typography)}).use(front_matter_plugin)
    if typography:
        parser.enable(typography)
    if myst and "colon_fence" in extensions:
        parser.use(colon_fence_plugin)
    tokens = parser.parse(text)
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and token.map:
            yield token, tokens[index + 1]


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


def html_headings(text: str) -> list[Heading]:
    parser = _HtmlHeadings()
    parser.feed(text)
    parser.close()
    # A heading's body starts on the line after its closing tag (headings sit on lines of their own).
    return [
        Heading(level, title, line - 1, end, anchor or faq_slug(title), anchor is not None)
        for level, line, title, anchor, end in parser.found
    ]
