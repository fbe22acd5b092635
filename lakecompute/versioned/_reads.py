"""Reading versions: a manifest followed along its deltas to the version stored whole, and remembered.

A version stored as a delta (``_stored``) is read by reading its base, and its base's base, up to a
version stored whole (at most `lakecompute.versioned._stored.MAX_DEPTH` files), then applying the deltas
forward; each base's content digest is checked before its delta is applied. Manifests read or committed
are remembered (a few dozen, per process), keyed by their location, number and stored bytes: a version
file's bytes never change while it names the same content, so a chain is read once, and the next read
of a version near it reads one file.

``vacuum(keep_versions=...)`` may remove the base of a version it keeps: it first stores that version
whole, in place (the same content, another form). A reader that finds a base gone reads the version
again, and finds it whole.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from lakecompute.errors import DatasetCorruptError, DatasetNotFoundError
from lakecompute.perprocess import PerProcess
from lakecompute.storage import Backend
from lakecompute.versioned._header import VersionHeader
from lakecompute.versioned._keys import version_key
from lakecompute.versioned._manifest import Manifest
from lakecompute.versioned._schema import InvalidField
from lakecompute.versioned._stored import MAX_DEPTH, Decoded, decode, header_of

__all__ = ["forget_manifests", "read_header", "read_manifest", "remember"]

#: How many manifests a process remembers (they share the tensor states they did not change).
_REMEMBERED = 64
#: The longest chain of deltas read: lakecompute writes at most `MAX_DEPTH`; a longer one was made by hand.
_LONGEST_CHAIN = 4 * MAX_DEPTH
_cache: OrderedDict[tuple[str, int, bytes], Manifest] = OrderedDict()
#: Guards `_cache`; a forked child gets a new one (it inherits the manifests: their bytes name them).
_lock = PerProcess(threading.Lock)


def remember(backend: Backend, data: bytes, manifest: Manifest) -> None:
    """Remember ``manifest`` as what the stored bytes ``data`` of its version read as."""
    key = (backend.spec.url, manifest.version, data)
    with _lock.get():
        _cache[key] = manifest
        _cache.move_to_end(key)
        while len(_cache) > _REMEMBERED:
            _cache.popitem(last=False)


def forget_manifests() -> None:
    """Forget every manifest this process remembers: the next read of each reads its whole chain (for
    tests of what is stored)."""
    with _lock.get():
        _cache.clear()


def _remembered(backend: Backend, version: int, data: bytes) -> Manifest | None:
    key = (backend.spec.url, version, data)
    with _lock.get():
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
        return found


def _corrupt(backend: Backend, version: int, exc: InvalidField) -> DatasetCorruptError:
    hint = "Open an earlier version with lc.load(path, version=N)." if version > 0 else ""
    return DatasetCorruptError(backend.url, version_key(version), exc.reason, hint, field=exc.field or None)


def _read(backend: Backend, version: int) -> bytes:
    data = backend.read(version_key(version))
    if data is None:
        raise DatasetNotFoundError(backend.url, f"It has no version {version}.")
    return data


def read_header(backend: Backend, version: int) -> VersionHeader:
    """A version's history fields and what the log prints of it, without its tensors' fragments.

    Raises:
        DatasetNotFoundError: the version does not exist.
        DatasetCorruptError: its history fields are damaged (names the file).
    """
    data = _read(backend, version)
    try:
        header = header_of(data)
    except InvalidField as exc:
        raise _corrupt(backend, version, exc) from exc
    if header.version != version:
        raise _corrupt(backend, version, InvalidField("version", f"expected {version}, got {header.version}"))
    return header


def _decoded(backend: Backend, version: int, data: bytes) -> Decoded:
    try:
        decoded = decode(data)
    except InvalidField as exc:
        raise _corrupt(backend, version, exc) from exc
    if decoded.header.version != version:
        found = decoded.header.version
        raise _corrupt(backend, version, InvalidField("version", f"expected {version}, got {found}"))
    return decoded


def read_manifest(backend: Backend, version: int) -> Manifest:
    """Load a version's manifest (whole: a delta is applied to its base, read the same way).

    Raises:
        DatasetNotFoundError: the version does not exist.
        DatasetCorruptError: the manifest, or one of the versions it is a change of, exists but cannot be
            parsed or applied, or is missing (names the file).
    """
    data = _read(backend, version)
    found = _remembered(backend, version, data)
    if found is not None:
        return found
    pending: list[tuple[int, bytes, Decoded]] = []  # deltas still to apply, newest first
    at, at_data = version, data
    while True:
        decoded = _decoded(backend, at, at_data)
        if decoded.whole is not None:
            manifest = decoded.whole
            remember(backend, at_data, manifest)
            break
        pending.append((at, at_data, decoded))
        if len(pending) > _LONGEST_CHAIN:
            reason = f"a chain of more than {_LONGEST_CHAIN} deltas (lakecompute writes at most {MAX_DEPTH})"
            raise _corrupt(backend, version, InvalidField("base", reason))
        base = decoded.header.base
        assert base is not None  # a delta names its base
        base_data = backend.read(version_key(base))
        if base_data is None:
            at, at_data = _restored(backend, at, base)
            pending.pop()  # read again: stored whole now
            continue
        manifest_or_none = _remembered(backend, base, base_data)
        if manifest_or_none is not None:
            manifest = manifest_or_none
            break
        at, at_data = base, base_data
    for at, at_data, decoded in reversed(pending):
        try:
            manifest = decoded.apply(manifest)
        except InvalidField as exc:
            raise _corrupt(backend, at, exc) from exc
        remember(backend, at_data, manifest)
    return manifest


def _restored(backend: Backend, version: int, base: int) -> tuple[int, bytes]:
    """A delta's base is gone: ``vacuum`` stored the version whole first, so read it again.

    Raises:
        DatasetCorruptError: it is still a delta of the missing version.
    """
    data = backend.read(version_key(version))
    if data is not None:
        decoded = _decoded(backend, version, data)
        if decoded.whole is not None or decoded.header.base != base:
            return version, data
    raise DatasetCorruptError(
        backend.url,
        version_key(version),
        f"it stores the change from version {base}, which is not stored",
        "A version it was based on was removed outside lakecompute; open another version with "
        "lc.load(path, version=N).",
    )
