"""Manifests: the small JSON document that describes one committed version.

A manifest names, for every tensor, its spec and the ordered list of fragments (runs of samples
in segments) that form it, and its place in the history: its parents, the branch it was committed on,
and what produced it. This module holds the document (`Manifest`, `TensorState`, `Fragment`) and its
checked parsing; listing, reading and committing versions on a backend is `lakecompute.versioned._versions`.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from lakecompute.errors import (
    LakeComputeError,
)
from lakecompute.specs import NOT_NUMERIC_DTYPES, TensorSpec, parse_tensor_name
from lakecompute.versioned._header import LINE_ID, Placed, Stored, header_fields, load_json
from lakecompute.versioned._keys import version_key
from lakecompute.versioned._schema import (
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
    check_str_dict,
    check_uniform,
    nested,
)
from lakecompute.versioned._segments import CAPACITY_INDEX

__all__ = [
    "FORMAT",
    "Fragment",
    "Manifest",
    "TensorState",
    "check_fits",
    "content_digest",
    "evals_of",
    "new_dataset_id",
]

FORMAT = "lakecompute/1"


def new_dataset_id() -> str:
    """A fresh random dataset id (written once, into version 0, when a dataset is created)."""
    return uuid.uuid4().hex


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
    # The digest of that text: made on first use, or given by the manifest that stored the state.
    _digest: str | None = field(init=False, default=None, repr=False, compare=False)

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

    @property
    def digest(self) -> str:
        """A digest of the state (its entry's text): 32 hex digits, equal exactly when the states are
        (the name included). Part of the version's `Manifest.digest`."""
        if self._digest is None:
            object.__setattr__(self, "_digest", hashlib.sha256(self.entry_text().encode()).hexdigest()[:32])
        assert self._digest is not None
        return self._digest

    def recorded(self, digest: str) -> TensorState:
        """This state, its digest known from the manifest that stored it (not computed again)."""
        object.__setattr__(self, "_digest", digest)
        return self

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
            nested(f"fragments[{i}]", check_fits, spec, ndim, frag)
        tid = obj.get("id")
        if tid is not None and (not isinstance(tid, str) or not LINE_ID.fullmatch(tid)):
            raise InvalidField("id", f"expected a tensor id of 32 hex digits, got {tid!r:.40}")
        state = cls(spec, dict(info), ndim, tuple(fragments), tid)
        length = obj.get("length")
        if length is not None and check_int(length, "length") != state.length:
            raise InvalidField("length", f"the fragments hold {state.length} samples, got {length}")
        return state


def _dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))


