"""History at scale (issue 39): a commit stores what it changed (a delta of its parent) once the content is
large, large versions stored whole are compressed, ``ds.log()`` reads headers only, and every read path
still checks what it reads: a damaged delta or compressed manifest is DatasetCorruptError naming the file,
never a raw exception, a wrong value or a huge allocation."""

from __future__ import annotations

import base64
import json
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.storage import open_backend
from lakecompute.versioned import forget_manifests
from lakecompute.versioned._keys import version_key
from lakecompute.versioned._reads import read_manifest

ROWS = 5_000
EDITS = 120


def _kinds(path: Path) -> dict[int, str]:
    """How each version is stored: "plain" (whole, plain JSON), "packed" (whole, compressed) or "delta"."""
    out = {}
    for file in (path / "versions").glob("*.json"):
        body = json.loads(file.read_bytes())
        out[int(file.name[:-5])] = "delta" if "delta" in body else "packed" if "packed" in body else "plain"
    return out


def _edited(path: Path, edits: int = EDITS, seed: int = 0) -> tuple[lc.Dataset, dict[int, list[int]]]:
    """``ROWS`` rows of x (int32) and y (int64), then ``edits`` single-row commits of x; the values of x at
    every version."""
    ds = lc.empty(str(path))
    with ds:
        ds.create_tensor("x", dtype="int32")
        ds.create_tensor("y", dtype="int64")
    ds.extend({"x": np.arange(ROWS, dtype=np.int32), "y": np.arange(ROWS)})
    values = np.arange(ROWS, dtype=np.int32)
    seen = {ds.version: values.tolist()}
    rng = np.random.default_rng(seed)
    for i in range(edits):
        row = int(rng.integers(ROWS))
        ds.x[row] = -i - 1
        values[row] = -i - 1
        seen[ds.version] = values.tolist()
    return ds, seen


@pytest.fixture(scope="module")
def edited(tmp_path_factory: Any) -> tuple[Path, dict[int, list[int]]]:
    path = tmp_path_factory.mktemp("stored") / "ds"
    _ds, seen = _edited(path)
    return path, seen


def test_single_row_commits_store_their_change(edited: tuple[Path, dict[int, list[int]]]) -> None:
    """After the first few, single-row commits are stored as deltas (plus a compressed whole version every
    so often), and each costs bytes of its change, not of the history: far less than the whole manifest."""
    path, seen = edited
    kinds = _kinds(path)
    assert set(kinds.values()) == {"plain", "packed", "delta"}
    assert sum(k == "delta" for k in kinds.values()) > 0.6 * EDITS
    last = max(seen)
    whole = len(lc.load(str(path)).x.numpy())  # noqa: F841 (opened: the head reads)
    whole_bytes = len(read_manifest(open_backend(str(path)), last).to_bytes())
    sizes = [os.path.getsize(path / version_key(v)) for v, kind in kinds.items() if kind == "delta"]
    assert max(sizes) < 2_000 < whole_bytes
    total = sum(os.path.getsize(path / version_key(v)) for v in kinds)
    assert total < 0.25 * EDITS * whole_bytes  # stored whole each time, the history would take this much


def test_every_version_reads_its_values(edited: tuple[Path, dict[int, list[int]]]) -> None:
    """Every version, whatever its form, reads exactly its values (read alone: no remembered manifest)."""
    path, seen = edited
    for version in sorted(seen, reverse=True):
        forget_manifests()
        ds = lc.load(str(path), version=version)
        assert ds.x.numpy().tolist() == seen[version], version
        assert ds.y.numpy().tolist() == list(range(ROWS))


def test_log_reads_no_fragments(tmp_path: Path) -> None:
    """The log reads each version's header only: a delta whose changes are damaged still lists (the
    version itself is refused when read)."""
    path = tmp_path / "ds"
    ds, _seen = _edited(path, edits=40)
    kinds = _kinds(path)
    damaged = max(v for v, kind in kinds.items() if kind == "delta" and v < ds.version)
    file = path / version_key(damaged)
    body = json.loads(file.read_bytes())
    body["delta"]["tensors"]["x"]["fragments"] = [["no", "fragment"]]
    file.write_text(json.dumps(body))
    log = lc.load(str(path)).log()
    assert [e["version"] for e in log] == list(range(ds.version + 1))
    assert log[damaged]["samples"] == {"x": ROWS, "y": ROWS}
    with pytest.raises(lc.DatasetCorruptError) as info:
        lc.load(str(path), version=damaged)
    assert info.value.file == version_key(damaged)
    assert "delta.tensors.x.fragments[0]" in str(info.value)


