"""Markdown headings as MkDocs anchors them, and HTML headings by their ids or text."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from scopes.splitting.anchors import faq_slug, mkdocs_slug
from scopes.splitting.pages import Heading

# Python-Markdown's attr_list on a heading: `## Title {#anchor .class}`.
ATTR_LIST = re.compile(r"\s*\{:?\s*([^}]*)\}\s*$")


def _inline_text(inline) -> str:
    """A heading's text as the toc extension sees it: markup and raw HTML dropped."""
    parts = []
    for child in inline.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(child.content)
    return html.unescape("".join(parts))


def markdown_headings(text: str) -> list[Heading]:
    """The headings (front matter, read as such, is none: it stays in the page's own text)."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.front_matter import front_matter_plugin

    tokens = MarkdownIt("commonmark").use(front_matter_plugin).parse(text)
    found = []
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and token.map:
            inline = tokens[index + 1]
            shown, explicit = _inline_text(inline), None
            attributes = ATTR_LIST.search(shown)
            if attributes:
                explicit = next(
                    (word[1:] for word in attributes.group(1).split() if word.startswith("#") and len(word) > 1), None
                )
                shown = shown[: attributes.start()]
            anchor = explicit or mkdocs_slug(" ".join(shown.split()))
            found.append(
                Heading(
                    int(token.tag[1:]) - 1, inline.content, token.map[0], token.map[1], anchor, explicit is not None
                )
            )
    return found


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
