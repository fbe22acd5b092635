"""Tables as an eval's ``data_in``: ``lc.read_parquet`` (read by row group in the workers), an Arrow table and
a DataFrame, each recorded by a digest of its content."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakecompute as lc

N = 50


def _table(offset: int = 0) -> pa.Table:
    i = np.arange(offset, offset + N)
    return pa.table({"i": i, "name": [f"row {k}" for k in i], "vec": [[float(k), -float(k)] for k in i]})


def _write(path: Path, table: pa.Table, row_group_size: int = 8) -> Path:
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


@lc.compute
def scaled(row: dict[str, Any], sample_out: Any) -> None:
    if int(row["i"]) == int(os.environ.get("LC_TEST_TABLE_FAIL_AT", "-1")):
        raise RuntimeError("a flaky step")
    sample_out.y.append(int(row["i"]) * 3)
    sample_out.name.append(row["name"])
    sample_out.vec.append(np.asarray(row["vec"], dtype=np.float64))


def _out(path: Path) -> lc.Dataset:
    out = lc.empty(str(path), overwrite=True)
    out.create_tensor("y", dtype="int64")
    out.create_tensor("name", htype="text")
    out.create_tensor("vec", dtype="float64")
    return out


def _content(path: Path) -> list[Any]:
    ds = lc.load(str(path))
    return [ds.y.numpy().tolist(), list(ds.name.text()), ds.vec.numpy().tolist()]


def test_read_parquet_is_lazy_picklable_and_knows_its_length(tmp_path: Path) -> None:
    source = lc.read_parquet(_write(tmp_path / "t.parquet", _table()), columns=["name", "i"])
    assert len(source) == N
    assert source.columns == ["name", "i"]
    again = pickle.loads(pickle.dumps(source))
    assert len(pickle.dumps(source)) < 4096  # the footer's facts travel, not the rows
    assert again.read_rows(9, 11) == [{"name": "row 9", "i": 9}, {"name": "row 10", "i": 10}]


@pytest.mark.parametrize("workers", [0, 2])
def test_outputs_are_those_of_the_rows_as_a_list(tmp_path: Path, workers: int) -> None:
    """On 0 and 2 workers, read_parquet, the Arrow table and the DataFrame give what the rows given as a
    list of dicts give."""
    table = _table()
    path = _write(tmp_path / "t.parquet", table)
    scaled().eval(table.to_pylist(), _out(tmp_path / "list"), num_workers=workers, progressbar=False)
    want = _content(tmp_path / "list")
    for name, data in {
        "parquet": lc.read_parquet(path),
        "arrow": table,
        "pandas": table.to_pandas(),
    }.items():
        scaled().eval(data, _out(tmp_path / name), num_workers=workers, progressbar=False)
        assert _content(tmp_path / name) == want, name


PARENT = """
import sys
from pathlib import Path
import pyarrow as pa
import lakecompute as lc
from tests.tables.test_data_in import _content, _out, scaled

