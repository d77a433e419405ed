"""Which files of a folder are pages, read as the project's own tool reads them.

- A Sphinx project (a `conf.py` in the folder): pages are the files with a `source_suffix`
  (merged with the suffixes its extensions register, as Sphinx merges them: myst_parser's and
  myst_nb's `.md` are Markdown read as MyST) that `exclude_patterns` (and `templates_path`, `html_static_path`, `html_extra_path`, and
  Sphinx's own list) leave in. conf.py is read, never run: only assignments of literal values
  count. The project's extensions are read the same way for the cross-reference targets and
  object types they add (`app.add_crossref_type("setting", ...)`), so their anchors are known.
- An MkDocs project (an `mkdocs.yml` in the folder, or in its parent with this folder as
  `docs_dir`): pages are the Markdown files under `docs_dir` that `exclude_docs` leaves in;
  the toc extension's `slugify` and `separator` and `pymdownx.snippets`' settings are read
  from `markdown_extensions`.
- Any other folder: pages by file extension; a folder mixing formats needs `--format`.
`--include` / `--exclude` globs narrow any of them. A symbolic link that leaves the folder is
refused: a sync publishes what it reads to every key of the scope.

Includes (`.. include::`, MyST's `{include}`, snippets) may read files of the project's
repository beside the folder (a `../CHANGELOG.rst`): the nearest folder above that holds the
VCS root (`.git`, `.hg`, `.svn`) or a project file (`pyproject.toml`, `setup.py`, ...), never
above it; with neither, the synced folder alone.
"""

from __future__ import annotations

import ast
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from scopes.splitting.anchors import markdown_slugify, mkdocs_slug
from scopes.splitting.files import FILE_KINDS, VCS_FOLDERS, read_regular, repository_boundary
from scopes.splitting.generated import extensions_changed_in_code, hooks_warning, registered_directive
from scopes.splitting.markdown_includes import (
    MarkdownIncludes,
    Snippets,
    configured_markdown_includes,
    configured_snippets,
    unread_includers,
)
from scopes.splitting.rst import SphinxDomain

FORMATS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "rst",
    ".html": "html",
    ".htm": "html",
    ".jsonl": "jsonl",
}
MKDOCS_SUFFIXES = (".md", ".markdown", ".mdown", ".mkdn", ".mkd")
SPHINX_ALWAYS_EXCLUDED = ["**/_sources", ".#*", "**/.#*", "*.lproj/**"]
# Markdown in a Sphinx project is MyST: docutils builds its anchors, as for reStructuredText.
SPHINX_TYPES = {"restructuredtext": "rst", "markdown": "myst", "myst-nb": "myst"}
# What a Sphinx extension registers with app.add_source_suffix (read from their sources).
EXTENSION_SUFFIXES = {
    "myst_parser": {".md": "markdown"},
    "myst_nb": {".md": "myst-nb", ".ipynb": "myst-nb"},
}
EMOJI_SHORTCODE = re.compile(r":[a-z0-9_+-]+:")


class ProjectError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message
        super().__init__(f"{path}: {message}")


@dataclass
class Project:
    kind: str  # sphinx, mkdocs, folder, file
    root: Path  # ids are relative to it
    formats: dict[str, str]  # file suffix -> format
    exclude: list[str] = field(default_factory=list)
    domain: SphinxDomain = field(default_factory=SphinxDomain)
    notes: list[str] = field(default_factory=list)
    # Where includes may read from: the repository holding the folder (see the module's docstring).
    boundary: Path | None = None
    slugify: Callable[[str], str] | None = None  # MkDocs' configured toc slugify
    snippets: Snippets | None = None  # pymdownx.snippets, when the project enables it
    markdown_includes: MarkdownIncludes | None = None
    myst_extensions: frozenset[str] = frozenset()  # conf.py's myst_enable_extensions
    attr_list: bool = True  # whether `{#id}` after a Markdown heading is read (MkDocs: when enabled)

    def warn(self, message: str) -> None:
        if f"warning: {message}" not in self.notes:
            self.notes.append(f"warning: {message}")

    def format_of(self, path: Path) -> str | None:
        name = path.name.lower()
        for suffix in sorted(self.formats, key=len, reverse=True):
            if name.endswith(suffix.lower()):
                return self.formats[suffix]
        return None


