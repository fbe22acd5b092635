"""Imports that run up the layers are lazy: each sits inside the function that needs it.

`make lint` checks the direction of imports with import-linter (the contracts in pyproject.toml's
``[tool.importlinter]``). A few imports run upwards on purpose: ``ds.batches()`` hands over to the
loaders, ``ds.filter()`` runs an eval. The layers contract ignores those, and import-linter cannot tell
an import at the top of a module from one inside a function, so this test checks that every import the
contract ignores is made inside a function (or under ``if TYPE_CHECKING:``), where loading the lower
layer never loads the upper one.

Two more rules keep the list short: the contract ignores only the dataset handle's verbs (imports from
``lakecompute.datasets`` into compute, loaders, vision and viz, each still in use), and no module below
the command line imports the ``lakecompute`` facade itself, even inside a function: the dataset
lifecycle is imported from ``lakecompute.datasets``, ``compute`` from ``lakecompute.compute``.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lakecompute"

#: The layers a dataset handle's verbs hand over to: ``ds.filter`` (compute, select), ``ds.batches`` and
#: ``ds.pytorch`` (loaders), ``view.export_coco`` (vision), the notebook view (viz), ``ds.to_arrow`` and
#: the other table exports (tables), ``ds.view()`` (the viewer). These are the only upward imports the
#: layers contract may ignore, and only from the dataset layer.
HANDLE_VERBS = {
    "lakecompute.compute",
    "lakecompute.loaders",
    "lakecompute.select",
    "lakecompute.tables",
    "lakecompute.vision",
    "lakecompute.viz",
    "lakecompute.viewer",
}

#: The modules that sit above the facade and may import ``lakecompute`` itself: the command line, the
#: demo and the test helpers (the facade, ``lakecompute/__init__.py``, is the package).
ABOVE_FACADE = ("lakecompute.__main__", "lakecompute.cli", "lakecompute.demo", "lakecompute.testing")


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


def _eager_imports(tree: ast.Module, functions: bool = False) -> list[tuple[int, str]]:
    """(line, module) of the imports that run when the module is imported: outside functions and
    ``if TYPE_CHECKING:`` blocks (with ``functions``, those inside functions too: every import that
    runs). ``from lakecompute import compression`` imports the submodule."""
    out: list[tuple[int, str]] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not functions:
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


def _facade_imports(path: Path, tree: ast.Module) -> list[str]:
    """The imports of the ``lakecompute`` facade itself (``import lakecompute as lc``, ``from lakecompute
    import empty``) in a module below it, inside functions included; ``from lakecompute import
    compression`` imports a submodule, not the facade."""
    module = _module_name(path)
    if module == "lakecompute" or any(
        _matches(top, module) or _matches(top + ".**", module) for top in ABOVE_FACADE
    ):
        return []
    return [
        f"{path.relative_to(ROOT)}:{line} imports the lakecompute facade; import the name from the layer "
        "that owns it (lakecompute.datasets, lakecompute.compute, ...)"
        for line, target in sorted(_eager_imports(tree, functions=True))
        if target == "lakecompute"
    ]


def test_no_module_below_the_facade_imports_it() -> None:
    """Nothing under the command line, the demo and the test helpers imports ``lakecompute`` itself, even
    inside a function: a back door through the facade ties every layer into one import loop."""
    violations: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        violations += _facade_imports(path, ast.parse(path.read_text(), str(path)))
    assert violations == [], "\n".join(violations)


def test_facade_check_catches_an_import_inside_a_function() -> None:
    """The check itself works: ``import lakecompute as lc`` inside an ingest function and ``from
    lakecompute import empty`` are reported, a submodule import and the command line's import are not."""
    source = (
        "from lakecompute import compression\n"
        "from lakecompute import empty\n"
        "def run():\n"
        "    import lakecompute as lc\n"
        "    return lc.load\n"
    )
    tree = ast.parse(source)
    assert _facade_imports(PACKAGE / "ingest" / "_x.py", tree) == [
        f"lakecompute/ingest/_x.py:{line} imports the lakecompute facade; import the name from the layer "
        "that owns it (lakecompute.datasets, lakecompute.compute, ...)"
        for line in (2, 4)
    ]
    assert _facade_imports(PACKAGE / "cli.py", tree) == []
    assert _facade_imports(PACKAGE / "testing" / "data.py", tree) == []


def _ignore_problems(pairs: list[tuple[str, str]], imports: dict[str, set[str]]) -> list[str]:
    """What is wrong with the layers contract's ignored imports, given every import each module makes:
    a line that is not a dataset handle's verb, or one that no import uses any more."""
    problems = []
    for importer, imported in pairs:
        if not importer.startswith("lakecompute.datasets") or imported not in HANDLE_VERBS:
            problems.append(f"{importer} -> {imported} is not a dataset handle's verb handing over")
        elif not any(_matches(importer, m) and imported in found for m, found in imports.items()):
            problems.append(f"{importer} -> {imported} is ignored but no module imports it: remove the line")
    return problems


def test_the_contract_ignores_only_the_handles_verbs() -> None:
    """The layers contract's ignored imports run from the dataset layer to the layers its verbs hand over
    to (compute, select, loaders, tables, vision, viz), and each is still used."""
    imports = {
        _module_name(path): {t for _, t in _eager_imports(ast.parse(path.read_text()), functions=True)}
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert _ignore_problems(_ignored_imports(), imports) == []


def test_ignore_check_catches_a_back_door_and_a_stale_line() -> None:
    """The check itself works: an ignored ingest -> facade import and a line no import uses are reported."""
    pairs = [
        ("lakecompute.ingest.**", "lakecompute"),
        ("lakecompute.datasets._views", "lakecompute.viz"),
        ("lakecompute.datasets._verbs", "lakecompute.compute"),
    ]
    imports = {"lakecompute.datasets._verbs": {"lakecompute.compute"}, "lakecompute.datasets._views": set()}
    assert _ignore_problems(pairs, imports) == [
        "lakecompute.ingest.** -> lakecompute is not a dataset handle's verb handing over",
        "lakecompute.datasets._views -> lakecompute.viz is ignored but no module imports it: remove the line",
    ]
