"""What each ``/api/`` route answers, from the Python API: the JSON twin of every page.

Each route takes the request's checked parameters (`lakecompute.viewer._params`) and returns what Python
says for them: ``info`` (the dataset's tensors, branches and tags), ``samples`` (the rows an expression
keeps, a page of them, with captions and thumbnail URLs), ``sample/N`` (every tensor's value, and the
previous and next rows within the expression), ``count`` (``count_values`` of a tensor within the
expression), ``log`` (``ds.log(all_branches=True)``), ``diff`` (``ds.diff(a, b)``, with the replaced rows'
thumbnails on both sides), ``thumb`` and ``image`` (pictures). Nothing here writes: every handle is
opened read-only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final
from urllib.parse import urlencode

import numpy as np

from lakecompute.errors import InvalidArgumentError, SampleIndexError, TensorDoesNotExistError
from lakecompute.viewer import _select
from lakecompute.viewer._cache import LruCache
from lakecompute.viewer._images import THUMB_CACHE_BYTES, full_image, thumbnail
from lakecompute.viewer._params import MAX_LIMIT, MAX_NUMBER, Params
from lakecompute.viewer._source import DatasetSource, Opened
from lakecompute.viewer._values import captions, jsonable, tensor_entry
from lakecompute.viz import class_label_tensors, image_tensors, target_tensors

__all__ = ["PAGE_SIZE", "SELECTION_CACHE_BYTES", "ViewerApp"]

#: Rows on one page of the grid (and of the diff's replaced rows) unless ``limit`` says otherwise.
PAGE_SIZE: Final = 48
#: Bytes of row positions kept for expressions already evaluated (a page turn does not evaluate again).
SELECTION_CACHE_BYTES: Final = 64 << 20

Rows = np.ndarray | range


def _shown_image(ds: Any) -> str | None:
    """The image tensor the grid shows: ``images``, else the first one there is."""
    found = image_tensors(ds)
    return "images" if "images" in found else (found[0] if found else None)


def _tensor(ds: Any, name: str) -> Any:
    if name not in ds.tensors:
        raise TensorDoesNotExistError(name, list(ds.tensors))
    return ds.tensors[name]


def _row(ds: Any, row: int, length: int | None = None) -> int:
    n = len(ds) if length is None else length
    if row >= n:
        raise SampleIndexError(f"Row {row} is past the end: version {ds.version} has {n} rows.")
    return row


class ViewerApp:
    """The routes of the viewer over one dataset (see the module docstring).

    Args:
        source: the dataset's read-only handles, by version.
        thumb_cache_bytes: bytes of thumbnails kept.
    """

    def __init__(self, source: DatasetSource, thumb_cache_bytes: int = THUMB_CACHE_BYTES) -> None:
        self.source = source
        self.thumbs: LruCache[bytes] = LruCache(thumb_cache_bytes)
        self.selections: LruCache[Rows] = LruCache(SELECTION_CACHE_BYTES)

    # -- helpers ------------------------------------------------------------------------------------
    def _selection(self, opened: Opened, ds: Any, expr: str | None) -> Rows:
        """The rows ``expr`` keeps in ``ds`` (cached by id, version and text)."""
        if expr is None:
            return range(len(ds))
        key = (*opened.key, expr)
        rows = self.selections.get(key)
        if rows is None:
            rows = _select.select(ds, expr)
            self.selections.put(key, rows, 8 * len(rows) + 64)
        return rows

    @staticmethod
    def _thumb_url(key: tuple[str, int], tensor: str | None, row: int) -> str | None:
        """The thumbnail of row ``row`` of ``tensor`` in version ``key = (id, version)``."""
        if tensor is None:
            return None
        return "/api/thumb?" + urlencode({"id": key[0], "version": key[1], "tensor": tensor, "row": row})

    # -- routes -------------------------------------------------------------------------------------
    def info(self, params: Params) -> dict[str, Any]:
        """``/api/info?version=``: the dataset at that version: its tensors, branches and tags."""
        opened = self.source.open(params.version())
        with self.source.reading(opened) as ds:
            image = _shown_image(ds)
            tensors = {
                name: {
                    "htype": t.htype,
                    "dtype": str(t.dtype),
                    "length": len(t),
                    "sample_compression": t.sample_compression,
                    "chunk_compression": t.chunk_compression,
                    "info": jsonable(dict(t.info)),
                }
                for name, t in ds.tensors.items()
            }
            return {
                "path": ds.path,
                "id": ds.id,
                "version": ds.version,
                "default": self.source.default,
                "length": len(ds),
                "tensors": tensors,
                "images": image_tensors(ds),
                "image": image,
                "labels": class_label_tensors(ds),
                "targets": target_tensors(ds, image) if image else [],
                "branches": ds.branches,
                "tags": ds.tags,
                "page_size": PAGE_SIZE,
            }

    def samples(self, params: Params) -> dict[str, Any]:
        """``/api/samples?version=&expr=&offset=&limit=``: a page of the rows ``expr`` keeps."""
        expr = params.text("expr")
        offset = params.number("offset", 0)
        limit = params.number("limit", PAGE_SIZE, 1, MAX_LIMIT)
        opened = self.source.open(params.version())
        with self.source.reading(opened) as ds:
            selected = self._selection(opened, ds, expr)
            page = [int(i) for i in selected[offset : offset + limit]]
            image = _shown_image(ds)
            labels, errors = captions(ds, page)
            rows = [
                {"index": i, "captions": c, "thumb": self._thumb_url(opened.key, image, i)}
                for i, c in zip(page, labels, strict=True)
            ]
            return {
                "id": ds.id,
                "version": ds.version,
                "expr": expr,
                "total": len(selected),
                "offset": offset,
                "limit": limit,
                "image": image,
                "rows": rows,
                "errors": errors,
            }

    def sample(self, params: Params, row: int) -> dict[str, Any]:
        """``/api/sample/N?version=&expr=``: every tensor's value at row N, and its neighbours within
        the rows ``expr`` keeps."""
        expr = params.text("expr")
        opened = self.source.open(params.version())
        with self.source.reading(opened) as ds:
            _row(ds, row)
            selected = self._selection(opened, ds, expr)
            images = set(image_tensors(ds))
            tensors = {name: tensor_entry(ds, name, row, name in images) for name in ds.tensors}
            for name in images & tensors.keys():
                tensors[name]["url"] = self._image_url(ds, name, row, False)
                tensors[name]["overlay_url"] = self._image_url(ds, name, row, True)
            return {
                "id": ds.id,
                "version": ds.version,
                "index": row,
                "expr": expr,
                "total": len(selected),
                **_neighbours(selected, row),
                "tensors": tensors,
            }

    def _image_url(self, ds: Any, tensor: str, row: int, overlays: bool) -> str:
        query = {"id": ds.id, "version": ds.version, "tensor": tensor, "row": row}
        return "/api/image?" + urlencode({**query, **({"overlays": 1} if overlays else {})})

    def count(self, params: Params) -> dict[str, Any]:
        """``/api/count?tensor=&version=&expr=``: ``count_values`` of a tensor over the rows ``expr``
        keeps, with the expression text that selects each value."""
        tensor = params.tensor()
        expr = params.text("expr")
        opened = self.source.open(params.version())
        with self.source.reading(opened) as ds:
            per_object = bool(_tensor(ds, tensor).ndim)
            data = ds if expr is None else ds[self._selection(opened, ds, expr)]
            counts = _select.count_values(data, tensor)
            return {
                "version": ds.version,
                "tensor": tensor,
                "expr": expr,
                "per_object": per_object,
                "counts": [[jsonable(value), n] for value, n in counts],
                "clauses": [_select.value_clause(tensor, value) for value, _ in counts],
            }

    def log(self, params: Params) -> dict[str, Any]:
        """``/api/log``: ``ds.log(all_branches=True)`` (every version every branch and tag reaches, with
        parents, the branch it was committed on, the branches and tags at it, and the eval that made it)."""
        opened = self.source.open(params.version())
        with self.source.reading(opened) as ds:
            return {
                "version": ds.version,
                "entries": jsonable(ds.log(all_branches=True)),
                "branches": ds.branches,
                "tags": ds.tags,
            }

    def thumb(self, params: Params) -> bytes:
        """``/api/thumb?id=&version=&tensor=&row=``: a thumbnail (PNG) with targets drawn over it."""
        dataset_id = params.text("id", 64) or ""
        version = params.number("version", -1, 0, MAX_NUMBER)
        if not dataset_id or version < 0:
            raise InvalidArgumentError("/api/thumb needs id= and version= (the page's links carry them).")
        tensor, row = params.tensor(), params.number("row", 0)
        key = (dataset_id, version, tensor, row)
        cached = self.thumbs.get(key)
        if cached is not None:
            return cached
        opened = self.source.pinned(dataset_id, version)
        with self.source.reading(opened) as ds:
            _image_tensor(ds, tensor)
            _row(ds, row, len(ds[tensor]))
            data = thumbnail(ds, tensor, row)
        self.thumbs.put(key, data, len(data))
        return data

    def image(self, params: Params) -> tuple[bytes, str]:
        """``/api/image?id=&version=&tensor=&row=&overlays=``: the full-size image and its media type."""
        dataset_id = params.text("id", 64) or ""
        version = params.number("version", -1, 0, MAX_NUMBER)
        if not dataset_id or version < 0:
            raise InvalidArgumentError("/api/image needs id= and version= (the page's links carry them).")
        tensor, row, overlays = params.tensor(), params.number("row", 0), params.flag("overlays")
        opened = self.source.pinned(dataset_id, version)
        with self.source.reading(opened) as ds:
            _image_tensor(ds, tensor)
            _row(ds, row, len(ds[tensor]))
            return full_image(ds, tensor, row, overlays)

    def diff(self, params: Params) -> dict[str, Any]:
        """``/api/diff?a=&b=&offset=&limit=``: ``ds.diff(a, b)``, rows counted per tensor, and a page of
        the replaced rows with thumbnails of both sides (``b`` defaults to the page's version, ``a`` to
        ``b``'s parent)."""
        offset = params.number("offset", 0)
        limit = params.number("limit", PAGE_SIZE, 1, MAX_LIMIT)
        b = params.version("b")
        newer = self.source.open(params.version() if b is None else b)  # b=0 is a version
        with self.source.reading(newer) as ds:
            d = ds.diff(params.version("a"))  # without a: what this version's own commit changed
            ranges = _merged([r for t in d.tensors.values() for r in t.replaced])
            page = list(_rows_of(ranges, offset, limit))
            image = _shown_image(ds)
            new_captions, errors = captions(ds, page)
        older = self.source.pinned(newer.key[0], d.a)
        with self.source.reading(older) as old:
            old_image = image if image in image_tensors(old) else None
            old_captions, old_errors = captions(old, page)
        rows = [
            {
                "index": i,
                "old": self._thumb_url(older.key, old_image, i),
                "new": self._thumb_url(newer.key, image, i),
                "old_captions": oc,
                "new_captions": nc,
            }
            for i, oc, nc in zip(page, old_captions, new_captions, strict=True)
        ]
        return {
            "id": newer.key[0],
            "a": d.a,
            "b": d.b,
            "text": str(d),
            "diff": d.to_dict(),
            "counts": {name: _counts(t.to_dict()) for name, t in d.tensors.items()},
            "replaced": {
                "total": sum(b - a for a, b in ranges),
                "offset": offset,
                "limit": limit,
                "rows": rows,
            },
            "errors": errors + old_errors,
        }


def _image_tensor(ds: Any, tensor: str) -> None:
    _tensor(ds, tensor)
    if tensor not in image_tensors(ds):
        raise InvalidArgumentError(
            f"Tensor {tensor!r} does not hold images; image tensors here: {image_tensors(ds)!r}."
        )


def _neighbours(selected: Rows, row: int) -> dict[str, int | None]:
    """The position of ``row`` among the rows an expression keeps, and the rows before and after it
    there (the sample page's previous and next); None where there is none."""
    n = len(selected)
    if isinstance(selected, range):
        k = row
    else:
        k = int(np.searchsorted(selected, row))
        if k == n or int(selected[k]) != row:  # not kept: the neighbours are the kept rows around it
            return {
                "position": None,
                "prev": int(selected[k - 1]) if k > 0 else None,
                "next": int(selected[k]) if k < n else None,
            }
    return {
        "position": k,
        "prev": int(selected[k - 1]) if k > 0 else None,
        "next": int(selected[k + 1]) if k + 1 < n else None,
    }


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Row ranges sorted and merged where they overlap or touch."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _rows_of(ranges: list[tuple[int, int]], offset: int, limit: int) -> Iterator[int]:
    """Rows ``offset .. offset + limit`` of the rows the ``ranges`` hold, in order (none materialised
    beyond those)."""
    skip, left = offset, limit
    for a, b in ranges:
        if skip >= b - a:
            skip -= b - a
            continue
        for i in range(a + skip, min(b, a + skip + left)):
            yield i
            left -= 1
        skip = 0
        if not left:
            return


def _counts(diff: dict[str, Any]) -> dict[str, int]:
    """Rows appended, replaced and removed, from a `TensorDiff` as plain values."""

    def span(rows: list[int] | None) -> int:
        return 0 if rows is None else rows[1] - rows[0]

    return {
        "appended": span(diff["appended"]),
        "replaced": sum(b - a for a, b in diff["replaced"]),
        "removed": span(diff["removed"]),
    }
