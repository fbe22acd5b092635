"""docs/errors.md and the code cannot drift apart: every row of its table is reproduced and checked here."""

from __future__ import annotations

import multiprocessing
import os
import re
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image as PILImage

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from lakecompute.viewer import parse_query
from lakecompute.viz import contact_sheet
from tests.helpers import make_numbers, make_out
from tests.reliability.reliability_helpers import FAIL_AT, KILL_AT, double

DOC = Path(__file__).resolve().parents[1] / "docs" / "errors.md"


def _ds(tmp: Path, name: str = "ds") -> lc.Dataset:
    """A dataset with tensors x (int8), r (ragged), img (image), labels, meta (json) and t (text)."""
    ds = lc.empty(str(tmp / name), overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int8")
        ds.create_tensor("r", dtype="int32")
        ds.create_tensor("img", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
        ds.create_tensor("meta", htype="json")
        ds.create_tensor("t", htype="text")
    row = {"x": 1, "r": np.arange(2), "img": np.zeros((4, 4), np.uint8), "labels": 0, "meta": {}, "t": "a"}
    ds.append(row)
    ds.append({**row, "r": np.arange(3)})
    return ds


def _numbers(tmp: Path, name: str = "src", n: int = 20) -> lc.Dataset:
    return make_numbers(tmp / name, n)


def _out(tmp: Path, name: str = "out", **tensors: dict[str, Any]) -> lc.Dataset:
    return make_out(tmp / name, **tensors)


@lc.compute
def fails_on_three(sample_in: Any, sample_out: Any) -> None:
    """Raise ValueError on input 3, else write x."""
    if int(sample_in) == 3:
        raise ValueError("three is bad")
    sample_out.append({"x": int(sample_in)})


@lc.compute
def writes_unknown(sample_in: Any, sample_out: Any) -> None:
    """Write to a tensor data_out does not have."""
    sample_out.append({"labelz": 1})


@lc.compute
def writes_x_twice(sample_in: Any, sample_out: Any) -> None:
    """Write x twice but y once per input."""
    sample_out.extend({"x": [1, 2], "y": [1]})


@lc.compute
def writes_only_x(sample_in: Any, sample_out: Any) -> None:
    """Write x but not y."""
    sample_out.append({"x": 1})


@lc.compute
def writes_big(sample_in: Any, sample_out: Any) -> None:
    """Write a value too big for an int8 tensor."""
    sample_out.append({"x": 1000})


@lc.compute
def first_of_pair(sample_in: Any, sample_out: Any) -> None:
    """Write the first item of a pair; the second is never used."""
    sample_out.append({"x": int(sample_in[0])})


@lc.compute
def forks_on_two(sample_in: Any, sample_out: Any) -> None:
    """Fork on input 2: the child returns from the function, the parent waits for it to end."""
    if int(sample_in) == 2:
        pid = os.fork()
        if pid:
            os.waitpid(pid, 0)
    sample_out.append({"x": int(sample_in)})


def _worker_start_failed(tmp: Path) -> Any:
    from lakecompute.schedulers import get_scheduler

    name = f"fails_in_workers_{uuid.uuid4().hex}"
    (tmp / f"{name}.py").write_text(
        textwrap.dedent(
            """
            import multiprocess

            if multiprocess.current_process().name.startswith("lakecompute-worker"):
                raise RuntimeError("cannot start in a worker")


            def task_fn(task, progress):
                return task
            """
        )
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(tmp))
        fn = __import__(name).task_fn
        list(get_scheduler("processed", 2, start_method="spawn").run(fn, range(4)))


def _corrupt(tmp: Path) -> Any:
    ds = _numbers(tmp)
    (tmp / "src" / "versions" / f"{ds.version:010d}.json").write_text("{not json")
    return lc.load(str(tmp / "src"))


def _corrupt_field(tmp: Path) -> Any:
    ds = _numbers(tmp)
    key = tmp / "src" / "versions" / f"{ds.version:010d}.json"
    key.write_text(key.read_text().replace(",0,20]]", ",5,20]]"))  # the fragment's k: 5 + 20 > 20 samples
    return lc.load(str(tmp / "src"))


def _chunk_file(tmp: Path, ds: lc.Dataset) -> Path:
    seg = dataset_core(ds).txn.head.tensors["x"].fragments[0].seg
    return tmp / "src" / "segments" / seg / "data" / "c" / "0"


def _missing_chunk(tmp: Path) -> Any:
    _chunk_file(tmp, _numbers(tmp)).unlink()
    return lc.load(str(tmp / "src")).x.numpy()


def _damaged_chunk(tmp: Path) -> Any:
    chunk = _chunk_file(tmp, _numbers(tmp))
    chunk.write_bytes(chunk.read_bytes()[:-3])
    return lc.load(str(tmp / "src")).x.numpy()


def _rewrite_x(path: str) -> None:
    ds = lc.load(path)
    with ds:
        ds.delete_tensor("x")
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(np.arange(3))


def _in_child(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn`` in a forked process (its segments then belong to a writer that is gone)."""
    proc = multiprocessing.get_context("fork").Process(target=fn, args=args)
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0


def _vacuumed(tmp: Path) -> Any:
    path = str(tmp / "src")
    _in_child(_numbers, tmp)
    old = lc.load(path)
    _in_child(_rewrite_x, path)
    lc.load(path).vacuum(grace_seconds=0, keep_versions=1)
    return old.x.numpy()


def _linked(tmp: Path) -> Any:
    ds = _numbers(tmp)
    manifest = tmp / "src" / "versions" / f"{ds.version:010d}.json"
    manifest.rename(tmp / "elsewhere.json")
    manifest.symlink_to(tmp / "elsewhere.json")
    return lc.load(str(tmp / "src"))


def _interrupted_delete(tmp: Path) -> Any:
    _numbers(tmp)
    marker = '{"zarr_format": 3, "node_type": "group", "attributes": {"lakecompute-incomplete": {}}}'
    (tmp / "src" / "zarr.json").write_text(marker)  # what a delete killed after its first step leaves
    return lc.load(str(tmp / "src"))


def _task_unpicklable(tmp: Path) -> Any:
    import warnings

    with warnings.catch_warnings():  # a stream is not recorded: its eval warns so first
        warnings.simplefilter("ignore", lc.LakeComputeWarning)
        items = ((i, (j for j in range(2))) for i in range(5))
        return first_of_pair().eval(items, _out(tmp), num_workers=2, progressbar=False)


def _replaced(tmp: Path) -> Any:
    import pickle

    blob = pickle.dumps(_numbers(tmp))
    _numbers(tmp, n=5)  # made again at the same path (overwrite=True): another dataset id
    return pickle.loads(blob)


def _replaced_copy(tmp: Path) -> Any:
    import pickle
    import shutil

    src = _numbers(tmp)
    shutil.copytree(tmp / "src", tmp / "copy")
    src.x[0] = -1
    lc.load(str(tmp / "copy")).x[0] = -2  # the same version number, other content
    blob = pickle.dumps(lc.load(str(tmp / "src")))
    shutil.rmtree(tmp / "src")
    shutil.move(str(tmp / "copy"), str(tmp / "src"))
    return pickle.loads(blob)


def _tag_of_missing_version(tmp: Path) -> Any:
    import json

    ds = _numbers(tmp)
    (tmp / "src" / "refs" / "tags").mkdir(parents=True, exist_ok=True)
    (tmp / "src" / "refs" / "tags" / "gone.json").write_text(json.dumps({"version": 99, "created": 0.0}))
    return lc.load(ds.path, version="gone")


def _image_depth(tmp: Path) -> Any:
    from tests.test_image_depth import png16

    (tmp / "scope.png").write_bytes(png16(np.full((4, 5, 3), 4095, np.uint16)))
    ds = lc.empty(str(tmp / "ds"))
    ds.create_tensor("images", htype="image", sample_compression="png")
    ds.images.append(lc.read(tmp / "scope.png"))


def _ingest_resume_conflict(tmp: Path) -> Any:
    folder = tmp / "files" / "a"
    folder.mkdir(parents=True)
    for i in range(3):
        PILImage.fromarray(np.full((4, 4, 3), i, np.uint8)).save(folder / f"{i}.png")
    (folder / "3.png").write_bytes(b"broken")
    with pytest.raises(lc.InvalidSampleError):
        lc.ingest_classification(tmp / "files", tmp / "ds", checkpoint_interval=1, progressbar=False)
    (folder / "3.png").unlink()
    (folder / "0.png").rename(folder / "00.png")  # another list of files
    lc.ingest_classification(tmp / "files", tmp / "ds", checkpoint_interval=1, resume=True, progressbar=False)


def _augment_objects(tmp: Path) -> Any:
    albumentations = pytest.importorskip("albumentations")
    ds = lc.empty(str(tmp / "ds"))
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("boxes", htype="bbox", format="xywh")
        ds.create_tensor("categories", htype="class_label", class_names=["a", "b"])
    boxes = [[1, 1, 2, 2], [3, 3, 2, 2], [5, 5, 2, 2]]
    ds.extend(
        {
            "images": [np.zeros((8, 8, 3), np.uint8)] * 2,
            "boxes": [boxes] * 2,
            "categories": [[0, 1, 1], [0, 1]],
        }
    )
    flip = albumentations.Compose(
        [albumentations.HorizontalFlip()], bbox_params=albumentations.BboxParams(format="coco")
    )
    lc.vision.augment(flip, ds[1], np.random.default_rng(0), boxes="boxes", objects=["categories"])


def _ingest_overlap(tmp: Path) -> Any:
    from lakecompute.demo import write_image_folder

    write_image_folder(tmp / "files", n=3, size=(8, 8))
    return lc.ingest_classification(tmp / "files", tmp / "files" / "ds", progressbar=False, overwrite=True)


def _conflict(tmp: Path) -> Any:
    a = _numbers(tmp)
    b = lc.load(str(tmp / "src"))
    a.x.append(1)
    b.x.append(2)


def _lease_expired(tmp: Path) -> Any:
    ds = _numbers(tmp)
    with ds:
        ds.x.append(99)
        _ = ds.x.numpy()  # the sample is written under this writer's lease
        # As after a pause: the process was stopped for 100 s, so its lease was not renewed.
        dataset_core(ds).txn.writer.lease.renewed -= 100


def _eval_conflict(tmp: Path) -> Any:
    out = _out(tmp)
    stale = lc.load(str(tmp / "out"))
    out.x.append(1)
    double().eval(list(range(5)), stale, progressbar=False)


def _eval_resume_conflict(tmp: Path) -> Any:
    out = _out(tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FAIL_AT, "7")  # the first run stops after its checkpoint at 5
        with pytest.raises(lc.TransformError):
            double().eval(list(range(20)), out, checkpoint_interval=5, progressbar=False)
    out = lc.load(str(tmp / "out"))
    out.x.append(99)  # someone else writes after the checkpoint
    double().eval(list(range(20)), out, checkpoint_interval=5, progressbar=False)


@lc.compute
def uneven_columns(sample_in: Any, sample_out: Any) -> dict[str, Any]:
    """With batch_size: return columns of different lengths."""
    return {"x": [1, 2], "y": [1]}


def _unequal_lengths(tmp: Path) -> Any:
    ds = _out(tmp, "ds", x={"dtype": "int64"}, y={"dtype": "int64"})
    ds.x.extend([1, 2])
    ds.y.extend([1])
    double().eval(ds, _out(tmp), progressbar=False)


def _eval_unfinished(tmp: Path) -> Any:
    out = _out(tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FAIL_AT, "7")  # the run stops after its checkpoint at 5
        with pytest.raises(lc.TransformError):
            double().eval(list(range(20)), out, checkpoint_interval=5, progressbar=False)
    double().eval(list(range(30)), out, checkpoint_interval=5, progressbar=False)  # other input


def _worker_died(tmp: Path) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KILL_AT, "3")
        double().eval(list(range(20)), _out(tmp), num_workers=2, checkpoint_interval=5, progressbar=False)


@lc.compute
def drops_odd(sample_in: Any, sample_out: Any) -> None:
    """Relabel even rows only: a filter, which in place would misalign the kept tensors."""
    if int(sample_in.x.numpy()) % 2 == 0:
        sample_out.y.append(0)


@lc.compute
def writes_and_returns(sample_in: Any, sample_out: Any) -> dict[str, int]:
    """Append a row and also return one."""
    sample_out.x.append(1)
    return {"x": 2}


@lc.compute
def returns_int(sample_in: Any, sample_out: Any) -> int:
    """Return an int instead of rows."""
    return 3


@lc.compute
def with_rng(sample_in: Any, sample_out: Any, rng: Any) -> None:
    """Write a random draw."""
    sample_out.x.append(int(rng.integers(10)))


def _two_columns(tmp: Path) -> lc.Dataset:
    ds = _numbers(tmp)
    ds.create_tensor("y", dtype="int64")
    ds.y.extend(np.arange(20))
    return ds


def _ray(tmp: Path) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "ray", None)  # as if Ray were not installed: importing it fails
        double().eval(list(range(5)), _out(tmp), scheduler="ray", num_workers=1, progressbar=False)


def _manifest_directory(tmp: Path) -> None:
    ds = _numbers(tmp)
    target = Path(ds.path) / "versions" / f"{ds.version:010d}.json"
    target.unlink()
    target.mkdir()
    lc.load(str(ds.path))


def _merge_conflict(tmp: Path) -> Any:
    ds = _numbers(tmp)
    ds.checkout("exp", create=True)
    ds.x[5] = -5
    main = lc.load(str(tmp / "src"))
    main.x[5] = 500
    main.merge("exp")


def _delete_current_branch(tmp: Path) -> Any:
    ds = _numbers(tmp)
    ds.checkout("exp", create=True)
    ds.delete_branch("exp")


CASES: dict[str, Callable[[Path], Any]] = {
    # -- datasets ------------------------------------------------------------------------------
    "not-found": lambda t: lc.load(str(t / "nothing")),
    "path-nul": lambda t: lc.load("x\x00y"),
    "path-too-long": lambda t: lc.empty(str(t) + "/a" * 2500),
    "cache-size": lambda t: lc.load(str(_numbers(t).path), cache_dir=t / "cache", cache_size="20 GBs"),
    "exists": lambda t: (_numbers(t), lc.empty(str(t / "src"))),
    "no-version": lambda t: lc.load(str(_numbers(t).path), version=99),
    "corrupt": _corrupt,
    "corrupt-directory": _manifest_directory,
    "corrupt-field": _corrupt_field,
    "corrupt-missing-chunk": _missing_chunk,
    "corrupt-chunk": _damaged_chunk,
    "vacuumed": _vacuumed,
    "linked-file": _linked,
    "interrupted-delete": _interrupted_delete,
    "replaced": _replaced,
    "replaced-copy": _replaced_copy,
    "ingest-overlap": _ingest_overlap,
    "image-depth": _image_depth,
    "ingest-resume-conflict": _ingest_resume_conflict,
    "augment-objects": _augment_objects,
    "bad-tensor-name": lambda t: _out(t).create_tensor("bad name!"),
    "tensor-name-too-long": lambda t: _out(t).create_tensor("x" * 300),
    "tensor-exists": lambda t: _out(t).create_tensor("x"),
    "no-such-tensor": lambda t: _out(t)["y"],
    "unknown-htype": lambda t: _out(t).create_tensor("v", htype="video"),
    "unknown-sample-compression": lambda t: _out(t).create_tensor(
        "v", htype="image", sample_compression="gif"
    ),
    "unknown-chunk-compression": lambda t: _out(t).create_tensor("v", chunk_compression="rar"),
    "class-names-wrong-htype": lambda t: _out(t).create_tensor("v", class_names=["a"]),
    "bad-box": lambda t: _out(t, b={"htype": "bbox"}).b.append([[5, 0, 1, 1]]),
    "bad-box-format": lambda t: _out(t, b={"htype": "bbox", "format": "xxyy"}),
    "bad-binary-mask": lambda t: _out(t, m={"htype": "binary_mask"}).m.append(np.full((2, 2), 255)),
    "bad-keypoints": lambda t: _out(t, k={"htype": "keypoints"}).k.append([[1, 2, 3]]),
    "dtype-overflow": lambda t: _ds(t).x.append(300),
    "float-overflow": lambda t: _out(t, f={"dtype": "float32"}).f.append(1e300),
    "float-image": lambda t: _ds(t).img.append(np.zeros((4, 4), np.float32)),
    "wrong-rank": lambda t: _ds(t).r.append(np.zeros((2, 2), np.int32)),
    "label-not-a-name": lambda t: _ds(t).labels.append("cow"),
    "label-out-of-range": lambda t: _ds(t).labels.append(7),
    "not-json": lambda t: _ds(t).meta.append({"a": object()}),
    "read-only": lambda t: lc.load(str(_numbers(t).path), read_only=True).x.append(1),
    "old-version": lambda t: lc.load(str(_numbers(t).path), version=1).x.append(1),
    "view-write": lambda t: _numbers(t)[0:2].append({"x": 1}),
    "index-out-of-range": lambda t: _numbers(t).x[100],
    "ragged-numpy": lambda t: _ds(t).r.numpy(),
    "append-missing-tensors": lambda t: _ds(t).append({"x": 1}),
    "extend-unequal": lambda t: _out(t, y={"dtype": "int64"}, x={"dtype": "int64"}).extend(
        {"x": [1, 2], "y": [1]}
    ),
    "append-not-dict": lambda t: _out(t).append(5),
    "commit-conflict": _conflict,
    "lease-expired": _lease_expired,
    "no-branch": lambda t: _numbers(t).checkout("nope"),
    "no-ref": lambda t: lc.load(str(_numbers(t).path), version="v2"),
    "ref-exists": lambda t: [
        _numbers(t).checkout("exp", create=True),
        lc.load(str(t / "src")).checkout("exp", create=True),
    ],
    "bad-ref-name": lambda t: _numbers(t).checkout("a/b", create=True),
    "bad-version-name": lambda t: lc.load(str(_numbers(t).path), version="²"),
    "checkout-version": lambda t: _numbers(t).checkout(2),  # type: ignore[arg-type]
    "ref-names-missing-version": _tag_of_missing_version,
    "merge-conflict": _merge_conflict,
    "delete-current-branch": _delete_current_branch,
    "keep-versions": lambda t: _numbers(t).vacuum(keep_versions=0),
    "expression-syntax": lambda t: _ds(t).filter("__import__('os').system('x')"),
    "expression-unknown-tensor": lambda t: _ds(t).filter("lables == 'cat'"),
    "expression-class-name": lambda t: _ds(t).filter(lc.col("labels") == "cow"),
    "expression-types": lambda t: _ds(t).filter("labels > 'cat'"),
    "expression-too-deep": lambda t: lc.expr("(" * 10_000 + "x" + ")" * 10_000),
    "filter-labels-per-row": lambda t: _ds(t).filter_labels("x > 0"),
    "show-not-image": lambda t: contact_sheet(_ds(t), tensor="labels"),
    "show-labels": lambda t: contact_sheet(_ds(t), tensor="img", label_tensor="t"),
    "viewer-parameter": lambda t: parse_query("limit=1000000000", {"limit"}).number("limit", 48, 1, 500),
    # -- evals ---------------------------------------------------------------------------------
    "transform-error": lambda t: fails_on_three().eval(list(range(10)), _out(t), progressbar=False),
    "eval-unknown-tensor": lambda t: writes_unknown().eval(list(range(5)), _out(t), progressbar=False),
    "eval-bad-value": lambda t: writes_big().eval(
        list(range(5)), _out(t, x={"dtype": "int8"}), progressbar=False
    ),
    "check-lengths": lambda t: writes_x_twice().eval(
        list(range(5)), _out(t, x={"dtype": "int64"}, y={"dtype": "int64"}), progressbar=False
    ),
    "skip-ok": lambda t: writes_only_x().eval(
        list(range(5)), _out(t, x={"dtype": "int64"}, y={"dtype": "int64"}), progressbar=False
    ),
    "num-workers": lambda t: double().eval(list(range(5)), _out(t), num_workers=-1),
    "checkpoint-interval": lambda t: double().eval(list(range(5)), _out(t), checkpoint_interval=-5),
    "batch-size": lambda t: double().eval(list(range(5)), _out(t), batch_size=0),
    "option-type": lambda t: double().eval(list(range(5)), _out(t), checkpoint_interval="5"),  # type: ignore[typeddict-item]
    "unknown-option": lambda t: double().eval(list(range(5)), _out(t), num_worker=2),  # type: ignore[call-arg]
    "storage-unreachable": lambda t: lc.load(
        "s3://bucket/ds", storage_options={"endpoint_url": "http://127.0.0.1:1", "key": "k", "secret": "s"}
    ),
    "storage-half-credentials": lambda t: lc.load(
        "s3://bucket/ds", storage_options={"endpoint_url": "http://127.0.0.1:1", "key": "k"}
    ),
    "unknown-scheduler": lambda t: double().eval(list(range(5)), _out(t), scheduler="dask", num_workers=2),
    "ray-missing": _ray,
    "in-place-not-dataset": lambda t: double().eval(list(range(5))),
    "out-is-view": lambda t: double().eval(list(range(5)), _out(t)[0:0]),
    "out-not-dataset": lambda t: double().eval(list(range(5)), [], progressbar=False),
    "out-no-tensors": lambda t: double().eval(list(range(5)), lc.empty(str(t / "e")), progressbar=False),
    "in-place-aligned": lambda t: drops_odd().eval(_two_columns(t), skip_ok=True, progressbar=False),
    "in-place-ignore-errors": lambda t: drops_odd().eval(
        _two_columns(t), skip_ok=True, ignore_errors=True, progressbar=False
    ),
    "return-and-write": lambda t: writes_and_returns().eval(list(range(5)), _out(t), progressbar=False),
    "return-other": lambda t: returns_int().eval(list(range(5)), _out(t), progressbar=False),
    "factory-eval": lambda t: double.eval(list(range(5)), _out(t)),
    "rng-bound": lambda t: with_rng(rng=1),
    "seed": lambda t: double().eval(list(range(5)), _out(t), seed=-1),
    "mem-processed": lambda t: double().eval(list(range(5)), _mem_out(), num_workers=2, progressbar=False),
    "data-in-str": lambda t: double().eval("abc", _out(t), progressbar=False),
    "data-in-scalar": lambda t: double().eval(np.array(5), _out(t), progressbar=False),
    "unequal-lengths": _unequal_lengths,
    "batched-columns": lambda t: uneven_columns().eval(
        list(range(4)), _out(t, x={"dtype": "int64"}, y={"dtype": "int64"}), batch_size=2, progressbar=False
    ),
    "pad-not-dataset": lambda t: double().eval(list(range(5)), _out(t), pad_data_in=True, progressbar=False),
    "worker-died": _worker_died,
    "worker-start-failed": _worker_start_failed,
    "task-unpicklable": _task_unpicklable,
    "task-forked": lambda t: forks_on_two().eval(list(range(6)), _out(t), num_workers=2, progressbar=False),
    "eval-commit-conflict": _eval_conflict,
    "eval-unfinished": _eval_unfinished,
    "eval-resume-conflict": _eval_resume_conflict,
    "fingerprint-stream": lambda t: double().eval(
        (i for i in range(5)), _out(t), checkpoint_interval=2, progressbar=False
    ),
}


def _mem_out() -> lc.Dataset:
    ds = lc.empty("mem://errors-doc", overwrite=True)
    ds.create_tensor("x", dtype="int64")
    return ds


def _rows() -> list[dict[str, str]]:
    """The rows of the table in docs/errors.md: id, error type, when, message excerpt, what to do."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 5 or not re.fullmatch(r"`[a-z-]+`", cells[0]):
            continue
        excerpt = re.fullmatch(r"`(.+)`", cells[3])
        assert excerpt, f"the message of row {cells[0]} must be one `code` span: {cells[3]!r}"
        rows.append({"id": cells[0].strip("`"), "type": cells[1].strip("`"), "message": excerpt.group(1)})
    return rows


ROWS = _rows()


def test_errors_doc_has_a_row_per_case() -> None:
    """The table lists at least 30 errors, each once, and every reproducer here has its row."""
    ids = [r["id"] for r in ROWS]
    assert len(ids) >= 30
    assert len(set(ids)) == len(ids)
    assert set(ids) == set(CASES)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_errors_doc_row(row: dict[str, str], tmp_path: Path) -> None:
    """The row's reproducer raises the documented type (a LakeComputeError) with the documented message."""
    kind = getattr(lc, row["type"].removeprefix("lc."))
    with pytest.raises(kind) as info:
        CASES[row["id"]](tmp_path)
    assert isinstance(info.value, lc.LakeComputeError)
    assert row["message"] in str(info.value)
