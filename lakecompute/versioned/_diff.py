"""What changed between two versions, from their manifests alone: no sample is read.

A version lists, per tensor, the runs of stored samples that form it. Data is written once and never
changed in place, so row ``i`` of two versions holds the same sample exactly when both name the same
stored sample for it (the same run, the same position in it). Comparing two fragment lists row range by
row range therefore tells which rows were appended, replaced or removed, in time proportional to the
number of fragments, whatever the number of rows.

This is a comparison of where rows are stored: ``compact()`` stores every row anew, so a diff across a
compaction lists its rows as replaced (their values are equal). Tensors are matched across versions by
their id (`lakecompute.versioned.TensorState.tid`), so a rename is told from a delete and a create.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lakecompute.versioned._manifest import Fragment, Manifest, TensorState

__all__ = [
    "Rows",
    "TensorDiff",
    "VersionDiff",
    "changed_rows",
    "diff_manifests",
    "diff_tensor",
    "slice_rows",
]

#: A row range ``(start, stop)``.
Rows = tuple[int, int]


def _where(f: Fragment, row: int) -> tuple[str, bool, int, int]:
    """Where row ``row`` of fragment ``f`` is stored, and the step to the next row: ``(segment, indexed,
    address, step)``. Runs written one after another into a slot merge into one fragment
    (`lakecompute.versioned.append_fragment`), so a row is told by its address, not by its fragment."""
    if f.idx is not None:
        step = 1 + f.ndim
        return (f.seg, True, f.idx + (f.k + row) * step, step)
    step = f.nbytes // f.total if f.total else 0
    return (f.seg, False, f.off + (f.k + row) * step, step)


def changed_rows(old: Sequence[Fragment], new: Sequence[Fragment]) -> list[Rows]:
    """The rows, among those both lists hold, at which ``new`` names another stored sample than ``old``
    (sorted, merged ranges). O(fragments of both)."""
    out: list[Rows] = []
    a, b = [f for f in old if f.n], [f for f in new if f.n]
    i = j = 0
    ka = kb = 0  # rows of a[i] / b[j] already passed
    row = 0
    while i < len(a) and j < len(b):
        fa, fb = a[i], b[j]
        step = min(fa.n - ka, fb.n - kb)
        same = _where(fa, ka) == _where(fb, kb) and fa.dtype == fb.dtype and fa.shape == fb.shape
        if not same:
            if out and out[-1][1] == row:
                out[-1] = (out[-1][0], row + step)
            else:
                out.append((row, row + step))
        row += step
        ka += step
        kb += step
        if ka == fa.n:
            i, ka = i + 1, 0
        if kb == fb.n:
            j, kb = j + 1, 0
    return out


def slice_rows(frags: Sequence[Fragment], start: int, stop: int) -> list[Fragment]:
    """The fragments holding rows ``start..stop`` of a tensor made of ``frags``."""
    out: list[Fragment] = []
    pos = 0
    for f in frags:
        lo, hi = max(start, pos), min(stop, pos + f.n)
        if lo < hi:
            out.append(f.sub(lo - pos, hi - lo))
        pos += f.n
        if pos >= stop:
            break
    return out


@dataclass(frozen=True, slots=True)
class TensorDiff:
    """How one tensor differs between two versions.

    Attributes:
        name: its name in the newer version (``b``); in ``a`` for a deleted tensor.
        appended: rows ``(start, stop)`` of ``b`` added after the end of ``a``'s rows, or None.
        replaced: rows of both versions that hold another sample in ``b`` (sorted ranges).
        removed: rows ``(start, stop)`` of ``a`` past the end of ``b``'s rows, or None.
        renamed_from: its name in ``a`` when it was renamed, else None.
        spec: the fields of its spec that changed (``"dtype"``, ``"htype"``, ...).
        info: the keys of its info that changed (``"class_names"``, ...).
        created: it is not in ``a``.
        deleted: a tensor of this name in ``a`` is not in ``b``: this tensor was deleted, or another took
            its name (one created anew, or one renamed to it: then ``renamed_from`` says which).
        deleted_rows: with ``deleted``, how many rows the deleted tensor held.
        rows: how many rows it holds in ``b`` (None for a tensor not in ``b``).
    """

    name: str
    appended: Rows | None = None
    replaced: tuple[Rows, ...] = ()
    removed: Rows | None = None
    renamed_from: str | None = None
    spec: tuple[str, ...] = ()
    info: tuple[str, ...] = ()
    created: bool = False
    deleted: bool = False
    deleted_rows: int | None = None
    rows: int | None = None

    @property
    def changed(self) -> bool:
        """Whether anything differs."""
        return bool(
            self.appended or self.replaced or self.removed or self.renamed_from or self.spec or self.info
        ) or (self.created or self.deleted)

    def to_dict(self) -> dict[str, Any]:
        """Plain values (lists for ranges), for JSON or printing."""
        return {
            "appended": None if self.appended is None else list(self.appended),
            "replaced": [list(r) for r in self.replaced],
            "removed": None if self.removed is None else list(self.removed),
            "renamed_from": self.renamed_from,
            "spec": list(self.spec),
            "info": list(self.info),
            "created": self.created,
            "deleted": self.deleted,
            "deleted_rows": self.deleted_rows,
            "rows": self.rows,
        }

    def describe(self) -> str:
        """One line: what changed."""
        rows = f" with {self.appended[1]} rows" if self.appended else ""
        gone = f"deleted ({self.deleted_rows or 0} rows)"
        if self.created and self.deleted:
            return f"{gone}, and created anew{rows}"
        if self.created:
            return f"created{rows}"
        if self.deleted and not self.renamed_from:
            return gone
        return "; ".join(self._parts()) or "unchanged"

    def _parts(self) -> list[str]:
        """What changed in a tensor of both versions, part by part."""
        parts = []
        if self.renamed_from and self.deleted:  # a rename onto the name of a deleted tensor: both said
            old, new = self.renamed_from, self.name
            parts.append(
                f"{old!r} renamed to {new!r} ({self.rows or 0} rows), the old {new!r} "
                f"({self.deleted_rows or 0} rows) deleted"
            )
        elif self.renamed_from:
            parts.append(f"renamed from {self.renamed_from!r}")
        if self.appended:
            parts.append(f"rows {self.appended[0]}:{self.appended[1]} appended")
        if self.replaced:
            shown = ", ".join(f"{a}:{b}" for a, b in self.replaced[:8])
            more = f" and {len(self.replaced) - 8} more ranges" if len(self.replaced) > 8 else ""
            parts.append(f"rows {shown}{more} replaced")
        if self.removed:
            parts.append(f"rows {self.removed[0]}:{self.removed[1]} removed")
        if self.spec:
            parts.append(f"{', '.join(self.spec)} changed")
        if self.info:
            parts.append(f"info {', '.join(self.info)} changed")
        return parts


def diff_tensor(old: TensorState, new: TensorState) -> TensorDiff:
    """How tensor ``old`` (in one version) became ``new`` (the same tensor in another)."""
    la, lb = old.length, new.length
    spec_a, spec_b = old.spec.to_json(), new.spec.to_json()
    spec = tuple(k for k in sorted(spec_a.keys() | spec_b.keys()) if spec_a.get(k) != spec_b.get(k))
    info = tuple(k for k in sorted(old.info.keys() | new.info.keys()) if old.info.get(k) != new.info.get(k))
    return TensorDiff(
        name=new.spec.name,
        appended=(la, lb) if lb > la else None,
        replaced=tuple(changed_rows(old.fragments, new.fragments)),
        removed=(lb, la) if la > lb else None,
        renamed_from=old.spec.name if old.spec.name != new.spec.name else None,
        spec=tuple(k for k in spec if k != "name"),
        info=info,
        rows=lb,
    )


@dataclass(frozen=True, slots=True)
class InfoDiff:
    """How the dataset's own info (``ds.info``) differs: the keys added, removed and changed."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def _info_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> InfoDiff:
    return InfoDiff(
        added=tuple(sorted(b.keys() - a.keys())),
        removed=tuple(sorted(a.keys() - b.keys())),
        changed=tuple(sorted(k for k in a.keys() & b.keys() if a[k] != b[k])),
    )


