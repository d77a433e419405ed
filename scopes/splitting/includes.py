"""Files a page pulls in, read as the tool reads them: reStructuredText's `.. include::` and
`.. literalinclude::`, MyST's `{include}` and `{literalinclude}` (Markdown's: markdown_includes.py).
The included text takes the place of the directive (a literalinclude's code follows it as its
content), so a change in an included file is a change of the sections that include it.

An include may read any file of the project's repository (Project.boundary: see projects.py),
never above it, never through a symbolic link out of it, never a hidden file (`.env`, `.git`:
the page walk skips them too) unless below a folder the project's configuration names. A
page's includes share one budget (Expansion: lines and bytes across the whole chain, each file
read once); past it the page is refused, naming the chain. A missing include inside `.. only::`
or `.. ifconfig::` (a file made at build time) is left out with a warning, as Sphinx logs it and
goes on; anywhere else it refuses the sync, naming the page and line.
"""

from __future__ import annotations

import os
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from scopes.splitting.files import VCS_FOLDERS, NotRegularFile, read_regular

RST_INCLUDE = re.compile(r"^(?P<indent>[ \t]*)\.\. (?P<kind>include|literalinclude)::[ \t]*(?P<target>\S.*?)[ \t]*$")
MYST_INCLUDE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,}|~{3,})\{(?P<kind>include|literalinclude)\}[ \t]*(?P<target>\S.*?)[ \t]*$"
)
# `.. csv-table::` / `.. raw::` with `:file:`: text the page shows from a file, not read here.
FILE_OPTION = re.compile(r"^[ \t]*:file:[ \t]*\S")
# A directive's opening line (reST's `.. name::`, MyST's fence), then its options, one per line.
OPTIONS_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?:(?P<rst>\.\. )[\w:-]+::|(?:`{3,}|:{3,})\{[\w:-]+\})")
OPTION_LINE = re.compile(r"^[ \t]*:[\w-]+:(?:[ \t]|$)")
CONDITIONAL = re.compile(r"^(?P<indent>[ \t]*)\.\. (?:only|ifconfig)::")
MYST_CONDITIONAL = re.compile(r"^[ \t]*(?:`{3,}|:{3,})\{(?:only|ifconfig)\}")
MAX_DEPTH = 8
# What one page's includes may add, across its whole chain (each inclusion counted, nested
# ones too): past it the page is refused, naming the chain. A long changelog is ~30,000 lines.
MAX_INCLUDED_LINES = 100_000
MAX_INCLUDED_BYTES = 16 * 2**20
RST_DIRECTIVE = re.compile(r"^\.\. ([\w:-]+)::")
# Directives whose content is code or text taken as is: an include written in one is an example.
LITERAL_DIRECTIVES = {
    "code",
    "code-block",
    "sourcecode",
    "literalinclude",
    "parsed-literal",
    "highlight",
    "doctest",
    "testcode",
    "testoutput",
    "testsetup",
    "testcleanup",
    "productionlist",
    "math",
    "raw",
    "eval-rst",
}
FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")


class IncludeError(ValueError):
    def __init__(self, line: int | None, message: str) -> None:
        self.line, self.message = line, message
        super().__init__(message)


def _resolve(target: str, page: Path, root: Path, boundary: Path, line: int) -> Path:
    """The included file's real path, checked against the boundary."""
    included = (root / target.lstrip("/")) if target.startswith("/") else (page.parent / target)
    return inside(included, boundary, target, line)


def inside(included: Path, boundary: Path, target: str, line: int, named: tuple[Path, ...] = ()) -> Path:
    """The real path, inside the boundary and hidden nowhere below it, or below a folder the
    project's configuration names (`named`: a snippets base_path such as `docs/.snippets`)."""
    real, fence = Path(os.path.realpath(included)), Path(os.path.realpath(boundary))
    if fence not in real.parents:
        raise IncludeError(
            line, f"includes {target}, outside {fence}, where includes may read (the repository): refused"
        )
    vcs = next((part for part in real.relative_to(fence).parts if part in VCS_FOLDERS), None)
    if vcs:
        raise IncludeError(line, f"includes {target}, inside {vcs} (version control's own files): refused")
    below = fence
    for folder in (Path(os.path.realpath(n)) for n in named):
        if folder in real.parents and (folder == fence or fence in folder.parents):
            below = folder if len(folder.parts) > len(below.parts) else below
    if any(part.startswith(".") for part in real.relative_to(below).parts):
        raise IncludeError(line, f"includes {target}, a hidden file the sync never reads: refused")
    return real