def glob_pattern(pattern: str) -> re.Pattern:
    """A Sphinx-style glob (`**` crosses folders, `*` and `?` do not) as a regular expression."""
    out, index = [], 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
            if pattern.startswith("/", index):
                out[-1] = "(?:.*/)?"
                index += 1
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            close = pattern.find("]", index + 1)
            if close == -1:
                out.append(re.escape(char))
            else:
                body = pattern[index + 1 : close]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                index = close
        else:
            out.append(re.escape(char))
        index += 1
    return re.compile("".join(out) + r"\Z")


def matches(patterns: list[re.Pattern], relative: str) -> bool:
    """Whether a path or any folder above it matches (excluding a folder excludes its files)."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    return any(p.match(candidate) for p in patterns for candidate in candidates)


# --- Sphinx -------------------------------------------------------------------------------


def _literal_assignments(source: str, path: str) -> dict[str, object]:
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as problem:
        raise ProjectError(path, f"not Python: {problem}") from None
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                found[node.targets[0].id] = None  # computed: Sphinx's default stands
    return found


def _declared_types(folder: Path, exclude: list[re.Pattern]) -> SphinxDomain:
    """Cross-reference targets and object types the project's extensions add to Sphinx."""
    crossref, objects, roles, directives = set(), {}, set(), set()
    boundary = repository_boundary(folder)[0]
    # The folder above too, inside the repository: pip's conf.py loads docs/pip_sphinxext.py from there.
    above = sorted(folder.parent.glob("*.py")) if boundary != folder and boundary in folder.parents else []
    for path in sorted(folder.rglob("*.py"))[:500] + above[:50]:
        relative = path.relative_to(folder).as_posix() if folder in path.parents else ""
        if matches(exclude, relative) or path.is_symlink():
            continue
        try:
            tree = ast.parse(read_regular(path))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (registered := registered_directive(node)):
                directives.add(registered)
                continue
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add_crossref_type", "add_object_type", "add_role")
            ):
                continue
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            first = node.args[0] if node.args else keywords.get("directivename")
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            if node.func.attr == "add_role":
                roles.add(first.value.lower())
            elif node.func.attr == "add_crossref_type":
                crossref.add(first.value.lower())
            else:
                parse_node = node.args[3] if len(node.args) > 3 else keywords.get("parse_node")
                objects[first.value.lower()] = parse_node is not None and not (
                    isinstance(parse_node, ast.Constant) and parse_node.value is None
                )
    return SphinxDomain(frozenset(crossref), objects, frozenset(roles), frozenset(directives))


