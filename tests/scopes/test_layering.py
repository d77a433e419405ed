"""The apps' layers: scopes < trails < evaluation. A lower one never imports a higher one."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCOPES = ROOT / "scopes"


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def imports_of(app: str, upper: set[str]) -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): name
        for path in (ROOT / app).rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in upper
    }


def test_scopes_never_imports_trails():
    offending = imports_of("scopes", {"trails", "evaluation"})
    assert not offending, f"scopes imports an upper app: {offending}"


def test_the_product_never_imports_the_evaluation():
    offending = {**imports_of("trails", {"evaluation"}), **imports_of("ragtrail_site", {"evaluation"})}
    assert not offending, f"the product imports the evaluation: {offending}"


def test_the_scan_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from trails.reindex import reindex_scope\n    import trails.models\n")
    assert imported_modules(module) == ["trails.reindex", "trails.models"]
