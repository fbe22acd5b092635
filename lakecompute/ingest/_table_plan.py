"""What each column of a table becomes in ``lc.from_arrow`` and the other table ingests: a tensor (its
``create_tensor`` arguments) and how a cell becomes its sample (`ColumnPlan`).

A column's tensor is what ``htypes=`` says; else what the table recorded (the layout ``ds.to_arrow``
writes, the Hugging Face features); else what its type suggests (numbers: generic, strings: text, a
``{bytes, path}`` struct: image, a pandas category: class_label). A column that cannot become the tensor
asked for is refused before anything is written, naming the column, what it holds and the rule.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from io import BytesIO
from typing import Any, Literal

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidSampleError, InvalidTypeError
from lakecompute.ingest._files import EXTENSION_FORMATS, FORMATS
from lakecompute.ingest._plan import plan_for_ingest, target_mode
from lakecompute.localfiles import Folder
from lakecompute.specs import HTYPES, parse_htype
from lakecompute.tables import Bad, CellReader, ColumnLayout, ImageBytes, TableInput, image_format, pyarrow

__all__ = ["ColumnPlan", "plan_columns"]

Convert = Literal["as_is", "path"]


@dataclass(frozen=True)
class ColumnPlan:
    """One column of the table as one tensor.

    Attributes:
        column: the column's (and tensor's) name.
        create: ``create_tensor``'s arguments besides the name.
        convert: ``as_is`` (the cell is the sample) or ``path`` (the cell names an image file inside
            ``folder``).
        folder: the folder image paths are confined to.
        dims: an image tensor's rank and channels (``(None, None)``: greyscale; ``(None, None, 3)``).
        verify: how an image kept as its bytes is checked: decoded once, or (False) its file's
            structure only (`ImageBytes.verify`).
    """

    column: str
    create: Mapping[str, Any]
    convert: Convert = "as_is"
    folder: Folder | None = None
    dims: tuple[int | None, ...] = field(default=())
    verify: bool = True

    def sample(self, cell: Any) -> Any:
        """The sample a cell stands for.

        Raises:
            InvalidArgumentError: the cell breaks the column's rule (the message says which).
        """
        if isinstance(cell, Bad):
            raise InvalidArgumentError(cell.reason)
        if self.create.get("htype") != "image":
            return cell
        if self.convert == "path" or isinstance(cell, str):
            cell = self._image_file(cell)
        if not isinstance(cell, ImageBytes):
            return cell
        # Checked here, in the row's own call, so that an image that fails its check fails its row: kept
        # as its bytes where they are the tensor's format, else the pixels (decoded once, encoded again).
        cell.verify = self.verify
        try:
            return cell.check() if cell.format == self.create.get("sample_compression") else cell.numpy()
        except InvalidSampleError as exc:
            raise InvalidArgumentError(exc.detail) from exc

    def _image_file(self, name: Any) -> ImageBytes:
        if self.folder is None:
            raise InvalidArgumentError(
                "the value is an image path, and no images_folder was given to read it from; pass "
                "images_folder= (the folder the paths are relative to)"
            )
        path = self.folder.confine(name, what=f"the image path {name!r:.200}")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot read the image file {path!r} ({exc.strerror or exc})"
            ) from exc
        _refuse_format(path, data)
        return ImageBytes(data, name, None, self.dims, verify=self.verify)


_READ_FORMATS = frozenset(EXTENSION_FORMATS.values())


def _refuse_format(path: str, data: bytes) -> None:
    """Refuse an image file of a format the folder ingests do not read (a GIF or an APNG may hold many
    frames, of which one would be stored), found from its bytes, whatever its name: a path need not end
    in the format's ending. Bytes Pillow does not read at all are refused when they are decoded."""
    if image_format(data) != "unknown":
        return  # png, jpeg, webp or bmp
    from PIL import Image

    try:
        with Image.open(BytesIO(data)) as image:
            found = image.format or "unknown"
    except Exception:  # Pillow raises OSError, ValueError or SyntaxError for what it does not read
        return
    if FORMATS.get(found, found.lower()) not in _READ_FORMATS:
        raise InvalidArgumentError(
            f"the image file {path!r} is a {found} file; image paths name files of the formats the "
            f"folder ingests read ({', '.join(sorted(_READ_FORMATS))}): convert it to one of those"
        )


def _kind_of(table: TableInput, name: str) -> str:
    """What the column holds, for messages (its Arrow type, or pandas dtype)."""
    schema = getattr(table, "schema", None)
    if schema is not None:
        return str(schema.field(name).type)
    frame = getattr(table, "frame", None)
    return str(frame[name].dtype) if frame is not None else "values"