path, out, workers = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
scaled().eval(lc.read_parquet(path), _out(out), num_workers=workers, progressbar=False)
print(pa.default_memory_pool().max_memory(), _content(out)[0][-1])
"""


def test_the_parent_never_loads_the_file(tmp_path: Path) -> None:
    """With workers, the caller reads the footer (and hashes the bytes) but never a row group: its Arrow
    memory peaks far below one row group (4 MiB here), where reading in the caller (0 workers) does not."""
    blob = np.random.default_rng(0).bytes(1 << 20)
    table = pa.table({"i": np.arange(40), "name": ["x"] * 40, "vec": [[0.0, 0.0]] * 40, "pad": [blob] * 40})
    path = _write(tmp_path / "big.parquet", table, row_group_size=4)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    peaks = {}
    for workers in (2, 0):
        run = subprocess.run(
            [sys.executable, "-c", PARENT, str(path), str(tmp_path / f"out{workers}"), str(workers)],
            capture_output=True, text=True, env=env, timeout=240, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        peak, last = (int(v) for v in run.stdout.split())
        assert last == 3 * 39
        peaks[workers] = peak
    assert peaks[2] < (1 << 20) < (4 << 20) <= peaks[0]


def test_the_identical_rerun_is_a_noop_and_new_content_runs(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.parquet", _table())
    out = _out(tmp_path / "out")
    first = scaled().eval(lc.read_parquet(path), out, progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        again = scaled().eval(lc.read_parquet(path), out, progressbar=False)
    assert again.version == first.version
    assert len(lc.load(str(tmp_path / "out")).y) == N
    inputs = lc.load(str(tmp_path / "out")).log()[-1]["eval"]["inputs"]
    assert inputs["kind"] == "parquet"
    assert inputs["paths"] == [str(path)]
    assert len(inputs["xxh3_128"][0]) == 32
    for data in (_table(), _table().to_pandas()):
        scaled().eval(data, out, progressbar=False)
        with pytest.warns(lc.LakeComputeWarning, match="already completed"):
            scaled().eval(data, out, progressbar=False)
    assert len(lc.load(str(tmp_path / "out")).y) == 3 * N


def test_a_file_rewritten_in_place_at_the_same_size_and_time_is_new_input(tmp_path: Path) -> None:
    """Same path, same size, same modification time, other bytes: another input, so the eval runs."""
    path = _write(tmp_path / "t.parquet", _table())
    out = _out(tmp_path / "out")
    scaled().eval(lc.read_parquet(path), out, progressbar=False)
    stat = path.stat()
    data = bytearray(path.read_bytes())
    changed = pa.table({"i": _table()["i"], "name": [f"ROW {k}" for k in range(N)], "vec": _table()["vec"]})
    rewritten = bytearray(_write(tmp_path / "other.parquet", changed).read_bytes())
    assert len(rewritten) == len(data)
    path.write_bytes(bytes(rewritten))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    scaled().eval(lc.read_parquet(path), out, progressbar=False)
    assert list(lc.load(str(tmp_path / "out")).name.text())[N:] == [f"ROW {k}" for k in range(N)]


def test_a_failed_checkpointed_eval_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.parquet", _table())
    out = _out(tmp_path / "out")
    monkeypatch.setenv("LC_TEST_TABLE_FAIL_AT", "27")
    with pytest.raises(lc.TransformError, match=r"data_in\[27\]"):
        scaled().eval(lc.read_parquet(path), out, checkpoint_interval=10, num_workers=2, progressbar=False)
    assert len(lc.load(str(tmp_path / "out")).y) == 20
    monkeypatch.delenv("LC_TEST_TABLE_FAIL_AT")
    result = scaled().eval(
        lc.read_parquet(path), out, checkpoint_interval=10, num_workers=2, progressbar=False
    )
    assert result.resumed_from == 20
    assert _content(tmp_path / "out")[0] == [3 * i for i in range(N)]


def test_a_file_changed_under_a_running_eval_is_refused(tmp_path: Path) -> None:
    """A worker checks that the file is the one whose footer the caller read (size, rows, footer)."""
    path = _write(tmp_path / "t.parquet", _table())
    source = lc.read_parquet(path)
    _write(path, _table().slice(0, 10))
    with pytest.raises(lc.InvalidArgumentError, match="changed since it was opened"):
        source.read_rows(0, 1)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.parquet", _table())
    with pytest.raises(lc.InvalidArgumentError, match=r"Unknown column\(s\) \['nope'\]"):
        lc.read_parquet(path, columns=["nope"])
    with pytest.raises(lc.InvalidArgumentError, match="Cannot open the Parquet file"):
        lc.read_parquet(tmp_path / "missing.parquet")
    with pytest.raises(lc.InvalidTypeError, match="a path or a list of paths"):
        lc.read_parquet(3)
    other = _write(tmp_path / "o.parquet", pa.table({"z": [1]}))
    with pytest.raises(lc.InvalidArgumentError, match="other columns than"):
        lc.read_parquet([path, other])
    table = _table()
    retyped = _write(tmp_path / "r.parquet", table.set_column(0, "i", table.column("i").cast(pa.float64())))
    with pytest.raises(lc.InvalidArgumentError, match=r"other column types than .*column 'i': double there"):
        lc.read_parquet([path, retyped])
    both = lc.read_parquet([path, path])
    assert len(both) == 2 * N
    assert both.read_rows(N - 1, N + 1)[1]["i"] == 0


def test_a_folder_is_read_as_its_parquet_files_in_path_order(tmp_path: Path) -> None:
    """A folder written by Spark, DuckDB or Polars reads as pandas and Ray Data read it: its .parquet files
    at any depth in path order, without Spark's _SUCCESS, checksums, hidden files or _temporary/."""
    folder = tmp_path / "parts"
    (folder / "year=2025").mkdir(parents=True)
    (folder / "_temporary").mkdir()
    _write(folder / "part-00001.parquet", _table(N))
    _write(folder / "part-00000.parquet", _table(0))
    _write(folder / "year=2025" / "part-00000.parquet", _table(2 * N))
    _write(folder / "_temporary" / "part-00009.parquet", pa.table({"other": [1]}))  # an unfinished job's
    _write(folder / ".part-00000.parquet", pa.table({"other": [1]}))
    (folder / "_SUCCESS").write_bytes(b"")
    (folder / ".part-00000.parquet.crc").write_bytes(b"\0" * 12)
    source = lc.read_parquet(folder)
    assert source.paths == [str(folder / n) for n in ("part-00000.parquet", "part-00001.parquet")] + [
        str(folder / "year=2025" / "part-00000.parquet")
    ]
    assert [row["i"] for row in source.read_rows(0, len(source))] == list(range(3 * N))
    ds = lc.from_parquet(folder, str(tmp_path / "ds"), progressbar=False)
    assert ds.i.numpy().tolist() == list(range(3 * N))
    assert len(lc.read_parquet([folder, folder / "part-00000.parquet"])) == 4 * N


