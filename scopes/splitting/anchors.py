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


def mkdocs_slug(text: str, separator: str = "-", unicode: bool = False) -> str:
    """markdown.extensions.toc.slugify (and slugify_unicode), which MkDocs anchors headings with."""
    value = re.sub(r"[^\w\s-]", "", text if unicode else _ascii(text)).strip().lower()
    return re.sub(rf"[{re.escape(separator)}\s]+", separator, value)


_TAGS = re.compile(r"</?[^>]*>")
_ASCII_LETTERS = re.compile(r"[A-Z]")


def pymdownx_slug(text: str, separator: str = "-", case: str = "none", percent: bool = False, form="NFC") -> str:
    """pymdownx.slugs' slugify: Unicode kept, every space a separator (`Gone & Deprecated` is
    `gone--deprecated` in lower case: runs are not collapsed)."""
    from urllib.parse import quote

    value = _TAGS.sub("", unicodedata.normalize(form, text)).strip()
    if case == "lower":
        value = value.lower()
    elif case == "lower-ascii":
        value = _ASCII_LETTERS.sub(lambda m: m.group(0).lower(), value)
    elif case == "fold":
        value = value.casefold()
    value = re.sub(r"[^\w\- ]", "", value).replace(" ", separator)
    return quote(value.encode("utf-8")) if percent else value


# pymdownx.slugs' older names, as that module defines them.
_PYMDOWNX_NAMED = {
    "uslugify": {"case": "lower"},
    "uslugify_encoded": {"case": "lower", "percent_encode": True},
    "uslugify_cased": {},
    "uslugify_cased_encoded": {"percent_encode": True},
    "gfm": {"case": "lower-ascii"},
    "gfm_encoded": {"case": "lower-ascii", "percent_encode": True},
}


def markdown_slugify(name: str, kwds: dict, separator: str = "-"):
    """The toc `slugify` a project configures (a Python path in mkdocs.yml), as a function of
    the heading's text; None for one not known here."""
    if name in ("markdown.extensions.toc.slugify", "markdown.extensions.toc.slugify_unicode"):
        unicode = name.endswith("_unicode")
        return lambda text: mkdocs_slug(text, separator, unicode)
    module, _, function = name.rpartition(".")
    if module != "pymdownx.slugs":
        return None
    if function == "slugify":
        settings = kwds
    elif function in _PYMDOWNX_NAMED:
        settings = _PYMDOWNX_NAMED[function]
    else:
        return None
    case, percent = str(settings.get("case", "none")), bool(settings.get("percent_encode", False))
    form = str(settings.get("normalize", "NFC"))
    return lambda text: pymdownx_slug(text, separator, case, percent, form)


_COUNTED = re.compile(r"^(.*)_([0-9]+)$")


def mkdocs_unique(anchor: str, taken: set[str]) -> str:
    """markdown.extensions.toc.unique: a repeat gets `_1`, `_2`, ..."""
    while anchor in taken or not anchor:
        counted = _COUNTED.match(anchor)
        anchor = f"{counted.group(1)}_{int(counted.group(2)) + 1}" if counted else f"{anchor}_1"
    taken.add(anchor)
    return anchor


def numbered_unique(anchor: str, taken: set[str]) -> str:
    """A repeat gets `-2`, `-3`, ... (docutils numbers it `id1`, which moves when any earlier
    repeat is added; a suffix counted per anchor does not: the built `idN` is recorded beside)."""
    candidate, number = anchor, 1
    while candidate in taken:
        number += 1
        candidate = f"{anchor}-{number}"
    taken.add(candidate)
    return candidate
