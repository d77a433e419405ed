"""Markdown headings as MkDocs anchors them (or, in a Sphinx project, as MyST and docutils
do), and HTML headings by their ids or text."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from typing import Callable

from scopes.splitting.anchors import docutils_id, faq_slug, mkdocs_slug
from scopes.splitting.pages import Heading

# Python-Markdown's attr_list on a heading: `## Title {#anchor .class}`.
ATTR_LIST = re.compile(r"\s*\{:?\s*([^}]*)\}\s*$")
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


def markdown_headings(text: str, slugify: Callable[[str], str] | None = None) -> list[Heading]:
    """The headings as MkDocs anchors them (front matter, read as such, is none: it stays in
    the page's own text); `slugify` is the project's configured toc slugify."""
    found = []
    for token, inline in _heading_tokens(text):
        shown, explicit = _inline_text(inline), None
        attributes = ATTR_LIST.search(shown)
        if attributes:
            given = ATTR_ID.search(attributes.group(1))
            if given:
                explicit = next(value for value in given.groups() if value)
            shown = shown[: attributes.start()]
        anchor = explicit or (slugify(shown.strip()) if slugify else mkdocs_slug(" ".join(shown.split())))
        found.append(
            Heading(int(token.tag[1:]) - 1, inline.content, token.map[0], token.map[1], anchor, explicit is not None)
        )
    return found


def myst_headings(text: str, extensions: frozenset[str] = frozenset()) -> list[Heading]:
    """The headings of a MyST page as Sphinx builds them: docutils ids of the titles (a
    repeated or digit-only title is `idN` in the built site: the id keeps the title's slug,
    numbered, and the built anchor is recorded beside it); a `(label)=` above wins.
    `extensions` are the project's myst_enable_extensions: `colon_fence` makes `:::` blocks
    (a heading in one is no section), `smartquotes` and `replacements` change the title's
    text before docutils makes its id (`doesn't` → `doesn’t` → `doesnt`)."""
    lines = text.split("\n")
    ids: set[str] = set()
    counter = 0
    labelled: dict[int, int] = {}  # line of a target -> its heading's start, filled below
    found = []
    headings = list(_heading_tokens(text, extensions, myst=True))
    starts = {token.map[0] for token, _ in headings}
    for number, line in enumerate(lines):
        target = MYST_TARGET.match(line)
        if target:
            follower = next((n for n in range(number + 1, len(lines)) if lines[n].strip()), None)
            while follower is not None and MYST_TARGET.match(lines[follower]):
                follower = next((n for n in range(follower + 1, len(lines)) if lines[n].strip()), None)
            if follower in starts:
                labelled[number] = follower
    by_start: dict[int, list[int]] = {}
    for label_line, start in labelled.items():
        by_start.setdefault(start, []).append(label_line)
    events = sorted([(n, "label") for n in labelled] + [(t.map[0], "heading") for t, _ in headings])
    built_of: dict[int, str] = {}
    for line, kind in events:
        if kind == "label":
            ids.add(docutils_id(MYST_TARGET.match(lines[line]).group(1)))
            continue
        title = " ".join(_inline_text(next(i for t, i in headings if t.map[0] == line), True).split())
        base = docutils_id(title)
        if base and base not in ids:
            built_of[line] = base
        else:  # docutils.utils.new_document's set_id with Sphinx's auto_id_prefix "id"
            counter += 1
            while f"id{counter}" in ids:
                counter += 1
            built_of[line] = f"id{counter}"
        ids.add(built_of[line])
    for token, inline in headings:
        start = token.map[0]
        title = " ".join(_inline_text(inline, True).split())
        labels = sorted(by_start.get(start, []))
        if labels:
            anchor = docutils_id(MYST_TARGET.match(lines[labels[0]]).group(1))
            found.append(
                Heading(int(token.tag[1:]) - 1, inline.content, start, token.map[1], anchor, True, labels[0], anchor)
            )
            continue
        built = built_of[start]
        anchor = built if built == docutils_id(title) else (docutils_id(title) or faq_slug(title) or "section")
        found.append(Heading(int(token.tag[1:]) - 1, inline.content, start, token.map[1], anchor, False, None, built))
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
