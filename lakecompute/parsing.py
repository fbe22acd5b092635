"""One way to check and normalise the options every public call takes: counts, flags, amounts, names.

``eval``, the loaders, the schedulers, the ingests and the eval records all parse their options here,
so the same wrong value gives the same error everywhere:

* a value of the wrong type is an `InvalidTypeError` ("Expected num_workers to be an int. Got str: '2'.");
* a value of the right type out of range is an `InvalidArgumentError` ("Expected num_workers >= 0. Got -1.").

The rules:

* **Counts** are ints. numpy integers are accepted and returned as ``int`` (an index read from an
  array, ``np.int64(4)``, is a count like any other); ``bool`` is not a count (``True`` as a worker
  count is a mistake, not 1), and neither is a float, even ``2.0``, nor a string.
* **Flags** are ``True`` or ``False`` (numpy bools too), never taken for their truth: ``progressbar="no"``
  is refused rather than read as True. The loaders' ``shuffle``, ``drop_last`` and ``pin_memory`` too
  (they used to be taken for their truth: ``shuffle=1`` now asks for ``True``).
* **Amounts** (a Ray task's CPUs) are finite numbers >= 0, int or float.
* **Names** are non-empty strings.
* **Sizes** in bytes (``cache_size``) are counts of bytes, or text with a unit: ``"20GB"``, ``"500 MB"``,
  ``"1.5GiB"`` (KB, MB, GB, TB are powers of 1000; KiB, MiB, GiB, TiB of 1024; the unit's case is free).
* **Devices** (``eval(devices=...)``, the processed scheduler's) are ``"cuda"`` (every visible GPU), a
  non-empty list of GPU indices (counts, repeats allowed: ``[0, 0, 1, 1]`` puts two workers on each), or
  None; ``"cpu"`` means None.

This module depends only on `lakecompute.errors` (and numpy), so that every layer (schedulers included)
may use it.

Example:
    >>> import numpy as np
    >>> from lakecompute.parsing import parse_count, parse_flag
    >>> parse_count("num_workers", np.int64(2))
    2
    >>> parse_count("batch_size", None, 1, optional=True) is None
    True
    >>> parse_flag("progressbar", "yes")
    Traceback (most recent call last):
    ...
    lakecompute.errors.InvalidTypeError: Expected progressbar to be True or False. Got str: 'yes'.
"""

from __future__ import annotations

import difflib
import math
import numbers
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Literal, TypeAlias, cast, overload

import numpy as np

from lakecompute.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "Devices",
    "DevicesLike",
    "parse_amount",
    "parse_choice",
    "parse_count",
    "parse_devices",
    "parse_flag",
    "parse_keywords",
    "parse_name",
    "parse_size",
]

DevicesLike: TypeAlias = "str | Sequence[int] | None"
"""What ``devices=`` accepts: ``"cuda"``, a list of GPU indices such as ``[0, 1]``, or None (``"cpu"``
means None)."""

Devices: TypeAlias = "Literal['cuda'] | tuple[int, ...] | None"
"""``devices=`` checked: ``"cuda"``, a tuple of GPU indices, or None."""

#: Most entries a devices list may have (a longer one is a mistake, not a placement).
_MAX_DEVICES = 4096


def _got(value: object) -> str:
    """``Got <type>: <value>.``, the second half of every type error here."""
    return f"Got {type(value).__name__}: {value!r}."


def _with(message: str, hint: str) -> str:
    return f"{message} {hint}" if hint else message


def _allowed_none(name: str, value: object, *, optional: bool, fits: bool, kind: str) -> bool:
    """True when ``value`` is None and None is allowed (``optional``); else raise `InvalidTypeError`
    when it does not ``fit`` (expected ``kind``, "or None" where allowed)."""
    if value is None and optional:
        return True
    if not fits:
        raise InvalidTypeError(f"Expected {name} to be {kind}{' or None' if optional else ''}. {_got(value)}")
    return False


