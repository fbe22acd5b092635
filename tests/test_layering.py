"""The package's layers talk through public names only: no module reaches into another's privates.

A *unit* is a subpackage (``lakecompute/datasets/``, ``lakecompute/compute/``, ...) or a top-level module
(``lakecompute/threads.py``). Across units — and into other libraries such as zarr — only public names are
used; a function that needs another unit's underscore name is asking for an API there.

Two places are held to more than that:

- Inside ``lakecompute/datasets/`` no module reads another module's private attributes: what the
  handle's tensors, views, readers and maintenance share is the dataset core
  (``lakecompute/datasets/_core.py``), reached by public names.
- Tests use no underscore name of lakecompute (or of another library): no ``x._name``, no ``from
  lakecompute... import _name``. They may import public names from a private module (a unit test of
  ``compute/_plan.py`` imports ``plan_ranges`` from it), and they reach a dataset's internals through
  ``lakecompute.testing.internals.dataset_core``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lakecompute"

TESTS = PACKAGE.parent / "tests"

# Allowed underscore names, each with its reason: a bare name anywhere (underscore names of other
# libraries that are documented public API), or "tests/<file>: <expression>" for one use in one test.
ALLOWED = {
    "_exit": "os._exit is the documented way to leave a forked child without running cleanup",
    "_repr_html_": "IPython's rich display protocol: the documented method a notebook calls to show it",
    "tests/reliability/versions_script.py: LocalBackend._write_temp": (
        "the kill-at-every-step tests stop a process between a file written under its temp name and its "
        "link (or rename) into place; no public hook marks that point"
    ),
    "tests/storage/test_fast_paths.py: w._data._put._root": (
        "whether the direct chunk writer is still on after its checked first write; nothing public "
        "shows it (its fallback to zarr is silent)"
    ),
    "tests/reliability/lease_script.py: lakecompute.versioned._leases": (
        "the child process shortens the lease timings, which are the lease module's globals, so that a "
        "reliability test sees leases expire in seconds"
    ),
    "tests/storage/test_integrity.py: lakecompute.versioned._segments": (
        "segments as lakecompute wrote them before chunks carried checksums are made by patching the "
        "module's codec choice (no public writer makes them any more)"
    ),
    **dict.fromkeys(
        [
            "tests/compute/test_huggingface_input.py: _hf()._fingerprint",
            "tests/compute/test_huggingface_input.py: _hf(offset=1)._fingerprint",
        ],
        "Hugging Face `datasets` keeps a dataset's content fingerprint only as `Dataset._fingerprint` (no "
        "public accessor); the test checks that an eval records exactly that value",
    ),
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
    tree = ast.parse("from lakecompute.versioned._segments import MAX_SLOTS\n")
    assert _import_violations(PACKAGE / "datasets" / "_x.py", tree) == [
        "datasets/_x.py:1 imports from private module lakecompute.versioned._segments"
    ]


# -- among the modules of datasets/ ------------------------------------------------------------------
def _sibling_violations(path: Path, tree: ast.AST, own: set[str], siblings: set[str]) -> list[str]:
    """``x._name`` in a module of datasets/ where ``_name`` is another module's there (not self/cls)."""
    found = [
        (node.lineno, ast.unparse(node))
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and _private(node.attr) and not _on_self(node)
        if node.attr in siblings and node.attr not in own
    ]
    return [f"{path.relative_to(PACKAGE)}:{line} uses {text}" for line, text in sorted(found)]


def test_no_dataset_module_uses_another_modules_private_attributes() -> None:
    """Inside datasets/, a private attribute is used only in the module that defines it: the rest go
    through the dataset core's public names."""
    modules = {p: t for p, t in _modules().items() if _unit(p) == "datasets"}
    defined = {p: _defined(t) for p, t in modules.items()}
    violations: list[str] = []
    for path, tree in modules.items():
        siblings = set().union(*(names for p, names in defined.items() if p != path))
        violations += _sibling_violations(path, tree, defined[path], siblings)
    assert violations == [], "\n".join(violations)


