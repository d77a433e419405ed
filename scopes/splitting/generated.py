"""Text a docs build makes and the sync cannot read, named in the summary as warnings.

A section whose page shows such text is served as its source reads: a change only the build
sees (a docstring, a changelog a project's directive reads) is no change of the section. The
sync cannot run the project's code, so it says where this happens rather than staying silent:

- a directive the project's own Sphinx extensions register (`app.add_directive`), used on a page;
- `extensions` set or changed in code in conf.py (`extensions.extend(...)` under an `if`,
  `base + [...]`): only one plain literal list is read, so a suffix such an extension registers
  (MyST's `.md`) is not a page;
- MkDocs' `::: package.name` blocks (mkdocstrings, mkautodoc) and `hooks:`.
"""

from __future__ import annotations

import ast
import re

# `.. name::` (reStructuredText) or a MyST fence's `{name}`.
_DIRECTIVE = re.compile(r"^[ \t]*(?:\.\.[ \t]+(?P<rst>[\w:.+-]+)::|(?:`{3,}|~{3,}|:{3,})\{(?P<myst>[\w:.+-]+)\})")
_DOCSTRING_BLOCK = re.compile(r"^[ \t]*(?:#+[ \t]+)?:::[ \t]*(?P<name>[\w.]+)", re.M)


class BuildTimeText:
    """Where a project's pages show text the build makes, gathered over the pages and said once
    each (what, on how many pages, where first): pip uses its own directives on every command page."""

    def __init__(self) -> None:
        self.places: dict[str, list[str]] = {}  # what -> "page:line" of each page using it

    def read(self, text: str, page: str, fmt: str, directives: frozenset[str]) -> None:
        if fmt in ("rst", "myst") and directives:
            for number, line in enumerate(text.split("\n"), 1):
                found = _DIRECTIVE.match(line)
                name = found and (found.group("rst") or found.group("myst")).lower()
                if name in directives:
                    self._seen(
                        f"`{name}` is the project's own directive: what it shows is made at build time", page, number
                    )
        if fmt == "markdown":
            for block in _DOCSTRING_BLOCK.finditer(text):
                number = text.count("\n", 0, block.start()) + 1
                self._seen(
                    "`::: name` blocks are filled in from docstrings at build time (mkdocstrings, mkautodoc)",
                    page,
                    number,
                )

    def _seen(self, what: str, page: str, number: int) -> None:
        pages = self.places.setdefault(what, [])
        if not any(place.startswith(f"{page}:") for place in pages):
            pages.append(f"{page}:{number}")

    def warnings(self) -> list[str]:
        return [
            f"{what} and not read, so a change there is no change of a section "
            f"({len(pages)} page{'s' if len(pages) > 1 else ''}, first {pages[0]})"
            for what, pages in self.places.items()
        ]


def registered_directive(node: ast.Call) -> str | None:
    """The name an `app.add_directive("name", ...)` or docutils' `register_directive("name", ...)`
    call registers, where written as a literal."""
    called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    if called not in ("add_directive", "register_directive"):
        return None
    keywords = {k.arg: k.value for k in node.keywords if k.arg}
    first = node.args[0] if node.args else keywords.get("name")
    return first.value.lower() if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def extensions_changed_in_code(source: str) -> int | None:
    """The line where conf.py sets or changes `extensions` other than by one plain literal list at
    its top level (the only form the sync reads), if it does."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    literal = {
        id(node)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and _names_extensions(node.targets[0])
        and isinstance(node.value, (ast.List, ast.Tuple))
        and all(isinstance(element, ast.Constant) for element in node.value.elts)
    }
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and id(node) not in literal:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_names_extensions(target) for target in targets):
                return node.lineno
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            mutated = node.func.attr in ("append", "extend", "insert") and _names_extensions(node.func.value)
            if mutated or node.func.attr == "setup_extension":
                return node.lineno
    return None


def _names_extensions(target: ast.AST) -> bool:
    if isinstance(target, ast.Name):
        return target.id == "extensions"
    if isinstance(target, ast.Subscript):
        return _names_extensions(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_names_extensions(element) for element in target.elts)
    return False


def hooks_warning(config: dict) -> str | None:
    """What mkdocs.yml's `hooks:` mean for the sync, where it lists any."""
    hooks = config.get("hooks") or []
    if not isinstance(hooks, list) or not hooks:
        return None
    return (
        f"hooks ({', '.join(str(h) for h in hooks)}) run code at build time that the sync does not run: "
        "text or anchors they make are not read"
    )