def test_a_folder_without_parquet_files_or_with_a_link_out_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "_SUCCESS").write_bytes(b"")
    with pytest.raises(lc.InvalidArgumentError, match=r"holds no Parquet file"):
        lc.read_parquet(empty)
    linked = tmp_path / "linked"
    linked.mkdir()
    _write(linked / "a.parquet", _table())
    outside = _write(tmp_path / "outside.parquet", _table())
    os.symlink(outside, linked / "b.parquet")
    with pytest.raises(lc.InvalidArgumentError, match=r"'b\.parquet' in the folder .*outside"):
        lc.read_parquet(linked)
    with pytest.raises(lc.InvalidArgumentError, match=r"'b\.parquet'"):
        lc.from_parquet(linked, str(tmp_path / "ds"), progressbar=False)
    assert not lc.exists(str(tmp_path / "ds"))


def test_a_parquet_file_of_no_rows_is_an_input_of_no_rows(tmp_path: Path) -> None:
    """pyarrow writes an empty table as one row group whose column chunks' data page offset is 0: a
    footer that fits its file, not a damaged one."""
    path = _write(tmp_path / "empty.parquet", _table().slice(0, 0))
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).data_page_offset == 0
    assert len(lc.read_parquet(path)) == 0
    ds = lc.from_parquet(path, str(tmp_path / "ds"), progressbar=False)
    assert (len(ds), sorted(ds.tensors)) == (0, ["i", "name", "vec"])
    out = _out(tmp_path / "out")
    scaled().eval(lc.read_parquet(path), out, num_workers=0, progressbar=False)
    assert len(out) == 0


@lc.compute
def animal(row: dict[str, Any], sample_out: Any) -> None:
    sample_out.append({"s": str(row["k"])})


def test_tables_that_differ_only_in_a_dictionary_are_two_inputs(tmp_path: Path) -> None:
    """A dictionary-encoded column's buffers are its indices: its dictionary is part of the digest too."""
    out = lc.empty(str(tmp_path / "out"), overwrite=True)
    out.create_tensor("s", htype="text")
    for words in (["cat", "dog", "cat"], ["cow", "pig", "cow"]):
        animal().eval(pa.table({"k": pa.array(words).dictionary_encode()}), out, progressbar=False)
    assert list(out.s.text()) == ["cat", "dog", "cat", "cow", "pig", "cow"]


def _digest(table: pa.Table) -> str:
    from lakecompute.tables._inputs import ArrowInput

    return str(ArrowInput(table).identity()["xxh3_128"])


def test_the_digest_covers_nested_dictionaries_and_all_of_the_schema() -> None:
    def nested(words: list[str]) -> dict[str, pa.Array]:
        codes = pa.array(words).dictionary_encode()
        return {
            "struct": pa.StructArray.from_arrays([codes, pa.array([1, 2])], names=["k", "n"]),
            "list": pa.ListArray.from_arrays(pa.array([0, 1, 2]), codes),
        }

    same, other = nested(["cat", "dog"]), nested(["cow", "pig"])
    for column in same:
        assert _digest(pa.table({column: same[column]})) != _digest(pa.table({column: other[column]}))
        assert _digest(pa.table({column: same[column]})) == _digest(
            pa.table({column: nested(["cat", "dog"])[column]})
        )
    schemas = [pa.schema([("i", pa.int64())], metadata={"note": "x" * 100 + end}) for end in "ab"]
    digests = {_digest(pa.table({"i": [1, 2]}, schema=schema)) for schema in schemas}
    assert len(digests) == 2
