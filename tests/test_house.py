"""The house stays as issue 43 left it: the versioned table format has one home behind a narrow API.

Static checks, computed from the source (no import of the code under test, no timing):

- the dataset layer imports few names from the table and storage layers (it had 72, in 21 modules);
- it spells no storage key (the key layout lives in ``lakecompute/versioned/_keys.py`` alone);
- the write transaction is small (it had 39 methods in seven jobs);
- the engine reaches eval records through its port (``lakecompute.datasets.evals_of``), never through
  methods of the user's ``Dataset``;
- the packages of the format and the layers beside it keep files under 600 lines;
- few files start threads or processes (it was 19 files): threads through ``lakecompute/threads.py``,
  processes only in the schedulers;
- ``htypes/`` imports no runtime (schedulers, shared memory, threads; it ran a process pool);
- per-process state is a ``lakecompute.perprocess.PerProcess``, never a dict keyed by ``os.getpid()``,
  and only that module and the schedulers' fork guard register fork hooks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lakecompute as lc

PACKAGE = Path(__file__).resolve().parents[1] / "lakecompute"
DATASETS = PACKAGE / "datasets"

#: The most names ``datasets/`` may import from ``lakecompute.versioned`` and ``lakecompute.storage``.
MAX_LOWER_NAMES = 25
#: The most methods `lakecompute.datasets._transaction.Transaction` may have (``__init__`` aside).
MAX_TRANSACTION_METHODS = 20
#: What only the transform engine calls: reached through its port, not on the user's handle.
ENGINE_ONLY = ("begin_eval", "eval_records", "eval_record", "drop_unfinished")
#: Names that spell the key layout besides those ``versioned/_keys.py`` defines: zarr's chunk keys, temp
#: files, and the marker of a typed stream.
OTHER_KEY_NAMES = {"chunk_key", "chunk_folder", "TEMP_PREFIX", "STREAM_SEGMENT"}
#: How a key looks as a string: the root document, or a path under one of the layout's folders.
KEY_PREFIXES = ("refs/", "versions/", "segments/", "tensors/", "leases/")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _modules(folder: Path) -> dict[Path, ast.Module]:
    return {p: _tree(p) for p in sorted(folder.glob("*.py"))}


def lower_names(folder: Path) -> set[str]:
    """The distinct names modules in ``folder`` import from ``lakecompute.versioned`` or
    ``lakecompute.storage`` (their packages or modules), type-checking imports included."""
    names: set[str] = set()
    for tree in _modules(folder).values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.split(".")[:2] in (["lakecompute", "versioned"], ["lakecompute", "storage"]):
                    names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(
                    a.name
                    for a in node.names
                    if a.name.startswith(("lakecompute.versioned", "lakecompute.storage"))
                )
    return names


def key_names() -> set[str]:
    """Every public name ``lakecompute/versioned/_keys.py`` defines (its ``__all__``), and the other names
    that spell keys."""
    tree = _tree(PACKAGE / "versioned" / "_keys.py")
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value)) | OTHER_KEY_NAMES
    raise AssertionError("lakecompute/versioned/_keys.py has no __all__")


def _is_key_text(text: str) -> bool:
    return text == "zarr.json" or text.startswith(KEY_PREFIXES)


def key_spellings(folder: Path) -> list[str]:
    """Where modules in ``folder`` spell a storage key: a key name of the table (imported or used), or a
    string (an f-string's first part too) that is a key; as ``file:line name``."""
    keys = key_names()
    found: set[str] = set()
    for path, tree in _modules(folder).items():
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Name) and node.id in keys:
                name = node.id
            elif isinstance(node, ast.Attribute) and node.attr in keys:
                name = node.attr
            elif isinstance(node, ast.alias) and node.name in keys:
                name = node.name
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_key_text(node.value):
                name = repr(node.value)
            if name is not None:
                found.add(f"{path.name}:{getattr(node, 'lineno', 0)} {name}")
    return sorted(found)


def transaction_methods() -> list[str]:
    """The methods (properties included, ``__init__`` aside) of the dataset layer's write transaction."""
    tree = _tree(DATASETS / "_transaction.py")
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Transaction"]
    return [
        n.name
        for n in cls.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("__")
    ]


