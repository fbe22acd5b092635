"""Tensor kinds (htypes): what a sample may be, how it is checked, and how it is stored.

Every sample passes through `encode_sample` (or `encode_batch` for a stacked array)
before it is buffered, so a bad value is refused at the call that tried to write it and nothing
already written is touched. Samples are stored either as raw numeric bytes (``array`` kind) or
as one encoded blob each (``bytes`` kind: PNG/JPEG/WEBP images, UTF-8 text, JSON).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np

from lakecompute import compression
from lakecompute.errors import InvalidArgumentError, InvalidSampleError, InvalidTypeError

__all__ = [
    "HTYPES",
    "MAX_TENSOR_NAME",
    "Encoded",
    "TensorSpec",
    "cast_checked",
    "check_new_tensor_name",
    "decode_sample",
    "encode_batch",
    "encode_sample",
    "parse_tensor_name",
    "parse_tensor_spec",
]

HTypeName = Literal["generic", "image", "class_label", "embedding", "text", "json"]
HTYPES: Final = ("generic", "image", "class_label", "embedding", "text", "json")
_DEFAULT_DTYPE: Final[dict[str, str | None]] = {
    "generic": None,  # decided by the data, once, at commit (see docs/how-it-works.md)
    "image": "uint8",
    "class_label": "uint32",
    "embedding": "float32",
    "text": "str",
    "json": "json",
}
# Matched with fullmatch: "$" alone would also accept a trailing newline ("x\n").
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")
#: The longest name `create_tensor` accepts (see `check_new_tensor_name`).
MAX_TENSOR_NAME = 128


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
    def kind(self) -> Literal["array", "bytes"]:
        """``bytes`` when each sample is stored as one encoded blob, else ``array``."""
        if self.sample_compression is not None or self.htype in ("text", "json"):
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
    ht = "generic" if htype is None else str(htype)
    if ht not in HTYPES:
        raise InvalidArgumentError(
            f"Unknown htype {htype!r} for tensor {name!r}. Expected one of {list(HTYPES)!r}."
        )
    sc = compression.parse_sample_compression(sample_compression)
    if sc is not None and ht not in ("image", "generic"):
        raise InvalidArgumentError(
            f"sample_compression={sc!r} needs htype 'image'; tensor {name!r} has htype {ht!r}. "
            "Use chunk_compression for other tensors."
        )
    if sc is not None and ht == "generic":
        ht = "image"
    use_default = chunk_compression == "default"
    cc = None if use_default else compression.parse_chunk_compression(chunk_compression)
    dt = _DEFAULT_DTYPE[ht] if dtype is None else _parse_dtype(name, ht, dtype)
    if use_default and sc is None and ht not in ("text", "json"):
        cc = "zstd"  # cheap and effective on numeric data; encoded images gain nothing from it
    return TensorSpec(name=name, htype=ht, dtype=dt, sample_compression=sc, chunk_compression=cc)


def _parse_dtype(name: str, ht: str, dtype: object) -> str:
    """Check a dtype given to ``create_tensor`` against the tensor's htype; its numpy name."""
    if ht in ("text", "json"):
        raise InvalidArgumentError(
            f"htype {ht!r} stores {_DEFAULT_DTYPE[ht]} values; do not pass dtype (got {dtype!r})."
        )
    try:
        npdt = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as exc:
        raise InvalidArgumentError(f"Unknown dtype {dtype!r} for tensor {name!r}.") from exc
    if npdt.kind not in "biufc":
        raise InvalidArgumentError(
            f"Tensor {name!r}: expected a numeric dtype (bool, int, uint, float, complex). Got {npdt}. "
            "Use htype='text' for strings and htype='json' for objects."
        )
    refused = {
        "image": (npdt != np.uint8, f"Image tensor {name!r} must have dtype uint8. Got {npdt}."),
        "class_label": (
            npdt.kind not in "iu",
            f"class_label tensor {name!r} needs an integer dtype. Got {npdt}.",
        ),
        "embedding": (npdt.kind != "f", f"embedding tensor {name!r} needs a float dtype. Got {npdt}."),
    }
    wrong, message = refused.get(ht, (False, ""))
    if wrong:
        raise InvalidArgumentError(message)
    return str(npdt.name)


