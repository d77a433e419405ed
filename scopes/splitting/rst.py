"""reStructuredText read as Sphinx reads it: section titles, labels, targets and object
descriptions, found by docutils' own parser (so a `::` block's text is never a heading).

docutils knows none of Sphinx's directives and roles; while a page is parsed, each Sphinx
directive is stood in for by one that records where it is and what Sphinx would anchor it
as, and each unknown role by one that shows what Sphinx shows (`:setting:\\`SECRET_KEY\\``
reads SECRET_KEY, `:meth:\\`~a.B.c\\`` reads c). Python objects are anchored by their full
name (`.. currentmodule::`, `.. module::`, `:module:` and the enclosing class as Sphinx
resolves them); cross-reference targets a project declares (Django's `.. setting::`) as
Sphinx's Target directive does, `std-<type>-<name>`; labels as docutils does. autodoc's
directives (`.. autofunction:: name`) are object descriptions whose content lives in code:
each is a section of its own, anchored by its full name, its text the directive as written.
"""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from scopes.splitting.anchors import docutils_id, faq_slug, sphinx_id
from scopes.splitting.pages import Described, Heading

PYTHON_OBJECTS = {
    "function",
    "data",
    "class",
    "exception",
    "method",
    "classmethod",
    "staticmethod",
    "attribute",
    "property",
    "decorator",
    "decoratormethod",
    "type",
}
NESTING = {"class", "exception"}
# Directives that render nothing on the page (settings for what follows, authors
# not shown): their lines are no section's text, so a release added above moves none of them.
SILENT_DIRECTIVES = {
    "module",
    "currentmodule",
    "highlight",
    "default-domain",
    "default-role",
    "role",
    "tabularcolumns",
    "sectionauthor",
    "moduleauthor",
    "codeauthor",
}
# Content-less directives that show nothing where they stand: right above a heading or an object
# they are its lead-in (with targets and labels); any other (`.. versionadded:: 3.1`, a project's
# own) shows text there, so it stays in the section it closes.
LEAD_IN_DIRECTIVES = SILENT_DIRECTIVES | {"index", "rst-class", "cssclass"}
# autodoc's directives -> the Python object type they describe.
AUTO_DIRECTIVES = {
    "autofunction": "function",
    "autoclass": "class",
    "autoexception": "exception",
    "automethod": "method",
    "autoattribute": "attribute",
    "autoproperty": "property",
    "autodata": "data",
    "autodecorator": "decorator",
    "autonewtypedata": "data",
    "automodule": "module",
}
# Directives whose content is code, never parsed as reStructuredText (as Sphinx shows them).
CODE_DIRECTIVES = {"code-block", "sourcecode", "literalinclude", "doctest", "testcode", "testoutput", "productionlist"}
STANDARD_OBJECTS = {"envvar", "confval"}  # anchored `<type>-<name>`
# Roles Sphinx registers over docutils' own: docutils' `:pep:` errors on `8#anchor` (and its
# error takes two ids), Sphinx's links it.
SPHINX_ROLES = {"pep", "rfc", "code"}
LABEL = re.compile(r"^\.\. _([^:`]+|`[^`]+`):\s*$")


@dataclass(frozen=True)
class SphinxDomain:
    """What a project adds to Sphinx (read from its extensions' `add_crossref_type` and
    `add_object_type` calls): directive name -> whether its anchor takes only the first word."""

    crossref_types: frozenset[str] = frozenset()
    object_types: dict[str, bool] = field(default_factory=dict)
    roles: frozenset[str] = frozenset()  # app.add_role(...) names
    directives: frozenset[str] = frozenset()  # app.add_directive(...) names: made at build time, not read


@dataclass
class _Directive:
    start: int
    end: int
    has_content: bool
    anchor: str | None  # objects and targets
    described: bool  # an object description (its block is a section when it has content)
    target: bool = False  # a cross-reference target: above a heading, it anchors the heading
    generated: bool = False  # autodoc: shows what the code holds, so a section even with no content of its own
    built: str | None = None  # the id Sphinx builds where the anchor is already taken (`id0`)
    lead_in: bool = False  # shows nothing where it stands: right above a heading or object, that one's


