"""Messages from a worker process to its parent, one pipe per worker, read without ever blocking.

A worker writes each message as a frame (an 8-byte length, then the bytes) on its own pipe. The parent
reads every pipe without blocking and keeps a partial frame until the rest arrives. A worker killed in
the middle of a frame (a result larger than the pipe's buffer is written in pieces, each waiting for
the parent to read the one before) leaves a partial frame that never completes; the parent notices the
death through the process's sentinel, keeps the complete frames the worker sent before, and drops the
rest. A blocking read of a whole message (``Connection.recv_bytes``) would wait forever for the missing
bytes instead, and one pipe shared by all workers under a lock would also leave the other workers
waiting forever for the lock the dead one held.
"""

from __future__ import annotations

import os
import struct

__all__ = ["FrameReader", "send_frame"]

_HEADER = struct.Struct("!Q")
# Messages up to this size are written with their header in one write (atomic on a pipe, and one
# system call); larger ones are written in place, without copying them behind a header.
_SMALL = 65536


def send_frame(fd: int, data: bytes) -> None:
    """Write one frame to the (blocking) file descriptor ``fd``; returns once all of it is in the pipe."""
    header = _HEADER.pack(len(data))
    if len(data) <= _SMALL:
        _write_all(fd, header + data)
        return
    _write_all(fd, header)
    _write_all(fd, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class FrameReader:
    """The parent's end of one worker's pipe: reads what has arrived, never waits for more."""

    def __init__(self, fd: int) -> None:
        """Read from ``fd`` (made non-blocking here)."""
        os.set_blocking(fd, False)
        self.fd = fd
        self._header = bytearray()
        self._body: bytearray | None = None
        self._filled = 0

    @property
    def partial(self) -> bool:
        """Whether part of a frame has arrived and the rest has not."""
        return bool(self._header) or self._body is not None

    def read_available(self) -> list[bytearray]:
        """The frames completed by what can be read now, in the order they were sent."""
        frames: list[bytearray] = []
        while True:
            try:
                frame = self._read_once()
            except (BlockingIOError, EOFError):  # nothing more now; or every writer is gone
                return frames
            if frame is not None:
                frames.append(frame)

    def _read_once(self) -> bytearray | None:
        """Read once; return the frame this completed, if any.

        Raises:
            BlockingIOError: nothing can be read now.
            EOFError: the pipe is closed at the other end and empty.
        """
        if self._body is None:
            data = os.read(self.fd, _HEADER.size - len(self._header))
            if not data:
                raise EOFError
            self._header += data
            if len(self._header) < _HEADER.size:
                return None
            (size,) = _HEADER.unpack(self._header)
            self._header.clear()
            self._body = bytearray(size)
            self._filled = 0
        elif self._filled < len(self._body):
            count = os.readv(self.fd, [memoryview(self._body)[self._filled :]])
            if not count:
                raise EOFError
            self._filled += count
        if self._filled < len(self._body):
            return None
        body, self._body = self._body, None
        return body