@dataclass(frozen=True, slots=True)
class Encoded:
    """One checked sample ready to store: a numeric array, or an encoded blob with its shape."""

    array: np.ndarray | None
    blob: bytes | None
    shape: tuple[int, ...]


def cast_checked(arr: np.ndarray, dtype: np.dtype[Any], tensor: str) -> np.ndarray:
    """Cast ``arr`` to ``dtype`` if no value changes meaning; else raise InvalidSampleError."""
    if arr.dtype == dtype:
        return arr
    src, dst = arr.dtype.kind, dtype.kind
    if np.can_cast(arr.dtype, dtype, "safe"):
        return arr.astype(dtype)
    if (src in "biuf" and dst in "fc") or (src == "c" and dst == "c"):
        return _cast_float_checked(arr, dtype, tensor)
    if src in "biu" and dst in "iu":
        if arr.size:
            info = np.iinfo(dtype)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                bad = lo if lo < info.min else hi
                raise InvalidSampleError(
                    tensor,
                    f"value {bad} does not fit dtype {dtype} (range {info.min}..{info.max}). "
                    "Use a wider dtype for the tensor or clip the values.",
                )
        return arr.astype(dtype)
    raise InvalidSampleError(
        tensor,
        f"values of dtype {arr.dtype} cannot be stored as {dtype} without losing information. "
        f"Convert them first (e.g. arr.astype({dtype.name!r})) or use a tensor of dtype {arr.dtype}.",
    )