@dataclass
class _Reading:
    domain: SphinxDomain
    module: str | None = None
    classes: list[str] = field(default_factory=list)
    directives: list[_Directive] = field(default_factory=list)
    silent: list[tuple[int, int]] = field(default_factory=list)  # directives that render nothing: [start, end)
    serials: dict[str, int] = field(default_factory=dict)  # Sphinx's env.new_serialno, per prefix


_LOCAL = threading.local()
_UNCHANGED = object()
_PATCHING = threading.Lock()


def _python_fullname(signature: str, reading: _Reading, options: dict) -> str | None:
    first = signature.strip().split("\n")[0]
    found = re.match(r"^\s*(?:(?:async|static|classmethod|abstract|final|class|def|type)\s+)*([\w.]*\.)?(\w+)", first)
    if not found:
        return None
    prefix, name = found.group(1) or "", found.group(2)
    classname = reading.classes[-1] if reading.classes else None
    if classname and prefix.startswith(classname + "."):
        fullname = prefix + name
    elif classname:
        fullname = f"{classname}.{prefix}{name}"
    else:
        fullname = prefix + name
    module = options.get("module", reading.module)
    return f"{module}.{fullname}" if module else fullname


def _autodoc_fullname(argument: str, kind: str, reading: _Reading) -> str | None:
    """The full name autodoc documents (its resolve_name): a dotted argument names its module
    itself (`pytest.Warning`), a bare one is in the current module (and class)."""
    found = re.match(r"^\s*([\w.]+)", argument)
    if not found:
        return None
    name = found.group(1)
    class_level = kind in ("method", "attribute", "property")
    if name.count(".") >= (2 if class_level else 1):
        return name
    if class_level and "." not in name and reading.classes:
        name = f"{reading.classes[-1]}.{name}"
    return f"{reading.module}.{name}" if reading.module else name


def _directive_class():
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives

    class AnyOptions(dict):
        def __missing__(self, key):
            return directives.unchanged

        def __bool__(self):  # docutils reads options only when a directive declares some
            return True

    class Recorded(Directive):
        """Stands in for a Sphinx directive: records it, parses nested content for objects."""

        has_content = True
        optional_arguments = 1
        final_argument_whitespace = True
        option_spec = AnyOptions()

        def run(self):
            reading: _Reading = _LOCAL.reading
            name = self.name.lower()
            kind = name.split(":", 1)[1] if name.startswith(("py:", "std:")) else name
            generated = kind in AUTO_DIRECTIVES
            kind = AUTO_DIRECTIVES.get(kind, kind)
            argument = self.arguments[0] if self.arguments else ""
            start = self.lineno - 1
            end = start + len(self.block_text.split("\n"))
            has_content = any(line.strip() for line in self.content)
            if kind in SILENT_DIRECTIVES and not generated and not has_content:  # `.. module::`'s content shows
                reading.silent.append((start, end))
            anchor, described, pushed = None, False, None
            nested_module = _UNCHANGED
            if kind in ("module", "currentmodule"):
                module = argument.strip() or None
                reading.module = None if module == "None" else module
                if kind == "module" and reading.module:
                    anchor = f"module-{reading.module}"
            elif kind in PYTHON_OBJECTS:
                if generated:
                    fullname = _autodoc_fullname(argument, kind, reading)
                else:
                    fullname = _python_fullname(argument, reading, self.options)
                if fullname:
                    anchor, described = sphinx_id(fullname), True
                    module = self.options.get("module", reading.module) or ""
                    if generated and kind in NESTING and not fullname.startswith(f"{module}."):
                        # autodoc's `pytest.RaisesExc`: what it nests is that module's class.
                        module, _, _ = fullname.rpartition(".")
                        nested_module = module or None
                    without_module = fullname[len(module) :].lstrip(".")
                    if kind in NESTING:
                        pushed = without_module
                    elif "." in without_module:
                        pushed = without_module.rsplit(".", 1)[0]
            if "noindex" in self.options or "no-index" in self.options:
                anchor, described = None, False  # Sphinx makes no target: nothing links here
            elif kind in STANDARD_OBJECTS or kind in reading.domain.object_types:
                # Each line is a signature of its own (`.. confval:: copyright` then
                # `project_copyright`): the first one anchors the block.
                words = " ".join(argument.strip().split("\n")[0].split())
                if reading.domain.object_types.get(kind) and words:
                    # A parse_node names the object by its signature's head: `config-inited(app, config)`.
                    words = re.match(r"[^\s(]+", words).group(0)
                anchor, described = (sphinx_id(f"{kind}-{words}") if words else None), True
            elif kind in reading.domain.crossref_types:
                # sphinx.domains.std.Target: make_id with the directive's full name, `std:<type>`.
                anchor = sphinx_id(f"std:{kind}-{' '.join(argument.split())}")
            if generated and kind == "module" and reading.module:
                described = True
            target = kind in reading.domain.crossref_types
            built = None
            if described and anchor:
                prefix = "" if kind in PYTHON_OBJECTS else kind
                built = _built_id(self.state.document, anchor, prefix, reading.serials)
            lead_in = not has_content and not described and (target or kind in LEAD_IN_DIRECTIVES)
            reading.directives.append(
                _Directive(
                    start,
                    end,
                    has_content,
                    anchor,
                    described,
                    target,
                    generated,
                    built if built != anchor else None,
                    lead_in,
                )
            )
            if has_content and kind not in CODE_DIRECTIVES:
                if pushed:
                    reading.classes.append(pushed)
                outer_module = reading.module
                if nested_module is not _UNCHANGED:
                    reading.module = nested_module
                holder = nodes.container()
                try:
                    self.state.nested_parse(self.content, self.content_offset, holder)
                finally:
                    if nested_module is not _UNCHANGED:
                        reading.module = outer_module
                    if pushed:
                        reading.classes.pop()
            return []

    return Recorded