@dataclass(frozen=True, slots=True)
class VersionDiff:
    """What changed from version ``a`` to version ``b`` of a dataset (``ds.diff(a, b)``).

    Attributes:
        path: the dataset.
        a: the older side's version number.
        b: the newer side's version number.
        tensors: per tensor that differs (by its name in ``b``, or in ``a`` if deleted), how.
        info: the dataset's info keys added, removed and changed.

    Example:
        >>> ds = lc.from_numpy("mem://diff-doc", {"x": [1, 2, 3]}, overwrite=True)
        >>> before = ds.version
        >>> ds.x[1] = 9
        >>> ds.x.append(4)
        >>> print(ds.diff(before))
        diff of mem://diff-doc, version 1 -> 3:
          x: rows 3:4 appended; rows 1:2 replaced
    """

    path: str
    a: int
    b: int
    tensors: dict[str, TensorDiff] = field(default_factory=dict)
    info: InfoDiff = field(default_factory=InfoDiff)

    @property
    def created(self) -> list[str]:
        return [n for n, t in self.tensors.items() if t.created]

    @property
    def deleted(self) -> list[str]:
        return [n for n, t in self.tensors.items() if t.deleted]

    @property
    def renamed(self) -> dict[str, str]:
        """Old name -> new name."""
        return {t.renamed_from: n for n, t in self.tensors.items() if t.renamed_from}

    def __bool__(self) -> bool:
        """Whether anything differs."""
        return bool(self.tensors) or bool(self.info)

    def to_dict(self) -> dict[str, Any]:
        """Plain values, for JSON (``lakecompute diff --json``) or tests."""
        return {
            "a": self.a,
            "b": self.b,
            "tensors": {n: t.to_dict() for n, t in self.tensors.items()},
            "info": {
                "added": list(self.info.added),
                "removed": list(self.info.removed),
                "changed": list(self.info.changed),
            },
        }

    def __str__(self) -> str:
        lines = [f"diff of {self.path}, version {self.a} -> {self.b}:"]
        lines += [f"  {name}: {t.describe()}" for name, t in self.tensors.items()]
        if self.info:
            for what, keys in (("added", self.info.added), ("removed", self.info.removed),
                               ("changed", self.info.changed)):  # fmt: skip
                if keys:
                    lines.append(f"  info: {', '.join(keys)} {what}")
        if len(lines) == 1:
            lines.append("  no changes")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"VersionDiff(path={self.path!r}, a={self.a}, b={self.b}, tensors={sorted(self.tensors)!r})"

    def _repr_html_(self) -> str:
        """The notebook view: one row per changed tensor."""
        head = f"<b>diff of {html.escape(self.path)}, version {self.a} → {self.b}</b>"
        rows = "".join(
            f"<tr><td><code>{html.escape(n)}</code></td><td>{html.escape(t.describe())}</td></tr>"
            for n, t in self.tensors.items()
        )
        if self.info:
            keys = ", ".join(self.info.added + self.info.removed + self.info.changed)
            rows += f"<tr><td><i>info</i></td><td>{html.escape(keys)} changed</td></tr>"
        if not rows:
            rows = "<tr><td colspan=2>no changes</td></tr>"
        return f"<div>{head}<table><tr><th>tensor</th><th>change</th></tr>{rows}</table></div>"


