"""Datasets: a handle on a versioned collection of tensors.

A :class:`Dataset` reads one committed version (its *base*) and keeps a working copy (its
*head*) that writes change. Writes go to this handle's own segments — nobody else writes there —
and become visible to others only when the head is committed as the next version. Outside a
``with ds:`` block every top-level write call commits; inside one, the block commits once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from lakecompute import compression
from lakecompute._index import parse_index
from lakecompute.datasets._session import WriteSession
from lakecompute.datasets._tensor import Tensor
from lakecompute.datasets._views import DatasetView, Row, _Reading
from lakecompute.errors import (
    CommitConflictError,
    InvalidArgumentError,
    InvalidSampleError,
    InvalidTypeError,
    ReadOnlyError,
    TensorDoesNotExistError,
    TensorExistsError,
)
from lakecompute.htypes import TensorSpec, parse_tensor_spec
from lakecompute.storage import (
    ArrayCache,
    Backend,
    Fragment,
    FragmentReader,
    Manifest,
    SlotWriter,
    TensorState,
    append_fragment,
    commit_manifest,
    create_segment,
    latest_version,
    list_versions,
    new_segment_id,
    read_manifest,
)
from lakecompute.storage._segments import MAX_SLOTS

__all__ = ["Dataset"]


class Dataset(_Reading):
    """A lakecompute dataset. Create or open one with :func:`lakecompute.empty`, :func:`lakecompute.load`
    or :func:`lakecompute.dataset`."""

    def __init__(
        self, backend: Backend, manifest: Manifest, *, read_only: bool = False, pinned: bool = False
    ) -> None:
        self._backend = backend
        self._store = backend.zarr_store()
        self._cache = ArrayCache(self._store, backend=backend)
        self._base = manifest
        self._head = manifest.copy()
        self._read_only = read_only or pinned
        self._pinned = pinned
        self._depth = 0
        self._dirty = False
        self._readers: dict[str, FragmentReader] = {}
        self._segments: dict[str, str] = {}  # chunk codec -> this handle's segment
        self._next_slot: dict[str, int] = {}
        self._session = WriteSession(self._new_slot)

    # -- identity ------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        """The location as given when the dataset was opened."""
        return self._backend.url

    @property
    def version(self) -> int:
        """The committed version this handle reads (and builds on)."""
        return self._base.version

    @property
    def read_only(self) -> bool:
        return self._read_only

    def _base_ds(self) -> Dataset:
        return self

    @property
    def tensors(self) -> dict[str, Tensor]:
        """Tensors by name, in creation order."""
        return {name: Tensor(self, name) for name in self._head.tensors}

    def _state(self, name: str) -> TensorState:
        try:
            return self._head.tensors[name]
        except KeyError:
            raise TensorDoesNotExistError(name, list(self._head.tensors)) from None

    def _tensor_length(self, name: str) -> int:
        return self._state(name).length + self._session.pending(name)

    def __len__(self) -> int:
        """The length of the shortest tensor (0 without tensors)."""
        if not self._head.tensors:
            return 0
        return min(self._tensor_length(n) for n in self._head.tensors)

    @property
    def max_len(self) -> int:
        """The length of the longest tensor."""
        return max((self._tensor_length(n) for n in self._head.tensors), default=0)

    def _reader(self, name: str) -> FragmentReader:
        if self._session.pending(name):
            self._flush(name)
        reader = self._readers.get(name)
        if reader is None:
            reader = self._readers[name] = FragmentReader(self._state(name), self._cache)
        return reader

    # -- indexing ------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            self._state(key)
            return Tensor(self, key)
        pos = parse_index(key, len(self))
        if isinstance(pos, int):
            return Row(self, pos)
        return DatasetView(self, pos)

    def __iter__(self) -> Iterator[Row]:
        for i in range(len(self)):
            yield Row(self, i)

    # -- transactions --------------------------------------------------------------------------
    def __enter__(self) -> Dataset:
        self._check_writable()
        self._depth += 1
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._depth -= 1
        if self._depth:
            return
        if exc_type is None:
            self._commit("write")
        else:
            self.rollback()

    @contextlib.contextmanager
    def _write(self, message: str) -> Iterator[None]:
        """One top-level write call: its own commit outside ``with``, part of the block inside."""
        self._check_writable()
        if self._depth:
            yield
            return
        self._depth = 1
        try:
            yield
            self._commit(message)
        except BaseException:
            self.rollback()
            raise
        finally:
            self._depth = 0

    def _check_writable(self) -> None:
        if self._pinned:
            raise ReadOnlyError(
                f"Version {self._base.version} of {self.path!r} was opened with version=; "
                "old versions are read-only. "
                "Open the latest with lc.load(path) to write."
            )
        if self._read_only:
            raise ReadOnlyError(
                f"Dataset {self.path!r} was opened read-only. Open it with lc.load(path) to write."
            )

    def rollback(self) -> None:
        """Drop every uncommitted change (what ``with ds:`` does when its block raises)."""
        self._session.discard()
        self._head = self._base.copy()
        self._readers.clear()
        self._dirty = False

    def commit(self, message: str = "commit") -> int:
        """Commit pending changes now (only needed inside ``with``); returns the version."""
        self._check_writable()
        self._commit(message)
        return self.version

    def _commit(self, message: str, evals: dict[str, Any] | None = None) -> None:
        for name in list(self._head.tensors):
            self._flush(name)
        if not self._dirty and evals is None:
            return
        new = self._head.copy()
        for name, state in new.tensors.items():
            if state.spec.dtype is None and state.fragments:
                # A generic tensor's dtype is decided once, here, from everything written to it.
                dtype = np.result_type(*{np.dtype(f.dtype) for f in state.fragments})
                state.spec = TensorSpec(
                    name, state.spec.htype, dtype.name, None, state.spec.chunk_compression
                )
        if evals is not None:
            new.evals = evals
        new.version = self._base.version + 1
        new.parent = self._base.version
        new.message = message
        if not commit_manifest(self._backend, new):
            found = latest_version(self._backend) or new.version
            raise CommitConflictError(self.path, self._base.version, found)
        self._base = new
        self._head = new.copy()
        self._readers.clear()
        self._dirty = False

    def _commit_record(self, message: str, evals: dict[str, Any]) -> None:
        """Commit a version with the base's content and new eval records, keeping the head as it is.

        An in-place eval checkpoints this way: its progress is saved, but readers keep seeing the
        old content until the eval's final commit replaces it.
        """
        for name in list(self._head.tensors):
            self._flush(name)
        new = self._base.copy()
        new.evals = evals
        new.version = self._base.version + 1
        new.parent = self._base.version
        new.message = message
        if not commit_manifest(self._backend, new):
            found = latest_version(self._backend) or new.version
            raise CommitConflictError(self.path, self._base.version, found)
        self._base = new

    # -- slots ---------------------------------------------------------------------------------
    def _new_slot(self, spec: TensorSpec) -> SlotWriter:
        codec = spec.chunk_compression or "none"
        seg = self._segments.get(codec)
        if seg is None or self._next_slot[seg] >= MAX_SLOTS:
            seg = new_segment_id()
            create_segment(self._store, seg, compression.zarr_compressors(spec.chunk_compression))
            self._segments[codec] = seg
            self._next_slot[seg] = 0
        slot = self._next_slot[seg]
        self._next_slot[seg] += 1
        return SlotWriter(self._store, seg, slot, self._cache)

    def _flush(self, name: str) -> None:
        state = self._head.tensors[name]
        for frag in self._session.flush(state):
            self._add_fragment(name, frag)

    def _add_fragment(self, name: str, frag: Fragment) -> None:
        state = self._head.tensors[name]
        if state.ndim is not None and frag.ndim != state.ndim:
            raise InvalidSampleError(
                name,
                "every sample of a tensor has the same number of dimensions: "
                f"expected {state.ndim}, got {frag.ndim}.",
            )
        append_fragment(state, frag)
        self._readers.pop(name, None)
        self._dirty = True

    # -- schema --------------------------------------------------------------------------------
    def create_tensor(
        self,
        name: str,
        htype: str | None = None,
        dtype: Any = None,
        sample_compression: str | None = None,
        chunk_compression: str | None = "default",
        class_names: Sequence[str] | None = None,
        **info: Any,
    ) -> Tensor:
        """Add a tensor.

        Args:
            name: letters, digits, ``_`` and ``-``.
            htype: ``generic`` (default), ``image``, ``class_label``, ``embedding``, ``text``, ``json``.
            dtype: a numpy dtype; implied by image (uint8), class_label (uint32), embedding (float32).
            sample_compression: ``png``, ``jpeg`` or ``webp`` for images.
            chunk_compression: ``zstd``, ``lz4``, ``gzip`` or None (uncompressed); the default is zstd
                for numeric tensors and none for encoded images, text and json.
            class_names: label names for ``class_label`` tensors.
            **info: extra JSON-serialisable information kept in ``tensor.info``.

        Raises:
            TensorExistsError: the name is taken.
            InvalidArgumentError: a bad name, htype, dtype or compression.
        """
        with self._write(f"create tensor {name}"):
            if name in self._head.tensors:
                raise TensorExistsError(name)
            spec = parse_tensor_spec(name, htype, dtype, sample_compression, chunk_compression)
            meta: dict[str, Any] = dict(info)
            if class_names is not None:
                if spec.htype != "class_label":
                    raise InvalidArgumentError(
                        f"class_names is for htype 'class_label'; tensor {name!r} has htype {spec.htype!r}."
                    )
                names = list(class_names)
                if not all(isinstance(c, str) for c in names) or len(set(names)) != len(names):
                    raise InvalidArgumentError(f"class_names must be distinct strings. Got {names!r}.")
                meta["class_names"] = names
            elif spec.htype == "class_label":
                meta["class_names"] = []
            self._head.tensors[name] = TensorState(spec, meta)
            self._dirty = True
        return Tensor(self, name)

    def create_tensor_like(self, name: str, source: Tensor) -> Tensor:
        """Add a tensor with the same htype, dtype, compression and info as ``source``."""
        state = source._ds._state(source.name)
        spec = state.spec
        dtype = None if spec.dtype in ("str", "json") else spec.dtype
        info = {k: v for k, v in state.info.items() if k != "class_names"}
        return self.create_tensor(
            name,
            htype=spec.htype,
            dtype=dtype,
            sample_compression=spec.sample_compression,
            chunk_compression=spec.chunk_compression,
            class_names=state.info.get("class_names") if spec.htype == "class_label" else None,
            **info,
        )

    def delete_tensor(self, name: str) -> None:
        """Remove a tensor from the next version (older versions keep it)."""
        with self._write(f"delete tensor {name}"):
            self._state(name)
            self._session.buffers.pop(name, None)
            del self._head.tensors[name]
            self._readers.pop(name, None)
            self._dirty = True

    # -- writing -------------------------------------------------------------------------------
    def _check_keys(self, keys: Sequence[str], skip_ok: bool, what: str) -> None:
        unknown = [k for k in keys if k not in self._head.tensors]
        if unknown:
            raise TensorDoesNotExistError(unknown[0], list(self._head.tensors))
        missing = [k for k in self._head.tensors if k not in keys]
        if missing and not skip_ok:
            raise InvalidArgumentError(
                f"{what} is missing tensors {missing!r} (it has {sorted(keys)!r}). "
                "Give a value for every tensor, or pass skip_ok=True to leave the others short."
            )

    def append(self, sample: Mapping[str, Any], skip_ok: bool = False) -> None:
        """Append one sample: ``{"images": array, "labels": 0}``."""
        if not isinstance(sample, Mapping):
            raise InvalidTypeError(f"Expected a dict of tensor name -> value. Got {type(sample).__name__}.")
        with self._write("append"):
            self._check_keys(list(sample), skip_ok, "append()")
            # Check every value before buffering any, so a bad value leaves nothing half-appended.
            checked = [
                (self._head.tensors[k], self._session.encode(self._head.tensors[k], v))
                for k, v in sample.items()
            ]
            for state, enc in checked:
                self._buffer(state, enc)

    def extend(self, samples: Mapping[str, Any], skip_ok: bool = False) -> None:
        """Append many samples: ``{"images": [a, b], "labels": [0, 1]}`` (lists or stacked arrays)."""
        if not isinstance(samples, Mapping):
            raise InvalidTypeError(
                f"Expected a dict of tensor name -> list of values. Got {type(samples).__name__}."
            )
        with self._write("extend"):
            self._check_keys(list(samples), skip_ok, "extend()")
            samples = {k: _as_sequence(k, v) for k, v in samples.items()}
            lengths = {k: len(v) for k, v in samples.items()}
            if len(set(lengths.values())) > 1:
                raise InvalidArgumentError(
                    f"extend() needs the same number of samples for every tensor. Got {lengths}."
                )
            checked = [
                (self._head.tensors[k], self._session.encode_many(self._head.tensors[k], v))
                for k, v in samples.items()
            ]
            for state, enc in checked:
                self._buffer(state, enc)

    def _buffer(self, state: TensorState, item: Any) -> None:
        for frag in self._session.add(state, item):
            self._add_fragment(state.spec.name, frag)
        self._readers.pop(state.spec.name, None)
        self._dirty = True

    def _tensor_append(self, name: str, value: Any) -> None:
        with self._write(f"append {name}"):
            state = self._state(name)
            self._buffer(state, self._session.encode(state, value))

    def _tensor_extend(self, name: str, values: Any) -> None:
        with self._write(f"extend {name}"):
            state = self._state(name)
            self._buffer(state, self._session.encode_many(state, values))

    def _tensor_setitem(self, name: str, key: Any, value: Any) -> None:
        with self._write(f"update {name}"):
            state = self._state(name)
            self._flush(name)
            pos = parse_index(key, state.length, f"tensor {name!r}")
            if isinstance(pos, int):
                positions, values = [pos], [value]
            else:
                positions = [int(p) for p in pos]
                values = list(value)
                if len(values) != len(positions):
                    raise InvalidArgumentError(
                        f"Assigning {len(values)} values to {len(positions)} samples of {name!r}; "
                        "give one per sample."
                    )
            encoded = [self._session.encode(state, v) for v in values]
            for p, enc in zip(positions, encoded, strict=True):
                self._session.add(state, enc)
                frags = self._session.flush(state)
                assert len(frags) == 1
                _replace_sample(state, p, frags[0])
            self._readers.pop(name, None)
            self._dirty = True

    # -- history and maintenance -----------------------------------------------------------------
    def log(self) -> list[dict[str, Any]]:
        """Committed versions, oldest first: number, time, message and sample counts."""
        out = []
        for v in list_versions(self._backend):
            m = read_manifest(self._backend, v)
            out.append({"version": v, "time": m.time, "message": m.message, "samples": m.sample_counts()})
        return out

    def reload(self) -> None:
        """Move this handle to the latest committed version (drops uncommitted changes)."""
        latest = latest_version(self._backend)
        if latest is not None and not self._pinned:
            self._base = read_manifest(self._backend, latest)
        self._cache.clear()
        self.rollback()

    def compact(self) -> int:
        """Rewrite every tensor into one fragment (content unchanged); returns the new version."""
        from lakecompute.datasets._maintenance import compact

        return compact(self)

    def vacuum(self, grace_seconds: float = 3600.0, keep_versions: int | None = None) -> dict[str, int]:
        """Remove stored data that no version references (see :func:`lakecompute.datasets.vacuum`)."""
        from lakecompute.datasets._maintenance import vacuum

        return vacuum(self, grace_seconds=grace_seconds, keep_versions=keep_versions)

    # -- display ---------------------------------------------------------------------------------
    def summary_table(self) -> str:
        """The summary as text."""
        rows = [("tensor", "htype", "dtype", "shape", "compression", "length")]
        for name, t in self.tensors.items():
            dt = t.dtype
            comp = t.sample_compression or t.chunk_compression or "None"
            shape = "(" + ", ".join("None" if d is None else str(d) for d in t.shape) + ")"
            rows.append((name, t.htype, "None" if dt is None else str(dt), shape, comp, str(len(t))))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [f"Dataset(path={self.path!r}, version={self.version}, samples={len(self)})"]
        for j, r in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
            if j == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def summary(self) -> None:
        """Print a table of the tensors: htype, dtype, shape, compression, length."""
        print(self.summary_table())

    def __repr__(self) -> str:
        mode = ", read_only=True" if self._read_only else ""
        return (
            f"Dataset(path={self.path!r}, version={self.version}, tensors={list(self._head.tensors)!r}, "
            f"samples={len(self)}{mode})"
        )

    # -- for the transform engine --------------------------------------------------------------
    def _latest_time(self) -> float:
        return time.time()


def _as_sequence(name: str, values: Any) -> Any:
    """``values`` if it has a length, a list of it if it is another iterable (a generator)."""
    if isinstance(values, (str, bytes, Mapping)) or (isinstance(values, np.ndarray) and values.ndim == 0):
        pass
    elif hasattr(values, "__len__"):
        return values
    elif isinstance(values, Iterable):
        return list(values)
    raise InvalidTypeError(
        f"extend() takes a sequence of samples for each tensor. Got {type(values).__name__} for {name!r}; "
        "use append() for one sample."
    )


def _replace_sample(state: TensorState, pos: int, frag: Fragment) -> None:
    out: list[Fragment] = []
    start = 0
    for f in state.fragments:
        end = start + f.n
        if start <= pos < end:
            local = pos - start
            if local:
                out.append(f.sub(0, local))
            out.append(frag)
            if f.n - local - 1:
                out.append(f.sub(local + 1, f.n - local - 1))
        else:
            out.append(f)
        start = end
    state.fragments = out
