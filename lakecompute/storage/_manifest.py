"""Manifests: the small JSON document that describes one committed version.

A manifest names, for every tensor, its spec and the ordered list of fragments (runs of samples
in segments) that form it, and its place in the history: its parents, the branch it was committed on,
and what produced it. This module holds the document (`Manifest`, `TensorState`, `Fragment`) and its
checked parsing; listing, reading and committing versions on a backend is `lakecompute.storage._versions`.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from lakecompute.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    LakeComputeError,
)
from lakecompute.specs import NOT_NUMERIC_DTYPES, TensorSpec, parse_tensor_name
from lakecompute.storage._refs import (
    LEGACY_LINE,
    parse_ref_name,
)
from lakecompute.storage._schema import (
    MAX_NDIM,
    InvalidField,
    check_bounds,
    check_dtype_name,
    check_info,
    check_int,
    check_layout,
    check_optional_int,
    check_segment_ref,
    check_shape,
    check_spec,
    check_str,
    check_str_dict,
    check_uniform,
    nested,
)
from lakecompute.storage._segments import CAPACITY_INDEX

__all__ = [
    "FORMAT",
    "MARKER",
    "VERSIONS",
    "Fragment",
    "Manifest",
    "TensorState",
    "new_dataset_id",
    "version_key",
]

FORMAT = "lakecompute/1"
# Line ids and tensor ids: 32 hex digits (uuid4().hex).
_LINE_ID = re.compile(r"[0-9a-f]{32}")
VERSIONS = "versions"
"""The folder of the version manifests."""
#: The root group attribute (in ``zarr.json``) that makes a folder a dataset: ``{"format": 1, "dataset_id":
#: ...}``, written last when a dataset is created (the id since datasets have ids).
MARKER = "lakecompute"
# A dataset id: 32 lowercase hex digits (a random uuid4), or "legacy-" and 32 for a dataset made before
# ids (see `dataset_id_of`).
_DATASET_ID = re.compile(r"(?:legacy-)?[0-9a-f]{32}")


def new_dataset_id() -> str:
    """A fresh random dataset id (written once, into version 0, when a dataset is created)."""
    return uuid.uuid4().hex


def version_key(version: int) -> str:
    """The storage key of a version's manifest."""
    return f"{VERSIONS}/{version:010d}.json"


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
    def from_json(cls, row: object) -> Fragment:
        """Parse a fragment row, checking every value against the others.

        Raises:
            InvalidField: a value breaks the schema (the field names it: ``k``, ``shape``, ...).
        """
        if not isinstance(row, list) or len(row) != 10:
            raise InvalidField("", f"expected a list of 10 values, got {row!r:.80}")
        seg = check_segment_ref(row[0], "seg")
        off, nbytes, total = check_int(row[1], "off"), check_int(row[2], "nbytes"), check_int(row[3], "total")
        dtype = check_dtype_name(row[4], "dtype")
        shape = check_shape(row[5], "shape")
        idx = check_optional_int(row[6], "idx", hi=CAPACITY_INDEX)
        ndim = check_int(row[7], "ndim", hi=MAX_NDIM)
        k, n = check_int(row[8], "k"), check_int(row[9], "n")
        if k + n > total:
            raise InvalidField("n", f"samples {k}..{k + n} (k + n) run past the fragment's {total} (total)")
        check_layout(seg, shape, idx, ndim, dtype)
        if shape is not None and not seg.startswith("@"):
            check_uniform(shape, dtype, nbytes, total)  # a typed array's rows are checked when opened
        check_bounds(seg, off, nbytes, idx, total * (1 + ndim))
        return cls(seg, off, nbytes, total, dtype, shape, idx, ndim, k, n)