@overload
def parse_count(
    name: str, value: object, least: int = 0, *, optional: Literal[False] = False, hint: str = ""
) -> int: ...
@overload
def parse_count(
    name: str, value: object, least: int = 0, *, optional: bool, hint: str = ""
) -> int | None: ...
def parse_count(
    name: str, value: object, least: int = 0, *, optional: bool = False, hint: str = ""
) -> int | None:
    """Check a count: an int (or numpy integer) ``>= least``, returned as a plain ``int``.

    Args:
        name: the option's name, as the caller wrote it (``"num_workers"``).
        value: what was given.
        least: the smallest value allowed.
        optional: None is allowed too (and returned as it is).
        hint: what to do instead, appended to the range error ("Use 0 to run in the calling process.").

    Raises:
        InvalidTypeError: ``value`` is not an int (a bool, a float, a string, ...).
        InvalidArgumentError: ``value`` is less than ``least``.
    """
    integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if _allowed_none(name, value, optional=optional, fits=integral, kind="an int"):
        return None
    count = int(cast(numbers.Integral, value))  # checked by _allowed_none
    if count < least:
        raise InvalidArgumentError(_with(f"Expected {name} >= {least}. Got {value!r}.", hint))
    return count


def parse_flag(name: str, value: object) -> bool:
    """Check a flag: ``True`` or ``False`` (a numpy bool too), returned as a plain ``bool``.

    Raises:
        InvalidTypeError: ``value`` is anything else (``1``, ``"yes"``, None).
    """
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise InvalidTypeError(f"Expected {name} to be True or False. {_got(value)}")


@overload
def parse_amount(name: str, value: object, *, optional: Literal[False] = False) -> float: ...
@overload
def parse_amount(name: str, value: object, *, optional: bool) -> float | None: ...
def parse_amount(name: str, value: object, *, optional: bool = False) -> float | None:
    """Check an amount: a finite number ``>= 0`` (int, float or numpy number), returned as a ``float``.

    Raises:
        InvalidTypeError: ``value`` is not a number (a bool is not one either).
        InvalidArgumentError: ``value`` is negative, infinite or NaN.
    """
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if _allowed_none(name, value, optional=optional, fits=real, kind="a number"):
        return None
    amount = float(cast(numbers.Real, value))  # checked by _allowed_none
    if not math.isfinite(amount) or amount < 0:
        raise InvalidArgumentError(f"Expected {name} to be a finite number >= 0. Got {value!r}.")
    return amount


#: Bytes per unit of a size given as text (`parse_size`): decimal units as disks and clouds count them,
#: binary ones as memory does.
_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}  # fmt: skip
_SIZE_TEXT = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*")
#: The largest size accepted: 8 EiB less one byte (what a signed 64-bit count of bytes holds).
MAX_SIZE = 2**63 - 1


