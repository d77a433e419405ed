"""Files a Markdown page pulls in, read as the MkDocs project's extensions read them:
pymdownx.snippets' `--8<--`, `{!file!}` (markdown-include, mdx_include) and `{* file *}`
(markdown-include-variants). The included text takes the marker's place, under the page's
include budget (includes.Expansion), inside the repository (includes.inside)."""

from __future__ import annotations

import os
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scopes.splitting.includes import MAX_DEPTH, Expansion, IncludeError, inside


@dataclass(frozen=True)
class Snippets:
    """pymdownx.snippets' settings: folders a snippet path is looked up in, and whether a
    missing one stops the build (`check_paths`) or is left out."""

    base_paths: tuple[Path, ...]
    check_paths: bool = False
    auto_append: tuple[str, ...] = ()  # snippets added to the end of every page


@dataclass(frozen=True)
class MarkdownIncludes:
    """The Python-Markdown include extensions a project enables: `{!file!}` (markdown-include,
    mdx_include) and `{* file *}` (markdown-include-variants), looked up in `base_paths`."""

    kinds: frozenset[str]  # "bang" for {!...!}, "star" for {* ... *}
    base_paths: tuple[Path, ...]


def configured_snippets(home: Path, settings: dict) -> tuple[Snippets, str]:
    """pymdownx.snippets' settings from mkdocs.yml (`home` its folder), and a note saying them."""
    bases = settings.get("base_path", ["."])
    bases = [bases] if isinstance(bases, str) else [str(b) for b in bases or []]
    appended = settings.get("auto_append") or []
    snippets = Snippets(
        tuple((home / b).resolve() for b in bases),
        bool(settings.get("check_paths", False)),
        tuple(str(a) for a in ([appended] if isinstance(appended, str) else appended)),
    )
    return snippets, f"snippets (--8<--) read from {', '.join(bases)}"


# Python-Markdown include extensions: name in markdown_extensions -> the syntax it reads.
MARKDOWN_INCLUDE_EXTENSIONS = {
    "markdown_include.include": "bang",
    "mdx_include": "bang",
    "markdown_include_variants": "star",
}


def configured_markdown_includes(home: Path, extensions: dict[str, dict]) -> tuple[MarkdownIncludes | None, str]:
    """The include extensions the project enables, and a note saying them (None, "" for none)."""
    kinds, bases = set(), []
    for name, kind in MARKDOWN_INCLUDE_EXTENSIONS.items():
        if name in extensions:
            kinds.add(kind)
            base = extensions[name].get("base_path", ".")
            bases += [base] if isinstance(base, str) else [str(b) for b in base or []]
    if not kinds:
        return None, ""
    bases = list(dict.fromkeys(bases or ["."]))
    configured = MarkdownIncludes(frozenset(kinds), tuple((home / b).resolve() for b in bases))
    shown = ", ".join(sorted({"bang": "{!file!}", "star": "{* file *}"}[k] for k in kinds))
    return configured, f"includes {shown} read from {', '.join(bases)}"


# Plugins and extensions that pull files into a page at build time in a way not read here.
UNREAD_INCLUDERS = ("include-markdown", "include_markdown", "macros", "markdown-exec", "markdown_exec", "mkdocs_macros")


def plugin_names(config: dict) -> list[str]:
    """mkdocs.yml's plugins, listed (`- search`, `- macros: {...}`) or as a mapping (`search:`)."""
    listed = config.get("plugins") or []
    if isinstance(listed, dict):
        return [str(name) for name in listed]
    return [
        next(iter(p)) if isinstance(p, dict) and p else str(p) for p in (listed if isinstance(listed, list) else [])
    ]


def unread_includers(config: dict, extensions: dict[str, dict]) -> list[str]:
    """The configured plugins and extensions that include text the sync does not read."""
    names = plugin_names(config)
    names += [n for n in extensions if "include" in n.lower() and n not in MARKDOWN_INCLUDE_EXTENSIONS]
    return [n for n in names if any(marker in n.lower() for marker in UNREAD_INCLUDERS) or n in extensions]


SNIPPET_INLINE = re.compile(
    r"""^(?P<space>[ \t]*)(?P<escape>;*)-+8<-+[ \t]+(?P<path>"(?:\\"|[^"\n])+?"|'(?:\\'|[^'\n])+?')$"""
)
SNIPPET_BLOCK = re.compile(r"^[ \t]*(?P<escape>;*)-+8<-+$")
SNIPPET_SECTION = re.compile(
    r"^(?P<pre>.*?);*-+8<-+[ \t]+\[[ \t]*(?:start|end)[ \t]*:[ \t]*[a-z][-_0-9a-z]*[ \t]*\].*$", re.I
)