def _cast_float_checked(arr: np.ndarray, dtype: np.dtype[Any], tensor: str) -> np.ndarray:
    """Cast to a narrower float (or complex) dtype, refusing finite values that would become inf; inf
    and nan given as such stay what they are."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(dtype)
    overflow = np.isfinite(arr) & ~np.isfinite(out) if arr.dtype.kind in "fc" else ~np.isfinite(out)
    if overflow.any():
        bad = arr[overflow].flat[0]
        limit = np.finfo(dtype).max
        raise InvalidSampleError(
            tensor,
            f"value {bad} does not fit dtype {dtype} (largest finite magnitude {limit}); storing it "
            "would make it inf. Use a wider dtype for the tensor or clip the values.",
        )
    return out


def _as_array(value: object, tensor: str) -> np.ndarray:
    numpy_method = getattr(value, "numpy", None)
    if callable(numpy_method) and not isinstance(value, np.ndarray):
        value = numpy_method()
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise InvalidSampleError(tensor, f"cannot make an array of {type(value).__name__} ({exc}).") from exc
    if arr.dtype.kind not in "biufc":
        raise InvalidSampleError(
            tensor,
            "expected numbers (a numpy array, list or scalar). "
            f"Got {type(value).__name__} with dtype {arr.dtype}.",
        )
    return arr


def _class_index(value: object, names: list[str], tensor: str) -> object:
    if isinstance(value, str):
        try:
            return names.index(value)
        except ValueError:
            raise InvalidSampleError(
                tensor, f"class name {value!r} is not in class_names {names!r}. Add it to class_names first."
            ) from None
    if isinstance(value, (list, tuple)) and any(isinstance(v, str) for v in value):
        return [_class_index(v, names, tensor) for v in value]
    return value


def _check_image(arr: np.ndarray, tensor: str) -> None:
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (1, 3, 4)):
        raise InvalidSampleError(
            tensor,
            f"expected an image of shape HxW or HxWxC with C in (1, 3, 4). Got shape {arr.shape}.",
        )
    if arr.dtype.kind == "f":
        raise InvalidSampleError(
            tensor,
            f"expected a uint8 image. Got a float image ({arr.dtype}); "
            "convert it with (img * 255).round().astype(np.uint8) or clip to 0..255 first.",
        )


def encode_sample(spec: TensorSpec, value: object, class_names: list[str]) -> Encoded:
    """Check one sample against ``spec`` and turn it into what is stored."""
    if spec.htype == "text":
        return _encode_text(spec.name, value)
    if spec.htype == "json":
        return _encode_json(spec.name, value)
    blob_in = getattr(value, "_lakecompute_blob", None)
    if blob_in is not None and spec.sample_compression is not None:
        # A lazily read file (lc.read) whose encoding already matches: store its bytes as they are.
        fmt, data, shape = blob_in()
        if fmt == spec.sample_compression:
            return Encoded(None, data, tuple(shape))
    if spec.htype == "class_label":
        value = _class_index(value, class_names, spec.name)
    arr = _as_array(value, spec.name)
    _check_htype(spec, arr, value, class_names)
    if spec.dtype is not None:
        arr = cast_checked(arr, np.dtype(spec.dtype), spec.name)
    if spec.sample_compression is not None:
        blob = compression.encode_image(arr, spec.sample_compression, tensor=spec.name)
        return Encoded(None, blob, arr.shape)
    return Encoded(arr, None, arr.shape)


def _encode_text(name: str, value: object) -> Encoded:
    if hasattr(value, "text") and callable(value.text):
        value = value.text()
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind == "U":
        value = str(value)
    if not isinstance(value, str):
        raise InvalidSampleError(
            name, f"expected str for a text tensor. Got {type(value).__name__}: {value!r:.80}."
        )
    return Encoded(None, value.encode("utf-8"), ())


def _encode_json(name: str, value: object) -> Encoded:
    if hasattr(value, "data") and callable(value.data):
        value = value.data()
    try:
        blob = json.dumps(value, default=_json_default, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidSampleError(name, f"value is not JSON-serialisable ({exc}).") from exc
    return Encoded(None, blob, ())


def _check_htype(spec: TensorSpec, arr: np.ndarray, value: object, class_names: list[str]) -> None:
    """What an image, an embedding or a class label must be, beyond being numbers."""
    name, ht = spec.name, spec.htype
    if ht == "image":
        _check_image(arr, name)
    elif ht == "embedding" and arr.ndim != 1:
        raise InvalidSampleError(name, f"expected a 1-D embedding vector. Got shape {arr.shape}.")
    elif ht == "class_label":
        if arr.dtype.kind not in "biu":
            raise InvalidSampleError(
                name, f"expected an integer class index or a class name. Got {arr.dtype} {value!r:.80}."
            )
        _check_label_range(arr, class_names, name)


def encode_batch(spec: TensorSpec, values: np.ndarray, class_names: list[str]) -> np.ndarray | None:
    """Check a stacked array of samples at once (fast path); None if it must go sample by sample."""
    if spec.kind != "array" or values.dtype.kind not in "biufc" or values.ndim == 0:
        return None
    name, ht = spec.name, spec.htype
    if ht == "image":
        _check_image(values[0] if len(values) else values.reshape(values.shape[1:]), name)
    elif ht == "embedding" and values.ndim != 2:
        raise InvalidSampleError(
            name, f"expected 1-D embedding vectors. Got samples of shape {values.shape[1:]}."
        )
    elif ht == "class_label":
        if values.dtype.kind not in "biu":
            raise InvalidSampleError(name, f"expected integer class indices. Got dtype {values.dtype}.")
        _check_label_range(values, class_names, name)
    if spec.dtype is not None:
        values = cast_checked(values, np.dtype(spec.dtype), name)
    return values


def _check_label_range(arr: np.ndarray, class_names: list[str], name: str) -> None:
    if arr.size and class_names:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= len(class_names):
            bad = lo if lo < 0 else hi
            raise InvalidSampleError(
                name,
                f"class index {bad} is out of range for {len(class_names)} class_names {class_names!r}.",
            )


def decode_sample(spec: TensorSpec, blob: bytes | memoryview | np.ndarray, shape: tuple[int, ...]) -> Any:
    """Turn a stored blob back into the value a user reads (``bytes`` kind tensors)."""
    raw = blob.tobytes() if isinstance(blob, np.ndarray) else bytes(blob)
    if spec.htype == "text":
        return raw.decode("utf-8")
    if spec.htype == "json":
        return json.loads(raw)
    assert spec.sample_compression is not None
    return compression.decode_image(raw, shape)


def _json_default(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
