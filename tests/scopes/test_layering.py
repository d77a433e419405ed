"""scopes is the lower app: it never imports trails (trails imports scopes)."""
from __future__ import annotations

import ast
from pathlib import Path

SCOPES = Path(__file__).resolve().parents[2] / "scopes"


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_scopes_never_imports_trails():
    offending = {
        str(path.relative_to(SCOPES.parent)): name
        for path in SCOPES.rglob("*.py")
        for name in imported_modules(path)
        if name == "trails" or name.startswith("trails.")
    }
    assert not offending, f"scopes imports trails: {offending}"


def test_the_scan_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from trails.reindex import reindex_scope\n    import trails.models\n")
    assert imported_modules(module) == ["trails.reindex", "trails.models"]