def parse_size(name: str, value: object) -> int:
    """Check a size in bytes: an int (or numpy integer) ``>= 0``, or text with a unit, as ``"20GB"``,
    ``"500 MB"``, ``"1.5GiB"`` or ``"4096"``; returned as a plain ``int`` of bytes (rounded down).

    KB, MB, GB, TB and PB are powers of 1000, KiB, MiB, GiB, TiB and PiB powers of 1024; the unit's case is
    free (``"20gb"``), and a number without a unit counts bytes.

    Raises:
        InvalidTypeError: ``value`` is neither an int nor a str (a float, a bool, None).
        InvalidArgumentError: a negative int, text that is not a number with a known unit, or a size of
            8 EiB or more.

    Example:
        >>> parse_size("cache_size", "20GB"), parse_size("cache_size", "1.5 KiB"), parse_size("cache_size", 7)
        (20000000000, 1536, 7)
    """
    hint = "such as '20GB', '500MB' or '1.5GiB'"
    if isinstance(value, str):
        match = _SIZE_TEXT.fullmatch(value) if len(value) <= 64 else None
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _SIZE_UNITS:
            raise InvalidArgumentError(
                f"Expected {name} as a number of bytes or a size {hint}. Got {value[:80]!r}. "
                "Use one of the units B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB."
            )
        whole, _, fraction = match.group(1).partition(".")
        scale = _SIZE_UNITS[unit]
        # Exact for any number of digits: no float turns 0.1GB into 99999999 bytes.
        size = int(whole or "0") * scale + (int(fraction) * scale // 10 ** len(fraction) if fraction else 0)
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        size = int(value)
        if size < 0:
            raise InvalidArgumentError(f"Expected {name} >= 0. Got {value!r}.")
    else:
        raise InvalidTypeError(
            f"Expected {name} to be a number of bytes (an int) or a size {hint}. {_got(value)}"
        )
    if size > MAX_SIZE:
        raise InvalidArgumentError(f"Expected {name} below 8 EiB. Got {value!r:.80}.")
    return size


@overload
def parse_name(name: str, value: object, *, optional: Literal[False] = False) -> str: ...
@overload
def parse_name(name: str, value: object, *, optional: bool) -> str | None: ...
def parse_name(name: str, value: object, *, optional: bool = False) -> str | None:
    """Check a name: a non-empty ``str``.

    Raises:
        InvalidTypeError: ``value`` is not a str.
        InvalidArgumentError: ``value`` is the empty string.
    """
    if _allowed_none(name, value, optional=optional, fits=isinstance(value, str), kind="a str"):
        return None
    if not value:
        raise InvalidArgumentError(f"Expected {name} to be a non-empty str. Got ''.")
    return cast(str, value)  # checked by _allowed_none


def parse_choice(name: str, value: object, choices: Collection[str]) -> str:
    """Check that ``value`` is one of ``choices`` (a closed set of names).

    Raises:
        InvalidTypeError: ``value`` is not a str.
        InvalidArgumentError: ``value`` is not one of ``choices`` (the message lists them).
    """
    text = parse_name(name, value)
    if text not in choices:
        raise InvalidArgumentError(
            f"Expected {name} to be one of {sorted(choices)!r}. Got {value!r}. Use one of those instead."
        )
    return text


def parse_keywords(call: str, options: Mapping[str, object], known: Collection[str]) -> None:
    """Refuse a keyword argument that a call taking ``**options`` does not know (a misspelt option).

    Args:
        call: the call's name as the user wrote it (``"eval"``, ``"batches"``).
        options: the keyword arguments given.
        known: the names the call takes.

    Raises:
        InvalidTypeError: a name in ``options`` is not in ``known`` (a ``TypeError``, as Python's own
            "unexpected keyword argument" is); the message suggests the nearest known name.
    """
    unknown = sorted(set(options) - set(known))
    if not unknown:
        return
    name = unknown[0]
    close = difflib.get_close_matches(name, sorted(known), n=1)
    hint = f"Use {close[0]!r} instead." if close else f"Expected one of {sorted(known)!r}."
    raise InvalidTypeError(f"{call}() got an unexpected keyword argument {name!r}. {hint}")


def parse_devices(name: str, value: object) -> Devices:
    """Check a device placement: ``"cuda"``, a non-empty list of GPU indices, or None.

    GPU indices count in this process's own numbering (what ``torch.cuda`` calls ``cuda:0``, ``cuda:1``,
    after ``CUDA_VISIBLE_DEVICES``); whether they exist is checked where workers are placed, not here.

    Args:
        name: the option's name (``"devices"``).
        value: what was given.

    Returns:
        ``"cuda"``, the indices as a tuple of plain ints, or None (for None and ``"cpu"``).

    Raises:
        InvalidTypeError: not a str, a sequence of ints, or None (a bare int, a float, bools).
        InvalidArgumentError: another string, an empty list, or a negative index.

    Example (the error's message is cut short here)::

        >>> parse_devices("devices", [0, np.int64(1)])
        (0, 1)
        >>> parse_devices("devices", "cuda:1")
        Traceback (most recent call last):
        ...
        lakecompute.errors.InvalidArgumentError: Expected devices to be 'cuda', a list of GPU indices ...
    """
    expected = f"Expected {name} to be 'cuda', a list of GPU indices such as [0, 1], or None."
    if value is None:
        return None
    if isinstance(value, str):
        if value == "cpu":
            return None
        if value == "cuda":
            return "cuda"
        index = value.removeprefix("cuda:")
        hint = f" For one GPU, pass {name}=[{index}]." if index.isdigit() and index != value else ""
        raise InvalidArgumentError(f"{expected} Got {value!r}.{hint}")
    if isinstance(value, bytes) or not isinstance(value, Sequence | np.ndarray):
        one = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        hint = f" For one GPU, pass {name}=[{int(value)}]." if one else ""  # type: ignore[call-overload]  # an Integral
        raise InvalidTypeError(f"{expected} {_got(value)}{hint}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise InvalidTypeError(f"{expected} Got an array of shape {value.shape}.")
    items = list(value)
    if not items:
        raise InvalidArgumentError(
            f"{expected} Got an empty {type(value).__name__}. Use None for no devices."
        )
    if len(items) > _MAX_DEVICES:
        raise InvalidArgumentError(f"Expected at most {_MAX_DEVICES} entries in {name}. Got {len(items)}.")
    return tuple(parse_count(f"each of {name}", item) for item in items)
