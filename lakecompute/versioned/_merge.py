"""Merging one line of work into another, from the manifests alone: fragments are combined, never samples.

``ds.merge(source)`` brings the changes of ``source`` (a branch, tag or version) into the branch the
handle is on:

- when ``source`` already descends from the branch's head, the branch simply moves there (a
  fast-forward: one atomic step, no new version);
- when the branch already holds ``source``, nothing happens;
- otherwise both sides are compared with their newest common ancestor (the *base*), tensor by tensor
  and row by row (`lakecompute.versioned._diff`), and the result is committed as a new version with two
  parents. Changes to different tensors, or to different rows of one tensor, combine; rows appended on
  both sides are all kept (this branch's first). Changes to the same rows, a tensor deleted on one side
  and changed on the other, created on both, or given different specs or info on each, are conflicts:
  `lakecompute.errors.MergeConflictError` names them and nothing is committed, unless
  ``conflict_resolution`` says which side wins (``"ours"``: this branch, ``"theirs"``: ``source``;
  Deep Lake 3's names).

The handle's verb (``lakecompute.datasets._branching.merge``) decides which of the three it is and
commits; `merged_content` is the third case's content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from lakecompute.errors import MergeConflictError
from lakecompute.storage import Backend
from lakecompute.versioned._diff import Rows, changed_rows, slice_rows
from lakecompute.versioned._evals import as_reference
from lakecompute.versioned._fragments import append_fragment
from lakecompute.versioned._history import merge_base
from lakecompute.versioned._manifest import Fragment, Manifest, TensorState

__all__ = ["Combined", "Resolution", "combine", "merged_content"]

Resolution = Literal["ours", "theirs"] | None


def merged_content(
    backend: Backend, ours: Manifest, theirs: Manifest, source: str, resolution: Resolution
) -> tuple[Manifest, dict[str, Any]]:
    """The content of the version that merges ``theirs`` (named ``source`` by the user) into ``ours``,
    combined from their newest common ancestor, and its origin (``Manifest.origin``).

    Raises:
        MergeConflictError: both sides changed the same rows or tensors (and ``resolution`` is None).
        InvalidArgumentError: no common ancestor is left.
    """
    base = merge_base(backend, ours, theirs)
    result = combine(base, ours, theirs, resolution)
    if result.row_conflicts or result.tensor_conflicts:
        raise MergeConflictError(backend.url, source, result.row_conflicts, result.tensor_conflicts)
    content = replace(ours, tensors=result.tensors, info=result.info, evals=_evals(ours, theirs))
    origin: dict[str, Any] = {
        "op": "merge",
        "source": source,
        "version": theirs.version,
        "base": base.version,
    }
    if resolution is not None:
        origin["resolution"] = resolution
    return content, origin


@dataclass
class Combined:
    """The result of combining two sides: the merged tensors and info, and the conflicts found.

    Attributes:
        tensors: the merged tensors by name (this branch's order, then tensors new from the other side).
        info: the merged dataset info.
        row_conflicts: per tensor, rows of the base both sides changed (unresolved).
        tensor_conflicts: tensor-level and info conflicts, as sentences (unresolved).
    """

    tensors: dict[str, TensorState] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    row_conflicts: dict[str, list[Rows]] = field(default_factory=dict)
    tensor_conflicts: list[str] = field(default_factory=list)


def combine(base: Manifest, ours: Manifest, theirs: Manifest, resolution: Resolution) -> Combined:
    """Combine the changes ``ours`` and ``theirs`` made since ``base`` (a three-way merge)."""
    out = Combined()
    b = {s.key: s for s in base.tensors.values()}
    o = {s.key: s for s in ours.tensors.values()}
    t = {s.key: s for s in theirs.tensors.values()}
    order = list(o) + [k for k in t if k not in o] + [k for k in b if k not in o and k not in t]
    for key in order:
        state = _tensor(b.get(key), o.get(key), t.get(key), resolution, out)
        if state is None:
            continue
        name = state.spec.name
        if name in out.tensors:
            out.tensor_conflicts.append(f"two different tensors named {name!r} (rename one of them first)")
            continue
        out.tensors[name] = state
    out.info = _info(base.info, ours.info, theirs.info, resolution, out)
    return out


def _tensor(
    b: TensorState | None, o: TensorState | None, t: TensorState | None, resolution: Resolution, out: Combined
) -> TensorState | None:
    """One tensor, merged (None: it is not in the result)."""
    if o == t:
        return o
    name = next(s for s in (o, t, b) if s is not None).spec.name
    if b is None or o is None or t is None:
        return _whole(b, o, t, name, resolution, out)
    spec_o, spec_t, spec_b = _meta(o), _meta(t), _meta(b)
    meta, clash = _pick(spec_b, spec_o, spec_t)
    if clash:
        if resolution is None:
            out.tensor_conflicts.append(f"tensor {name!r}: its spec or rank (dtype, htype, ...) on each side")
            return o
        return o if resolution == "ours" else t  # different specs: one side's tensor, whole
    new_name, clash = _pick(b.spec.name, o.spec.name, t.spec.name)
    if clash:
        if resolution is None:
            out.tensor_conflicts.append(f"tensor {name!r}: renamed to {o.spec.name!r} and {t.spec.name!r}")
        new_name = t.spec.name if resolution == "theirs" else o.spec.name
    info, clash = _pick(b.info, o.info, t.info)
    if clash:
        if resolution is None:
            out.tensor_conflicts.append(f"tensor {name!r}: its info on each side")
        info = o.info if resolution != "theirs" else t.info
    source = o if meta == spec_o else t
    fragments, conflicts = _rows(b, o, t, resolution)
    if conflicts and resolution is None:
        out.row_conflicts[name] = conflicts
    return TensorState(replace(source.spec, name=new_name), dict(info), source.ndim, tuple(fragments), o.tid)


def _whole(
    b: TensorState | None,
    o: TensorState | None,
    t: TensorState | None,
    name: str,
    resolution: Resolution,
    out: Combined,
) -> TensorState | None:
    """A tensor created or deleted on a side: taken whole from one side."""
    if b is None:  # created on one side or both
        if o is None or t is None:
            return o if t is None else t
        problem = f"tensor {name!r}: created on both sides"
    else:  # deleted on one side or both
        if o is None and t is None:
            return None
        changed = t if o is None else o
        if changed == b:
            return None  # deleted on one side, untouched on the other
        problem = f"tensor {name!r}: deleted on one side and changed on the other"
    if resolution is None:
        out.tensor_conflicts.append(problem)
        return o
    return o if resolution == "ours" else t


def _meta(s: TensorState) -> tuple[Any, ...]:
    """What must agree for rows of two sides to mix: the spec (but the name) and the rank."""
    spec = s.spec.to_json()
    return (tuple(sorted((k, str(v)) for k, v in spec.items() if k != "name")), s.ndim)


def _pick(b: Any, o: Any, t: Any) -> tuple[Any, bool]:
    """A three-way choice of one value: the side that changed it; True when both did, differently."""
    if o == t or t == b:
        return o, False
    if o == b:
        return t, False
    return o, True


def _touched(base: TensorState, side: TensorState) -> list[Rows]:
    """The rows of ``base`` a side replaced or removed."""
    n = base.length
    touched = changed_rows(base.fragments, side.fragments)
    if side.length < n:
        _add(touched, (side.length, n))
    return touched


def _add(ranges: list[Rows], item: Rows) -> None:
    if ranges and ranges[-1][1] >= item[0]:
        ranges[-1] = (ranges[-1][0], max(ranges[-1][1], item[1]))
    else:
        ranges.append(item)


def _intersect(a: Sequence[Rows], b: Sequence[Rows]) -> list[Rows]:
    out: list[Rows] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _subtract(a: Sequence[Rows], b: Sequence[Rows]) -> list[Rows]:
    out: list[Rows] = []
    for lo, hi in a:
        for blo, bhi in b:
            if bhi <= lo or blo >= hi:
                continue
            if blo > lo:
                out.append((lo, blo))
            lo = max(lo, bhi)
        if lo < hi:
            out.append((lo, hi))
    return out


def _rows(
    b: TensorState, o: TensorState, t: TensorState, resolution: Resolution
) -> tuple[list[Fragment], list[Rows]]:
    """The rows of a tensor both sides kept: each row of the base from the side that changed it (both
    changed it: a conflict, or the side ``resolution`` names), then the rows each side appended."""
    n = b.length
    mine, theirs = _touched(b, o), _touched(b, t)
    conflicts = _intersect(mine, theirs)
    taken = _subtract(theirs, conflicts) if conflicts and resolution == "ours" else theirs
    out: list[Fragment] = []
    pos = 0
    for lo, hi in taken:
        _extend(out, slice_rows(o.fragments, pos, min(lo, o.length)))
        _extend(out, slice_rows(t.fragments, lo, min(hi, t.length)))
        pos = hi
    _extend(out, slice_rows(o.fragments, pos, min(n, o.length)))
    _extend(out, slice_rows(o.fragments, n, o.length))
    _extend(out, slice_rows(t.fragments, n, t.length))
    return out, conflicts


def _extend(out: list[Fragment], frags: list[Fragment]) -> None:
    for f in frags:
        append_fragment(out, f)


def _info(
    b: Mapping[str, Any], o: Mapping[str, Any], t: Mapping[str, Any], resolution: Resolution, out: Combined
) -> dict[str, Any]:
    """The dataset's info, merged key by key."""
    missing = object()
    merged: dict[str, Any] = {}
    for key in list(o) + [k for k in t if k not in o] + [k for k in b if k not in o and k not in t]:
        value, clash = _pick(b.get(key, missing), o.get(key, missing), t.get(key, missing))
        if clash:
            if resolution is None:
                out.tensor_conflicts.append(f"the dataset's info key {key!r}")
            value = t.get(key, missing) if resolution == "theirs" else o.get(key, missing)
        if value is not missing:
            merged[key] = value
    return merged


def _evals(ours: Manifest, theirs: Manifest) -> dict[str, Any]:
    """The eval records the merge remembers: both sides' (as references to where each is kept whole)."""
    out = {fp: as_reference(obj) for fp, obj in theirs.evals.items()}
    for fp, obj in ours.evals.items():
        ref = as_reference(obj)
        other = out.get(fp)
        if other is None or int(ref.get("at", 0)) >= int(other.get("at", 0)):
            out[fp] = ref
    return out
