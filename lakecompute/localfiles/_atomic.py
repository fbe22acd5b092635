"""A file written outside a dataset is whole or absent: a temporary file beside it, flushed, then
renamed into place."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

from lakecompute.errors import StorageError
from lakecompute.threads import start_thread

__all__ = [
    "abandoned_partial",
    "alive",
    "atomic_file",
    "atomic_path",
    "storage_error",
    "write_atomic",
    "write_fd",
]


def write_atomic(path: str, data: bytes, *, durable: bool = True, tidy: bool = True) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file in the same folder, flushed to
    disk, then renamed over ``path`` (`atomic_file` with one write).

    Args:
        path: where the file appears.
        data: its bytes.
        durable: flush the file to disk before the rename (a crash of the machine then leaves the old
            file or the new one, not an empty one); False for files whose readers verify them and can
            make them again, such as the disk cache's chunks, where the flush would cost more than the rest.
        tidy: first remove the temporary files of this path that killed processes left (a listing of the
            folder); False where the caller sweeps them itself (`abandoned_partial`).

    Raises:
        StorageError: the file cannot be written (a full disk, a missing folder, no permission); ``path``
            keeps what it held before.
    """
    with atomic_file(path, durable=durable, tidy=tidy) as f:
        f.write(data)


@contextlib.contextmanager
def atomic_file(path: str, *, durable: bool = True, tidy: bool = True) -> Iterator[BinaryIO]:
    """A binary file to write in pieces that appears at ``path`` whole, or not at all: the block writes a
    temporary file in the same folder, which is flushed to disk (with ``durable``) and renamed over
    ``path`` when the block ends; an exception in the block (or a kill) leaves ``path`` as it was.

    The temporary file is hidden and named after ``path`` and the writing process
    (``.<name>.<pid>.<random>.partial``); one that a killed process left is removed by the next write of
    the same path (with ``tidy``; see `abandoned_partial`).

    Raises:
        StorageError: the file cannot be written (a full disk, a missing folder, no permission); ``path``
            keeps what it held before.
    """
    with _replacing(path, tidy) as (fd, _), os.fdopen(fd, "wb") as f:
        yield f
        f.flush()
        if durable:
            os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """`atomic_file` for a writer that opens files by name (pyarrow's native Parquet writer): the block
    writes the temporary file whose name it is given, which is then flushed to disk and renamed over
    ``path``; an exception in the block (or a kill) leaves ``path`` as it was.

    Raises:
        StorageError: the file cannot be written; ``path`` keeps what it held before.
    """
    with _replacing(path) as (fd, tmp):
        try:
            yield tmp
            os.fsync(fd)  # the same file the writer wrote by name: on disk before the rename
        finally:
            os.close(fd)


@contextlib.contextmanager
def _replacing(path: str, tidy: bool = True) -> Iterator[tuple[int, str]]:
    """A new temporary file beside ``path`` (its descriptor and name), renamed over ``path`` when the
    block ends without an exception (the block writes it and flushes it to disk), removed otherwise."""
    folder, name = os.path.split(os.path.abspath(path))
    prefix = f".{name[:100]}."
    tmp = None
    replaced = _hold_if_large(path)
    try:
        if tidy:
            _remove_abandoned_partials(folder, prefix)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{prefix}{os.getpid()}.", suffix=".partial")
        os.fchmod(fd, _FILE_MODE)
        yield fd, tmp
        os.replace(tmp, path)
        tmp = None
        if replaced is not None:
            start_thread("drop-replaced", os.close, replaced)
            replaced = None
    except OSError as exc:
        raise storage_error(path, exc) from exc
    finally:
        if replaced is not None:  # not replaced: the file stays, and closing it frees nothing
            os.close(replaced)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)


#: A file replaced that is at least this large has its blocks freed after the call returns.
_LARGE = 64 << 20


def _hold_if_large(path: str) -> int | None:
    """A descriptor of the file at ``path`` when it is a large one about to be replaced (its cached pages
    let go first), else None.

    * The rename that replaces a file frees the old file's blocks, unless it is still open: then they
      are freed when the last descriptor closes. Closing it on a thread after the rename returns that
      time to the caller: replacing a 237 MB export took 45 ms more than writing it anew (on a disk
      mounted with ``discard``, which trims every freed block), and 0.1 ms so. A kill before the close
      frees them as the kernel closes the process's descriptors.
    * Its pages in the page cache are dropped before its successor is written, which then reuses them
      instead of taking memory the system has not used yet: on this project's VMs, where such memory is
      faulted in by the host, a new 237 MB file written beside the old one took 0.5 s, and 0.07-0.15 s
      into memory let go by a file of the same size.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # nothing there, a link (replaced itself, not followed), or not ours to read
    try:
        if os.fstat(fd).st_size >= _LARGE:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages go; dirty ones stay
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _remove_abandoned_partials(folder: str, prefix: str) -> None:
    """Remove the temporary files of `write_atomic` that start with ``prefix`` and whose process is gone."""
    for entry in os.listdir(folder):
        if entry.startswith(prefix) and abandoned_partial(entry):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, entry))


def abandoned_partial(name: str) -> bool | None:
    """Whether a file named ``name`` is a temporary file of `write_atomic` whose writing process is gone
    (True: a kill left it, remove it), one still being written (False), or no such file at all (None)."""
    if not (name.startswith(".") and name.endswith(".partial")):
        return None
    parts = name.split(".")
    # "." + name + "." + pid + "." + random + ".partial": the pid is the third part from the end.
    pid = parts[-3] if len(parts) >= 5 else ""
    if not pid.isdigit():
        return None
    return not alive(int(pid))


def _file_mode() -> int:
    """The mode ``open()`` gives a new file (0o666 less the umask); read once, at import."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


# mkstemp makes files only their owner may read (0o600); an exported file is made as open() makes one.
_FILE_MODE = _file_mode()


def write_fd(fd: int, data: bytes) -> None:
    os.fchmod(fd, _FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def storage_error(path: str, exc: OSError) -> StorageError:
    return StorageError(
        f"Cannot write {path!r} ({exc.strerror or exc}); the file keeps what it held before. "
        "Check free space and permissions, then run again.",
        url=path,
        reason="other",
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
