"""Versions: one small JSON manifest per committed version.

A manifest names, for every tensor, its spec and the ordered list of fragments (runs of samples
in segments) that form it. Committing is creating the next manifest file exclusively; see
`lakecompute.storage.Backend.create_exclusive`. ``versions/LATEST`` is only a hint that
saves a directory listing: readers check forward from it, so a stale hint is harmless.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from lakecompute.errors import DatasetCorruptError, DatasetNotFoundError
from lakecompute.htypes import TensorSpec
from lakecompute.storage._backend import Backend

__all__ = [
    "FORMAT",
    "Fragment",
    "Manifest",
    "TensorState",
    "commit_manifest",
    "latest_version",
    "list_versions",
    "read_manifest",
    "version_key",
]

FORMAT = "lakecompute/1"
_HINT = "versions/LATEST"


def version_key(version: int) -> str:
    """The storage key of a version's manifest."""
    return f"versions/{version:010d}.json"


@dataclass(frozen=True, slots=True)
class Fragment:
    """A run of stored samples of one tensor, and which of them a version uses.

    Attributes:
        seg: the segment holding the bytes.
        off: byte offset of the run in the segment's data array.
        nbytes: bytes of the whole stored run.
        total: samples in the stored run.
        dtype: dtype of the stored values (array kind), or the tensor's dtype name (bytes kind).
        shape: the common sample shape when the run is uniform raw arrays, else None.
        idx: offset of the run's index rows (``[nbytes, *shape]`` per sample), or None if uniform.
        ndim: rank of the samples.
        k: first sample of the run this fragment uses.
        n: number of samples used.
    """

    seg: str
    off: int
    nbytes: int
    total: int
    dtype: str
    shape: tuple[int, ...] | None
    idx: int | None
    ndim: int
    k: int
    n: int

    def sub(self, start: int, count: int) -> Fragment:
        """The fragment using ``count`` samples from the ``start``-th used one."""
        return replace(self, k=self.k + start, n=count)

    def to_json(self) -> list[Any]:
        shape = None if self.shape is None else list(self.shape)
        return [
            self.seg,
            self.off,
            self.nbytes,
            self.total,
            self.dtype,
            shape,
            self.idx,
            self.ndim,
            self.k,
            self.n,
        ]

    @classmethod
    def from_json(cls, row: list[Any]) -> Fragment:
        seg, off, nbytes, total, dtype, shape, idx, ndim, k, n = row
        return cls(
            str(seg), int(off), int(nbytes), int(total), str(dtype),
            None if shape is None else tuple(int(s) for s in shape),
            None if idx is None else int(idx), int(ndim), int(k), int(n),
        )  # fmt: skip


@dataclass(slots=True)
class TensorState:
    """A tensor as one version sees it."""

    spec: TensorSpec
    info: dict[str, Any] = field(default_factory=dict)
    ndim: int | None = None
    fragments: list[Fragment] = field(default_factory=list)

    @property
    def length(self) -> int:
        return sum(f.n for f in self.fragments)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.spec.to_json(),
            "info": self.info,
            "ndim": self.ndim,
            "length": self.length,
            "fragments": [f.to_json() for f in self.fragments],
        }

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> TensorState:
        return cls(
            spec=TensorSpec.from_json(name, obj),
            info=dict(obj.get("info") or {}),
            ndim=obj.get("ndim"),
            fragments=[Fragment.from_json(r) for r in obj.get("fragments", [])],
        )

    def copy(self) -> TensorState:
        return TensorState(self.spec, copy.deepcopy(self.info), self.ndim, list(self.fragments))


@dataclass(slots=True)
class Manifest:
    """One committed version of a dataset."""

    version: int
    parent: int | None = None
    time: float = 0.0
    message: str = ""
    tensors: dict[str, TensorState] = field(default_factory=dict)
    evals: dict[str, Any] = field(default_factory=dict)

    def copy(self) -> Manifest:
        return Manifest(
            self.version,
            self.parent,
            self.time,
            self.message,
            {k: t.copy() for k, t in self.tensors.items()},
            copy.deepcopy(self.evals),
        )

    def to_bytes(self) -> bytes:
        body = {
            "format": FORMAT,
            "version": self.version,
            "parent": self.parent,
            "time": self.time,
            "message": self.message,
            "tensors": {k: t.to_json() for k, t in self.tensors.items()},
            "evals": self.evals,
        }
        return json.dumps(body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} manifest")
        return cls(
            version=int(body["version"]),
            parent=body.get("parent"),
            time=float(body.get("time", 0.0)),
            message=str(body.get("message", "")),
            tensors={k: TensorState.from_json(k, v) for k, v in body["tensors"].items()},
            evals=dict(body.get("evals") or {}),
        )

    def sample_counts(self) -> dict[str, int]:
        return {k: t.length for k, t in self.tensors.items()}


def list_versions(backend: Backend) -> list[int]:
    """Every committed version number, ascending."""
    out = []
    for name in backend.list("versions"):
        if name.endswith(".json") and name[:-5].isdigit():
            out.append(int(name[:-5]))
    return sorted(out)


def latest_version(backend: Backend) -> int | None:
    """The newest committed version, or None if there is none."""
    hint = backend.read(_HINT)
    start: int | None = None
    if hint is not None:
        try:
            start = int(hint.decode().strip())
        except ValueError:
            start = None
    if start is None or not backend.exists(version_key(start)):
        versions = list_versions(backend)
        if not versions:
            return None
        start = versions[-1]
    # The hint may lag behind other writers' commits: step forward until a version is missing.
    while backend.exists(version_key(start + 1)):
        start += 1
    return start


def read_manifest(backend: Backend, version: int) -> Manifest:
    """Load a version's manifest.

    Raises:
        DatasetNotFoundError: the version does not exist.
        DatasetCorruptError: the manifest exists but cannot be parsed (names the file).
    """
    key = version_key(version)
    data = backend.read(key)
    if data is None:
        raise DatasetNotFoundError(backend.url, f"It has no version {version}.")
    try:
        manifest = Manifest.from_bytes(data)
    except (ValueError, KeyError, TypeError) as exc:
        hint = "Open an earlier version with lc.load(path, version=N)." if version > 0 else ""
        raise DatasetCorruptError(backend.url, key, str(exc) or type(exc).__name__, hint) from exc
    if manifest.version != version:
        raise DatasetCorruptError(backend.url, key, f"it says version {manifest.version}")
    return manifest


def commit_manifest(backend: Backend, manifest: Manifest) -> bool:
    """Publish ``manifest`` as its version; False if another writer took that number first."""
    manifest.time = time.time()
    if not backend.create_exclusive(version_key(manifest.version), manifest.to_bytes()):
        return False
    try:
        # Fixed width, written in place: a reader that sees a torn or stale value finds a
        # missing version (and lists) or an older one (and steps forward), never a wrong answer.
        backend.write_hint(_HINT, f"{manifest.version:010d}".encode())
    except OSError:
        pass  # the hint is an optimisation; readers find the version without it
    return True