def expand_snippets(
    text: str,
    snippets: Snippets,
    boundary: Path,
    warn: Callable[[str], None],
    seen: tuple[tuple[Path, str], ...] = (),  # the snippets above: (file, name as written)
    spent: Expansion | None = None,
) -> str:
    """pymdownx.snippets' `--8<-- "file.md"` (and the block form) replaced by the file's
    lines (`file.md:3:9` a line range, `file.md:name` a `[start:name]` section); `;--8<--` is
    an escape. A missing snippet is a refusal with `check_paths`, else left out with a warning."""
    if "8<" not in text:
        return text
    spent = spent if spent is not None else Expansion()
    if len(seen) >= MAX_DEPTH:
        raise IncludeError(None, f"snippets nest deeper than {MAX_DEPTH}")
    out: list[str] = []
    block = False
    for number, line in enumerate(text.split("\n"), 1):
        inline, edge = SNIPPET_INLINE.match(line), SNIPPET_BLOCK.match(line)
        if (inline and inline.group("escape")) or (edge and edge.group("escape")):
            out.append(line.replace(";", "", 1))
            continue
        if edge:
            block = not block
            continue
        if inline and not block:
            space, path = inline.group("space"), inline.group("path")[1:-1].strip()
        elif block:
            space, path = line[: len(line) - len(line.lstrip())], line.strip()
            if not path:
                out.append("")
                continue
        else:
            if not SNIPPET_SECTION.match(line):
                out.append(line)
            continue
        if path.startswith(";"):
            continue
        try:
            out.extend(space + piece for piece in _snippet(path, snippets, boundary, warn, seen, number, spent))
        except IncludeError as problem:
            raise IncludeError(problem.line if seen else number, problem.message) from None
    return "\n".join(out)


def _snippet(path, snippets, boundary, warn, seen, number, spent: Expansion) -> list[str]:
    found = re.match(r"(?i)^(.*?)(?:((?::-?[0-9]*){1,2}(?:,-?[0-9]*(?::-?[0-9]*)?)*)|(:[a-z][-_0-9a-z]*))?$", path)
    name, ranges, section = found.group(1).strip(), found.group(2), found.group(3)
    if name.lower().startswith(("http://", "https://")):
        warn(f"snippet {name} is a URL: not fetched, left out")
        return []
    chain = (*(written for _, written in seen), name)
    if ("snippet", path) in spent.expanded_snippets:  # included before: counted again, not read again
        real, body = spent.expanded_snippets["snippet", path]
        if real in (file for file, _ in seen):
            return []
        spent.spend(body, chain, None)
        return body.split("\n")
    real = None
    for base in snippets.base_paths:
        candidate = Path(os.path.realpath(base / name))
        if candidate.exists() and (base == candidate or Path(os.path.realpath(base)) in candidate.parents):
            real = candidate
            break
    if real is None:
        if snippets.check_paths:
            raise IncludeError(number, f"snippet {name} could not be found (check_paths is on)")
        warn(f"snippet {name} could not be found: left out, as pymdownx.snippets does")
        return []
    real = inside(real, boundary, name, number, snippets.base_paths)
    if real in (file for file, _ in seen):
        return []
    lines = spent.read(real, name, number if not seen else None).split("\n")
    if ranges:
        chosen: list[str] = []
        for span in ranges[1:].split(","):
            start, _, end = span.partition(":")
            first = int(start) - 1 if start and int(start) > 0 else (len(lines) + int(start) if start else 0)
            last = (int(end) if int(end) >= 0 else len(lines) + 1 + int(end)) if end else None
            chosen.extend(lines[max(first, 0) : last])
        lines = textwrap.dedent("\n".join(chosen)).split("\n")
    elif section:
        lines = _section(lines, section[1:])
    body = "\n".join(lines)
    spent.spend(body, chain, None)
    body = expand_snippets(body, snippets, boundary, warn, (*seen, (real, name)), spent)
    spent.expanded_snippets["snippet", path] = (real, body)
    return body.split("\n")


def _section(lines: list[str], name: str) -> list[str]:
    marker = re.compile(rf"(?i)-+8<-+[ \t]+\[[ \t]*(start|end)[ \t]*:[ \t]*{re.escape(name)}[ \t]*\]")
    kept, inside = [], False
    for line in lines:
        found = marker.search(line)
        if found:
            if found.group(1).lower() == "start":
                inside = True
                continue
            if inside:
                break
        elif inside and not SNIPPET_SECTION.match(line):
            kept.append(line)
    return kept


