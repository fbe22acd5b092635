"""Imports that run up the layers are lazy: each sits inside the function that needs it.

`make lint` checks the direction of imports with import-linter (the contracts in pyproject.toml's
``[tool.importlinter]``). A few imports run upwards on purpose: ``ds.batches()`` hands over to the
loaders, ``ds.filter()`` runs an eval. The layers contract ignores those, and import-linter cannot tell
an import at the top of a module from one inside a function, so this test checks that every import the
contract ignores is made inside a function (or under ``if TYPE_CHECKING:``), where loading the lower
layer never loads the upper one.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lakecompute"


def _ignored_imports() -> list[tuple[str, str]]:
    """The layers contract's ignore_imports, as (importer pattern, imported module) pairs."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    pairs = []
    for line in layers["ignore_imports"]:
        importer, imported = (part.strip() for part in line.split("->"))
        pairs.append((importer, imported))
    return pairs


def _matches(pattern: str, module: str) -> bool:
    """import-linter's module expressions: ``*`` one name, ``**`` one or more."""
    regex = re.escape(pattern).replace(r"\*\*", r"[^.]+(\.[^.]+)*").replace(r"\*", r"[^.]+")
    return re.fullmatch(regex, module) is not None


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    return ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _eager_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of the imports that run when the module is imported: outside functions and
    ``if TYPE_CHECKING:`` blocks. ``from lakecompute import compression`` imports the submodule."""
    out: list[tuple[int, str]] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                is_module = (ROOT / sub.replace(".", "/")).with_suffix(".py").exists() or (
                    ROOT / sub.replace(".", "/")
                ).is_dir()
                out.append((node.lineno, sub if is_module else node.module))
        stack.extend(ast.iter_child_nodes(node))
    return out


def _eager_ignored(pairs: list[tuple[str, str]], path: Path, tree: ast.Module) -> list[str]:
    module = _module_name(path)
    rules = [imported for importer, imported in pairs if _matches(importer, module)]
    return [
        f"{path.relative_to(ROOT)}:{line} imports {target} when it is imported; import it inside the "
        "function that needs it"
        for line, target in _eager_imports(tree)
        if target in rules
    ]


def test_imports_the_layers_contract_ignores_are_inside_functions() -> None:
    """Every upward import the layers contract ignores (datasets -> loaders, ...) is made lazily."""
    pairs = _ignored_imports()
    assert ("lakecompute.datasets.**", "lakecompute.loaders") in pairs
    violations: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        violations += _eager_ignored(pairs, path, ast.parse(path.read_text(), str(path)))
    assert violations == [], "\n".join(violations)


def test_lazy_import_check_catches_a_module_level_import() -> None:
    """The check itself works: a top-level import of the loaders in a dataset module is reported, one
    inside a function or under TYPE_CHECKING is not."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from lakecompute.loaders import batches\n"
        "if TYPE_CHECKING:\n"
        "    from lakecompute.loaders import Batches\n"
        "def f():\n"
        "    from lakecompute.loaders import pytorch\n"
    )
    path = PACKAGE / "datasets" / "_x.py"
    assert _eager_ignored(_ignored_imports(), path, ast.parse(source)) == [
        "lakecompute/datasets/_x.py:2 imports lakecompute.loaders when it is imported; import it inside "
        "the function that needs it"
    ]
    assert _matches("lakecompute.datasets.**", "lakecompute.datasets._views")
    assert not _matches("lakecompute.datasets.**", "lakecompute.datasets")
