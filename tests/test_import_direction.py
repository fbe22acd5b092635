"""Imports that run up the layers go through one door, which the rest of its layer opens lazily.

`make lint` checks the direction of imports with import-linter (the contracts in pyproject.toml's
``[tool.importlinter]``). A few imports run upwards on purpose: ``ds.batches()`` hands over to the
loaders, ``ds.filter()`` runs an eval. They all sit in one module, the door
(``lakecompute/datasets/_upward.py``), and the layers contract ignores exactly that module's imports.
Import-linter cannot tell an import at the top of a module from one inside a function, so this test
checks that every import of the door is made inside a function (or under ``if TYPE_CHECKING:``), where
loading the dataset layer never loads the ones above it; and that, the door aside, no import loop
joins two packages (and no loop inside a package grows).

Two more rules keep the list short: the contract ignores only the dataset handle's verbs (imports from
the door into compute, loaders, vision and viz, each still in use), and no module below the command
line imports the ``lakecompute`` facade itself, even inside a function: the dataset lifecycle is
imported from ``lakecompute.datasets``, ``compute`` from ``lakecompute.compute``.
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

#: The one module of the dataset layer that imports the layers above it.
DOOR = "lakecompute.datasets._upward"

#: The largest import loop inside one package, the door aside (compute's engine, worker and plan, whose
#: modules import one another inside functions). It may shrink, never grow.
MAX_LOOP_IN_A_PACKAGE = 11

#: The modules that sit above the facade and may import ``lakecompute`` itself: the command line, the
#: demo and the test helpers (the facade, ``lakecompute/__init__.py``, is the package).
ABOVE_FACADE = ("lakecompute.__main__", "lakecompute.cli", "lakecompute.demo", "lakecompute.testing")


def _ignored_imports() -> list[tuple[str, str]]:
    """The layers contract's ignore_imports, as (importer pattern, imported module) pairs."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers" and "ignore_imports" in c]
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


def _eager_door(path: Path, tree: ast.Module) -> list[str]:
    """Where ``path`` imports the door when it is imported (not inside a function or for type checking)."""
    return [
        f"{path.relative_to(ROOT)}:{line} imports {target} when it is imported; import it inside the "
        "function that needs it"
        for line, target in _eager_imports(tree)
        if target == DOOR and _module_name(path) != DOOR
    ]


def test_the_contract_ignores_only_the_door() -> None:
    """The layers contract ignores imports of one module only: the door."""
    pairs = _ignored_imports()
    assert ("lakecompute.datasets._upward", "lakecompute.loaders") in pairs
    assert {importer for importer, _ in pairs} == {DOOR}


def test_the_door_is_opened_inside_functions() -> None:
    """Every import of the door (datasets -> loaders, ...) is made lazily."""
    violations: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        violations += _eager_door(path, ast.parse(path.read_text(), str(path)))
    assert violations == [], "\n".join(violations)
    assert (PACKAGE / "datasets" / "_upward.py").exists()
    assert not (PACKAGE / "api.py").exists()  # the 10-line re-export went: lc.load is datasets'


