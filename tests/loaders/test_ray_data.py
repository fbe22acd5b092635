"""Ray Data in and out: ``ds.to_ray()`` reads a committed version as a ``ray.data.Dataset``, and a
``ray.data.Dataset`` is ``data_in`` of an eval, its order kept, on a real local Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from tests.s3.ray_session import ray_session

pytest.importorskip("ray.data")

__all__ = ["ray_session"]  # the module fixture, imported so that pytest finds it here

N = 45


@pytest.fixture(autouse=True)
def _ray(ray_session: Any) -> None:
    """Every test here runs on the module's local Ray."""


def _make(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
    ds.create_tensor("caption", htype="text")
    ds.create_tensor("ragged", dtype="float32")
    ds.create_tensor("emb", htype="embedding", dtype="float32")
    with ds:
        for i in range(N):
            ds.append({
                "images": np.full((4, 5, 3), i, dtype=np.uint8),
                "labels": i % 2,
                "caption": f"sample {i}",
                "ragged": np.arange(i % 4 + 1, dtype=np.float32) + i,
                "emb": np.full(3, i / 2, dtype=np.float32),
            })  # fmt: skip
    return ds


@pytest.mark.parametrize("rows_per_block", [1, 7, 1024])
def test_to_ray_rows_equal_the_dataset_in_order(tmp_path: Path, rows_per_block: int) -> None:
    """Every row of to_ray() equals the dataset's sample, in order, for any block size."""
    ds = _make(tmp_path / "ds")
    rows = ds.to_ray(rows_per_block=rows_per_block).take_all()
    assert len(rows) == N
    for i, row in enumerate(rows):
        np.testing.assert_array_equal(row["images"], ds.images[i].numpy())
        assert int(row["labels"]) == i % 2
        assert str(row["caption"]) == f"sample {i}"
        np.testing.assert_array_equal(row["ragged"], ds.ragged[i].numpy())
        np.testing.assert_array_equal(row["emb"], ds.emb[i].numpy())


def test_to_ray_of_a_view_and_some_tensors(tmp_path: Path) -> None:
    """A view's selection and a subset of tensors: only those rows and columns."""
    ds = _make(tmp_path / "ds")
    rows = ds[[30, 2, 2, 17]].to_ray(tensors=["labels", "emb"], rows_per_block=3).take_all()
    assert [sorted(r) for r in rows] == [["emb", "labels"]] * 4
    assert [float(r["emb"][0]) for r in rows] == [15.0, 1.0, 1.0, 8.5]


def test_to_ray_reads_the_version_it_was_made_from(tmp_path: Path) -> None:
    """Rows appended after to_ray() was called are not in it: it reads one committed version."""
    ds = _make(tmp_path / "ds")
    planned = ds.to_ray(tensors="labels")
    ds.labels.append(1)
    assert planned.count() == N


def test_to_ray_refuses_what_workers_cannot_read(tmp_path: Path) -> None:
    """A mem:// dataset and a bad block size are refused with what to do."""
    mem = lc.empty("mem://to-ray", overwrite=True)
    mem.create_tensor("x", dtype="int64")
    mem.x.extend(np.arange(3))
    with pytest.raises(lc.InvalidArgumentError, match="Use a local path"):
        mem.to_ray()
    with pytest.raises(lc.InvalidArgumentError, match=r"^Expected rows_per_block >= 1\. Got 0\.$"):
        _make(tmp_path / "ds").to_ray(rows_per_block=0)


@lc.compute
def brightness_times_ten(row: dict[str, Any], sample_out: Any) -> None:
    """From a Ray Data row: the image's first pixel times ten, and the caption kept."""
    sample_out.append({"y": np.int64(row["images"][0, 0, 0]) * 10, "caption": str(row["caption"])})


@pytest.mark.parametrize(("scheduler", "workers"), [("serial", 0), ("processed", 2), ("ray", 2)])
def test_eval_takes_a_ray_dataset_in_order(tmp_path: Path, scheduler: str, workers: int) -> None:
    """to_ray() -> map_batches -> eval back into a dataset: every row once, in the input's order."""
    ds = _make(tmp_path / "ds")
    mapped = ds.to_ray(rows_per_block=4).map_batches(lambda batch: batch, batch_format="numpy")
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("y", dtype="int64")
    out.create_tensor("caption", htype="text")
    with pytest.warns(lc.LakeComputeWarning, match=r"is not recorded .*a ray\.data\.Dataset"):
        result = brightness_times_ten().eval(mapped, out, num_workers=workers, scheduler=scheduler,
                                             progressbar=False)  # fmt: skip
    assert result.inputs == N
    back = lc.load(str(tmp_path / "out"))
    assert back.y.numpy().tolist() == [10 * i for i in range(N)]
    assert [str(c) for c in back.caption.numpy(aslist=True)] == [f"sample {i}" for i in range(N)]


def _late_first(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Sleep longer for earlier rows, so Ray Data's blocks finish in reverse order."""
    import time

    time.sleep(0.05 * (10 - int(batch["i"][0])))
    return batch


@lc.compute
def keep_i(row: dict[str, Any], sample_out: Any) -> None:
    """Store the row's ``i``."""
    sample_out.append({"i": np.int64(row["i"])})


def test_eval_keeps_the_order_of_any_ray_dataset(tmp_path: Path) -> None:
    """A user's own ray.data.Dataset (not from to_ray) whose blocks finish out of order: the eval
    still writes its rows in the dataset's order."""
    import ray.data

    data = ray.data.from_items([{"i": i} for i in range(10)], override_num_blocks=10)
    mapped = data.map_batches(_late_first, batch_format="numpy", batch_size=1)
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("i", dtype="int64")
    with pytest.warns(lc.LakeComputeWarning, match="is not recorded"):
        keep_i().eval(mapped, out, progressbar=False)
    assert lc.load(str(tmp_path / "out")).i.numpy().tolist() == list(range(10))
    assert mapped.context.execution_options.preserve_order is False  # the user's setting, restored


def test_checkpointed_eval_of_a_ray_dataset_is_refused_with_the_ways_out(tmp_path: Path) -> None:
    """checkpoint_interval over a ray.data.Dataset (no identity to resume by) is refused before anything
    runs, naming it and the ways out, instead of calling it a generator."""
    import ray.data

    data = ray.data.from_items([{"i": i} for i in range(10)])
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("i", dtype="int64")
    with pytest.raises(lc.FingerprintError) as info:
        keep_i().eval(data, out, checkpoint_interval=5, progressbar=False)
    message = str(info.value)
    assert "data_in, a ray.data.Dataset, is a stream" in message
    assert "Write it into a lakecompute dataset first" in message
    assert "list(ray_ds.iter_rows())" in message
    assert "generator" not in message
    assert lc.load(str(tmp_path / "out")).version == out.version


def test_to_ray_of_a_damaged_chunk_raises_dataset_corrupt_error(tmp_path: Path) -> None:
    """A chunk damaged on disk: consuming to_ray() raises what `except lc.DatasetCorruptError` catches,
    naming the file, never wrong values."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(np.arange(100))
    chunks = sorted((tmp_path / "ds" / "segments").glob("*/data/c/*"))
    assert chunks
    for chunk in chunks:
        chunk.write_bytes(b"not a chunk")
    with pytest.raises(lc.DatasetCorruptError) as info:
        ds.to_ray(rows_per_block=50).take_all()
    assert "segments/" in info.value.file
    assert info.value.tensor == "x"
    assert "does not decode" in str(info.value)