def _not_json(table: TableInput, name: str) -> bool:
    """Whether the column holds values no JSON text reads back as (times, decimals, raw bytes)."""
    schema = getattr(table, "schema", None)
    if schema is not None:
        pa = pyarrow()
        t, dtype = pa.types, schema.field(name).type
        return bool(
            t.is_temporal(dtype) or t.is_decimal(dtype) or t.is_binary(dtype) or t.is_large_binary(dtype)
            or t.is_interval(dtype) or t.is_null(dtype)
        )  # fmt: skip
    frame = getattr(table, "frame", None)
    return frame is not None and frame[name].dtype.kind in "mMOV" and frame[name].dtype.kind != "O"


def _refuse(name: str, holds: str, htype: str, rule: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Column {name!r} holds {holds}, which cannot become a {htype} tensor: {rule}. Pass htypes= to say "
        "what the column is, or leave it out (columns=)."
    )


def _tensor_args(layout: ColumnLayout, recorded: bool) -> dict[str, Any]:
    """``create_tensor``'s arguments for the tensor a layout describes (a recorded one exactly, with its
    compressions; an inferred one with the htype's defaults)."""
    declared = HTYPES[layout.htype]
    args: dict[str, Any] = {"htype": layout.htype}
    if declared.numeric and layout.dtype is not None:
        args["dtype"] = layout.dtype
    if recorded:
        args["sample_compression"] = layout.sample_compression
        args["chunk_compression"] = layout.chunk_compression
    info = dict(layout.info)
    names = info.pop("class_names", None)
    if declared.class_named and names:
        args["class_names"] = names
    return args | info


def _user_spec(name: str, spec: Any) -> dict[str, Any]:
    if isinstance(spec, str):
        return {"htype": parse_htype(spec, name).name}
    if isinstance(spec, Mapping) and "htype" in spec:
        return dict(spec) | {"htype": parse_htype(spec["htype"], name).name}
    raise InvalidTypeError(
        f"htypes[{name!r}] must be an htype name or a dict of create_tensor arguments with 'htype'. Got "
        f"{spec!r:.100}."
    )


@dataclass(frozen=True)
class _Context:
    table: TableInput
    image_compression: str | None
    folder: Folder | None


def _image_plan(ctx: _Context, reader: CellReader, args: dict[str, Any]) -> tuple[CellReader, ColumnPlan]:
    """An image column: bytes (stored as they are where the format is the tensor's) or paths."""
    name = reader.name
    layout = reader.layout
    recorded = reader.recorded and layout is not None and layout.htype == "image"
    if reader.kind in ("text", "path"):
        paths = [c for c in ctx.table.column_values(name) if isinstance(c, str)]
        if ctx.folder is None:
            raise _refuse(name, "image paths", "image", "pass images_folder= to say where the files are")
        files = [p for p in (_confined(ctx.folder, p) for p in paths[:1_000_000]) if p]
        compression = (
            args.get("sample_compression") or plan_for_ingest(files, ctx.image_compression).compression
        )
        grey = bool(files) and target_mode(files) == "L"  # no file to look at: colour, as for bytes
        dims: tuple[int | None, ...] = (None, None) if grey else (None, None, 3)
        plan = ColumnPlan(name, args | {"sample_compression": compression}, "path", ctx.folder, dims)
        return CellReader(name, "path"), plan
    if recorded and layout is not None:
        keep = ctx.image_compression in ("auto", layout.sample_compression)
        compression = layout.sample_compression if keep else ctx.image_compression
        return reader, ColumnPlan(name, args | {"sample_compression": compression}, dims=layout.dims)
    first = ctx.table.first_cell(name)
    fmt = image_format(first.data) if isinstance(first, ImageBytes) else "png"
    auto = fmt if fmt in ("png", "jpeg", "webp") else "png"
    compression = args.get(
        "sample_compression", auto if ctx.image_compression == "auto" else ctx.image_compression
    )
    grey = isinstance(first, ImageBytes) and _is_grey(first)
    dims = (None, None) if grey else (None, None, 3)
    image_reader = CellReader(name, "image", ColumnLayout(name, "image", "uint8", dims=dims))
    return image_reader, ColumnPlan(name, args | {"sample_compression": compression}, dims=dims)


def _is_grey(image: ImageBytes) -> bool:
    try:
        return len(image.shape) == 2
    except InvalidSampleError:
        return False  # a damaged first image is reported, by row, when it is stored (or skipped)


def _confined(folder: Folder, name: str) -> str | None:
    try:
        return folder.confine(name, what="an image path")
    except InvalidArgumentError:
        return None  # refused, naming the row, when that row is read