# -- from tests into lakecompute -------------------------------------------------------------------------
def _inner_attributes(tree: ast.AST) -> set[int]:
    """Private attribute nodes inside a longer chain (``w._data`` of ``w._data._put``): reported as one."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            value = node.value
            while isinstance(value, (ast.Attribute, ast.Call, ast.Subscript)):
                if isinstance(value, ast.Attribute) and _private(value.attr):
                    inner.add(id(value))
                value = value.func if isinstance(value, ast.Call) else value.value
    return inner


def _on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def _test_defined(tree: ast.AST) -> set[str]:
    """Underscore names a test file defines itself: functions, classes, variables, arguments, and
    attributes of its own objects (``self._x = ...``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _on_self(node):
            names.add(node.attr)
    return {n for n in names if _private(n)}


def _named_attribute(node: ast.AST) -> str | None:
    """The private name in ``getattr(x, "_name")``, ``setattr``, ``delattr`` or ``monkeypatch.setattr``."""
    if not isinstance(node, ast.Call) or len(node.args) < 2:
        return None
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    arg = node.args[1]
    if name not in ("getattr", "setattr", "delattr") or not isinstance(arg, ast.Constant):
        return None
    return ast.unparse(node) if isinstance(arg.value, str) and _private(arg.value) else None


def _test_uses(node: ast.AST, inner: set[int], own: set[str]) -> list[tuple[str, str]]:
    """What ``node`` uses of others' underscore names: (message, the ALLOWED key's expression)."""
    if isinstance(node, ast.Attribute) and _private(node.attr) and id(node) not in inner:
        if _on_self(node) or node.attr in own or node.attr in ALLOWED:
            return []
        return [(f"uses {ast.unparse(node)}", ast.unparse(node))]
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lakecompute":
        return [
            (f"imports {a.name} from {node.module}", f"{node.module}.{a.name}")
            for a in node.names
            if _private(a.name)
        ]
    if isinstance(node, ast.Import):
        return [
            (f"imports {a.name}", a.name)
            for a in node.names
            if a.name.split(".")[0] == "lakecompute" and any(_private(p) for p in a.name.split("."))
        ]
    named = _named_attribute(node)
    return [(f"uses {named}", named)] if named else []


def _test_violations(path: Path, tree: ast.AST, own: set[str]) -> list[str]:
    """Underscore names a test file uses that it does not define itself: ``x._name`` (not self/cls),
    ``setattr(x, "_name", v)``, ``from lakecompute... import _name``, ``import lakecompute..._module``."""
    rel = path.relative_to(TESTS.parent).as_posix()
    inner = _inner_attributes(tree)
    found = [
        (node.lineno, what, f"{rel}: {expr}")
        for node in ast.walk(tree)
        for what, expr in _test_uses(node, inner, own)
    ]
    return [f"{rel}:{line} {what}" for line, what, key in sorted(found) if key not in ALLOWED]


def test_no_test_uses_private_names() -> None:
    """Tests use lakecompute by public names (internals through lakecompute.testing.internals); each
    exception is in ALLOWED with its reason."""
    violations: list[str] = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        violations += _test_violations(path, tree, _test_defined(tree))
    assert violations == [], "\n".join(violations)


def test_scan_catches_private_access_between_dataset_modules_and_from_tests() -> None:
    """The two scans work: a planted sibling access and planted test accesses are reported."""
    tree = ast.parse("def f(self, name):\n    return self._ds._state(name)\n")
    assert _sibling_violations(PACKAGE / "datasets" / "_tensor.py", tree, set(), {"_state"}) == [
        "datasets/_tensor.py:2 uses self._ds._state"
    ]
    source = (
        "from lakecompute.schedulers import _REGISTRY\n"
        "import lakecompute.versioned._leases as leases\n"
        "def test(ds, w, monkeypatch):\n"
        "    assert ds._txn.head and w._data._put._root\n"
        "    monkeypatch.setattr(ds, '_cache', None)\n"
    )
    tree = ast.parse(source)
    assert _test_violations(TESTS / "dataset" / "test_x.py", tree, _test_defined(tree)) == [
        "tests/dataset/test_x.py:1 imports _REGISTRY from lakecompute.schedulers",
        "tests/dataset/test_x.py:2 imports lakecompute.versioned._leases",
        "tests/dataset/test_x.py:4 uses ds._txn",
        "tests/dataset/test_x.py:4 uses w._data._put._root",
        "tests/dataset/test_x.py:5 uses monkeypatch.setattr(ds, '_cache', None)",
    ]