def diff_manifests(path: str, a: Manifest, b: Manifest) -> VersionDiff:
    """What changed from version ``a`` to version ``b`` (any two versions, in any order of time)."""
    old = {s.key: s for s in a.tensors.values()}
    new = {s.key: s for s in b.tensors.values()}
    out: dict[str, TensorDiff] = {}
    for key, state in new.items():
        before = old.get(key)
        if before is None:
            rows = (0, state.length) if state.length else None
            out[state.spec.name] = TensorDiff(state.spec.name, appended=rows, created=True, rows=state.length)
        elif before != state:
            d = diff_tensor(before, state)
            if d.changed:
                out[state.spec.name] = d
    for key, state in old.items():
        if key not in new:
            out[state.spec.name] = _deleted(state, out.get(state.spec.name))
    return VersionDiff(path, a.version, b.version, out, _info_diff(a.info, b.info))


def _deleted(state: TensorState, taken: TensorDiff | None) -> TensorDiff:
    """The diff of tensor ``state`` of ``a``, absent from ``b``; ``taken`` is how the tensor now under its
    name in ``b`` changed, if one is: created anew there, or renamed to it (the rename is kept: "y renamed
    to x, the old x deleted", never "x deleted and created anew" with y lost)."""
    name, length = state.spec.name, state.length
    if taken is not None and taken.renamed_from is not None:
        return replace(taken, deleted=True, deleted_rows=length)
    rows = (0, length) if length else None
    created = taken is not None and taken.created
    return TensorDiff(
        name,
        appended=taken.appended if created and taken is not None else None,
        removed=rows,
        created=created,
        deleted=True,
        deleted_rows=length,
        rows=taken.rows if created and taken is not None else None,
    )
