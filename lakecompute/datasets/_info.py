"""Metadata handed to the user: a dataset's ``info`` and a tensor's, as the caller's own copies.

What ``ds.info`` and ``ds.<tensor>.info`` return is a deep copy of what the version holds: changing a
list read from it (``info.class_names.sort()``) changes that copy only, never the dataset. The
dataset changes only through an explicit call on the info object — ``info[key] = value``,
``info.key = value`` (Deep Lake 3's spelling), ``info.update(...)``, ``del info[key]`` — which commits
like any write (or joins the ``with`` block), after the same checks a version's manifest gets when it is
read back (JSON values, nesting depth, the htype's own rules). No assignment on an info object is ever
dropped: one that cannot be a key (``info.update = ...``, a name the dict itself uses) raises.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lakecompute.errors import InvalidArgumentError, InvalidTypeError, ReadOnlyError
from lakecompute.htypes import CLASS_NAMED_HTYPES, parse_htype_info
from lakecompute.versioned import TensorState, check_nesting

__all__ = ["DatasetInfo", "InfoWriter", "TensorInfo", "parse_info", "parse_tensor_info"]

#: Commits changed keys and deleted keys; returns the info as committed.
InfoWriter = Callable[[dict[str, Any], tuple[str, ...]], dict[str, Any]]

_MISSING = object()


class _Info(dict[str, Any]):
    """A dict of JSON values that is the caller's own copy, whose changes commit through ``write``.

    Reads are plain dict reads (and attributes: ``info.class_names``). ``[key] = value``, ``.key = value``,
    ``update``, ``del`` (of an item or an attribute), ``pop``, ``setdefault`` and ``|=`` commit the change
    (one commit per call) and refresh this copy from what was committed; with no ``write`` (a view's
    info) they raise `ReadOnlyError`.
    """

    _what = "Info"
    _read_only = "This info is read-only."

    def __init__(self, values: Mapping[str, Any], write: InfoWriter | None) -> None:
        super().__init__(copy.deepcopy(dict(values)))
        self._write = write

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{self._what} has no {name!r}; it has {sorted(self)!r}.") from None

    def __setattr__(self, name: str, value: Any) -> None:
        # ``info.key = value`` is a key, committed like ``info[key] = value``: as an instance attribute
        # (what a dict subclass would make of it) it would change nothing stored and vanish unseen.
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        self._check_attribute_key(name)
        self[name] = value

    def __delattr__(self, name: str) -> None:
        if name.startswith("_"):
            object.__delattr__(self, name)
            return
        self._check_attribute_key(name)
        try:
            del self[name]
        except KeyError:
            raise AttributeError(f"{self._what} has no {name!r}; it has {sorted(self)!r}.") from None

    def _check_attribute_key(self, name: str) -> None:
        if hasattr(type(self), name):
            raise InvalidArgumentError(
                f"info.{name} names the info's own {name}() method, not a key, so it cannot be set or "
                f"deleted as an attribute. Use info[{name!r}] = value (or del info[{name!r}])."
            )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled or deep-copied, it is a plain dict of its values: the copy has no dataset to write to.
        return (dict, (dict(self),))

    # -- changes: each commits -------------------------------------------------------------------
    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._store({}, (key,))

    def update(  # type: ignore[override]  # dict's overloads, in one signature that commits
        self, values: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None, **more: Any
    ) -> None:
        """Set several keys at once, in one commit."""
        changes = {**dict(values or {}), **more}
        for key in changes:
            if not isinstance(key, str):
                raise InvalidTypeError(f"{self._what} keys are strings. Got {key!r}.")
        self._store(changes, ())

    def pop(self, key: str, default: Any = _MISSING) -> Any:
        """Remove ``key`` (one commit) and return its value."""
        if key not in self:
            if default is _MISSING:
                raise KeyError(key)
            return default
        value = self[key]
        del self[key]
        return value

    def popitem(self) -> tuple[str, Any]:
        if not self:
            raise KeyError("popitem(): info is empty")
        key = next(reversed(self))
        return key, self.pop(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self) -> None:
        """Remove every key (one commit)."""
        self._store({}, tuple(self))

    def __ior__(self, other: Any) -> _Info:  # type: ignore[override, misc]  # commits, like update
        self.update(other)
        return self

    def _store(self, changes: dict[str, Any], deleted: tuple[str, ...]) -> None:
        if self._write is None:
            raise ReadOnlyError(self._read_only)
        committed = self._write(changes, deleted)
        dict.clear(self)
        dict.update(self, copy.deepcopy(committed))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self)!r})"


class DatasetInfo(_Info):
    """A dataset's own metadata (``ds.info``): JSON values by key, read like a dict or by attribute.

    It is the caller's own copy. Setting a key (``ds.info["source"] = "COCO"``, or ``ds.info.source =
    "COCO"``), ``update(...)`` and ``del`` write a new version of the dataset (or join its ``with`` block).
    A view's info is its dataset's, read-only.
    """

    _what = "Dataset info"
    _read_only = "A view's info is its dataset's and is read-only; set it on the dataset."


class TensorInfo(_Info):
    """A tensor's info (``ds.labels.info``): JSON values by key, read like a dict or by attribute
    (``info.class_names``).

    It is the caller's own copy: sorting ``info.class_names`` changes nothing stored. ``info[key] = value``,
    ``info.key = value``, ``info.update(...)`` and ``del info[key]`` commit, like ``ds.info``; class names
    change only this way (``ds.labels.info.class_names = [...]`` or ``ds.labels.info.update(class_names=
    [...])``: distinct names, at least as many as before, so every stored label still names a class). A
    view's tensor info is read-only.
    """

    _what = "Tensor info"
    _read_only = (
        "A view's tensor info is its tensor's and is read-only; update it on the dataset's tensor "
        "(ds.<tensor>.info.update(...))."
    )


def parse_info(values: Mapping[str, Any], what: str) -> dict[str, Any]:
    """Check metadata as a manifest will hold it, and return it as stored (a new JSON copy).

    Raises:
        InvalidTypeError: a key is not a string.
        InvalidArgumentError: a value is not JSON (or NaN / infinity), or lists and dicts are nested
            deeper than a manifest accepts (`lakecompute.versioned.check_nesting`).
    """
    for key in values:
        if not isinstance(key, str):
            raise InvalidTypeError(f"{what} keys are strings. Got {key!r}.")
    check_nesting(dict(values), what)
    try:
        text = json.dumps(dict(values), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"{what} holds JSON values (str, numbers, bools, None, lists, dicts): {exc}."
        ) from exc
    stored: dict[str, Any] = json.loads(text)
    return stored


def parse_tensor_info(state: TensorState, info: Mapping[str, Any], length: int) -> dict[str, Any]:
    """Check a tensor's new info against its htype and the samples it holds; return it as stored.

    Raises:
        InvalidTypeError, InvalidArgumentError: what `parse_info` refuses; class names that are not
            distinct strings, or fewer than before (stored labels would name no class), or given to a
            tensor without class names; a change of a box layout or of the number of keypoint names
            while the tensor holds samples (the stored values would change meaning).
    """
    name, spec = state.spec.name, state.spec
    out = parse_htype_info(spec, parse_info(info, f"The info of tensor {name!r}"))
    _check_class_names(state, out)
    if length:
        _check_layout_kept(state, out)
    return out


def _check_class_names(state: TensorState, info: Mapping[str, Any]) -> None:
    name, htype = state.spec.name, state.spec.htype
    names = info.get("class_names")
    if htype not in CLASS_NAMED_HTYPES:
        if names is not None:
            raise InvalidArgumentError(
                f"class_names is for htypes {list(CLASS_NAMED_HTYPES)!r}; tensor {name!r} has htype "
                f"{htype!r}."
            )
        return
    before = list(state.info.get("class_names") or [])
    if (
        not isinstance(names, list)
        or not all(isinstance(c, str) for c in names)
        or len(set(names)) != len(names)
    ):
        raise InvalidArgumentError(
            f"class_names of tensor {name!r} must be distinct strings. Got {names!r:.200}."
        )
    if len(names) < len(before):
        raise InvalidArgumentError(
            f"class_names of tensor {name!r} would go from {len(before)} names to {len(names)}: stored "
            f"labels up to {len(before) - 1} would name no class. Rename or add names (keep at least "
            f"{len(before)})."
        )


def _check_layout_kept(state: TensorState, info: Mapping[str, Any]) -> None:
    name, htype, old = state.spec.name, state.spec.htype, state.info
    keys = {"bbox": ("format", "normalized")}.get(htype, ())
    for key in keys:
        if info.get(key) != old.get(key):
            raise InvalidArgumentError(
                f"Tensor {name!r} holds boxes in {key}={old.get(key)!r}; changing it to {info.get(key)!r} "
                "would change what every stored box means. Convert the boxes into a new tensor created with "
                f"{key}={info.get(key)!r} instead."
            )
    if htype == "keypoints":
        before, after = old.get("keypoint_names"), info.get("keypoint_names")
        if before is not None and (after is None or len(after) != len(before)):
            raise InvalidArgumentError(
                f"Tensor {name!r} holds samples of {len(before)} keypoints; keypoint_names must keep "
                f"{len(before)} names (rename them in place). Got {after!r:.200}."
            )
