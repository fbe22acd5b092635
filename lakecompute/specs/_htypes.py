"""The htype declarations: what each kind of sample is, in one table that every layer asks.

An htype is named by a string in manifests and in ``create_tensor``; everything the library knows about
it is declared once here, in its `HType`: the dtypes it takes, whether its samples are stored as arrays or
as one blob each, whether it names classes, what its info holds, what stands in for a missing sample, what
``numpy()`` of several of them is, and how the notebook view and the loaders treat it. Code that needs to
know "what kind of tensor is this" reads the declaration (``spec.declaration``, `htype_declaration`)
instead of comparing names, so adding an htype is a declaration here plus its codec in
`lakecompute.htypes` (see docs/how-it-works.md, "Adding an htype").

This module sits below storage (storage checks manifests against it), so it knows nothing of how samples
are encoded; it imports only `lakecompute.errors` and `lakecompute.boxes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

import numpy as np

from lakecompute.boxes import BoxLayout
from lakecompute.errors import InvalidArgumentError

__all__ = [
    "CLASS_NAMED_HTYPES",
    "HTYPES",
    "NOT_NUMERIC_DTYPES",
    "ArrowColumn",
    "ArrowMapping",
    "HType",
    "ObjectAxis",
    "Target",
    "htype_declaration",
    "parse_htype",
]

Target = Literal["boxes", "mask", "class_mask", "keypoints", "polygons"]
"""What a detection or segmentation sample marks on its image: boxes, a mask (a channel per object), a
class id per pixel, keypoints or polygons."""

InfoParser = Callable[[str, dict[str, Any]], dict[str, Any]]
"""Checks a tensor's info for its htype and fills in the defaults: ``(tensor name, info) -> info``."""


ArrowColumn = Literal["numbers", "image", "text", "json", "polygons"]
"""How a sample is one cell of an Arrow column (`ArrowMapping.column`)."""


@dataclass(frozen=True, slots=True)
class ArrowMapping:
    """How the samples of an htype are a column of an Arrow table (Parquet, pandas, Hugging Face
    ``datasets``), and which Hugging Face feature types it: one declaration that both directions use
    (``ds.to_arrow()`` and ``lc.from_arrow``, in `lakecompute.tables`), so that a round trip is exact.

    The tensor's own description (htype, dtype, compressions, info, which dimensions are fixed) travels
    in the field's metadata beside it; see docs/tables.md for each htype's column.
    """

    column: ArrowColumn
    """``numbers``: a sample's numbers, a plain value for a scalar, else nested lists (fixed-size where
    every row has that extent); ``image``: Hugging Face's image struct ``{bytes, path}`` holding the
    stored encoded bytes; ``text``: a string; ``json``: the sample's JSON text, a string marked json;
    ``polygons``: lists of objects of polygons of ``(x, y)`` points."""
    cast: str | None = None
    """The Arrow value type numbers are written as where it is not the tensor's dtype (class labels are
    int64, as Hugging Face's ``ClassLabel`` reads them); the field metadata keeps the dtype."""
    class_label: bool = False
    """A named tensor's values are Hugging Face ``ClassLabel(names=...)`` of its class names (in a
    ``Sequence`` for several per sample)."""
    objects: bool = False
    """The objects' axis (`HType.objects`: a sample's boxes, labels, keypoints, a mask's channels) is a
    variable-length list in every export, whatever count the exported rows happen to share: the column's
    type is the tensor's, not its rows', so that exports of different rows are read back together."""
    trailing: tuple[int, ...] = ()
    """The extents of the samples' last dimensions that the htype fixes (a box's 4 coordinates, a
    keypoint's x, y and visibility): fixed-size lists in every export, one of no rows included."""


def _empty_sample(dtype: np.dtype[Any], ndim: int) -> Any:
    """An empty array of the tensor's rank and dtype; zero for a tensor of scalars (a label, a number),
    so that the value can be stored again."""
    return np.zeros((0,) * ndim if ndim else (), dtype=dtype)


def _same_info(tensor: str, info: dict[str, Any]) -> dict[str, Any]:
    return info