def sphinx_project(folder: Path) -> Project:
    try:
        source = read_regular(folder / "conf.py")
    except (OSError, UnicodeDecodeError) as problem:
        raise ProjectError("conf.py", f"cannot be read: {problem}") from None
    conf = _literal_assignments(source, "conf.py")
    suffix = conf.get("source_suffix") or {".rst": "restructuredtext"}
    if isinstance(suffix, str):
        suffix = {suffix: "restructuredtext"}
    elif isinstance(suffix, (list, tuple)):
        suffix = dict.fromkeys(suffix, "restructuredtext")
    suffix = {str(k): str(v or "restructuredtext") for k, v in dict(suffix).items()}
    extensions = [str(e) for e in (conf.get("extensions") or []) if isinstance(e, str)]
    unread = []
    for extension in extensions:
        # sphinx.registry.merge_source_suffix: an extension's filetype fills a suffix conf.py
        # left to the default (restructuredtext) or did not name.
        for ending, filetype in EXTENSION_SUFFIXES.get(extension, {}).items():
            if suffix.get(ending, "restructuredtext") == "restructuredtext":
                suffix[ending] = filetype
    formats = {}
    for ending, filetype in suffix.items():
        fmt = SPHINX_TYPES.get(filetype)
        if fmt:
            formats[ending] = fmt
        else:
            unread.append(f"{ending} ({filetype})")
    exclude = [str(p) for p in (conf.get("exclude_patterns") or [])]
    for setting in ("templates_path", "html_static_path", "html_extra_path"):
        exclude += [str(p).rstrip("/") for p in (conf.get(setting) or []) if isinstance(p, str)]
    exclude += SPHINX_ALWAYS_EXCLUDED
    root_doc = conf.get("root_doc") or conf.get("master_doc") or "index"
    domain = _declared_types(folder, [glob_pattern(p) for p in exclude])
    notes = [
        f"Sphinx project (conf.py): pages {', '.join(f'{e} ({f})' for e, f in sorted(formats.items()))}; "
        f"excluded {', '.join(exclude)}; root document {root_doc}"
    ]
    if unread:
        notes.append(f"warning: pages not read (a format ragtrail does not split): {', '.join(unread)}")
    if domain.crossref_types or domain.object_types:
        notes.append(
            "targets and objects the project adds: "
            + ", ".join(sorted(domain.crossref_types | set(domain.object_types)))
        )
    if changed_at := extensions_changed_in_code(source):
        notes.append(
            f"warning: conf.py:{changed_at} changes `extensions` in code: only its literal list is read, so "
            "pages of a suffix an extension added there registers (MyST's .md) are not read"
        )
    if not any((folder / f"{root_doc}{ending}").exists() for ending in [*formats, *suffix]):
        notes.append(f"warning: the root document {root_doc!r} is not in the folder")
    project = Project("sphinx", folder, formats, exclude, domain, notes)
    listed = conf.get("myst_enable_extensions") or ()
    project.myst_extensions = frozenset(str(e) for e in listed if isinstance(e, str))
    _bound_includes(project)
    return project


def _bound_includes(project: Project) -> None:
    boundary, marker = repository_boundary(project.root)
    project.boundary = boundary
    if marker:
        project.notes.append(f"includes read inside {boundary} (it holds {marker}), never above it")
    else:
        project.notes.append("includes read inside the synced folder (no repository or project file above it)")


# --- MkDocs -------------------------------------------------------------------------------


def _mkdocs_config(path: Path, above: tuple[Path, ...] = ()) -> dict:
    """mkdocs.yml as MkDocs reads it: an `INHERIT: base.yml` (relative to the file naming it)
    is read first and this file deep-merged over it (mappings merged key by key, anything
    else replaced: mkdocs.utils.yaml_load with mergedeep), within the repository."""
    found = _mkdocs_yaml(path)
    parent = found.pop("INHERIT", None)
    if parent is None:
        return found
    real, fence = Path(os.path.realpath(path.parent / str(parent))), repository_boundary(path.parent)[0]
    named = f"INHERIT {str(parent)!r} in {path.name}"
    if fence not in real.parents or any(p in VCS_FOLDERS for p in real.relative_to(fence).parts):
        raise ProjectError(path.name, f"{named} lies outside the repository ({fence}) or in its VCS files: refused")
    if real in above or len(above) >= 8:
        raise ProjectError(path.name, f"{named} inherits in a loop: refused")
    if not real.exists():
        raise ProjectError(path.name, f"{named} is missing")
    return _deep_merge(_mkdocs_config(real, (*above, Path(os.path.realpath(path)))), found)