@dataclass(frozen=True, slots=True)
class TensorState:
    """A tensor as one version sees it (frozen: a transaction's head builds new states, see
    ``lakecompute.datasets``; storage records what it is given).

    Attributes:
        spec: the tensor's spec (its dtype None until a generic tensor's first commit decides it).
        info: the tensor's info, JSON values by key (never changed in place).
        ndim: the samples' rank, None until the first samples decide it.
        fragments: the runs of stored samples that form the tensor, in order.
        tid: the tensor's identity: made when it is created, kept through renames and every version
            (None for tensors created before tensors had one); diff and merge match tensors by it.
        length: the samples the fragments use (derived).
    """

    spec: TensorSpec
    info: dict[str, Any] = field(default_factory=dict)
    ndim: int | None = None
    fragments: tuple[Fragment, ...] = ()
    tid: str | None = None
    length: int = field(init=False, compare=False)
    # The entry's JSON text, made on first use: a commit re-encodes only the tensors it changed.
    _text: str | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.fragments, tuple):
            object.__setattr__(self, "fragments", tuple(self.fragments))
        object.__setattr__(self, "length", sum(f.n for f in self.fragments))

    def to_json(self) -> dict[str, Any]:
        out = {
            **self.spec.to_json(),
            "info": self.info,
            "ndim": self.ndim,
            "length": self.length,
            "fragments": [f.to_json() for f in self.fragments],
        }
        if self.tid is not None:
            out["id"] = self.tid
        return out

    @property
    def key(self) -> str:
        """What identifies the tensor across versions: its id, or its name for a tensor without one."""
        return self.tid if self.tid is not None else f"name:{self.spec.name}"

    def entry_text(self) -> str:
        """The tensor's entry in a manifest file, ``"<name>":<to_json() as compact JSON>``, encoded once."""
        if self._text is None:
            object.__setattr__(self, "_text", f"{_dumps(self.spec.name)}:{_dumps(self.to_json())}")
        assert self._text is not None
        return self._text

    @classmethod
    def from_json(cls, name: str, obj: object) -> TensorState:
        """Parse a tensor's entry of a manifest.

        Raises:
            InvalidField: a value breaks the schema (the field is relative to the tensor).
        """
        if not isinstance(obj, dict):
            raise InvalidField("", f"expected an object, got {obj!r:.80}")
        spec = check_spec(name, obj)
        info = check_info(obj.get("info"), spec)
        ndim = check_optional_int(obj.get("ndim"), "ndim", hi=MAX_NDIM)
        rows = obj.get("fragments", [])
        if not isinstance(rows, list):
            raise InvalidField("fragments", f"expected a list, got {rows!r:.80}")
        fragments = [nested(f"fragments[{i}]", Fragment.from_json, r) for i, r in enumerate(rows)]
        for i, frag in enumerate(fragments):
            nested(f"fragments[{i}]", _check_fits, spec, ndim, frag)
        tid = obj.get("id")
        if tid is not None and (not isinstance(tid, str) or not _LINE_ID.fullmatch(tid)):
            raise InvalidField("id", f"expected a tensor id of 32 hex digits, got {tid!r:.40}")
        state = cls(spec, dict(info), ndim, tuple(fragments), tid)
        length = obj.get("length")
        if length is not None and check_int(length, "length") != state.length:
            raise InvalidField("length", f"the fragments hold {state.length} samples, got {length}")
        return state


def _dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _check_fits(spec: TensorSpec, ndim: int | None, frag: Fragment) -> None:
    """A fragment holds samples of its tensor: the tensor's rank, the tensor's kind of storage."""
    if ndim is None or frag.ndim != ndim:
        raise InvalidField("ndim", f"the tensor's samples have {ndim} dimensions, got {frag.ndim}")
    if spec.kind == "bytes":
        if frag.shape is not None or frag.dtype != spec.dtype:
            raise InvalidField("dtype", f"expected an indexed run of {spec.dtype!r} blobs")
    elif frag.dtype in NOT_NUMERIC_DTYPES:
        raise InvalidField(
            "dtype", f"expected a numeric dtype for a {spec.htype!r} tensor, got {frag.dtype!r}"
        )