def _built_id(document, anchor: str, prefix: str, serials: dict[str, int]) -> str:
    """sphinx.util.nodes.make_id for an object description: its anchor, or where the page
    already holds that id, `id0`, `id1`, ... (`<type>-0` for a typed object), counted per page;
    the id is noted in the document, so docutils' own `idN` for titles skip it, as in Sphinx."""
    from docutils import nodes

    chosen = anchor
    while chosen in document.ids:
        number = serials.get(prefix, 0)
        serials[prefix] = number + 1
        chosen = f"{prefix}-{number}" if prefix else f"id{number}"
    document.set_id(nodes.target("", "", ids=[chosen]))
    return chosen


def _shown(text: str) -> str:
    """What Sphinx shows for a cross-reference role's text."""
    explicit = re.match(r"^(.*?)\s*<([^<>]*)>$", text, re.S)
    if explicit and explicit.group(1).strip():
        return explicit.group(1)
    shown = text.lstrip("!")
    if shown.startswith("~"):
        shown = shown[1:].rsplit(".", 1)[-1]
    return shown


def _silent(directive_class):
    """docutils' own directive, its lines recorded as rendering nothing."""

    class Silent(directive_class):
        def run(self):
            start = self.lineno - 1
            _LOCAL.reading.silent.append((start, start + len(self.block_text.split("\n"))))
            return super().run()

    return Silent


@contextmanager
def _sphinx_stand_ins():
    """docutils' directive and role lookups, answered for Sphinx's names while a page parses."""
    from docutils import nodes, utils
    from docutils.parsers.rst import directives, roles

    recorded = _directive_class()
    docutils_builtin = {
        "class",
        "include",
        "raw",
        "meta",
        "title",
        "role",
        "default-role",
        "unicode",
        "replace",
        "date",
    }

    def role_stand_in(name, rawtext, text, lineno, inliner, options=None, content=None):
        return [nodes.literal(rawtext, utils.unescape(_shown(text)))], []

    original_directive, original_role = directives.directive, roles.role

    def directive(name, language, document):
        lowered = name.lower()
        if lowered in ("role", "default-role"):
            found, messages = original_directive(name, language, document)
            return (_silent(found) if found is not None else None), messages
        if lowered in docutils_builtin and lowered != "class":
            return original_directive(name, language, document)
        found, messages = (None, []) if lowered == "class" else original_directive(name, language, document)
        return (found, messages) if found is not None else (recorded, [])

    def role(name, language, lineno, reporter):
        if name.lower() in SPHINX_ROLES or name.lower() in _LOCAL.reading.domain.roles:
            return role_stand_in, []  # Sphinx's own (`:pep:\`8#naming\``): no docutils error, no id
        found, messages = original_role(name, language, lineno, reporter)
        return (found, messages) if found is not None else (role_stand_in, [])

    with _PATCHING:
        directives.directive, roles.role = directive, role
        try:
            yield
        finally:
            directives.directive, roles.role = original_directive, original_role