@dataclass
class Expansion:
    """One page's includes: the files read (each once) and what they added, against a total
    budget across the whole chain, so nested includes cannot fan out without bound."""

    max_lines: int = MAX_INCLUDED_LINES
    max_bytes: int = MAX_INCLUDED_BYTES
    lines: int = 0
    bytes: int = 0
    files: dict[Path, str] = field(default_factory=dict)
    # (folder, target) -> the checked real path; (real path, options) -> its text, includes expanded
    resolved: dict[tuple[Path, str], Path] = field(default_factory=dict)
    expanded: dict[tuple[Path, str], str] = field(default_factory=dict)
    expanded_snippets: dict[tuple[str, str], tuple[Path, str]] = field(default_factory=dict)

    def read(self, real: Path, target: str, line: int | None) -> str:
        if real not in self.files:
            try:
                self.files[real] = read_regular(real)
            except NotRegularFile as problem:
                raise IncludeError(line, f"includes {target}, which {problem}: refused") from None
            except (OSError, UnicodeDecodeError) as problem:
                raise IncludeError(line, f"includes {target}, which cannot be read: {problem}") from None
        return self.files[real]

    def spend(self, body: str, chain: tuple[str, ...], line: int | None) -> None:
        """Counts an inclusion of `body`, reached through `chain` (the included names, outermost first)."""
        self.lines += body.count("\n") + 1
        self.bytes += len(body.encode("utf-8"))
        if self.lines > self.max_lines or self.bytes > self.max_bytes:
            raise IncludeError(
                line,
                f"includes expand past {self.max_lines:,} lines or {self.max_bytes // 2**20} MiB "
                f"(through {' → '.join(chain)}): refused",
            )


def _options(lines: list[str], index: int, pattern: str, fmt: str = "rst") -> tuple[dict[str, str], int]:
    """A directive's `:name: value` options; MyST reads them as YAML (`'quoted -->'` unquoted)."""
    options: dict[str, str] = {}
    while index < len(lines) and re.match(pattern, lines[index]):
        name, _, value = lines[index].strip()[1:].partition(":")
        options[name] = _yaml_value(value.strip()) if fmt != "rst" else value.strip()
        index += 1
    return options, index


def _yaml_value(value: str) -> str:
    if not value or value[0] not in "'\"":
        return value
    import yaml

    try:
        loaded = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return loaded if isinstance(loaded, str) else value


def _line_numbers(spec: str, total: int) -> list[int]:
    """sphinx.util.parselinenos: `1,3,5-10,20-` as 0-based indexes."""
    chosen: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        begin, dash, end = part.partition("-")
        try:
            first = int(begin) if begin else 1
            last = (int(end) if end else total) if dash else first
        except ValueError:
            return list(range(total))
        chosen.extend(range(first - 1, min(last, total)))
    return chosen


def _python_object(text: str, name: str) -> list[str] | None:
    """The lines of a Python object (`Class.method`), decorators included, as pyobject shows it."""
    import ast

    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError):
        return None
    found = None
    for part in name.split("."):
        found = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part
            ),
            None,
        )
        if found is None:
            return None
        body = found.body
    start = min([found.lineno, *(d.lineno for d in found.decorator_list)])
    return text.split("\n")[start - 1 : found.end_lineno]