@dataclass(frozen=True, slots=True)
class Manifest:
    """One committed version of a dataset (frozen: a transaction builds the next one).

    Attributes:
        version: its number.
        parent: the version it was built on (None for the first).
        time: when it was committed (seconds since the epoch; set by `commit_manifest`).
        message: what the commit did.
        tensors: the tensors by name, in creation order (never changed in place).
        evals: eval records by fingerprint (JSON objects; the dataset layer reads them).
        info: the dataset's own metadata (``ds.info``): JSON values by key.
        branch: the branch it was committed on (None: committed before the dataset had refs).
        line: the id of that branch's line (see ``_refs``), None with ``branch``.
        merged: the parents after the first, for a merge (``parent`` is the branch's own head).
        reach: per line, the newest version of that line this version descends from (itself on its
            own line): which versions are its ancestors, known without reading them (`descends_from`).
        origin: what produced it: ``{"op": "eval", "functions": [...], "code": ..., "inputs": ...}``,
            ``{"op": "restore", "version": N}``, ``{"op": "merge", ...}`` (JSON values; empty for plain
            writes, whose ``message`` says what they did).
        dataset_id: the id of the dataset this version belongs to: random, made when the dataset was
            created, copied into every later version. ``""`` in a manifest written before datasets had
            ids (`dataset_id_of` derives one for those).
    """

    version: int
    parent: int | None = None
    time: float = 0.0
    message: str = ""
    tensors: dict[str, TensorState] = field(default_factory=dict)
    evals: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    branch: str | None = None
    line: str | None = None
    merged: tuple[int, ...] = ()
    reach: dict[str, int] = field(default_factory=dict)
    origin: dict[str, Any] = field(default_factory=dict)
    dataset_id: str = ""

    @property
    def parents(self) -> tuple[int, ...]:
        """Every parent: the first is the branch's own previous head, the others were merged in."""
        return () if self.parent is None else (self.parent, *self.merged)

    def reach_of(self) -> dict[str, int]:
        """`reach`, or what it is for a version committed before refs: the versions before it."""
        return self.reach if self.reach else {self.line or LEGACY_LINE: self.version}

    def descends_from(self, other: Manifest) -> bool:
        """Whether ``other`` is this version or one of its ancestors (from the manifests alone)."""
        return self.reach_of().get(other.line or LEGACY_LINE, -1) >= other.version

    def to_bytes(self) -> bytes:
        # The same bytes as json.dumps of the whole body (JSON text composes), but each tensor's entry
        # is encoded once per state: a commit costs nothing for the tensors it does not change.
        fields = {"format": FORMAT, "version": self.version, "parent": self.parent, "time": self.time,
                  "message": self.message}  # fmt: skip
        if self.dataset_id:  # absent only in manifests written before datasets had ids
            fields["dataset_id"] = self.dataset_id
        head = _dumps(fields)
        tensors = ",".join(t.entry_text() for t in self.tensors.values())
        tail = f',"evals":{_dumps(self.evals)}'
        if self.info:  # absent when empty: manifests without dataset info stay as they were
            tail += f',"info":{_dumps(self.info)}'
        for key, value in self._history().items():
            tail += f',"{key}":{_dumps(value)}'
        return f'{head[:-1]},"tensors":{{{tensors}}}{tail}}}'.encode()

    def _history(self) -> dict[str, Any]:
        """The fields of its place in the history (absent before branches, so older files read alike)."""
        out: dict[str, Any] = {}
        if self.branch is not None:
            out["branch"] = self.branch
        if self.line is not None:
            out["line"] = self.line
        if self.merged:
            out["parents"] = list(self.parents)
        if self.reach:
            out["reach"] = self.reach
        if self.origin:
            out["origin"] = self.origin
        return out

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse and check a manifest (see ``_schema``).

        Raises:
            InvalidField: the bytes are not JSON, or a value breaks the schema (the field names it).
        """
        body = _load_json(data)
        if body.get("format") != FORMAT:
            raise InvalidField("format", f"expected {FORMAT!r}, got {body.get('format')!r:.40}")
        version = check_int(body.get("version"), "version")
        parent = check_optional_int(body.get("parent"), "parent", hi=max(0, version - 1))
        when = body.get("time", 0.0)
        if not isinstance(when, (int, float)) or isinstance(when, bool) or not math.isfinite(when):
            raise InvalidField("time", f"expected a number of seconds, got {when!r:.40}")
        branch, line = _branch_of(body)
        return cls(
            version=version,
            parent=parent,
            time=float(when),
            message=check_str(body.get("message", ""), "message"),
            tensors=_tensors(body.get("tensors")),
            evals=_evals(body.get("evals")),
            info=check_str_dict(body.get("info") or {}, "info"),
            branch=branch,
            line=line,
            merged=_merged(body.get("parents"), version, parent),
            reach=_reach(body.get("reach"), version, line),
            origin=check_str_dict(body.get("origin") or {}, "origin"),
            dataset_id=_dataset_id(body.get("dataset_id", "")),
        )

    def sample_counts(self) -> dict[str, int]:
        return {k: t.length for k, t in self.tensors.items()}


def _branch_of(body: dict[str, Any]) -> tuple[str | None, str | None]:
    """The ``branch`` and ``line`` fields: both or neither."""
    branch, line = body.get("branch"), body.get("line")
    if branch is None and line is None:
        return None, None
    try:
        parse_ref_name("branch", branch)
    except (InvalidArgumentError, InvalidTypeError):
        raise InvalidField("branch", f"expected a branch name, got {branch!r:.40}") from None
    if not isinstance(line, str) or not _LINE_ID.fullmatch(line):
        raise InvalidField("line", f"expected a line id of 32 hex digits, got {line!r:.40}")
    return branch, line


def _merged(value: object, version: int, parent: int | None) -> tuple[int, ...]:
    """The parents after the first: ``parents`` lists the first (``parent``) and at least one more."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) < 2 or len(value) > 64:
        raise InvalidField("parents", f"expected a list of 2 to 64 versions, got {value!r:.40}")
    parents = [check_int(p, f"parents[{i}]", hi=max(0, version - 1)) for i, p in enumerate(value)]
    if parents[0] != parent or len(set(parents)) != len(parents):
        raise InvalidField(
            "parents", f"expected distinct versions starting with parent {parent}, got {parents}"
        )
    return tuple(parents[1:])