def test_a_delta_of_another_base_is_refused(tmp_path: Path) -> None:
    """A delta names its base's content digest: a base file replaced by other content is refused."""
    path = tmp_path / "ds"
    ds, _seen = _edited(path, edits=40)
    kinds = _kinds(path)
    head = ds.version
    assert kinds[head] == "delta"
    base = json.loads((path / version_key(head)).read_bytes())["base"]
    other = lc.load(str(path), version=base - 1)
    # Version `base` replaced by a copy of its parent's content, stored whole under its own number.
    body = json.loads(read_manifest(open_backend(str(path)), other.version).to_bytes())
    body.update(version=base, parent=other.version, reach={body["line"]: base})
    (path / version_key(base)).write_text(json.dumps(body, separators=(",", ":")))
    forget_manifests()
    with pytest.raises(lc.DatasetCorruptError, match="base_digest") as info:
        lc.load(str(path), version=head).x.numpy()
    assert info.value.file.startswith("versions/")


def test_vacuum_keeps_what_kept_versions_need(tmp_path: Path) -> None:
    """vacuum(keep_versions=2): the kept versions whose base it removes are stored whole first; they read,
    the others are gone, and the data only removed versions used goes."""
    path = tmp_path / "ds"
    ds, seen = _edited(path, edits=50)
    assert _kinds(path)[ds.version] == "delta"
    removed = ds.vacuum(grace_seconds=0, keep_versions=2)
    assert removed["versions"] == ds.version - 1
    kinds = _kinds(path)
    assert sorted(kinds) == [ds.version - 1, ds.version]
    assert kinds[ds.version - 1] in ("plain", "packed")
    for version in kinds:
        forget_manifests()
        assert lc.load(str(path), version=version).x.numpy().tolist() == seen[version]
    assert [e["version"] for e in lc.load(str(path)).log()] == sorted(kinds)
    lc.load(str(path)).x.append(7)  # and writing goes on from there
    assert lc.load(str(path)).x.numpy().tolist() == [*seen[ds.version], 7]


def test_a_delta_whose_base_was_removed_outside_lakecompute_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ds, _seen = _edited(path, edits=40)
    base = json.loads((path / version_key(ds.version)).read_bytes())["base"]
    (path / version_key(base)).unlink()
    forget_manifests()
    gone = rf"change from version {base}, which is not stored"
    with pytest.raises(lc.DatasetCorruptError, match=gone) as info:
        lc.load(str(path))
    assert info.value.file == version_key(ds.version)


def test_restore_diff_and_merge_over_deltas(tmp_path: Path) -> None:
    """Restore of a version deep in a chain, a branch from an old version, a diff and a merge, all on
    versions stored as deltas: the values are those of the versions named."""
    path = tmp_path / "ds"
    ds, seen = _edited(path, edits=60)
    old, head = ds.version - 45, ds.version
    ds.restore(old)
    assert lc.load(str(path)).x.numpy().tolist() == seen[old]
    branch = lc.load(str(path), version=old + 10)
    branch.checkout("b", create=True)
    branch.y[3] = -3
    main = lc.load(str(path))
    main.x.append(1)
    main.y.append(2)
    changed = main.diff(old, head)
    assert changed.tensors["x"].replaced
    main.merge("b", conflict_resolution="theirs")
    merged = lc.load(str(path))
    assert merged.y.numpy()[3] == -3
    assert merged.x.numpy().tolist() == [*seen[old], 1]  # restored on main: the branch kept x


def test_a_dataset_made_again_at_the_path_is_not_read_from_memory(tmp_path: Path) -> None:
    """Manifests are remembered by their stored bytes: the same numbers of a dataset made again at the
    path read its own content."""
    path = tmp_path / "ds"
    _edited(path, edits=30, seed=1)
    first = lc.load(str(path)).x.numpy().tolist()
    lc.delete(str(path))
    _ds, seen = _edited(path, edits=30, seed=2)
    assert lc.load(str(path)).x.numpy().tolist() == seen[max(seen)] != first


# -- hostile stored manifests: a result or DatasetCorruptError ------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: Any) -> tuple[Path, int, int]:
    """A dataset whose head is a delta, and the newest version stored whole and compressed."""
    path = tmp_path_factory.mktemp("hostile") / "ds"
    ds, _seen = _edited(path, edits=40)
    kinds = _kinds(path)
    assert kinds[ds.version] == "delta"
    return path, ds.version, max(v for v, k in kinds.items() if k == "packed")


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document (dict keys and list indices), shallow first."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:3]):
            out += _paths(item, (*prefix, i))
    return out


