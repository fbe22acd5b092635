"""pyarrow and pandas, imported when a table verb is first used (``import lakecompute`` never loads them),
and what their exceptions become: a library error naming the file or column, never a raw pyarrow one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from lakecompute.errors import DatasetCorruptError, InvalidArgumentError, LakeComputeError
from lakecompute.optional import require

__all__ = ["DIGEST", "content_hasher", "damaged_file", "pandas", "pyarrow", "reading_file"]

_EXTRA = "pip install 'lakecompute[tables]' (pyarrow, pandas and xxhash)"

DIGEST = "xxh3_128"
"""The digest a table input is recorded by (the key of its identity): 128 bits of xxHash3, which hashes a
Parquet file of images at memory speed (~25 GB/s; SHA-256 ~2 GB/s took a fifth of ``lc.from_parquet``).
It tells one content from another (the identical rerun, a file rewritten in place), as Hugging Face
``datasets`` fingerprints with xxHash; it is not a defence against files crafted to collide."""


def pyarrow() -> ModuleType:
    """The ``pyarrow`` module, with ``pyarrow.parquet``, ``pyarrow.csv`` and ``pyarrow.compute`` loaded.

    Raises:
        InvalidArgumentError: pyarrow is not installed.
    """
    for module in ("pyarrow.compute", "pyarrow.csv", "pyarrow.parquet"):  # loaded for pa.parquet.*
        require(module, "A table verb", _EXTRA)
    return require("pyarrow", "A table verb", _EXTRA)


def pandas() -> ModuleType:
    """The ``pandas`` module.

    Raises:
        InvalidArgumentError: pandas is not installed.
    """
    return require("pandas", "A DataFrame verb", _EXTRA)


def content_hasher() -> Any:
    """A new `DIGEST` hasher (``update(bytes-like)``, ``hexdigest()``).

    Raises:
        InvalidArgumentError: xxhash is not installed.
    """
    return require("xxhash", "Recording a table as input", _EXTRA).xxh3_128()


def damaged_file(path: str, exc: BaseException, what: str = "Parquet") -> DatasetCorruptError:
    """A table file that cannot be read as what it claims to be: `DatasetCorruptError` naming it."""
    reason = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    return DatasetCorruptError(
        path,
        path,
        f"not a readable {what} file ({reason})",
        "The file is truncated, damaged or not of that format; write it again, or read another copy.",
    )


@contextlib.contextmanager
def reading_file(path: str, what: str = "Parquet") -> Iterator[None]:
    """Inside the block, pyarrow's errors about the file at ``path`` (and OSError, MemoryError) become
    `DatasetCorruptError` naming it; library errors pass through.

    Raises:
        DatasetCorruptError: the file is damaged, truncated, or not of its format.
        InvalidArgumentError: the file cannot be opened at all (no such file, a folder).
    """
    pa = pyarrow()
    try:
        yield
    except LakeComputeError:
        raise
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise InvalidArgumentError(f"Cannot open the {what} file {path!r} ({exc}).") from exc
    except (pa.ArrowException, OSError, MemoryError, ValueError, IndexError, TypeError, KeyError) as exc:
        raise damaged_file(path, exc, what) from exc


def arrow_error_types() -> tuple[type[BaseException], ...]:
    """The exceptions pyarrow raises for data it cannot convert (for ``except`` clauses)."""
    pa: Any = pyarrow()
    return (pa.ArrowException, ValueError, TypeError, OverflowError, IndexError)
