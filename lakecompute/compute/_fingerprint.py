"""Fingerprints of evals: what makes a rerun "the same eval" for checkpoint resume.

A fingerprint hashes the code of every compute function, its bound arguments, the input's
identity (location, version and positions for datasets; content for plain sequences) and the output
tensors. A value that has no stable identity raises `FingerprintError` naming it — a random
key would silently defeat resume, which is worse than an error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import types
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.errors import FingerprintError

if TYPE_CHECKING:
    from lakecompute.compute._decorator import Pipeline

__all__ = ["fingerprint_eval", "fingerprint_value"]

_MAX_SEQUENCE = 10_000_000


def _code_identity(obj: Any) -> list[Any]:
    """The identity of a function or class: its qualified name and its source (or bytecode)."""
    name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        code = getattr(obj, "__code__", None)
        if code is None and inspect.isclass(obj):
            code = getattr(inspect.getattr_static(obj, "__call__", None), "__code__", None)
        if code is None:
            raise FingerprintError(
                f"Cannot fingerprint {name}: its source code is not available. "
                "Define it in a module file, or run without checkpoint_interval."
            ) from None
        source = _code_bytes(code).hex()
    return [name, source]


def _code_bytes(code: types.CodeType) -> bytes:
    parts = [code.co_code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            parts.append(_code_bytes(const))
        else:
            parts.append(repr(const).encode())
    return b"".join(parts)


def fingerprint_value(value: Any, what: str) -> Any:
    """A JSON-able stand-in for ``value`` that is equal exactly when the value is.

    Raises:
        FingerprintError: the value has no stable identity (named by ``what``).
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes):
        return {"bytes": hashlib.sha256(value).hexdigest()}
    if isinstance(value, np.generic):
        return {"np": value.dtype.str, "v": repr(value.item())}
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O":
            return {"list": [fingerprint_value(v, f"{what}[{i}]") for i, v in enumerate(value.tolist())]}
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return {"ndarray": digest, "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, (list, tuple)):
        if len(value) > _MAX_SEQUENCE:
            raise FingerprintError(f"Cannot fingerprint {what}: {len(value)} items is too many to hash.")
        return {type(value).__name__: [fingerprint_value(v, f"{what}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, range):
        return {"range": [value.start, value.stop, value.step]}
    if isinstance(value, dict):
        items = sorted(((repr(k), fingerprint_value(v, f"{what}[{k!r}]")) for k, v in value.items()))
        return {"dict": items}
    if isinstance(value, (set, frozenset)):
        return {"set": sorted(json.dumps(fingerprint_value(v, what)) for v in value)}
    custom = getattr(value, "__lakecompute_fingerprint__", None)
    if callable(custom):
        return {"custom": fingerprint_value(custom(), what)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"dataclass": _code_identity(type(value))[0], "fields": fingerprint_value(fields, what)}
    if inspect.isfunction(value) or inspect.isclass(value):
        return {"code": _code_identity(value)}
    raise FingerprintError(
        f"Cannot fingerprint {what} of type {type(value).__name__}: it has no stable identity, so a rerun "
        "could not be recognised as the same eval. Pass plain values (numbers, strings, lists, dicts, numpy "
        "arrays), give the type a __lakecompute_fingerprint__() method, or run without checkpoint_interval."
    )


def fingerprint_eval(pipeline: Pipeline, input_identity: Any, output: Any) -> str:
    """The fingerprint of an eval: functions, bound arguments, input identity and output tensors."""
    stages = []
    for f in pipeline.functions:
        args = [fingerprint_value(a, f"argument {i} of {f.name}") for i, a in enumerate(f.args)]
        kwargs = {k: fingerprint_value(v, f"argument {k!r} of {f.name}") for k, v in f.kwargs.items()}
        stages.append({"code": _code_identity(f.func), "args": args, "kwargs": kwargs})
    body = json.dumps(
        {"stages": stages, "input": input_identity, "output": output}, sort_keys=True, default=str
    )
    return hashlib.sha256(body.encode()).hexdigest()[:32]
