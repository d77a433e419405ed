"""How each documentation tool turns a heading or an object into the anchor it links to.

The rules are the tools' own, read from their sources, so an id a scope stores is the anchor a
reader of the built site sees: docutils' `make_id` for reStructuredText section titles and
labels, Sphinx's `_make_id` (case, dots and underscores kept) for object descriptions and
cross-reference targets, Python-Markdown's `toc` slugify (what MkDocs uses) for Markdown.
"""

from __future__ import annotations

import re
import unicodedata


def faq_slug(title: str) -> str:
    """The older scheme (still HTML's fallback): lower case, markup dropped, `+` as `plus`."""
    text = title.lower().replace("`", "").replace("*", "").replace("+", " plus ")
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def docutils_id(text: str) -> str:
    """docutils.nodes.make_id: what a section title or a `.. _label:` is anchored as."""
    from docutils.nodes import make_id

    return make_id(text)


_SPHINX_NON_ID = re.compile(r"[^a-zA-Z0-9._]+")
_SPHINX_AT_ENDS = re.compile(r"^[-0-9._]+|-+$")


def sphinx_id(text: str) -> str:
    """sphinx.util.nodes._make_id: object descriptions (`QuerySet.filter`) and targets
    (`setting-SECRET_KEY`) keep their case, dots and underscores."""
    value = _ascii(text)
    value = _SPHINX_NON_ID.sub("-", " ".join(value.split()))
    return _SPHINX_AT_ENDS.sub("", value)


def mkdocs_slug(text: str) -> str:
    """markdown.extensions.toc.slugify (separator "-"), which MkDocs anchors headings with."""
    value = re.sub(r"[^\w\s-]", "", _ascii(text)).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


_COUNTED = re.compile(r"^(.*)_([0-9]+)$")


def mkdocs_unique(anchor: str, taken: set[str]) -> str:
    """markdown.extensions.toc.unique: a repeat gets `_1`, `_2`, ..."""
    while anchor in taken or not anchor:
        counted = _COUNTED.match(anchor)
        anchor = f"{counted.group(1)}_{int(counted.group(2)) + 1}" if counted else f"{anchor}_1"
    taken.add(anchor)
    return anchor


def numbered_unique(anchor: str, taken: set[str]) -> str:
    """A repeat gets `-2`, `-3`, ... (docutils would number it `id1`, which moves when any
    earlier repeat is added; a suffix counted per anchor does not)."""
    candidate, number = anchor, 1
    while candidate in taken:
        number += 1
        candidate = f"{anchor}-{number}"
    taken.add(candidate)
    return candidate
