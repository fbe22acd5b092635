"""Small gaps found by the adversarial pass: empty label lists, bad split fractions, a view's summary,
the read-only message of an old version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc


def _labels(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
    return ds


def test_empty_list_is_a_class_label_sample(tmp_path: Path) -> None:
    """[] (an image without objects) is stored as zero labels, like np.zeros(0, np.uint32), in append and
    in extend beside other samples."""
    ds = _labels(tmp_path / "ds")
    ds.labels.append([])
    ds.labels.extend([[0, 1], [], ["dog"], ()])
    back = lc.load(str(tmp_path / "ds")).labels.numpy(aslist=True)
    assert [a.tolist() for a in back] == [[], [0, 1], [], [1], []]
    assert {a.dtype for a in back} == {np.dtype(np.uint32)}
    assert back[0].shape == (0,)


@pytest.mark.parametrize(
    "fractions",
    [[float("nan"), 1.0], [float("inf"), 0.0], [0.5, None], ["a", 1], [True, False], [-0.5, 1.5], []],
)
def test_random_split_refuses_bad_fractions_clearly(tmp_path: Path, fractions: list[Any]) -> None:
    """NaN, infinity, None, strings, bools, negatives or nothing: InvalidArgumentError naming the rule."""
    ds = lc.from_numpy(str(tmp_path / "ds"), {"x": np.arange(10)})
    with pytest.raises(lc.InvalidArgumentError, match=r"all finite and >= 0\. Got "):
        ds.random_split(fractions)


def test_random_split_refuses_a_non_list(tmp_path: Path) -> None:
    """A single number or a string is an InvalidTypeError."""
    ds = lc.from_numpy(str(tmp_path / "ds"), {"x": np.arange(10)})
    for bad in (0.5, "0.8,0.2"):
        with pytest.raises(lc.InvalidTypeError, match="takes a list of fractions or sizes"):
            ds.random_split(bad)  # type: ignore[arg-type]


def test_view_summary_lists_the_views_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A view has summary() and summary_table() like a dataset, counting the view's samples."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("images", htype="image", sample_compression="png")
    ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
    for i in range(6):
        ds.append({"images": np.full((4, 3 + i % 2, 3), i, np.uint8), "labels": i % 2})
    view = ds[[0, 2, 4]]
    view.summary()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"DatasetView(path={ds.path!r}, version={ds.version}, samples=3)"
    assert out[1].split() == ["tensor", "htype", "dtype", "shape", "compression", "length"]
    assert out[3].split() == ["images", "image", "uint8", "(3,", "4,", "3,", "3)", "png", "3"]
    assert out[4].split()[:3] == ["labels", "class_label", "uint32"]
    assert out[4].split()[-1] == "3"
    assert ds[1:3].summary_table().splitlines()[3].split()[3:6] == ["(2,", "4,", "None,"]


def test_old_version_read_only_message_names_the_call(tmp_path: Path) -> None:
    """Writing to a handle opened at an old version says how it was opened and what to do."""
    ds = _labels(tmp_path / "ds")
    ds.labels.append(0)
    old = lc.load(str(tmp_path / "ds"), version=1)
    with pytest.raises(lc.ReadOnlyError) as info:
        old.labels.append(1)
    assert str(info.value) == (
        f"Version 1 of {ds.path!r} was opened with lc.load(path, version=1), and old versions are "
        "read-only. Open the latest with lc.load(path) to write, or start a branch from this version with "
        "ds.checkout(name, create=True)."
    )