@dataclass(frozen=True, slots=True)
class ObjectAxis:
    """Where a sample lists objects, one entry per object (a box, its class label, its score, a mask's
    channel, its keypoints, its polygons): what ``ds.filter_labels`` keeps or drops together, aligned by
    object, and what ``len()`` of a value counts."""

    rank: int | None
    """The rank of the samples that list objects (a ``(k, 4)`` box sample: 2; a ``(k,)`` label sample: 1;
    a lower rank is one value per image); None: every sample lists objects (polygons)."""
    axis: Literal[0, -1] = 0
    """The objects' axis: the first (boxes, labels, keypoints, polygons) or the last (a ``H x W x K``
    mask)."""


@dataclass(frozen=True, slots=True)
class HType:
    """The declaration of one htype: what its samples are, stated once for every layer.

    Its codec (how a sample is checked, encoded and decoded) is registered against it in
    `lakecompute.htypes`.
    """

    name: str
    """The name ``create_tensor`` takes and manifests record."""
    dtype: str | None
    """The dtype of a tensor created without one: a numpy dtype name, None where the samples decide it
    at the first commit (generic), ``"str"`` or ``"json"`` for values that are not numbers."""
    dtypes: str = ""
    """The numpy dtype kinds ``create_tensor(dtype=...)`` accepts; empty: the values are not numbers, and
    no dtype may be given."""
    dtype_rule: str = ""
    """What the accepted dtypes are, in words, for the message that refuses another ("needs an integer
    dtype"); an empty rule with `dtypes` means any of those kinds."""
    exact_dtype: bool = False
    """Only `dtype` itself is accepted (an image is uint8, a binary mask bool)."""
    blob: bool = False
    """Each sample is stored as one encoded blob (text, json, polygons, packed mask bits) rather than as
    the numbers of an array; any htype with a sample compression is stored so too."""
    class_names: Literal["always", "optional", "never"] = "never"
    """Whether the tensor's info holds ``class_names`` (an index per value names a class): always (an
    empty list until given), when given, or never."""
    labels: bool = False
    """The samples are class indices, one per sample or per object (loaders hand them out as int64)."""
    ragged: bool = False
    """The checks hold row by row, so samples of varying first dimension can be checked joined on axis 0
    in one go, refusing exactly what checking each would."""
    parse_info: InfoParser = _same_info
    """Checks the info a tensor is created (or loaded) with, and fills in its defaults."""
    checked_info: tuple[str, ...] = ()
    """The info keys samples are checked against (besides class names): a bbox tensor's layout."""
    pad: Callable[[np.dtype[Any], int], Any] = _empty_sample
    """What stands in for a missing sample when shorter tensors are padded (``eval(pad_data_in=True)``),
    from the tensor's dtype and rank."""
    stacks: bool = True
    """``numpy()`` of several samples stacks them into one array (when their shapes agree); False: a
    list (a polygon sample is a list of objects, never one array)."""
    with_sample_compression: str | None = None
    """The htype a tensor of this htype becomes when created with a sample compression (png, jpeg,
    webp): ``image``; None: a sample compression is refused."""
    image: bool = False
    """The samples are images (the notebook view shows them, the exports write them as image files)."""
    target: Target | None = None
    """What a detection or segmentation sample marks on its image (the notebook view draws it there)."""
    arrow: ArrowMapping = field(kw_only=True)
    """How its samples are a column of an Arrow table, and the Hugging Face feature that types it: every
    htype declares one (`lakecompute.tables` converts by it, both ways)."""

    objects: ObjectAxis | None = None
    """Where its samples list objects, for tensors of the rank it names (None: never; see `ObjectAxis`)."""

    def object_axis(self, ndim: int | None) -> int | None:
        """The axis that lists objects in samples of rank ``ndim`` (0 or -1), or None where those samples
        are one value per image (a scalar label, an ``H x W`` mask, an embedding)."""
        objects = self.objects
        if objects is None or ndim is None or (objects.rank is not None and ndim != objects.rank):
            return None
        return objects.axis

    @property
    def numeric(self) -> bool:
        """The values are numbers with a numpy dtype (every htype but text and json)."""
        return bool(self.dtypes)

    @property
    def class_named(self) -> bool:
        """The tensor may have ``class_names``."""
        return self.class_names != "never"

    def parse_dtype(self, tensor: str, dtype: object) -> str:
        """Check a dtype given to ``create_tensor`` for a tensor of this htype; its numpy name.

        Raises:
            InvalidArgumentError: not a numpy dtype, not one of this htype's, or any dtype for an htype
                whose values are not numbers.
        """
        if not self.numeric:
            raise InvalidArgumentError(
                f"htype {self.name!r} stores {self.dtype} values; do not pass dtype (got {dtype!r})."
            )
        try:
            npdt = np.dtype(dtype)  # type: ignore[call-overload]
        except TypeError as exc:
            raise InvalidArgumentError(f"Unknown dtype {dtype!r} for tensor {tensor!r}.") from exc
        if npdt.kind not in "biufc":
            raise InvalidArgumentError(
                f"Tensor {tensor!r}: expected a numeric dtype (bool, int, uint, float, complex). Got {npdt}. "
                "Use htype='text' for strings and htype='json' for objects."
            )
        wrong = npdt != np.dtype(self.dtype) if self.exact_dtype else npdt.kind not in self.dtypes
        if wrong:
            raise InvalidArgumentError(f"{self.name} tensor {tensor!r} {self.dtype_rule}. Got {npdt}.")
        return str(npdt.name)


