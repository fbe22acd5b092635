"""The direct chunk reader's zstd header parser: the size a frame declares, read from untrusted bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numcodecs import Zstd

from lakecompute.storage._checked import decode_chunk, zstd_content_size


@pytest.mark.parametrize("level", [-1, 1, 3, 19])
@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 65791, 65792, 1 << 20, 3 << 20])
def test_declared_size_is_the_decoded_size(level: int, n: int) -> None:
    """For frames numcodecs writes (as zarr does) the declared size is the size decoded, at every width."""
    values = (np.arange(n) * 37 % 251).astype(np.uint8)
    frame = bytes(Zstd(level=level).encode(values))
    assert zstd_content_size(frame) == n
    if n:
        np.testing.assert_array_equal(decode_chunk(frame, np.dtype(np.uint8), n, Zstd(), False), values)


def test_a_frame_declaring_the_wrong_size_does_not_decode() -> None:
    """A header edited to declare the chunk's size while the frame holds less fails (never garbage)."""
    values = (np.arange(1000) * 7 % 251).astype(np.uint8)
    frame = bytearray(Zstd(level=1).encode(values))
    frame[5:7] = (2000 - 256).to_bytes(2, "little")  # a one-segment frame: 2 size bytes after the descriptor
    assert zstd_content_size(bytes(frame)) == 2000
    with pytest.raises(RuntimeError):
        decode_chunk(bytes(frame), np.dtype(np.uint8), 2000, Zstd(), False)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=24), st.integers(0, 23), st.integers(0, 255))
def test_any_bytes_give_a_size_or_none(data: bytes, at: int, byte: int) -> None:
    """Random bytes and valid frames with one byte changed give an int or None, never an exception."""
    frame = bytearray(Zstd(level=1).encode(np.arange(300, dtype=np.uint8)))
    frame[at % len(frame)] = byte
    for candidate in (data, bytes(frame), b"\x28\xb5\x2f\xfd" + data):
        size = zstd_content_size(candidate)
        assert size is None or (isinstance(size, int) and size >= 0)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 200), st.integers(0, 255))
def test_damaged_frames_decode_to_the_chunk_or_raise(at: int, byte: int) -> None:
    """A frame with one byte changed decodes to exactly the chunk's bytes or raises a decode error."""
    values = (np.arange(4096) * 13 % 251).astype(np.uint8)
    frame = bytearray(Zstd(level=1).encode(values))
    frame[at % len(frame)] = byte
    try:
        out = decode_chunk(bytes(frame), np.dtype(np.uint8), 4096, Zstd(), False)
    except (ValueError, RuntimeError):
        return
    assert out.shape == (4096,)
    assert out.dtype == np.uint8
