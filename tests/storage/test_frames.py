"""zstd frames written without compressing (`lakecompute.storage.encode_zstd`): zstd's own decoder (the one
zarr's codec uses) and zarr itself read them as the bytes given, and they are taken only where zstd would
gain nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from numcodecs import Zstd

from lakecompute.storage import encode_zstd
from lakecompute.storage._checked import zstd_content_size
from lakecompute.storage._frames import BLOCK_BYTES, PROBE_BYTES

ZSTD = Zstd(level=-1)


def _runs(draw_runs: list[tuple[int, int | None]], seed: int) -> np.ndarray:
    """Runs of random bytes (``None``) or of one byte repeated, laid end to end."""
    rng = np.random.default_rng(seed)
    parts = [
        rng.integers(0, 256, n, dtype=np.uint8) if byte is None else np.full(n, byte, dtype=np.uint8)
        for n, byte in draw_runs
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 300_000), st.one_of(st.none(), st.integers(0, 255))), min_size=1, max_size=8
    ),
    st.integers(0, 2**32 - 1),
)
def test_every_frame_decodes_to_its_bytes(runs: list[tuple[int, int | None]], seed: int) -> None:
    """Whatever the bytes (random, runs of one byte, both, across block edges), the frame declares their
    size and zstd's decoder gives them back, into a new buffer and into one of their size."""
    raw = _runs(runs, seed)
    frame = encode_zstd(raw, ZSTD.encode)
    assert zstd_content_size(frame) == raw.size
    assert np.array_equal(np.frombuffer(ZSTD.decode(frame), dtype=np.uint8), raw)
    out = np.empty(raw.size, dtype=np.uint8)
    ZSTD.decode(frame, out=out)
    assert np.array_equal(out, raw)


def test_incompressible_bytes_are_stored_and_padding_is_a_run() -> None:
    """A MiB of random bytes whose last 300 KiB are zeros (a writer's padding): written as blocks of the
    bytes themselves, the whole zero blocks as runs of four bytes; compressible bytes are compressed."""
    raw = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8)
    raw[-300 * 1024 :] = 0
    frame = encode_zstd(raw, ZSTD.encode)
    zero_blocks = (300 * 1024) // BLOCK_BYTES  # blocks wholly inside the padding
    stored = raw.size - zero_blocks * BLOCK_BYTES  # bytes in raw blocks
    blocks = -(-raw.size // BLOCK_BYTES)
    assert len(frame) == 4 + 1 + 4 + 3 * blocks + stored + zero_blocks  # header, block headers, bytes, runs
    text = np.frombuffer(b"a caption of a photo, repeated. " * 40_000, dtype=np.uint8)[: 1 << 20]
    squeezed = encode_zstd(text, ZSTD.encode)
    assert len(squeezed) < text.size // 10  # the probe compresses: zstd compresses the whole chunk
    assert np.array_equal(np.frombuffer(ZSTD.decode(squeezed), dtype=np.uint8), text)
    small = raw[: PROBE_BYTES // 2]
    assert encode_zstd(small, ZSTD.encode) == bytes(ZSTD.encode(small))  # too small to probe


def test_zarr_reads_a_chunk_file_written_so(tmp_path: Path) -> None:
    """A chunk file made of such a frame and its crc32c, placed where zarr keeps the chunk of an array
    stored with zstd and crc32c, reads back through zarr as the bytes written."""
    import google_crc32c

    arr = zarr.create_array(
        str(tmp_path / "b"),
        shape=(2 << 20,),
        chunks=(1 << 20,),
        dtype="uint8",
        compressors=[zarr.codecs.ZstdCodec(level=-1), zarr.codecs.Crc32cCodec()],
        fill_value=0,
    )
    assert [c["name"] for c in arr.metadata.to_dict()["codecs"]] == ["bytes", "zstd", "crc32c"]
    raw = np.random.default_rng(2).integers(0, 256, 1 << 20, dtype=np.uint8)
    raw[-200_000:] = 0
    frame = encode_zstd(raw, ZSTD.encode)
    key = arr.metadata.encode_chunk_key((1,))
    path = tmp_path / "b" / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(frame + int(google_crc32c.value(frame)).to_bytes(4, "little"))
    got = zarr.open_array(str(tmp_path / "b"), mode="r")[1 << 20 :]
    assert np.array_equal(np.asarray(got), raw)


def test_blobs_are_written_as_views_of_the_buffers_that_hold_them() -> None:
    """Blobs that lie back to back in a buffer (a row group's images) are written as one view of it, a
    run per buffer (a block of rows across two row groups: two views, no copy); other blobs are joined,
    in order."""
    from lakecompute.versioned._fragments import blob_runs

    mib = 1 << 20
    first = np.random.default_rng(3).integers(0, 256, 4 * mib, dtype=np.uint8)
    second = np.random.default_rng(4).integers(0, 256, 4 * mib, dtype=np.uint8)
    a, b = memoryview(first), memoryview(second)
    blobs: list[bytes | memoryview] = [
        a[0:mib], a[mib : 2 * mib], b[0:mib], b"loose", b[3 * mib : 4 * mib], a[3 * mib : 3 * mib + 10],
        b[100:110], bytes(5), memoryview(bytes(7)),
    ]  # fmt: skip
    runs = blob_runs(blobs)
    assert np.array_equal(np.concatenate(runs), np.frombuffer(b"".join(blobs), dtype=np.uint8))
    assert [r.size for r in runs] == [2 * mib, mib, 5, mib, 10 + 10 + 5 + 7]
    assert np.shares_memory(runs[0], first)  # two blobs back to back in one buffer: one view
    assert np.shares_memory(runs[1], second)  # the next buffer's: a view of its own
    assert not np.shares_memory(runs[2], second)  # loose bytes: joined
    assert np.shares_memory(runs[3], second)  # not right after the run before it: a view of its own
    assert not np.shares_memory(runs[4], first)  # short runs (under a MiB) joined into one write


def test_a_stored_frame_is_made_of_views_of_the_chunk() -> None:
    """`zstd_frame` gives the frame as parts: the raw blocks are read-only views of the chunk's own memory
    (written and checksummed from there, never copied), the chunk stays writable, and the parts joined are
    `encode_zstd`'s frame; a chunk that compresses is one part, its compressed bytes."""
    from lakecompute.storage import zstd_frame

    raw = np.random.default_rng(4).integers(0, 256, 1 << 20, dtype=np.uint8)
    raw[-BLOCK_BYTES:] = 7
    parts = zstd_frame(raw, ZSTD.encode)
    views = [p for p in parts if isinstance(p, np.ndarray)]
    assert len(views) == (1 << 20) // BLOCK_BYTES - 1  # every block but the last (a run)
    assert all(np.shares_memory(v, raw) and not v.flags.writeable for v in views)
    assert raw.flags.writeable
    assert b"".join(bytes(p) for p in parts) == encode_zstd(raw, ZSTD.encode)
    text = np.frombuffer(b"the same words again " * 60_000, dtype=np.uint8)
    assert zstd_frame(text, ZSTD.encode) == [bytes(ZSTD.encode(text))]
