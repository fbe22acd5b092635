"""Tensor specs: what a tensor is declared as, checked without touching any sample.

A tensor's name, htype, dtype and compressions (`TensorSpec`), and the names lakecompute accepts for
each. What the htype means is its declaration (`lakecompute.specs.HType`, in ``_htypes.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Generic, Literal, TypeVar, get_args

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.specs._htypes import HTYPES, HType, parse_htype

__all__ = [
    "CHUNK_COMPRESSIONS",
    "MAX_TENSOR_NAME",
    "SAMPLE_COMPRESSIONS",
    "ChunkCompression",
    "Encoded",
    "SampleCompression",
    "TensorSpec",
    "check_new_tensor_name",
    "parse_chunk_compression",
    "parse_htype_info",
    "parse_sample_compression",
    "parse_tensor_name",
    "parse_tensor_spec",
]

# Matched with fullmatch: "$" alone would also accept a trailing newline ("x\n").
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")
#: The longest name `create_tensor` accepts (see `check_new_tensor_name`).
MAX_TENSOR_NAME = 128


SampleCompression = Literal["png", "jpeg", "webp"]
"""The names of the image codecs a tensor's samples can be stored with."""

ChunkCompression = Literal["zstd", "lz4", "gzip"]
"""The names of the generic codecs a tensor's chunks can be stored with."""

SAMPLE_COMPRESSIONS: Final[frozenset[str]] = frozenset(get_args(SampleCompression))
"""Every accepted sample compression (``None``, meaning raw arrays, is accepted too)."""

CHUNK_COMPRESSIONS: Final[frozenset[str | None]] = frozenset({*get_args(ChunkCompression), None})
"""Every accepted chunk compression, ``None`` meaning uncompressed chunks."""

_Name = TypeVar("_Name", bound=str)


@dataclass(frozen=True, slots=True)
class _CompressionNames(Generic[_Name]):
    """The names of one kind of compression that a parser accepts, in any case: each canonical name (the
    kind's ``Literal``) and the aliases users reach for; None (no compression) as well."""

    what: str
    """The kind, as error messages name it."""
    lookup: Mapping[str, _Name]
    """Every accepted lower-case spelling, to its canonical name."""

    @classmethod
    def of(
        cls, what: str, names: tuple[_Name, ...], aliases: Mapping[str, _Name]
    ) -> _CompressionNames[_Name]:
        """The names of a kind: its canonical ``names`` (``get_args`` of its ``Literal``) and ``aliases``."""
        return cls(what, MappingProxyType({**{n: n for n in names}, **aliases}))

    def parse(self, value: str | None) -> _Name | None:
        """The canonical name of ``value``; None stays None."""
        if value is None:
            return None
        if not isinstance(value, str):
            raise InvalidTypeError(
                f"Expected the {self.what} as a str or None. Got {type(value).__name__} {value!r}."
            )
        name = self.lookup.get(value.strip().lower())
        if name is None:
            expected = ", ".join(["None", *(repr(n) for n in sorted(set(self.lookup.values())))])
            raise InvalidArgumentError(f"Unknown {self.what} {value!r}. Expected one of {expected}.")
        return name


_SAMPLE_NAMES: Final[_CompressionNames[SampleCompression]] = _CompressionNames.of(
    "sample compression", get_args(SampleCompression), {"jpg": "jpeg"}
)
_CHUNK_NAMES: Final[_CompressionNames[ChunkCompression]] = _CompressionNames.of(
    "chunk compression", get_args(ChunkCompression), {}
)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """The fixed description of a tensor.

    Attributes:
        name: the tensor's name in the dataset.
        htype: one of `HTYPES`.
        dtype: numpy dtype name; None for generic tensors until the first commit decides it;
            ``"str"`` for text and ``"json"`` for json.
        sample_compression: ``png`` / ``jpeg`` / ``webp`` for images stored encoded, else None.
        chunk_compression: the zarr codec for the tensor's bytes (``zstd``, ``lz4``, ``gzip``, None).
    """

    name: str
    htype: str
    dtype: str | None
    sample_compression: str | None
    chunk_compression: str | None

    @property
    def declaration(self) -> HType:
        """What the htype declares: its dtypes, storage, class names, info (see `HType`)."""
        return HTYPES[self.htype]

    @property
    def kind(self) -> Literal["array", "bytes"]:
        """``bytes`` when each sample is stored as one encoded blob, else ``array``."""
        if self.sample_compression is not None or HTYPES[self.htype].blob:
            return "bytes"
        return "array"

    def to_json(self) -> dict[str, Any]:
        return {
            "htype": self.htype,
            "dtype": self.dtype,
            "sample_compression": self.sample_compression,
            "chunk_compression": self.chunk_compression,
        }

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> TensorSpec:
        return cls(
            name=name,
            htype=str(obj["htype"]),
            dtype=obj.get("dtype"),
            sample_compression=obj.get("sample_compression"),
            chunk_compression=obj.get("chunk_compression"),
        )