def _reach(value: object, version: int, line: str | None) -> dict[str, int]:
    """Per line, the newest version of it this version descends from: at most this version, and this
    version itself on its own line."""
    if value is None:
        return {}
    reach = check_str_dict(value, "reach")
    for key, at in reach.items():
        if key != LEGACY_LINE and not _LINE_ID.fullmatch(key):
            raise InvalidField("reach", f"expected line ids as keys, got {key!r:.40}")
        check_int(at, f"reach.{key}", hi=version)
    if line is not None and reach.get(line) != version:
        raise InvalidField("reach", f"expected version {version} on its own line, got {reach.get(line)!r}")
    return dict(reach)


def _dataset_id(value: object) -> str:
    text = check_str(value, "dataset_id")
    if text and not _DATASET_ID.fullmatch(text):
        raise InvalidField("dataset_id", f"expected 32 hexadecimal digits, got {text!r:.60}")
    return text


def _load_json(data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except RecursionError:
        raise InvalidField("", "the JSON is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise InvalidField("", f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidField("", f"expected a JSON object, got {type(body).__name__}")
    return body


def _tensors(value: object) -> dict[str, TensorState]:
    if not isinstance(value, dict):
        raise InvalidField("tensors", f"expected an object, got {value!r:.40}")
    out: dict[str, TensorState] = {}
    for name, obj in value.items():
        try:
            parse_tensor_name(name)
        except LakeComputeError:
            raise InvalidField("tensors", f"invalid tensor name {name!r:.80}") from None
        out[name] = nested(f"tensors.{name}", TensorState.from_json, name, obj)
    return out


def _evals(value: object) -> dict[str, Any]:
    """Eval records: str -> dict (their contents are the dataset layer's to check)."""
    evals = check_str_dict({} if value is None else value, "evals")
    for key, record in evals.items():
        if not isinstance(record, dict):
            raise InvalidField(f"evals.{key}", f"expected an object, got {record!r:.40}")
    return dict(evals)
