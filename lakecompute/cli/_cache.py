"""``lakecompute cache info|clear``: what the local disk cache of object-storage chunks holds, and
emptying it (see docs/cluster.md)."""

from __future__ import annotations

import argparse

from lakecompute.errors import InvalidArgumentError
from lakecompute.storage import CACHE_DIR_ENV, CacheInfo, DiskCache, cache_spec

__all__ = ["run_cache"]


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]  # a float from here on, printed as one
    return f"{n} TB"  # pragma: no cover (the loop returns)


def _print(info: CacheInfo, bound: int) -> None:
    chunks = "chunk" if info.entries == 1 else "chunks"
    print(f"{info.directory}: {info.entries} {chunks}, {_size(info.nbytes)} of at most {_size(bound)}")
    for held in info.datasets:
        print(f"  {held.location}  (id {held.dataset_id[:12]})  {held.entries} chunks, {_size(held.nbytes)}")
    if info.partial:
        print(f"  {info.partial} being written now")


def run_cache(args: argparse.Namespace) -> int:
    """``lakecompute cache info|clear [--cache-dir DIR]``."""
    spec = cache_spec(args.cache_dir, None)
    if spec is None:
        raise InvalidArgumentError(
            f"No cache folder: pass --cache-dir DIR, or set the {CACHE_DIR_ENV} environment variable."
        )
    cache = DiskCache(spec)
    if args.action == "clear":
        info = cache.clear()
        print(f"{spec.directory}: removed {info.removed} files ({_size(info.nbytes)})")
        return 0
    _print(cache.info(), spec.max_bytes)
    return 0