def parse_tensor_name(name: object) -> str:
    """Check a tensor name: letters, digits, ``_`` and ``-``, not starting with ``-``."""
    if not isinstance(name, str):
        raise InvalidTypeError(f"Expected a tensor name as str. Got {type(name).__name__}: {name!r}.")
    if not _NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"Invalid tensor name {name!r}: use letters, digits, '_' and '-' (not empty, no '/', "
            "no '..', not starting with '.' or '-'), e.g. 'images' or 'labels_2'."
        )
    return name


def check_new_tensor_name(name: object) -> str:
    """Check the name of a tensor being created: `parse_tensor_name`, and at most `MAX_TENSOR_NAME`
    characters, so that every backend can store the paths named after it (``compact`` writes
    ``tensors/<name>/...``; local file systems allow 255 bytes per path component, S3 1024 per key).
    Names read from existing manifests are not held to the length limit.
    """
    parse_tensor_name(name)
    assert isinstance(name, str)
    if len(name) > MAX_TENSOR_NAME:
        raise InvalidArgumentError(
            f"Invalid tensor name {name[:20]!r}... ({len(name)} characters): tensor names are at most "
            f"{MAX_TENSOR_NAME} characters, so that every storage backend can hold the paths named after "
            "them. Choose a shorter name."
        )
    return name


def parse_tensor_spec(
    name: str,
    htype: str | None = None,
    dtype: object = None,
    sample_compression: str | None = None,
    chunk_compression: str | None = "default",
) -> TensorSpec:
    """Check and normalise the arguments of ``create_tensor``.

    ``chunk_compression="default"`` picks zstd for numeric tensors and nothing for encoded images,
    text and json; None stores the bytes uncompressed.
    """
    parse_tensor_name(name)
    declared = parse_htype(htype, name)
    sc = parse_sample_compression(sample_compression)
    if sc is not None:
        if declared.with_sample_compression is None:
            raise InvalidArgumentError(
                f"sample_compression={sc!r} needs htype 'image'; tensor {name!r} has htype "
                f"{declared.name!r}. Use chunk_compression for other tensors."
            )
        declared = HTYPES[declared.with_sample_compression]
    use_default = chunk_compression == "default"
    cc = None if use_default else parse_chunk_compression(chunk_compression)
    dt = declared.dtype if dtype is None else declared.parse_dtype(name, dtype)
    if use_default and sc is None and declared.numeric:
        cc = "zstd"  # cheap and effective on numeric data; encoded images gain nothing from it
    return TensorSpec(name=name, htype=declared.name, dtype=dt, sample_compression=sc, chunk_compression=cc)


@dataclass(frozen=True, slots=True)
class Encoded:
    """One checked sample ready to store: a numeric array, or an encoded blob with its shape (a blob may be
    a view of a buffer it was read from, a table's column of images: it is stored from there, not copied
    first, in the process that made it)."""

    array: np.ndarray | None
    blob: bytes | memoryview | None
    shape: tuple[int, ...]


def parse_sample_compression(value: str | None) -> SampleCompression | None:
    """Check and normalise a sample compression name.

    Args:
        value: ``"png"``, ``"jpeg"`` (or ``"jpg"``), ``"webp"`` in any case, or ``None`` for raw arrays.

    Returns:
        The canonical lower-case name, or ``None``.

    Raises:
        InvalidArgumentError: if the name is not a known sample compression.
        InvalidTypeError: if ``value`` is neither a str nor None.

    Example:
        >>> parse_sample_compression("JPG")
        'jpeg'
    """
    return _SAMPLE_NAMES.parse(value)


def parse_chunk_compression(value: str | None) -> ChunkCompression | None:
    """`parse_sample_compression` for a chunk compression: ``"zstd"``, ``"lz4"`` or ``"gzip"`` in any
    case, or ``None`` for uncompressed chunks, with the same result and errors.

    Example:
        >>> parse_chunk_compression("ZSTD")
        'zstd'
    """
    return _CHUNK_NAMES.parse(value)


def parse_htype_info(spec: TensorSpec, info: Mapping[str, Any]) -> dict[str, Any]:
    """Check the info a tensor of ``spec.htype`` is created with, and fill in its defaults (the
    htype's `HType.parse_info`).

    * ``bbox``: ``format`` (``"xyxy"`` by default, ``"xywh"`` or ``"cxcywh"``) and ``normalized``
      (False: pixel coordinates; True: fractions of the image's width and height, in 0..1).
    * ``keypoints``: optional ``keypoint_names`` (distinct strings; samples then have that many
      keypoints) and ``skeleton`` (pairs of 1-based keypoint numbers, as COCO writes them).

    Raises:
        InvalidArgumentError: a value of the wrong kind, naming the key and what it accepts.
    """
    return spec.declaration.parse_info(spec.name, dict(info))