def _replaced(body: Any, at: tuple[Any, ...], value: Any) -> Any:
    copy = json.loads(json.dumps(body))
    target = copy
    for key in at[:-1]:
        target = target[key]
    if value is _DROP:
        if isinstance(target, dict):
            target.pop(at[-1])
        else:
            target.pop(at[-1])
    else:
        target[at[-1]] = value
    return copy


_DROP = object()


def _outcome(path: Path, version: int) -> None:
    """Read ``version`` and its values: a result, or DatasetCorruptError naming a version's file."""
    forget_manifests()
    damaged: lc.DatasetCorruptError | None = None
    try:
        ds = lc.load(str(path), version=version)
        ds.x.numpy()
        ds.log()
    except lc.DatasetCorruptError as exc:
        damaged = exc
    except lc.DatasetNotFoundError:
        pass  # a delta naming another base: "no version N"
    if damaged is not None:
        assert damaged.file.startswith(("versions/", "segments/")), damaged.file


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_near_valid_delta_reads_or_is_corrupt(stored: tuple[Path, int, int], data: Any) -> None:
    path, head, _packed = stored
    file = path / version_key(head)
    good = file.read_bytes()
    body = json.loads(good)
    at = data.draw(st.sampled_from(_paths(body)))
    value = data.draw(json_values | st.just(_DROP))
    try:
        file.write_text(json.dumps(_replaced(body, at, value)))
        _outcome(path, head)
    finally:
        file.write_bytes(good)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_near_valid_compressed_manifest_reads_or_is_corrupt(
    stored: tuple[Path, int, int], data: Any
) -> None:
    path, _head, packed = stored
    file = path / version_key(packed)
    good = file.read_bytes()
    body = json.loads(good)
    content = json.loads(zlib.decompress(base64.b64decode(body["packed"])))
    choice = data.draw(st.sampled_from(["field", "content", "bytes"]))
    if choice == "field":
        at = data.draw(st.sampled_from([p for p in _paths(body) if p[0] != "packed"] + [("packed",)]))
        changed = _replaced(body, at, data.draw(json_values | st.just(_DROP)))
    elif choice == "content":
        at = data.draw(st.sampled_from(_paths(content)))
        inner = json.dumps(_replaced(content, at, data.draw(json_values | st.just(_DROP)))).encode()
        changed = {**body, "packed": base64.b64encode(zlib.compress(inner)).decode(), "plain": len(inner)}
    else:
        raw = bytearray(base64.b64decode(body["packed"]))
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
        changed = {**body, "packed": base64.b64encode(bytes(raw)).decode()}
    try:
        file.write_text(json.dumps(changed))
        _outcome(path, packed)
    finally:
        file.write_bytes(good)


def test_a_compressed_manifest_never_inflates_past_what_it_declares(stored: tuple[Path, int, int]) -> None:
    """A compressed manifest that inflates to far more than its ``plain`` size is refused after that many
    bytes (a zip bomb is never decompressed whole)."""
    path, _head, packed = stored
    file = path / version_key(packed)
    good = file.read_bytes()
    body = json.loads(good)
    bomb = zlib.compress(b" " * (256 << 20), 9)
    try:
        file.write_text(json.dumps({**body, "packed": base64.b64encode(bomb).decode()}))
        forget_manifests()
        with pytest.raises(lc.DatasetCorruptError, match=r"field packed.*expected \d+ bytes"):
            lc.load(str(path), version=packed)
    finally:
        file.write_bytes(good)


def test_a_chain_of_deltas_longer_than_written_is_refused(tmp_path: Path) -> None:
    """lakecompute writes at most 32 deltas in a row; a chain made by hand far longer than that is refused
    after a bounded number of reads (never followed through the whole history)."""
    path = tmp_path / "ds"
    ds, _seen = _edited(path, edits=40)
    body = json.loads((path / version_key(ds.version)).read_bytes())
    assert "delta" in body
    top = ds.version
    for _ in range(200):
        top += 1
        body = {**body, "version": top, "parent": top - 1, "base": top - 1, "reach": {body["line"]: top}}
        (path / version_key(top)).write_text(json.dumps(body))
    forget_manifests()
    with pytest.raises(lc.DatasetCorruptError, match=r"a chain of more than 128 deltas") as info:
        lc.load(str(path), version=top)
    assert info.value.file == version_key(top)