def test_lazy_import_check_catches_a_module_level_import() -> None:
    """The check itself works: a top-level import of the door in a dataset module is reported, one
    inside a function or under TYPE_CHECKING is not."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from lakecompute.datasets._upward import batches\n"
        "if TYPE_CHECKING:\n"
        "    from lakecompute.datasets._upward import Batches\n"
        "def f():\n"
        "    from lakecompute.datasets._upward import pytorch\n"
    )
    path = PACKAGE / "datasets" / "_x.py"
    assert _eager_door(path, ast.parse(source)) == [
        "lakecompute/datasets/_x.py:2 imports lakecompute.datasets._upward when it is imported; import it "
        "inside the function that needs it"
    ]
    assert _matches("lakecompute.datasets.**", "lakecompute.datasets._views")
    assert not _matches("lakecompute.datasets.**", "lakecompute.datasets")


def _runtime_imports() -> dict[str, set[str]]:
    """Every module of the package and the modules of the package it imports when run (inside functions
    too; not for type checking), as import-linter's graph has them."""
    import grimp

    graph = grimp.build_graph("lakecompute", exclude_type_checking_imports=True)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def _reachable(imports: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for found in imports.get(todo.pop(), set()):
            if found not in seen:
                seen.add(found)
                todo.append(found)
    return seen


def import_loops(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import loops of ``imports`` (module -> modules it imports): the groups of more than one module
    each of which imports every other, directly or not (strongly connected components), each sorted."""
    reach = {module: _reachable(imports, module) for module in imports}
    loops = {
        tuple(sorted({module} | {other for other in reach[module] if module in reach.get(other, set())}))
        for module in imports
    }
    return sorted(list(loop) for loop in loops if len(loop) > 1)


def _without(imports: dict[str, set[str]], module: str) -> dict[str, set[str]]:
    return {m: found - {module} for m, found in imports.items() if m != module}


def _by_package(imports: dict[str, set[str]]) -> dict[str, set[str]]:
    """``imports`` between the package's top-level units (``lakecompute.datasets``, ...)."""
    out: dict[str, set[str]] = {}
    for module, found in imports.items():
        unit = ".".join(module.split(".")[:2])
        out.setdefault(unit, set()).update(".".join(f.split(".")[:2]) for f in found)
    return {unit: found - {unit} for unit, found in out.items()}


def test_without_the_door_no_import_loop_joins_two_packages() -> None:
    """With the door, the handle's verbs tie the dataset layer and every layer above it into one loop (67
    modules); without it no loop joins two packages, and a loop inside one stays small."""
    imports = _runtime_imports()
    assert max(map(len, import_loops(imports))) > 2 * MAX_LOOP_IN_A_PACKAGE  # the door's loop
    inside = _without(imports, DOOR)
    assert import_loops(_by_package(inside)) == []
    loops = import_loops(inside)
    assert all(len({".".join(m.split(".")[:2]) for m in loop}) == 1 for loop in loops), loops
    assert max(map(len, loops), default=0) <= MAX_LOOP_IN_A_PACKAGE, loops


def test_the_loop_finder_finds_loops() -> None:
    """The check itself works: a loop of three, one of two, a module importing itself and a chain."""
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"f", "a"}, "g": set()}
    assert import_loops(imports) == [["a", "b", "c"], ["d", "e"]]
    assert import_loops(_without(imports, "c")) == [["d", "e"]]
    assert _by_package({"x.p.a": {"x.q.b"}, "x.q.b": {"x.p.c"}, "x.p.c": set()}) == {
        "x.p": {"x.q"},
        "x.q": {"x.p"},
    }


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
        ("lakecompute.datasets._upward", "lakecompute.viz"),
        ("lakecompute.datasets._upward", "lakecompute.compute"),
    ]
    imports = {"lakecompute.datasets._upward": {"lakecompute.compute"}, "lakecompute.datasets._views": set()}
    assert _ignore_problems(pairs, imports) == [
        "lakecompute.ingest.** -> lakecompute is not a dataset handle's verb handing over",
        "lakecompute.datasets._upward -> lakecompute.viz is ignored but no module imports it: remove the "
        "line",
    ]


_VERBS_SCRIPT = """
import sys
import lakecompute as lc

ds = lc.empty(sys.argv[1], overwrite=True)
with ds:
    ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
    ds.labels.extend([0, 1, 1])
assert sum(len(b["labels"]) for b in ds.batches(2)) == 3
assert len(ds.filter(lc.col("labels") == "dog")) == 2
assert ds.count_values("labels") == {"cat": 1, "dog": 2}
assert ds.to_arrow().num_rows == 3
print("torch imported:", "torch" in sys.modules)
"""


def test_a_handles_verbs_never_import_torch(tmp_path: Path) -> None:
    """``ds.batches()``, ``ds.filter(expr)``, ``count_values`` and ``to_arrow`` in a fresh process leave torch
    unimported: the door imported the torch loader's class at its top, and the first verb of every process
    paid torch's import (1.1 s)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _VERBS_SCRIPT, str(tmp_path / "ds")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "torch imported: False"
