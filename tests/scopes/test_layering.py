"""The project's floors, drawn from its own imports (those inside functions included), one
floor a folder, lowest first:

  0 infra/          the plumbing: errors, strict JSON, load shedding, database deadline,
                    metrics, env settings, prepared statements, section hashing;
  1 trails/core/    the rules in plain Python (no Django): matching, validation, the lifecycle table;
  2 scopes/         tenants, keys, the section store;
  3 trails/         trails, recall, record, learning, upkeep, pages and API;
  4 ragtrail_site/  the wiring: settings, URLs, the API object, the app that connects the floors;
  5 evaluation/     benchmarks and the evaluation, beside the product, never imported by it.

A module never imports one of a higher floor, and no modules import each other in a circle,
not even inside a function. Where a lower floor must tell a higher one something, it sends a
Django signal or calls what the higher one registered at app ready (ragtrail_site.apps).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("infra", "ragtrail_site", "scopes", "trails", "evaluation")
# The floors, by the folder a module lives in (the longest prefix decides).
FLOORS = {"infra": 0, "trails.core": 1, "scopes": 2, "trails": 3, "ragtrail_site": 4, "evaluation": 5}


def layer_of(module: str) -> int:
    parts = module.split(".")
    for depth in range(len(parts), 0, -1):
        floor = FLOORS.get(".".join(parts[:depth]))
        if floor is not None:
            return floor
    raise KeyError(f"{module} is in no floor")


def project_modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            modules[name] = path
    return modules


def imported_modules(path: Path, module: str | None = None) -> list[str]:
    """Every module name an import statement in the file names, at any depth (inside
    functions too), relative imports resolved against `module` (the file's own name);
    `from a import b` names both a and a.b."""
    names = []
    package = (module or "").split(".") if path.stem == "__init__" else (module or "").split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    """module -> the project modules it imports (a name resolves to its longest module prefix)."""
    modules = project_modules(root, packages)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        targets = {resolve(name) for name in imported_modules(path, module)}
        graph[module] = {t for t in targets if t and t != module and not module.startswith(t + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for module in sorted(graph):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_modules_import_each_other_in_a_circle():
    found = circles(import_graph())
    assert not found, f"modules that import each other in a circle: {found}"


def test_no_module_imports_a_higher_layer():
    upward = sorted(
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in import_graph().items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )
    assert not upward, "imports that reach up a layer:\n" + "\n".join(upward)


def test_the_scan_sees_imports_inside_functions_and_relative_ones(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from pkg.high import g\n    return g\n")
    (package / "high.py").write_text("from . import low\n\ndef g():\n    return low\n")
    (package / "alone.py").write_text("import pkg.low\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.low"] == {"pkg.high"} and graph["pkg.high"] == {"pkg.low"}
    assert circles(graph) == [["pkg.high", "pkg.low"]]
    (package / "low.py").write_text("def f():\n    return 1\n")
    assert circles(import_graph(tmp_path, ("pkg",))) == []


def _imports_of(package: str, upper: set[str]) -> dict[str, list[str]]:
    return {
        module: sorted(t for t in targets if t.split(".")[0] in upper)
        for module, targets in import_graph().items()
        if module.split(".")[0] == package and any(t.split(".")[0] in upper for t in targets)
    }


def test_scopes_never_imports_trails():
    offending = _imports_of("scopes", {"trails", "evaluation"})
    assert not offending, f"scopes imports an upper app: {offending}"


def test_the_product_never_imports_the_evaluation():
    offending = {**_imports_of("trails", {"evaluation"}), **_imports_of("ragtrail_site", {"evaluation"})}
    assert not offending, f"the product imports the evaluation: {offending}"


def test_the_plumbing_imports_no_app_and_no_wiring():
    offending = _imports_of("infra", {"scopes", "trails", "evaluation", "ragtrail_site"})
    assert not offending, f"infra imports an app or the wiring: {offending}"


def test_the_core_imports_nothing_but_the_plumbings_pure_hashing():
    core = {
        module: sorted(t for t in targets if not t.startswith("trails.core"))
        for module, targets in import_graph().items()
        if module.startswith("trails.core")
    }
    assert {
        module: targets for module, targets in core.items() if set(targets) - {"infra.hashing", "infra.tokens"}
    } == {}


def test_no_module_is_longer_than_500_lines():
    long = {
        module: n for module, path in project_modules(ROOT).items() if (n := len(path.read_text().splitlines())) > 500
    }
    assert long == {}, f"split these by concept: {long}"


def test_the_scan_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from trails.upkeep.reindex import reindex_scope\n    import trails.models\n")
    # `from a import b` names a and a.b (b may be a module); both imported modules are seen.
    assert imported_modules(module) == ["trails.upkeep.reindex", "trails.upkeep.reindex.reindex_scope", "trails.models"]
