"""Where the local disk cache of a remote dataset's chunks is and how much it may hold: the options
``cache_dir`` and ``cache_size`` (of ``lc.load``, ``ds.batches``, ``ds.pytorch``) and their environment
variables, checked once (`DiskCache` is the cache itself)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from lakecompute.errors import InvalidArgumentError, InvalidTypeError
from lakecompute.parsing import parse_size

__all__ = ["CACHE_DIR_ENV", "CACHE_SIZE_ENV", "DEFAULT_CACHE_SIZE", "CacheSpec", "cache_folder", "cache_spec"]

#: The environment variable naming the default cache folder (no cache when it is unset or empty).
CACHE_DIR_ENV: Final = "LAKECOMPUTE_CACHE_DIR"
#: The environment variable giving the default bound (``"20GB"`` when unset).
CACHE_SIZE_ENV: Final = "LAKECOMPUTE_CACHE_SIZE"
#: The bound on the bytes a cache holds when none is given.
DEFAULT_CACHE_SIZE: Final = 20 * 10**9


@dataclass(frozen=True, slots=True)
class CacheSpec:
    """Where a disk cache is and how much it may hold (travels to workers with a dataset's location).

    Attributes:
        directory: the cache folder, absolute (the cache keeps its files in ``lakecompute-cache/`` in it).
        max_bytes: the most bytes its files take on disk.
    """

    directory: str
    max_bytes: int


def cache_spec(
    cache_dir: object = None, cache_size: object = None, *, inherit: CacheSpec | None = None
) -> CacheSpec | None:
    """The disk cache asked for: ``cache_dir`` (a folder; None: ``inherit``'s, else the
    ``LAKECOMPUTE_CACHE_DIR`` environment variable, else no cache) bounded by ``cache_size`` (bytes or a
    size such as ``"20GB"``; None: ``inherit``'s, else ``LAKECOMPUTE_CACHE_SIZE``, else 20 GB). A size of
    0 turns the cache off.

    Raises:
        InvalidTypeError: ``cache_dir`` is not a path, or ``cache_size`` not a size.
        InvalidArgumentError: an empty ``cache_dir``, or a size that does not parse.
    """
    if cache_dir is not None:
        folder: str | None = cache_folder(cache_dir)
    elif inherit is not None:
        folder = inherit.directory
    else:
        folder = os.environ.get(CACHE_DIR_ENV) or None
    if cache_size is not None:
        size = parse_size("cache_size", cache_size)
    elif inherit is not None and cache_dir is None:
        size = inherit.max_bytes
    else:
        size = parse_size(CACHE_SIZE_ENV, os.environ.get(CACHE_SIZE_ENV) or DEFAULT_CACHE_SIZE)
    if folder is None or size == 0:
        return None
    return CacheSpec(os.path.abspath(os.path.expanduser(folder)), size)


def cache_folder(cache_dir: object) -> str:
    """``cache_dir`` checked: an absolute path (``~`` expanded).

    Raises:
        InvalidTypeError: not a str or os.PathLike.
        InvalidArgumentError: an empty path, or one with a NUL character.
    """
    if not isinstance(cache_dir, str | os.PathLike):
        raise InvalidTypeError(
            f"Expected cache_dir to be a folder (str or os.PathLike) or None. Got "
            f"{type(cache_dir).__name__}: {cache_dir!r:.80}."
        )
    folder = os.fspath(cache_dir)
    if not isinstance(folder, str) or not folder or "\x00" in folder:
        raise InvalidArgumentError(
            f"Expected cache_dir to be a folder's path. Got {cache_dir!r:.80}; pass a path such as "
            "'~/.cache/lakecompute', or leave it out for no cache."
        )
    return os.path.abspath(os.path.expanduser(folder))