def _parse_box_info(tensor: str, info: dict[str, Any]) -> dict[str, Any]:
    """A bbox tensor's ``format`` (``xyxy`` by default, ``xywh``, ``cxcywh``) and ``normalized`` (False:
    pixels; True: fractions of the image's width and height)."""
    return {**info, **BoxLayout.parse(info, tensor).info()}


def _parse_keypoint_info(tensor: str, info: dict[str, Any]) -> dict[str, Any]:
    """A keypoints tensor's optional ``keypoint_names`` (distinct strings; samples then have that many
    keypoints) and ``skeleton`` (pairs of 1-based keypoint numbers, as COCO writes them)."""
    names = info.get("keypoint_names")
    if names is not None and (
        not isinstance(names, list)
        or not all(isinstance(n, str) for n in names)
        or len(set(names)) != len(names)
    ):
        raise InvalidArgumentError(
            f"keypoints tensor {tensor!r}: keypoint_names must be a list of distinct strings. Got {names!r}."
        )
    skeleton = info.get("skeleton")
    if skeleton is None:
        return info
    limit = len(names) if names else None
    ok = isinstance(skeleton, list) and all(
        isinstance(e, (list, tuple))
        and len(e) == 2
        and all(isinstance(j, int) and j >= 1 and (limit is None or j <= limit) for j in e)
        for e in skeleton
    )
    if not ok:
        raise InvalidArgumentError(
            f"keypoints tensor {tensor!r}: skeleton must be a list of [a, b] pairs of 1-based keypoint "
            "numbers" + (f" (1..{limit})" if limit else "") + f". Got {skeleton!r:.120}."
        )
    return info


_NUMBERS: Final = ArrowMapping("numbers")  # the tensor's dtype, nested as its samples' shape
_COORDINATES: Final = "needs an integer or float dtype for coordinates"