def test_datasets_imports_few_names_from_the_layers_below() -> None:
    """The dataset layer reaches the table and storage through at most 25 names (it was 72, then 77)."""
    names = lower_names(DATASETS)
    assert len(names) <= MAX_LOWER_NAMES, sorted(names)
    assert "Table" in names  # the narrow API it goes through


def test_datasets_spells_no_storage_key() -> None:
    """No module of datasets/ spells a storage key: branch_key, segment_key, TEMP_PREFIX, "refs/...", ..."""
    assert key_spellings(DATASETS) == []


def test_the_key_scan_finds_spellings(tmp_path: Path) -> None:
    """The scan itself works: an import of a key function, its use, and a key string are each found."""
    (tmp_path / "m.py").write_text(
        "from lakecompute.versioned import tag_key\n"
        "backend.delete(tag_key(name))\n"
        "raw = backend.read('zarr.json')\n"
        "backend.delete_tree(f'refs/lines/{line}')\n"
    )
    assert key_spellings(tmp_path) == [
        "m.py:1 tag_key",
        "m.py:2 tag_key",
        "m.py:3 'zarr.json'",
        "m.py:4 'refs/lines/'",
    ]
    assert lower_names(tmp_path) == {"tag_key"}


def test_the_write_transaction_is_small() -> None:
    """The write transaction has at most 20 methods (it had 39): the commit protocol is the table's."""
    methods = transaction_methods()
    assert len(methods) <= MAX_TRANSACTION_METHODS, methods
    assert "commit" in methods


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top, in functions or for type checking."""
    out: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


def test_the_transaction_does_not_import_the_eval_write() -> None:
    """The loop open since turn 3 stays broken: an eval's write builds on the transaction, which knows
    nothing of evals (the engine's port makes an `EvalWrite`)."""
    assert "lakecompute.datasets._eval_write" not in _imported_modules(DATASETS / "_transaction.py")
    assert "lakecompute.datasets._transaction" in _imported_modules(DATASETS / "_eval_write.py")


@pytest.mark.parametrize("name", ENGINE_ONLY)
def test_the_engine_only_methods_are_off_the_users_dataset(name: str) -> None:
    """``Dataset`` has none of the engine's methods; the port has them."""
    from lakecompute.datasets import EvalPort

    assert not hasattr(lc.Dataset, name)
    assert hasattr(
        EvalPort, {"begin_eval": "begin", "eval_records": "records", "eval_record": "record"}.get(name, name)
    )


def test_files_stay_under_600_lines() -> None:
    """No module of the package passes 600 lines (the table's packages and the layers on either side
    of it, the engine and the runtime included)."""
    long = {
        name: n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 600 and (name := str(p.relative_to(PACKAGE)))
    }
    assert long == {}


# -- part B: a worker's inside in one place ------------------------------------------------------------

#: The most files of the package that may start threads or processes (it was 19, then 17).
MAX_CONCURRENCY_FILES = 8
#: What starts a thread or a process when called, or serves requests on threads when inherited from.
STARTERS = {
    "Thread",
    "Timer",
    "Process",
    "Pool",
    "ThreadPool",
    "ThreadPoolExecutor",
    "ProcessPoolExecutor",
    "ThreadingMixIn",
    "ThreadingHTTPServer",
    "ThreadingTCPServer",
    "Popen",
    "start_new_thread",
}
#: The modules ``htypes/`` may not import: the runtime (it ran a pool of helper processes).
RUNTIME = ("lakecompute.schedulers", "lakecompute.sharedmem", "lakecompute.threads", "lakecompute.compute")


def _called_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def concurrency_starters(folder: Path) -> dict[str, list[str]]:
    """The files under ``folder`` that construct a thread, a process or a pool of either (a call of one
    of `STARTERS`, ``ctx.Process(...)`` included, or a class inheriting one), with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call):
                names = [_called_name(node.func)]
            elif isinstance(node, ast.ClassDef):
                names = [_called_name(base) for base in node.bases]
            else:
                continue
            for name in names:
                if name in STARTERS:
                    found.setdefault(str(path.relative_to(folder)), []).append(f"{name}:{node.lineno}")
    return {path: sorted(where, key=lambda w: int(w.split(":")[1])) for path, where in found.items()}


def _has_getpid(node: ast.AST | None) -> bool:
    return node is not None and any(
        isinstance(n, ast.Call) and _called_name(n.func) == "getpid" for n in ast.walk(node)
    )


def _keys_of(node: ast.AST) -> list[ast.AST | None]:
    """What ``node`` uses as a key of a mapping: a subscript, a dict display's keys, the first argument
    of ``get``/``setdefault``/``pop``, or a value assigned to a name ending in ``key``."""
    if isinstance(node, ast.Subscript):
        return [node.slice]
    if isinstance(node, ast.Dict):
        return list(node.keys)
    if isinstance(node, ast.Call) and _called_name(node.func) in ("get", "setdefault", "pop") and node.args:
        return [node.args[0]]
    if isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id.lower().endswith("key") for t in node.targets
    ):
        return [node.value]
    return []


def pid_keyed(folder: Path) -> list[str]:
    """Where modules under ``folder`` key state by process (``os.getpid()`` in a mapping's key), or
    register a fork hook outside the two homes of per-process state (`lakecompute.perprocess`, and the
    schedulers' guard of forks)."""
    homes = {"perprocess.py", "schedulers/_base.py"}
    found: list[str] = []
    for path in sorted(folder.rglob("*.py")):
        name = str(path.relative_to(folder))
        for node in ast.walk(_tree(path)):
            if any(_has_getpid(key) for key in _keys_of(node)):
                found.append(f"{name}:{getattr(node, 'lineno', 0)} getpid key")
            if (
                isinstance(node, ast.Call)
                and _called_name(node.func) == "register_at_fork"
                and name not in homes
            ):
                found.append(f"{name}:{node.lineno} register_at_fork")
    return sorted(found, key=lambda f: (f.split(":")[0], int(f.split(":")[1].split()[0])))


def test_few_files_start_threads_or_processes() -> None:
    """At most 8 files start threads or processes (19 before issue 43): threads in ``threads.py``,
    processes in the schedulers' pools."""
    found = concurrency_starters(PACKAGE)
    assert len(found) <= MAX_CONCURRENCY_FILES, found
    assert "threads.py" in found
    assert {p for p in found if p != "threads.py"} <= {p for p in found if p.startswith("schedulers/")}, found


def test_htypes_imports_no_runtime() -> None:
    """``htypes/`` encodes and decodes: it imports no scheduler, shared memory, threads or engine."""
    imported = set().union(*(_imported_modules(p) for p in (PACKAGE / "htypes").glob("*.py")))
    assert sorted(m for m in imported if m.startswith(RUNTIME)) == []


def test_no_state_is_keyed_by_process_id() -> None:
    """Per-process state is a `PerProcess` (the four dicts keyed by ``os.getpid()`` went)."""
    assert pid_keyed(PACKAGE) == []


def test_the_scans_find_what_they_look_for(tmp_path: Path) -> None:
    """The scans themselves work, on a module with one of each thing they look for."""
    (tmp_path / "m.py").write_text(
        "import os, threading, socketserver\n"
        "import multiprocessing as mp\n"
        "threading.Thread(target=print).start()\n"
        "mp.get_context('spawn').Process(target=print)\n"
        "class S(socketserver.ThreadingMixIn): pass\n"
        "_cache = {}\n"
        "_cache[os.getpid()] = 1\n"
        "key = (os.getpid(), 'url')\n"
        "send(('ready', os.getpid()))\n"
        "os.register_at_fork(after_in_child=print)\n"
    )
    (tmp_path / "n.py").write_text("import os\nname = f'x-{os.getpid()}'\n")
    assert concurrency_starters(tmp_path) == {"m.py": ["Thread:3", "Process:4", "ThreadingMixIn:5"]}
    assert pid_keyed(tmp_path) == ["m.py:7 getpid key", "m.py:8 getpid key", "m.py:10 register_at_fork"]
