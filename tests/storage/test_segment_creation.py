"""A new segment's metadata documents are stored directly (made once by zarr, in memory): byte for byte
what ``zarr.create_array`` writes, readable by zarr, and the ``segments`` folder's own document is
written where a new dataset lacks it and left alone where it is there."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

import lakecompute as lc
from lakecompute import compression
from lakecompute.versioned import SlotWriter
from lakecompute.versioned._segments import OpenSegment, create_segment


def _documents(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("zarr.json"))}


@pytest.mark.parametrize("codec", [None, "zstd", "lz4", "gzip"])
def test_documents_are_what_zarr_writes(tmp_path: Path, codec: str | None) -> None:
    """Two segments, in a new dataset and in one that has segments: every document equals the one
    zarr writes for an array of the same shape, chunks, dtype, codecs and attributes."""
    lc.empty(str(tmp_path / "ds"))
    store = LocalStore(str(tmp_path / "ds"))
    assert not (tmp_path / "ds" / "segments" / "zarr.json").exists()
    create_segment(store, "a", compression.zarr_compressors(codec))
    assert (tmp_path / "ds" / "segments" / "zarr.json").exists()
    create_segment(store, "b", compression.zarr_compressors(codec))

    reference = LocalStore(str(tmp_path / "ref"))
    zarr.create_group(reference)  # the dataset's root group, as lc.empty made it
    for part in ("data", "index"):
        ours = zarr.open_array(store, path=f"segments/a/{part}", mode="r")
        zarr.create_array(
            reference,
            name=f"segments/a/{part}",
            shape=ours.shape,
            chunks=ours.chunks,
            dtype=ours.dtype,
            fill_value=0,
            compressors=ours.compressors,
            attributes=dict(ours.attrs),
        )
        assert ours.attrs["lakecompute"] == f"segment-{part}"
        assert ours.compressors[-1].to_dict()["name"] == "crc32c"  # every chunk carries its checksum
    ours_docs = {k: v for k, v in _documents(tmp_path / "ds").items() if k.startswith("segments")}
    ref_docs = {k: v for k, v in _documents(tmp_path / "ref").items() if k.startswith("segments")}
    folder = "segments/a"
    expected = [
        f"{folder}/data/zarr.json",
        f"{folder}/index/zarr.json",
        f"{folder}/zarr.json",
        "segments/zarr.json",
    ]
    assert sorted(ref_docs) == expected
    for key, data in ref_docs.items():
        assert ours_docs[key] == data, key
        assert ours_docs[key.replace("segments/a/", "segments/b/")] == data, key


def test_segment_reads_back_through_zarr(tmp_path: Path) -> None:
    """Bytes written into a directly created segment read back through zarr's own array."""
    lc.empty(str(tmp_path / "ds"))
    store = LocalStore(str(tmp_path / "ds"))
    create_segment(store, "s", compression.zarr_compressors("zstd"))
    writer = SlotWriter(OpenSegment(store, "s"), 1)
    values = np.arange(3000, dtype=np.int64).astype(np.uint8)
    offset = writer.write_data(values)
    rows = np.arange(30, dtype=np.int64)
    row = writer.write_index(rows)
    np.testing.assert_array_equal(
        zarr.open_array(store, path="segments/s/index", mode="r")[row : row + 30], rows
    )
    stored = zarr.open_array(store, path="segments/s/data", mode="r")
    np.testing.assert_array_equal(stored[offset : offset + values.size], values)


def test_existing_folder_document_is_left_alone(tmp_path: Path) -> None:
    """The ``segments`` folder's document, once there, is not written again by a new segment."""
    lc.empty(str(tmp_path / "ds"))
    store = LocalStore(str(tmp_path / "ds"))
    create_segment(store, "a", compression.zarr_compressors("zstd"))
    folder = tmp_path / "ds" / "segments" / "zarr.json"
    marked = {**json.loads(folder.read_text()), "attributes": {"marker": 1}}
    folder.write_text(json.dumps(marked))
    create_segment(store, "b", compression.zarr_compressors("zstd"))
    assert json.loads(folder.read_text())["attributes"] == {"marker": 1}
    assert zarr.open_group(store, path="segments/b", mode="r").attrs.asdict() == {}


def test_evals_into_new_datasets_read_back(tmp_path: Path) -> None:
    """An eval into a new dataset (its first segment made this way) reads back in a new handle."""
    src = lc.empty(str(tmp_path / "in"))
    src.create_tensor("x", dtype="int32")
    src.x.extend(np.arange(500, dtype=np.int32).reshape(100, 5))

    @lc.compute
    def double(sample_in, sample_out):  # type: ignore[no-untyped-def]
        sample_out.x.append(sample_in.x.numpy() * 2)

    out = lc.like(str(tmp_path / "out"), src)
    double().eval(src, out, num_workers=2, progressbar=False)
    again = lc.load(str(tmp_path / "out"))
    np.testing.assert_array_equal(again.x.numpy(), np.arange(500, dtype=np.int32).reshape(100, 5) * 2)