def _plan_one(ctx: _Context, reader: CellReader, spec: Any) -> tuple[CellReader, ColumnPlan]:
    name, layout = reader.name, reader.layout
    if spec is None:
        if layout is None:
            if _not_json(ctx.table, name):
                holds = _kind_of(ctx.table, name)
                raise _refuse(name, holds, "json", "its values are not JSON; convert the column first")
            return CellReader(name, "value"), ColumnPlan(name, {"htype": "json"})
        args = _tensor_args(layout, reader.recorded)
    else:
        args = _user_spec(name, spec)
    htype = args["htype"]
    if htype == "image":
        return _image_plan(ctx, reader, args)
    return _typed_plan(ctx, reader, args)


def _typed_plan(ctx: _Context, reader: CellReader, args: dict[str, Any]) -> tuple[CellReader, ColumnPlan]:
    """A column of numbers, labels, text, json or polygons."""
    name, layout, htype = reader.name, reader.layout, args["htype"]
    declared = HTYPES[htype]
    holds = _kind_of(ctx.table, name)
    if declared.labels and reader.kind == "text" and "class_names" not in args:
        args = args | {
            "class_names": sorted({c for c in ctx.table.column_values(name) if isinstance(c, str)})
        }
    elif declared.labels and layout is not None and layout.class_names and "class_names" not in args:
        args = args | {"class_names": layout.class_names}
    if htype == "text" and reader.kind not in ("text", "path"):
        raise _refuse(name, holds, htype, "a text tensor takes strings")
    if htype == "json" and reader.kind == "text":
        reader = CellReader(name, "json", ColumnLayout(name, "json", "json"))
    if declared.arrow.column == "polygons" and reader.kind != "polygons":
        reader = CellReader(name, "polygons", ColumnLayout(name, htype, args.get("dtype", declared.dtype)))
    numbers = declared.numeric and declared.arrow.column == "numbers"
    names = declared.labels and reader.kind == "text"
    if numbers and reader.kind not in ("numbers", "value") and not names:
        raise _refuse(name, holds, htype, f"a {htype} tensor takes numbers")
    if "dtype" not in args and declared.numeric and declared.dtype is None and layout and layout.dtype:
        args = args | {"dtype": layout.dtype}
    return _with_pad_dims(reader, declared.pad), ColumnPlan(name, args)


def _with_pad_dims(reader: CellReader, pad: Any) -> CellReader:
    """A reader of nested lists whose trailing extents the htype fixes (a box is 4 numbers), so that an
    empty cell is a sample of none of them, ``(0, 4)``, not ``(0, 0)``."""
    layout = reader.layout
    if reader.kind != "numbers" or layout is None or reader.recorded or not layout.dims:
        return reader
    trailing = np.shape(pad(np.dtype(layout.dtype or "float32"), len(layout.dims)))[1:]
    if not trailing or len(trailing) >= len(layout.dims):
        return reader
    dims = layout.dims[: len(layout.dims) - len(trailing)] + tuple(
        d if d is not None else int(t) for d, t in zip(layout.dims[-len(trailing) :], trailing, strict=True)
    )
    return replace(reader, layout=replace(layout, dims=dims))


def plan_columns(
    table: TableInput,
    htypes: Mapping[str, Any] | None,
    image_compression: str | None,
    images_folder: str | os.PathLike[str] | None,
    verify: bool = True,
) -> tuple[ColumnPlan, ...]:
    """A plan per column of ``table``; the table's readers are set to read each as its plan needs
    (``verify``: how its images are checked, `ColumnPlan.verify`).

    Raises:
        InvalidArgumentError: a column that cannot become its tensor, an ``htypes`` key that is not a
            column, or an unknown htype.
        InvalidTypeError: ``htypes`` that is not a dict, or a value of it that is neither an htype nor a
            dict with one.
    """
    if htypes is not None and not isinstance(htypes, Mapping):
        raise InvalidTypeError(
            "htypes must be a dict of column name to an htype or a dict of create_tensor arguments "
            f"({{'file': 'image'}}). Got {type(htypes).__name__} {htypes!r:.100}."
        )
    given = dict(htypes or {})
    unknown = [c for c in given if c not in table.readers]
    if unknown:
        raise InvalidArgumentError(
            f"htypes names column(s) {unknown!r} the table does not have: {table.columns!r}."
        )
    folder = Folder.of(os.fspath(images_folder)) if images_folder is not None else None
    ctx = _Context(table, image_compression, folder)
    readers, plans = {}, []
    for name, reader in table.readers.items():
        new_reader, plan = _plan_one(ctx, reader, given.get(name))
        readers[name] = new_reader
        plans.append(plan if verify else replace(plan, verify=False))
    table.readers = readers
    return tuple(plans)