def _deep_merge(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        both = isinstance(merged.get(key), dict) and isinstance(value, dict)
        merged[key] = _deep_merge(merged[key], value) if both else value
    return merged


def _mkdocs_yaml(path: Path) -> dict:
    import yaml

    class Loader(yaml.SafeLoader):
        """Safe, and blind to the Python tags MkDocs configs use (`!!python/name:...`, `!ENV`)."""

    def python_tag(loader, suffix, node):
        """`!!python/name:x.y` and `!!python/object/apply:x.y {kwds: ...}` kept as (x.y, kwds):
        enough to know which toc slugify a project configures, never imported."""
        if not suffix.startswith("tag:yaml.org,2002:python/"):
            return None
        name = suffix.rsplit(":", 1)[-1]
        if isinstance(node, yaml.MappingNode):
            value = loader.construct_mapping(node, deep=True)
            return PythonName(name, dict(value.get("kwds") or {}))
        return PythonName(name, {})

    Loader.add_multi_constructor("", python_tag)
    try:
        found = yaml.load(read_regular(path), Loader=Loader)  # noqa: S506 (a SafeLoader)
    except (OSError, UnicodeDecodeError) as problem:
        raise ProjectError(path.name, f"cannot be read: {problem}") from None
    except yaml.YAMLError as problem:
        raise ProjectError(path.name, f"not YAML: {problem}") from None
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class PythonName:
    name: str
    kwds: dict


def _extensions(config: dict) -> dict[str, dict]:
    """markdown_extensions as {name: settings}: a list of names or of one-key mappings."""
    found: dict[str, dict] = {}
    listed = config.get("markdown_extensions") or []
    if isinstance(listed, dict):
        listed = [{k: v} for k, v in listed.items()]
    for entry in listed if isinstance(listed, list) else []:
        if isinstance(entry, str):
            found[entry] = {}
        elif isinstance(entry, dict):
            for name, settings in entry.items():
                found[str(name)] = settings if isinstance(settings, dict) else {}
    return found


def _configured_slugify(project: Project, toc: dict) -> None:
    chosen = toc.get("slugify")
    separator = str(toc.get("separator") or "-")
    if chosen is None and separator == "-":
        return
    name, kwds = (
        (chosen.name, chosen.kwds) if isinstance(chosen, PythonName) else ("markdown.extensions.toc.slugify", {})
    )
    slugify = markdown_slugify(name, kwds, separator)
    if slugify is None:
        project.warn(f"the toc slugify {name} is not one ragtrail knows: anchors use the toc's default")
        return
    project.slugify = slugify
    project.notes.append(f"headings anchored by {name}{f' {kwds}' if kwds else ''} (toc separator {separator!r})")


def _gitignore_globs(lines: str) -> list[str]:
    globs = []
    for line in str(lines or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("!"):
            continue  # a negation cannot widen what a sync reads
        line = line.rstrip("/")
        globs.append(line[1:] if line.startswith("/") else ("**/" + line if "/" not in line else line))
    return globs


def mkdocs_project(config_path: Path) -> Project:
    config = _mkdocs_config(config_path)
    docs = (config_path.parent / str(config.get("docs_dir") or "docs")).resolve()
    home = config_path.parent.resolve()
    if docs != home and home not in docs.parents:
        # The sync reads the folder it was pointed at: docs_dir: ../secret would publish what lies beside it.
        raise ProjectError(
            config_path.name, f"docs_dir {config.get('docs_dir')!r} lies outside the project's folder: refused"
        )
    exclude = ["**/.*", "templates"] + _gitignore_globs(config.get("exclude_docs"))
    notes = [
        f"MkDocs project ({config_path.name}): pages {', '.join(MKDOCS_SUFFIXES)} under {docs.name}/; "
        f"excluded {', '.join(exclude)}"
    ]
    project = Project("mkdocs", docs, dict.fromkeys(MKDOCS_SUFFIXES, "markdown"), exclude, SphinxDomain(), notes)
    extensions = _extensions(config)
    # attr_list on its own, or in Python-Markdown's `extra` or pymdownx's `extra`, which register it.
    project.attr_list = "pymdownx.extra" in extensions or any(
        f"{p}{n}" in extensions for p in ("", "markdown.extensions.") for n in ("attr_list", "extra")
    )
    _configured_slugify(project, extensions.get("toc", {}))
    if "pymdownx.emoji" in extensions:
        # An emoji's shortcode (`:smile:`, `:material-check:`) shows as an image: no slug text.
        slug = project.slugify or mkdocs_slug
        project.slugify = lambda text: slug(EMOJI_SHORTCODE.sub("", text))
    if "pymdownx.snippets" in extensions:
        project.snippets, note = configured_snippets(home, extensions["pymdownx.snippets"])
        project.notes.append(note)
    project.markdown_includes, note = configured_markdown_includes(home, extensions)
    project.notes += [note] if note else []
    fence = repository_boundary(home)[0]
    bases = [*(project.snippets.base_paths if project.snippets else ())]
    bases += project.markdown_includes.base_paths if project.markdown_includes else ()
    for real in (Path(os.path.realpath(base)) for base in bases):
        if fence in real.parents and any(p in VCS_FOLDERS for p in real.relative_to(fence).parts):
            where = real.relative_to(fence)
            raise ProjectError(config_path.name, f"base_path {where} is version control's own files: refused")
    for name in unread_includers(config, extensions):
        project.warn(f"{name} adds text at build time that the sync does not read: sections hold its markers")
    if hooks := hooks_warning(config):
        project.warn(hooks)
    _bound_includes(project)
    return project


# --- any folder ---------------------------------------------------------------------------


def read_project(path: Path, fmt: str = "auto") -> Project:
    """The project at `path`: Sphinx, MkDocs, or a plain folder (or one file)."""
    path = Path(path)
    if not path.exists():
        raise ProjectError(str(path), "no such file or folder")
    if path.is_file():
        chosen = fmt if fmt != "auto" else FORMATS.get(path.suffix.lower())
        if chosen is None:
            raise ProjectError(path.name, f"no format for {path.suffix or 'a file without extension'}: pass --format")
        project = Project("file", path.parent, {path.name: chosen})
        _bound_includes(project)
        return project
    if fmt == "auto":
        if (path / "conf.py").exists():
            return sphinx_project(path)
        for config in (path / "mkdocs.yml", path / "mkdocs.yaml"):
            if config.exists():
                return mkdocs_project(config)
        for config in (path.parent / "mkdocs.yml", path.parent / "mkdocs.yaml"):
            project = mkdocs_project(config) if config.is_file() else None
            if project is not None and project.root == path.resolve():
                return project
        project = Project("folder", path, dict(FORMATS))
    else:
        project = Project("folder", path, {ending: kind for ending, kind in FORMATS.items() if kind == fmt})
    _bound_includes(project)
    return project


def pages(project: Project, include: list[str] = (), exclude: list[str] = (), single: Path | None = None) -> list[Path]:
    """The project's page files in path order.

    Raises:
        ProjectError: a symbolic link leaving the folder, or (a plain folder) mixed formats.
    """
    root = project.root
    real_root = Path(os.path.realpath(root))
    if single is not None:
        _inside(single, real_root, single.name)
        return [single]
    excluded = [glob_pattern(p) for p in [*project.exclude, *exclude]]
    included = [glob_pattern(p) for p in include]
    found = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        base = Path(folder)
        for name in sorted(dirs):
            link = base / name
            relative = link.relative_to(root).as_posix()
            if name.startswith(".") or matches(excluded, relative):
                dirs.remove(name)
            elif link.is_symlink():
                _inside(link, real_root, relative)
                dirs.remove(name)  # inside the folder: its files are read where they really are
        for name in files:
            file = base / name
            relative = file.relative_to(root).as_posix()
            if name.startswith(".") or project.format_of(file) is None or matches(excluded, relative):
                continue
            if included and not any(p.match(relative) for p in included):
                continue
            if file.is_symlink():
                _inside(file, real_root, relative)
            kind = stat.S_IFMT(file.stat().st_mode) if file.exists() else stat.S_IFREG
            if kind != stat.S_IFREG:
                raise ProjectError(
                    relative, f"is {FILE_KINDS.get(kind, 'not a regular file')}, not a regular file: refused"
                )
            found.append(file)
    found.sort(key=lambda p: p.relative_to(root).as_posix())
    if project.kind == "folder":
        kinds = {project.format_of(p) for p in found}
        if len(kinds) > 1:
            raise ProjectError(
                str(root),
                f"mixed formats ({', '.join(sorted(kinds))}): pass --format to choose one, or --include/--exclude",
            )
    return found


def _inside(link: Path, real_root: Path, relative: str) -> None:
    target = Path(os.path.realpath(link))
    if target != real_root and real_root not in target.parents:
        raise ProjectError(
            relative,
            f"a symbolic link to {target}, outside the synced folder: refused (a sync "
            "publishes what it reads to every key of the scope)",
        )
