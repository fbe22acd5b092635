"""The codecs of values that are not numbers: ``text`` (a str, stored as UTF-8) and ``json`` (any
JSON-serialisable value, stored as its JSON text)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from lakecompute.errors import InvalidSampleError
from lakecompute.htypes._base import HTypeCodec, TensorRules
from lakecompute.specs import Encoded, TensorSpec

__all__ = ["CODECS", "JsonCodec", "TextCodec"]


class TextCodec(HTypeCodec):
    """A str (a value with ``.text()``, or a 0-d numpy str array, gives one)."""

    htype = "text"

    def encode(self, rules: TensorRules, value: object) -> Encoded:
        if hasattr(value, "text") and callable(value.text):
            value = value.text()
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind == "U":
            value = str(value)
        if not isinstance(value, str):
            raise InvalidSampleError(
                rules.name, f"expected str for a text tensor. Got {type(value).__name__}: {value!r:.80}."
            )
        try:
            return Encoded(None, value.encode("utf-8"), ())
        except UnicodeEncodeError as exc:  # a lone surrogate ("\ud800") has no UTF-8
            raise InvalidSampleError(rules.name, f"the text is not valid Unicode ({exc.reason}).") from exc

    def decode(self, spec: TensorSpec, raw: bytes, shape: tuple[int, ...]) -> Any:
        return raw.decode("utf-8")


class JsonCodec(HTypeCodec):
    """Any value ``json.dumps`` writes (numpy arrays and scalars become lists and numbers); no nan or
    inf, which JSON does not have."""

    htype = "json"

    def encode(self, rules: TensorRules, value: object) -> Encoded:
        if hasattr(value, "data") and callable(value.data):
            value = value.data()
        try:
            blob = json.dumps(value, default=_json_default, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested past Python's limit
            raise InvalidSampleError(rules.name, f"value is not JSON-serialisable ({exc}).") from exc
        return Encoded(None, blob, ())

    def decode(self, spec: TensorSpec, raw: bytes, shape: tuple[int, ...]) -> Any:
        try:
            return json.loads(raw)
        except RecursionError as exc:  # a damaged blob nested past Python's limit
            raise ValueError(f"a json blob nested too deeply to read ({len(raw)} bytes)") from exc


def _json_default(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


CODECS = (TextCodec(), JsonCodec())