def literal_lines(text: str, options: dict[str, str], target: str, line: int) -> str:
    """The code `literalinclude` shows: Sphinx's filters in its order (pyobject, start-at /
    start-after, end-at / end-before, lines, dedent, prepend, append)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if options.get("pyobject"):
        found = _python_object(text, options["pyobject"])
        if found is None:
            raise IncludeError(line, f"includes {target} (literalinclude), which holds no {options['pyobject']}")
        lines = found
    for key, after in (("start-at", False), ("start-after", True)):
        if options.get(key):
            index = next((n for n, text_line in enumerate(lines) if options[key] in text_line), None)
            lines = lines[index + after :] if index is not None else lines
    for key, at in (("end-at", True), ("end-before", False)):
        if options.get(key):
            index = next((n for n, text_line in enumerate(lines) if options[key] in text_line), None)
            lines = lines[: index + at] if index is not None else lines
    if options.get("lines"):
        lines = [lines[n] for n in _line_numbers(options["lines"], len(lines)) if n < len(lines)]
    if options.get("dedent", None) is not None:
        try:
            cut = int(options["dedent"]) if options["dedent"] else None
        except ValueError:
            cut = None
        lines = textwrap.dedent("\n".join(lines)).split("\n") if cut is None else [x[cut:] for x in lines]
    if options.get("prepend"):
        lines.insert(0, options["prepend"])
    if options.get("append"):
        lines.append(options["append"])
    return "\n".join(lines)


def _cut(body: str, options: dict[str, str]) -> str:
    """docutils' include options: start-after / end-before text, start-line / end-line."""
    if "start-after" in options and options["start-after"] in body:
        body = body.split(options["start-after"], 1)[1]
    if "end-before" in options and options["end-before"] in body:
        body = body.split(options["end-before"], 1)[0]
    if "start-line" in options or "end-line" in options:
        try:
            start = int(options.get("start-line") or 0)
            end = int(options["end-line"]) if options.get("end-line") else None
            body = "\n".join(body.split("\n")[start:end])
        except ValueError:
            pass
    return body


def _enclosing(lines: list[str], index: int, indent: str):
    """The lines that hold line `index` (indented by `indent`): each less indented one above
    it, nearest first (the reStructuredText blocks it is nested in)."""
    depth = len(indent.expandtabs())
    for above in range(index - 1, -1, -1):
        line = lines[above]
        if not line.strip() or depth == 0:
            if depth == 0:
                return
            continue
        own = len(line.expandtabs()) - len(line.expandtabs().lstrip())
        if own < depth:
            yield line
            depth = own


def _conditional(lines: list[str], index: int, indent: str) -> bool:
    """Whether line `index` lies inside `.. only::` / `.. ifconfig::` (or MyST's)."""
    if any(MYST_CONDITIONAL.match(line) for line in lines[:index]):
        return _open_myst_conditional(lines, index)
    return any(CONDITIONAL.match(line) for line in _enclosing(lines, index, indent))


def _open_myst_conditional(lines: list[str], index: int) -> bool:
    opened: list[str] = []
    for line in lines[:index]:
        found = FENCE.match(line)
        if not found:
            continue
        if opened and found.group("fence") == opened[-1] and not found.group("info").strip():
            opened.pop()
        elif found.group("info").strip():
            opened.append(found.group("fence"))
            if MYST_CONDITIONAL.match(line):
                return True
    return False


def _literal(lines: list[str], index: int, indent: str) -> bool:
    """Whether a reStructuredText line is text, not markup: inside a literal block (after
    `::`), a comment, or a directive whose content is code (`.. code-block::`)."""
    for line in _enclosing(lines, index, indent):
        stripped = line.strip()
        directive = RST_DIRECTIVE.match(stripped)
        if directive:
            if directive.group(1).lower() in LITERAL_DIRECTIVES:
                return True
        elif stripped == ".." or (
            stripped.startswith(".. ") and "::" not in stripped and not stripped.startswith(".. _")
        ):
            return True  # a comment
        elif stripped.endswith("::"):
            return True
    return False


def name_unread(text: str, page: str, warn: Callable[[str], None]) -> None:
    """Warns of each `:file:` option (csv-table, raw): a file the page shows that is not read."""
    if ":file:" not in text:
        return
    options = None  # the indent options have inside the directive above, while in its option block
    for number, line in enumerate(text.split("\n"), 1):
        opened = OPTIONS_OPEN.match(line)
        if opened:
            options = len(opened.group("indent")) + (1 if opened.group("rst") else 0)
            continue
        indent = len(line) - len(line.lstrip())
        if options is None or indent < options or not OPTION_LINE.match(line):
            options = None  # a blank line or text ends the option block: a `:file:` role after it is prose
            continue
        if FILE_OPTION.match(line):
            warn(f"{page}:{number} reads a file ({line.strip()}) the sync does not read")


