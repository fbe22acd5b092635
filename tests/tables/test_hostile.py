"""Property tests of the table readers: any near-valid input (a damaged Parquet file, CSV text, an Arrow table
of any types, metadata of any content) ends in a dataset or a `LakeComputeError`, never another exception."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.specs import HTYPES
from tests.tables.conftest import make_photos

SETTINGS = settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def parquet_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("hostile")
    ds = make_photos(str(root / "ds"), n=6)
    ds.to_parquet(root / "p.parquet", row_group_size=2, progressbar=False)
    return (root / "p.parquet").read_bytes()


def _damage(data: bytes, draw: st.DrawFn) -> bytes:
    """``data`` cut short, overwritten in places, or spliced with itself."""
    way = draw(st.sampled_from(["truncate", "flip", "overwrite", "splice", "random"]))
    if way == "truncate":
        return data[: draw(st.integers(0, len(data) - 1))]
    if way == "random":
        return draw(st.binary(max_size=2048))
    out = bytearray(data)
    if way == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(out) - 1))
            out[i] ^= draw(st.integers(1, 255))
    elif way == "overwrite":
        i = draw(st.integers(0, len(out) - 1))
        chunk = draw(st.binary(min_size=1, max_size=64))
        out[i : i + len(chunk)] = chunk
    else:
        a, b = sorted(draw(st.lists(st.integers(0, len(out)), min_size=2, max_size=2)))
        out = out[:a] + out[b:] + out[a:b]
    return bytes(out)


def _outcome(fn: Any) -> None:
    """Run ``fn``: it returns, or raises a LakeComputeError (its warnings, of rows skipped, are expected)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", lc.LakeComputeWarning)
            fn()
    except lc.LakeComputeError:
        pass


def test_damaged_parquet_files_are_read_or_refused(parquet_bytes: bytes, tmp_path: Path) -> None:
    """read_parquet and reading every row, then from_parquet: a result or a LakeComputeError."""
    counter = iter(range(10**6))

    @SETTINGS
    @given(st.data())
    def run(data: st.DataObject) -> None:
        damaged = _damage(parquet_bytes, data.draw)
        path = tmp_path / f"d{next(counter)}.parquet"
        path.write_bytes(damaged)

        def read() -> None:
            source = lc.read_parquet(path)
            source.read_rows(0, len(source))

        _outcome(read)
        _outcome(lambda: lc.from_parquet(path, "mem://hostile-parquet", overwrite=True, progressbar=False))

    run()


_BODY = st.text(alphabet=st.sampled_from(list('ab,1.5"\n\r;-é ')), max_size=80)
# Half the texts start with a header of valid column names, so that the rows themselves are exercised.
CSV_TEXT = st.one_of(_BODY, st.tuples(st.sampled_from(["a", "a,b", "a,b,c"]), _BODY).map("\n".join))


def test_any_csv_text_becomes_a_dataset_or_an_error(tmp_path: Path) -> None:
    counter = iter(range(10**6))

    @SETTINGS
    @given(CSV_TEXT, st.booleans())
    def run(text: str, skip: bool) -> None:
        path = tmp_path / f"c{next(counter)}.csv"
        path.write_text(text)
        _outcome(
            lambda: lc.from_csv(
                path, "mem://hostile-csv", overwrite=True, progressbar=False, skip_errors=skip
            )
        )

    run()


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.text(max_size=4),
    st.binary(max_size=4),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3), max_leaves=8)


@st.composite
def arrow_columns(draw: st.DrawFn) -> Any:
    """A column pyarrow makes of drawn Python values (any type it infers), or None if it makes none."""
    values = draw(st.lists(_VALUES, min_size=1, max_size=4))
    try:
        return pa.array(values)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None


_LAYOUTS = st.fixed_dictionaries(
    {
        "format": st.just(1),
        "htype": st.sampled_from([*HTYPES, "video"]),
        "dtype": st.sampled_from(
            [None, "int16", "uint32", "float32", "bool", "complex64", "str", "json", "x"]
        ),
        "sample_compression": st.sampled_from([None, "png", "webp", "zip"]),
        "chunk_compression": st.sampled_from([None, "zstd"]),
        "info": st.sampled_from([{}, {"class_names": ["a"]}, {"format": "xywh"}, {"format": 3}, []]),
        "dims": st.lists(st.one_of(st.none(), st.integers(-1, 4)), max_size=3),
        "shaped": st.booleans(),
    }
)


def test_any_arrow_table_with_any_metadata_becomes_a_dataset_or_an_error() -> None:
    """Columns of any inferred type, with a lakecompute layout or Hugging Face features of any content (or
    none), read as data_in and ingested: a result or a LakeComputeError."""

    @SETTINGS
    @given(
        arrow_columns(),
        st.one_of(st.none(), _LAYOUTS),
        st.sampled_from([None, "Image", "ClassLabel", "Json"]),
    )
    def run(column: Any, layout: Any, feature: Any) -> None:
        if column is None:
            return
        meta = {"lakecompute": json.dumps(layout)} if layout is not None else None
        field = pa.field("c", column.type, metadata=meta)
        schema = pa.schema([field])
        if feature is not None:
            hf = {"info": {"features": {"c": {"_type": feature, "names": ["a", "b"]}}}}
            schema = schema.with_metadata({"huggingface": json.dumps(hf)})
        table = pa.Table.from_arrays([column], schema=schema)
        _outcome(lambda: lc.from_arrow(table, "mem://hostile-arrow", overwrite=True, progressbar=False))

        def as_input() -> None:
            @lc.compute
            def copy(row: Any, out: Any) -> None:
                out.v.append(json.dumps(row["c"], default=str))

            out = lc.empty("mem://hostile-arrow-out", overwrite=True)
            out.create_tensor("v", htype="text")
            copy().eval(table, out, progressbar=False)

        _outcome(as_input)

    run()


def test_numbers_columns_decode_exactly_or_name_the_rule() -> None:
    """Nested lists that are not arrays (ragged inner lists, nulls inside) are Bad cells naming the rule."""
    from lakecompute.tables import CellReader, ColumnLayout, read_cells

    reader = CellReader("m", "numbers", ColumnLayout("m", "generic", "int64", dims=(None, None)))
    cells = read_cells(reader, pa.array([[[1, 2], [3, 4]], [[1], [2, 3]], [[1, None]], None, []]))
    assert cells[0].tolist() == [[1, 2], [3, 4]]
    assert cells[0].dtype == np.int64
    assert "not an array" in cells[1].reason
    assert "null" in cells[2].reason
    assert "null" in cells[3].reason
    assert cells[4].shape == (0, 0)