def check_fits(spec: TensorSpec, ndim: int | None, frag: Fragment) -> None:
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
class Manifest(Placed):
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
        stored: how the version is stored (whole, or as a change of its parent), when it was read from
            storage or committed: what the next commit's choice between the two starts from.
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
    stored: Stored | None = field(init=False, default=None, repr=False, compare=False)
    # The content digest, made on first use or given by the stored manifest (see `digest`).
    _digest: str | None = field(init=False, default=None, repr=False, compare=False)

    @property
    def digest(self) -> str:
        """A digest of the version's content: its tensors (each by `TensorState.digest`), eval records and
        info; 64 hex digits. Two versions with the same digest hold the same content, whatever their
        numbers, histories or datasets: what identifies a version's data (with `dataset_id` and the
        number) where a copied folder's history may have diverged from the original's. Made when the
        version is committed and recorded in its manifest."""
        if self._digest is None:
            object.__setattr__(self, "_digest", content_digest(self.tensors, self.evals, self.info))
        assert self._digest is not None
        return self._digest

    @property
    def key(self) -> str:
        """The storage key of the version's manifest (what errors about its content name)."""
        return version_key(self.version)

    def recorded(self, digest: str | None, stored: Stored | None) -> Manifest:
        """This manifest, with its digest as recorded (None: made on first use) and how it is stored."""
        if digest is not None:
            object.__setattr__(self, "_digest", digest)
        object.__setattr__(self, "stored", stored)
        return self

    def to_bytes(self) -> bytes:
        """The manifest stored whole, as plain JSON (format ``lakecompute/1``)."""
        # The same bytes as json.dumps of the whole body (JSON text composes), but each tensor's entry
        # is encoded once per state: a commit costs nothing for the tensors it does not change.
        fields = self.history_fields()
        history = {key: fields.pop(key) for key in self._history()}
        tail = "".join(f',"{key}":{_dumps(value)}' for key, value in history.items())
        return f"{_dumps(fields)[:-1]},{self.content_text()}{tail}}}".encode()

    def content_text(self) -> str:
        """The content as stored whole: ``"tensors":{...},"evals":{...}`` and ``"info"`` when not empty
        (JSON members, without braces)."""
        tensors = ",".join(t.entry_text() for t in self.tensors.values())
        text = f'"tensors":{{{tensors}}},"evals":{_dumps(self.evals)}'
        if self.info:  # absent when empty: manifests without dataset info stay as they were
            text += f',"info":{_dumps(self.info)}'
        return text

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

    def history_fields(self) -> dict[str, Any]:
        """The JSON fields of its place in the history and of who made it, as a stored manifest has them
        before its content (format, version, parent, time, message, dataset id, digest, branch, ...)."""
        fields: dict[str, Any] = {"format": FORMAT, "version": self.version, "parent": self.parent,
                                  "time": self.time, "message": self.message}  # fmt: skip
        if self.dataset_id:
            fields["dataset_id"] = self.dataset_id
        fields["digest"] = self.digest
        return {**fields, **self._history()}

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse and check a manifest stored whole as plain JSON (format ``lakecompute/1``; see ``_schema``).

        Raises:
            InvalidField: the bytes are not JSON, or a value breaks the schema (the field names it).
        """
        body = load_json(data)
        if body.get("format") != FORMAT:
            raise InvalidField("format", f"expected {FORMAT!r}, got {body.get('format')!r:.40}")
        return cls.from_json(body)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Manifest:
        """A whole manifest from its JSON fields (its format checked by the caller).

        Raises:
            InvalidField: a value breaks the schema.
        """
        manifest = cls(
            **header_fields(body),
            tensors=_tensors(body.get("tensors")),
            evals=evals_of(body.get("evals")),
            info=check_str_dict(body.get("info") or {}, "info"),
        )
        return manifest.recorded(_digest_field(body.get("digest")), None)

    def sample_counts(self) -> dict[str, int]:
        return {k: t.length for k, t in self.tensors.items()}


_DIGEST = re.compile(r"[0-9a-f]{64}")


def _digest_field(value: object) -> str | None:
    """The recorded content digest: 64 hex digits, or None (a manifest written before digests)."""
    if value is None:
        return None
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise InvalidField("digest", f"expected 64 hexadecimal digits, got {value!r:.80}")
    return value


def content_digest(tensors: dict[str, TensorState], evals: dict[str, Any], info: dict[str, Any]) -> str:
    """The digest of a version's content (`Manifest.digest`): of each tensor's digest, in order, then of
    the eval records and the info as compact JSON."""
    listed = ",".join(f"[{_dumps(name)},{_dumps(t.digest)}]" for name, t in tensors.items())
    text = f'{{"tensors":[{listed}],"evals":{_dumps(evals)},"info":{_dumps(info)}}}'
    return hashlib.sha256(text.encode()).hexdigest()


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


def evals_of(value: object) -> dict[str, Any]:
    """Eval records: str -> dict (their contents are the dataset layer's to check)."""
    evals = check_str_dict({} if value is None else value, "evals")
    for key, record in evals.items():
        if not isinstance(record, dict):
            raise InvalidField(f"evals.{key}", f"expected an object, got {record!r:.40}")
    return dict(evals)
