"""The package's layers talk through public names only: no module reaches into another package's privates.

A *unit* is a subpackage (``lakecompute/datasets/``, ``lakecompute/compute/``, ...) or a top-level module
(``lakecompute/api.py``). Inside a unit, underscore names are shared freely; across units — and into other
libraries such as zarr — only public names are used. A function that needs another unit's underscore name
is asking for an API there.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lakecompute"

# Underscore names of other libraries that are documented public API, each with its reason.
ALLOWED = {
    "_exit": "os._exit is the documented way to leave a forked child without running cleanup",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _unit(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _defined(tree: ast.AST) -> set[str]:
    """Underscore names a module defines: functions, classes, methods, attributes, module globals."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries and the like
    return {n for n in names if _private(n)}


def _modules() -> dict[Path, ast.AST]:
    return {p: ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def _import_violations(path: Path, tree: ast.AST) -> list[str]:
    unit = _unit(path)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        parts = node.module.split(".")
        owner = parts[1] if parts[0] == "lakecompute" and len(parts) > 1 else None
        if owner == unit:
            continue
        if any(_private(p) for p in parts):
            out.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports from private module {node.module}")
        for alias in node.names:
            if _private(alias.name):
                out.append(
                    f"{path.relative_to(PACKAGE)}:{node.lineno} imports {alias.name} from {node.module}"
                )
    return out


def _attribute_violations(path: Path, tree: ast.AST, own: set[str]) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr) or node.attr in ALLOWED:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr not in own:
            out.append(f"{path.relative_to(PACKAGE)}:{node.lineno} uses {ast.unparse(node)}")
    return out


def test_no_module_uses_another_packages_private_names() -> None:
    """Every `x._name` and `from m import _name` in lakecompute/ stays inside the unit that defines it."""
    modules = _modules()
    own: dict[str, set[str]] = defaultdict(set)
    for path, tree in modules.items():
        own[_unit(path)] |= _defined(tree)
    violations: list[str] = []
    for path, tree in modules.items():
        violations += _import_violations(path, tree)
        violations += _attribute_violations(path, tree, own[_unit(path)])
    assert violations == [], "\n".join(violations)


def test_scan_catches_a_private_attribute_from_another_package(tmp_path: Path) -> None:
    """The scan itself works: a module using another unit's private attribute is reported."""
    tree = ast.parse("def f(ds):\n    return ds._txn.head\n")
    assert _attribute_violations(PACKAGE / "compute" / "_engine.py", tree, own=set()) == [
        "compute/_engine.py:2 uses ds._txn"
    ]
    tree = ast.parse("from lakecompute.storage._segments import MAX_SLOTS\n")
    assert _import_violations(PACKAGE / "datasets" / "_x.py", tree) == [
        "datasets/_x.py:1 imports from private module lakecompute.storage._segments"
    ]