# The htypes, in the order messages list them.
_DECLARATIONS: Final = (
    HType(
        "generic",
        None,  # decided by the data, once, at commit (see docs/how-it-works.md)
        dtypes="biufc",
        ragged=True,
        with_sample_compression="image",
        objects=ObjectAxis(1),  # a 1-D sample holds one number per object (scores, ids, areas, iscrowd)
        arrow=_NUMBERS,
    ),
    HType(
        "image",
        "uint8",
        dtypes="u",
        exact_dtype=True,
        dtype_rule="must have dtype uint8",
        with_sample_compression="image",
        image=True,
        arrow=ArrowMapping("image"),
    ),
    HType(
        "class_label",
        "uint32",
        dtypes="iu",
        dtype_rule="needs an integer dtype",
        class_names="always",
        labels=True,
        ragged=True,
        objects=ObjectAxis(1),  # (k,): a class per object; a scalar labels the whole sample
        arrow=ArrowMapping("numbers", cast="int64", class_label=True, objects=True),
    ),
    HType(
        "embedding",
        "float32",
        dtypes="f",
        dtype_rule="needs a float dtype",
        arrow=_NUMBERS,
    ),
    HType("text", "str", blob=True, pad=lambda dtype, ndim: "", arrow=ArrowMapping("text")),  # UTF-8
    # Any JSON-serialisable value, stored (and exported) as its JSON text.
    HType("json", "json", blob=True, pad=lambda dtype, ndim: None, arrow=ArrowMapping("json")),
    HType(
        "bbox",
        "float32",
        dtypes="iuf",
        dtype_rule=_COORDINATES,
        ragged=True,
        parse_info=_parse_box_info,
        checked_info=("format", "normalized"),
        pad=lambda dtype, ndim: np.zeros((0, 4), dtype),  # no boxes: a sample the tensor stores again
        target="boxes",
        objects=ObjectAxis(2),
        arrow=ArrowMapping("numbers", objects=True, trailing=(4,)),
    ),
    HType(
        "binary_mask",
        "bool",
        dtypes="b",
        exact_dtype=True,
        dtype_rule="must have dtype bool",
        blob=True,  # as bits (np.packbits: 8 pixels a byte, then the chunk compression shrinks them)
        target="mask",
        objects=ObjectAxis(3, -1),  # H x W x K: a channel per object; H x W is one mask
        arrow=ArrowMapping("numbers", objects=True),
    ),
    HType(
        "segment_mask",
        "uint32",
        dtypes="iu",
        dtype_rule="needs an integer dtype (class ids)",
        class_names="optional",
        target="class_mask",
        arrow=_NUMBERS,
    ),
    HType(
        "keypoints",
        "float32",
        dtypes="iuf",
        dtype_rule=_COORDINATES,
        ragged=True,
        parse_info=_parse_keypoint_info,
        checked_info=("keypoint_names",),
        target="keypoints",
        objects=ObjectAxis(3),  # (k, K, 3); a (K, 3) sample is one object's
        arrow=ArrowMapping("numbers", objects=True, trailing=(3,)),
    ),
    HType(
        "polygon",
        "float32",
        dtypes="iuf",
        dtype_rule=_COORDINATES,
        blob=True,  # counts and coordinates, one blob per sample
        pad=lambda dtype, ndim: [],
        stacks=False,
        target="polygons",
        objects=ObjectAxis(None),
        arrow=ArrowMapping("polygons"),
    ),
)

HTYPES: Final[Mapping[str, HType]] = MappingProxyType({d.name: d for d in _DECLARATIONS})
"""Every htype's declaration by name, in the order messages list them."""

CLASS_NAMED_HTYPES: Final = tuple(d.name for d in _DECLARATIONS if d.class_named)
"""The htypes whose tensors take ``class_names`` (an index per value names a class)."""

NOT_NUMERIC_DTYPES: Final = frozenset(d.dtype for d in _DECLARATIONS if not d.numeric)
"""The dtype names a spec records for values that are not numbers (``str``, ``json``)."""


def htype_declaration(htype: str) -> HType:
    """The declaration of a known htype (a spec's, a tensor's).

    Raises:
        KeyError: not an htype; names from users go through `parse_htype`.
    """
    return HTYPES[htype]


def parse_htype(htype: object, tensor: str) -> HType:
    """The declaration of the htype a user names for tensor ``tensor`` (None means ``generic``).

    Raises:
        InvalidArgumentError: an unknown htype, listing those there are.
    """
    declared = HTYPES.get("generic" if htype is None else str(htype))
    if declared is None:
        raise InvalidArgumentError(
            f"Unknown htype {htype!r} for tensor {tensor!r}. Expected one of {list(HTYPES)!r}."
        )
    return declared