def expand_includes(
    text: str,
    page: Path,
    root: Path,
    boundary: Path,
    warn: Callable[[str], None],
    fmt: str = "rst",
    spent: Expansion | None = None,
    chain: tuple[str, ...] = (),
) -> str:
    """`.. include::` (reStructuredText) or ```{include}``` (MyST) replaced by the file's text,
    within `spent`'s budget (one per page)."""
    marker = "include::" if fmt == "rst" else "include}"
    if marker not in text:
        return text
    spent = spent if spent is not None else Expansion()
    depth = len(chain)
    if depth >= MAX_DEPTH:
        raise IncludeError(None, f"includes nest deeper than {MAX_DEPTH}")
    lines, out, index = text.split("\n"), [], 0
    fences: list[tuple[str, bool]] = []  # MyST: the fences open above the line
    while index < len(lines):
        if fmt != "rst":
            if _myst_code(lines[index], fences):
                out.append(lines[index])
                index += 1
                continue
        found = (RST_INCLUDE if fmt == "rst" else MYST_INCLUDE).match(lines[index])
        if (
            not found
            or found.group("target").startswith("<")
            or (fmt == "rst" and _literal(lines, index, found.group("indent")))
        ):
            out.append(lines[index])
            index += 1
            continue
        indent, target, at = found.group("indent"), found.group("target"), index + 1
        if fmt == "rst":
            options, index = _options(lines, index + 1, rf"^{re.escape(indent)}[ \t]+:[\w-]+:", fmt)
            written = lines[at - 1 : index]
        else:
            options, index = _options(lines, index + 1, r"^[ \t]*:[\w-]+:", fmt)
            written = lines[at - 1 : index]
            fence = found.group("fence")
            while index < len(lines) and not lines[index].strip().startswith(fence):
                index += 1
            index += 1
        if found.group("kind") == "literalinclude":
            real = _resolve(target, page, root, boundary, at)
            if not real.exists():
                raise IncludeError(at, f"includes {target} (literalinclude), which is missing")
            code = literal_lines(spent.read(real, target, at), options, target, at)
            spent.spend(code, (*chain, target), None)
            # The directive as written, then the code the page shows (its content, for the reader).
            if fmt == "rst":
                out.extend([*written, ""] + [f"{indent}   {line}" if line else line for line in code.split("\n")])
            else:
                fence = found.group("fence")
                longest = max((len(m) for m in re.findall(rf"^[ \t]*({re.escape(fence[0])}+)", code, re.M)), default=0)
                if longest >= len(fence):  # the code holds a fence: one longer keeps it inside
                    written[0] = written[0].replace(fence, fence[0] * (longest + 1), 1)
                    fence = fence[0] * (longest + 1)
                out.extend([*written, *code.split("\n"), f"{indent}{fence}"])
            continue
        if (page.parent, target) not in spent.resolved:
            spent.resolved[page.parent, target] = _resolve(target, page, root, boundary, at)
        real = spent.resolved[page.parent, target]
        known = (real, repr(sorted(options.items())))
        if known in spent.expanded:  # included before: counted again, not read or expanded again
            body = spent.expanded[known]
            spent.spend(body, (*chain, target), None)
            out.extend(f"{indent}{line}" if line else line for line in body.split("\n"))
            continue
        if not real.exists():
            if _conditional(lines, at - 1, indent):
                warn(f"{page.name}:{at} includes {target}, which is missing: left out (inside a conditional block)")
                continue
            raise IncludeError(at, f"includes {target}, which is missing")
        body = _cut(spent.read(real, target, at), options)
        spent.spend(body, (*chain, target), None)
        if "literal" not in options and "code" not in options:
            try:
                body = expand_includes(body, real, root, boundary, warn, fmt, spent, (*chain, target))
            except IncludeError as problem:
                raise IncludeError(at if not chain else problem.line, problem.message) from None
        spent.expanded[known] = body
        out.extend(f"{indent}{line}" if line else line for line in body.split("\n"))
    return "\n".join(out)


def _myst_code(line: str, opened: list[tuple[str, bool]]) -> bool:
    """Whether `line` is part of a MyST code block, keeping `opened` (the fences open above
    it: the fence, whether it holds code). A directive's fence (```{note}) holds MyST, read
    like the page; a plain or language fence (```md) holds code, where an include is only an
    example."""
    found = FENCE.match(line)
    in_code = any(code for _, code in opened)
    if not found:
        return in_code
    fence, info = found.group("fence"), found.group("info").strip()
    if opened and not info and fence[0] == opened[-1][0][0] and len(fence) >= len(opened[-1][0]):
        opened.pop()
        return in_code
    if in_code:
        return True
    code = fence[0] != ":" and (
        not info.startswith("{") or info[1:].split("}")[0] in LITERAL_DIRECTIVES | {"code-cell"}
    )
    if info.startswith(("{include}", "{literalinclude}")):
        return False  # read below, up to its closing fence
    opened.append((fence, code))
    return code
