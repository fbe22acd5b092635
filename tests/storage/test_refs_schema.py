"""Branch and tag refs, moves, hints and the history fields of manifests are checked on read: near-valid
or hostile bytes give a value or a DatasetCorruptError naming the file, never a raw exception or a hang."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.storage import open_backend
from lakecompute.versioned import BranchRef
from lakecompute.versioned._keys import version_key
from lakecompute.versioned._reads import read_manifest
from lakecompute.versioned._refs import moved_to, read_branch, read_tag
from lakecompute.versioned._versions import branch_head

LINE = "0123456789abcdef0123456789abcdef"
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def _near(good: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """Bytes near ``good``: one field replaced by any JSON value, dropped, or the text cut short."""

    def replaced(pair: tuple[str, Any]) -> bytes:
        key, value = pair
        return json.dumps({**good, key: value}).encode()

    keys = st.sampled_from(sorted(good))
    return st.one_of(
        st.tuples(keys, json_values).map(replaced),
        keys.map(lambda k: json.dumps({x: v for x, v in good.items() if x != k}).encode()),
        st.integers(0, 60).map(lambda n: json.dumps(good).encode()[:n]),
        st.binary(max_size=80),
    )


def _backend() -> Any:
    return open_backend(f"mem://refs-{uuid.uuid4().hex}")


def _outcome(read: Any) -> tuple[Any, lc.DatasetCorruptError | None]:
    """What ``read()`` gives: its value, or the DatasetCorruptError it raised (any other error escapes)."""
    try:
        return read(), None
    except lc.DatasetCorruptError as exc:
        return None, exc


@settings(max_examples=200, deadline=None)
@given(_near({"line": LINE, "start": 3, "created": 1.5, "from": "main"}))
def test_a_branch_ref_reads_or_is_corrupt(data: bytes) -> None:
    """Any near-valid branch ref gives a BranchRef or DatasetCorruptError naming the file."""
    backend = _backend()
    backend.write("refs/branches/b.json", data)
    ref, error = _outcome(lambda: read_branch(backend, "b"))
    if error is not None:
        assert error.file == "refs/branches/b.json"
    else:
        assert ref.line == LINE
        assert ref.start >= 0


@settings(max_examples=200, deadline=None)
@given(_near({"version": 4, "created": 0.0}))
def test_a_tag_reads_or_is_corrupt(data: bytes) -> None:
    """Any near-valid tag gives a TagRef or DatasetCorruptError naming the file."""
    backend = _backend()
    backend.write("refs/tags/t.json", data)
    tag, error = _outcome(lambda: read_tag(backend, "t"))
    if error is not None:
        assert error.file == "refs/tags/t.json"
    else:
        assert tag.version >= 0


@settings(max_examples=200, deadline=None)
@given(
    move=st.binary(max_size=24) | st.integers(-5, 30).map(lambda v: f"{v:010d}".encode()),
    hint=st.binary(max_size=24) | st.integers(0, 30).map(lambda v: f"{v:010d} {v:010d}".encode()),
)
def test_a_branch_head_is_found_or_corrupt(move: bytes, hint: bytes) -> None:
    """Any move and hint bytes give a head at or after the start, or DatasetCorruptError naming a ref; a
    move that does not go forward (a loop) is refused, so following moves always ends. (No version is
    stored here: a head that a ref names but that is not stored is damage too.)"""
    backend = _backend()
    ref = BranchRef("b", LINE, 5)
    backend.write(f"refs/lines/{LINE}/0000000005.json", move)
    backend.write(f"refs/lines/{LINE}/HEAD", hint)
    head, error = _outcome(lambda: branch_head(backend, ref))
    if error is not None:
        assert error.file.startswith(f"refs/lines/{LINE}/") or error.file == "refs/branches/b.json"
    else:
        assert head >= 5


def test_a_move_back_is_refused() -> None:
    """A move to an earlier (or the same) version is damage, named as such."""
    backend = _backend()
    backend.write(f"refs/lines/{LINE}/0000000005.json", b"0000000005")
    with pytest.raises(lc.DatasetCorruptError, match="expected a version after 5, got 5"):
        moved_to(backend, LINE, 5)


def test_a_torn_hint_is_ignored(tmp_path: Path) -> None:
    """A hint whose two copies differ (a write cut short) is not used: the moves are listed instead."""
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("x", dtype="int64")
    ds.checkout("b", create=True)
    for i in range(3):
        ds.x.append(i)
    backend = open_backend(str(tmp_path / "ds"))
    ref = read_branch(backend, "b")
    assert ref is not None
    backend.write(f"refs/lines/{ref.line}/HEAD", f"{ds.version + 5:010d} {ds.version:010d}".encode())
    assert branch_head(backend, ref) == ds.version


@pytest.fixture(scope="module")
def committed(tmp_path_factory: Any) -> tuple[Path, bytes]:
    """A dataset whose newest version is a merge (every history field set), and that manifest's bytes."""
    path = tmp_path_factory.mktemp("refs") / "ds"
    ds = lc.empty(str(path))
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(4))
    ds.checkout("exp", create=True)
    ds.x[0] = 9
    main = lc.load(str(path))
    main.x.append(4)
    main.merge("exp")
    return path, (path / version_key(main.version)).read_bytes()


HISTORY = ["branch", "line", "parents", "reach", "origin", "parent"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(HISTORY), value=json_values)
def test_history_fields_read_or_are_corrupt(committed: tuple[Path, bytes], field: str, value: Any) -> None:
    """A manifest whose branch, line, parents, reach, origin or parent is replaced by any JSON value reads
    as a Manifest or raises DatasetCorruptError naming the file and the field."""
    path, raw = committed
    body = json.loads(raw)
    body[field] = value
    copy = path.parent / f"copy-{uuid.uuid4().hex}"
    (copy / "versions").mkdir(parents=True)
    version = body["version"]
    (copy / version_key(version)).write_text(json.dumps(body))
    backend = open_backend(str(copy))
    manifest, error = _outcome(lambda: read_manifest(backend, version))
    if error is not None:
        assert error.file == version_key(version)
        assert error.field is not None
        assert error.field.split(".")[0].split("[")[0] in HISTORY
    else:
        assert all(p < version for p in manifest.parents)
        assert manifest.descends_from(manifest)


Body = dict[str, Any]


def _set(key: str, value: Any) -> Any:
    return lambda body: body.update({key: value})


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (
            lambda b: b.update(parents=[b["parent"], b["parent"]]),
            "expected distinct versions starting with parent",
        ),
        (lambda b: b.update(parents=[b["parent"], b["version"] + 5]), "expected an integer in 0.."),
        (lambda b: b.update(parents=[b["parent"] - 1, b["parents"][1]]), "starting with parent"),
        (_set("reach", {"nope": 1}), "expected line ids as keys"),
        (lambda b: b["reach"].update({b["line"]: 0}), "on its own line"),
        (_set("line", "../../etc"), "expected a line id of 32 hex digits"),
        (_set("branch", "a/b"), "expected a branch name"),
        (_set("origin", [1]), "expected an object"),
    ],
)
def test_history_field_reasons(committed: tuple[Path, bytes], edit: Any, reason: str) -> None:
    """Each broken history field is named with what was expected."""
    path, raw = committed
    body: Body = json.loads(raw)
    edit(body)
    copy = path.parent / f"copy-{uuid.uuid4().hex}"
    (copy / "versions").mkdir(parents=True)
    (copy / version_key(body["version"])).write_text(json.dumps(body))
    with pytest.raises(lc.DatasetCorruptError, match=reason):
        read_manifest(open_backend(str(copy)), body["version"])
