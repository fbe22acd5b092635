"""Transforms with S3 datasets (a local moto server): local → S3, S3 → S3 in place, resume, errors;
with the processed scheduler (workers started by forkserver) and with Ray (2 local workers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc

N = 300
SCHEDULERS = ["processed", "ray"]


@pytest.fixture(params=SCHEDULERS)
def scheduler(request: pytest.FixtureRequest) -> str:
    """The processed scheduler and, when Ray is installed, the Ray scheduler (on the session's Ray)."""
    name: str = request.param
    if name == "ray":
        pytest.importorskip("ray")
        request.getfixturevalue("ray_session")
    return name


@lc.compute
def flip_and_shift(sample_in: Any, sample_out: Any) -> None:
    """Flip the image upside down and add 1 to the label (mod 2)."""
    sample_out.append(
        {
            "images": np.flip(sample_in.images.numpy(), axis=0),
            "labels": (int(sample_in.labels.numpy()) + 1) % 2,
        }
    )


@lc.compute
def square_or_fail(sample_in: int, sample_out: Any, marker: str, fail_at: int) -> None:
    """Write ``sample_in ** 2``; fail at ``fail_at`` on the first run only (until ``marker`` exists)."""
    if sample_in == fail_at and not Path(marker).exists():
        Path(marker).touch()
        raise RuntimeError(f"first run dies at {fail_at}")
    sample_out.x.append(np.int64(sample_in) ** 2)


@lc.compute
def fail_on_13(sample_in: Any, sample_out: Any) -> None:
    """Raise on the sample whose label index is 13, pass the others through."""
    if int(sample_in.x.numpy()) == 13:
        raise ValueError("thirteen is unlucky")
    sample_out.x.append(sample_in.x.numpy())


def _images(n: int) -> list[np.ndarray]:
    return [
        np.full((6, 4, 3), i % 251, dtype=np.uint8) + np.arange(6, dtype=np.uint8)[:, None, None]
        for i in range(n)
    ]


def _make_source(url: str, n: int, storage_options: dict[str, Any] | None = None) -> lc.Dataset:
    ds = lc.empty(url, overwrite=True, storage_options=storage_options)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
        ds.extend({"images": _images(n), "labels": [i % 2 for i in range(n)]})
    return ds


def _assert_flipped(ds: lc.Dataset, n: int) -> None:
    assert len(ds) == n
    expected = _images(n)
    for i in (0, 1, n // 2, n - 1):
        np.testing.assert_array_equal(ds.images[i].numpy(), np.flip(expected[i], axis=0))
    np.testing.assert_array_equal(ds.labels.numpy().reshape(-1), [(i + 1) % 2 for i in range(n)])


def test_eval_local_to_s3(
    tmp_path: Path, bucket: str, storage_options: dict[str, Any], scheduler: str
) -> None:
    """A local dataset transformed into an S3 dataset by 2 workers reads back in input order."""
    src = _make_source(str(tmp_path / "src"), N)
    url = f"s3://{bucket}/out"
    out = lc.like(url, src, storage_options=storage_options)
    result = flip_and_shift().eval(src, out, num_workers=2, scheduler=scheduler, progressbar=False)
    assert (result.inputs, result.outputs) == (N, {"images": N, "labels": N})
    _assert_flipped(lc.load(url, storage_options=storage_options), N)


def test_eval_s3_in_place(bucket: str, storage_options: dict[str, Any], scheduler: str) -> None:
    """An S3 dataset transformed in place by 2 workers: the new content replaces the old in one version,
    and the old version stays loadable."""
    url = f"s3://{bucket}/inplace"
    ds = _make_source(url, N, storage_options)
    before = ds.version
    flip_and_shift().eval(ds, num_workers=2, scheduler=scheduler, progressbar=False)
    after = lc.load(url, storage_options=storage_options)
    assert after.version == before + 1
    _assert_flipped(after, N)
    old = lc.load(url, version=before, storage_options=storage_options)
    np.testing.assert_array_equal(old.images[3].numpy(), _images(4)[3])


def test_eval_s3_resume_after_failure(
    tmp_path: Path, bucket: str, storage_options: dict[str, Any], scheduler: str
) -> None:
    """A checkpointed eval into S3 that fails at 57 resumes from its last checkpoint and writes
    every output once."""
    url = f"s3://{bucket}/resume"
    out = lc.empty(url, storage_options=storage_options)
    out.create_tensor("x", dtype="int64")
    marker = str(tmp_path / "crashed-once")
    fn = square_or_fail(marker=marker, fail_at=57)
    with pytest.raises(lc.TransformError) as info:
        fn.eval(
            list(range(100)),
            out,
            num_workers=2,
            scheduler=scheduler,
            checkpoint_interval=10,
            progressbar=False,
        )
    assert info.value.index == 57
    kept = len(lc.load(url, storage_options=storage_options).x)
    assert kept % 10 == 0
    assert 0 <= kept <= 50  # 0 when the failing task reports before any earlier one is applied

    out = lc.load(url, storage_options=storage_options)
    result = fn.eval(
        list(range(100)), out, num_workers=2, scheduler=scheduler, checkpoint_interval=10, progressbar=False
    )
    assert result.resumed_from == kept
    assert (result.inputs, result.outputs) == (100, {"x": 100})
    np.testing.assert_array_equal(
        lc.load(url, storage_options=storage_options).x.numpy(), np.arange(100) ** 2
    )


def test_eval_s3_transform_error_has_index_sample_cause(
    bucket: str, storage_options: dict[str, Any], scheduler: str
) -> None:
    """A failing sample raises TransformError with its index, its sample and the original cause;
    data_out is left at its last version."""
    src = lc.empty(f"s3://{bucket}/src13", storage_options=storage_options)
    src.create_tensor("x", dtype="int32")
    src.x.extend(np.arange(40, dtype=np.int32))
    out = lc.empty(f"s3://{bucket}/out13", storage_options=storage_options)
    out.create_tensor("x", dtype="int32")
    version = out.version
    with pytest.raises(lc.TransformError) as info:
        fail_on_13().eval(src, out, num_workers=2, scheduler=scheduler, progressbar=False)
    error = info.value
    assert error.index == 13
    assert int(error.sample.x.numpy()) == 13
    assert type(error.__cause__) is ValueError
    assert str(error.__cause__) == "thirteen is unlucky"
    assert "data_in[13]" in str(error)
    assert lc.load(f"s3://{bucket}/out13", storage_options=storage_options).version == version