# markdown-include: `{!file!}`, `{!file!lines=1 3 8-10!}`; mdx_include: `{!+>file [ln:2-5] | utf-8!}`
# (`+`/`-` recursion, `>` indentation); markdown-include-variants: `{* file hl[3] *}`. `\{!` is an escape.
MARKDOWN_BANG = re.compile(
    r"(?<!\\)\{![+-]?>?\s*(?P<path>[^\]|\[!\n]+?)(?:\s*\[ln:(?P<ln>[\d.,-]+)\])?\s*(?:\|[^!\n]*)?!"
    r"(?:lines=(?P<lines>[0-9 -]+)!)?\}"
)
MARKDOWN_STAR = re.compile(r"(?<!\\)\{\*\s*(?P<path>\S+)(?P<options>[^*\n]*)\*\}")


def expand_markdown_includes(
    text: str,
    configured: MarkdownIncludes,
    boundary: Path,
    warn: Callable[[str], None],
    spent: Expansion | None = None,
    chain: tuple[str, ...] = (),
) -> str:
    """`{!file!}` replaced by the file's text (its own includes read too) and `{* file *}` by
    a code block of the file, as the configured extensions show them; a URL is named, not
    fetched; a missing file refuses the page."""
    spent = spent if spent is not None else Expansion()
    if len(chain) >= MAX_DEPTH:
        raise IncludeError(None, f"includes nest deeper than {MAX_DEPTH}")
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        if "bang" in configured.kinds and "{!" in line:
            line = MARKDOWN_BANG.sub(
                lambda m: _markdown_include(m, configured, boundary, warn, spent, chain, number), line
            )
        if "star" in configured.kinds and "{*" in line:
            line = MARKDOWN_STAR.sub(
                lambda m: _markdown_code(m, configured, boundary, warn, spent, chain, number), line
            )
        out.append(line)
    return "\n".join(out)


def _find_markdown_include(
    path: str, configured: MarkdownIncludes, boundary: Path, line: int, spent: Expansion
) -> Path | None:
    """The included file's checked real path, looked up and checked once per written path."""
    if ("markdown", path) in spent.resolved:
        return spent.resolved["markdown", path]
    found = None
    for base in configured.base_paths:
        candidate = base / path
        if candidate.exists():
            found = inside(candidate, boundary, path, line, configured.base_paths)
            break
    spent.resolved["markdown", path] = found
    return found


def _markdown_include(found, configured, boundary, warn, spent, chain, number) -> str:
    path = found.group("path").strip()
    if path.lower().startswith(("http://", "https://")):
        warn(f"include {path} is a URL: not fetched, left as written")
        return found.group(0)
    real = _find_markdown_include(path, configured, boundary, number, spent)
    if real is None:
        raise IncludeError(number if not chain else None, f"includes {path}, which is missing")
    key = (real, f"bang {found.group('lines')} {found.group('ln')}")
    if key in spent.expanded:  # expanded before: counted again in full, not read again
        spent.spend(spent.expanded[key], (*chain, path), number if not chain else None)
        return spent.expanded[key]
    body = spent.read(real, path, number if not chain else None)
    spans = (found.group("lines") or "").split() + [p for p in (found.group("ln") or "").split(",") if p]
    if spans:
        lines, chosen = body.split("\n"), []
        for span in spans:
            first, _, last = span.partition("-")
            if not first.isdigit() or not (last or first).isdigit():
                warn(f"include {path}: the line range {span} is not read; the whole file is")
                chosen = lines
                break
            chosen += lines[int(first) - 1 : int(last or first)]
        body = "\n".join(chosen)
    spent.spend(body, (*chain, path), number if not chain else None)
    try:
        expanded = expand_markdown_includes(body.rstrip("\n"), configured, boundary, warn, spent, (*chain, path))
    except IncludeError as problem:
        raise IncludeError(problem.line if chain else number, problem.message) from None
    spent.expanded[key] = expanded
    return expanded


def _markdown_code(found, configured, boundary, warn, spent, chain, number) -> str:
    path = found.group("path")
    real = _find_markdown_include(path, configured, boundary, number, spent)
    if real is None:
        raise IncludeError(number if not chain else None, f"includes {path}, which is missing")
    body = spent.read(real, path, number if not chain else None).rstrip("\n")
    spent.spend(body, (*chain, path), None)
    unread = re.sub(r"\bhl\[[^\]]*\]", "", found.group("options")).strip()  # highlighting: the text is whole
    if unread:
        warn(f"include {path}: its options ({unread}) are not read; the whole file is")
    return f"```{real.suffix.lstrip('.')}\n{body}\n```"