def read(
    text: str, path: str, domain: SphinxDomain | None = None
) -> tuple[list[Heading], list[Described], list[tuple[int, int]]]:
    """The page's headings (anchored as Sphinx anchors them), object descriptions, and the
    line spans of directives that render nothing."""
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    settings = get_default_settings(Parser)
    settings.report_level, settings.halt_level = 5, 5  # the docs' own mistakes are Sphinx's to report
    settings.file_insertion_enabled = False  # includes are expanded before, inside the synced folder only
    settings.raw_enabled = False
    settings.auto_id_prefix, settings.id_prefix = "id", ""  # as Sphinx sets them: the built ids
    document = new_document(path, settings)
    reading = _Reading(domain or SphinxDomain())
    _LOCAL.reading = reading
    try:
        with _sphinx_stand_ins():
            Parser().parse(text, document)
    finally:
        _LOCAL.reading = None
    lines = text.split("\n")
    # Where a lead-in directive block (a target, `.. module::`, `.. index::`) ends -> it.
    quiet = {}
    for directive in reading.directives:
        if directive.lead_in and not directive.generated:
            last = directive.end - 1
            while last > directive.start and not lines[last].strip():
                last -= 1
            quiet[last] = directive
    headings = []
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
        above, labels, targets = _above(lines, start, quiet)
        shown = " ".join(title.astext().split())
        built = section["ids"][0] if section["ids"] else None
        if labels:
            anchor, explicit, built = docutils_id(labels[0]), True, None
        elif targets:
            anchor, explicit, built = targets[0], True, None
        else:
            anchor, explicit = docutils_id(shown) or faq_slug(shown) or "section", False
        placeless = not explicit and not (docutils_id(shown) or faq_slug(shown))
        headings.append(
            Heading(
                level,
                title.rawsource or title.astext(),
                start,
                underline + 1,
                anchor,
                explicit,
                above,
                built,
                placeless,
            )
        )
    described = []
    for directive in reading.directives:
        if directive.described and (directive.has_content or directive.generated) and directive.anchor:
            # The targets, labels and index entries right above an object are its own.
            above = _above(lines, directive.start, quiet)[0]
            start = directive.start if above is None else above
            described.append(Described(start, _trimmed_end(lines, directive), directive.anchor, directive.built))
    return sorted(headings, key=lambda h: h.start), described, reading.silent


def _trimmed_end(lines: list[str], directive: _Directive) -> int:
    end = min(directive.end, len(lines))
    while end > directive.start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _above(lines: list[str], start: int, quiet: dict[int, _Directive]) -> tuple[int | None, list[str], list[str]]:
    """The lines right above a heading that belong to it: labels and content-less directives
    (targets, `.. module::`, `.. index::`), with blank lines between; nearest first."""
    cursor, first, labels, targets = start - 1, None, [], []
    while cursor >= 0:
        line = lines[cursor]
        if not line.strip():
            cursor -= 1
            continue
        label = LABEL.match(line)
        if label:
            labels.insert(0, label.group(1).strip("`"))
            first, cursor = cursor, cursor - 1
        elif cursor in quiet:
            directive = quiet[cursor]
            if directive.target and directive.anchor:
                targets.insert(0, directive.anchor)
            first, cursor = directive.start, directive.start - 1
        else:
            break
    return first, labels, targets


def _adornment(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= 2 and len(set(stripped)) == 1 and not stripped[0].isalnum()
