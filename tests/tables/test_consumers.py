"""Our Parquet files and Arrow streams, read as they are by the libraries users hand them to: pandas,
pyarrow, Hugging Face ``datasets`` (typed features, with no options), DuckDB, Polars and Ray Data."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import lakecompute as lc
from tests.s3.ray_session import ray_session  # noqa: F401  # the module's local Ray
from tests.tables.conftest import NAMES, image


def _label_counts(photos: lc.Dataset) -> dict[int, int]:
    return dict(Counter(int(v) for v in photos.labels.numpy()))


def test_pandas_reads_the_file(photos: lc.Dataset, photos_parquet: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.read_parquet(photos_parquet)
    assert frame["labels"].tolist() == [i % 3 for i in range(12)]
    assert frame["caption"][7] == "photo 7 é"
    assert frame["images"][2]["bytes"] == photos.images[2].tobytes()


def test_pyarrow_dataset_reads_the_file(photos_parquet: Path) -> None:
    import pyarrow.dataset as pads

    table = pads.dataset(photos_parquet).to_table(columns=["emb"], filter=pads.field("labels") == 1)
    assert [row[0] for row in table.column("emb").to_pylist()] == [1.0, 4.0, 7.0, 10.0]


def test_hugging_face_reads_typed_features_with_no_options(photos: lc.Dataset, photos_parquet: Path) -> None:
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset.from_parquet(str(photos_parquet), cache_dir=str(photos_parquet.parent / "hf"))
    f = hf.features
    assert f["images"] == datasets.Image()
    assert f["labels"] == datasets.ClassLabel(names=NAMES)
    assert f["emb"] == datasets.Sequence(datasets.Value("float32"), length=4)
    assert f["boxes"] == datasets.Sequence(datasets.Sequence(datasets.Value("float32"), length=4))
    assert f["caption"] == datasets.Value("string")
    row = hf[5]
    assert np.array_equal(np.asarray(row["images"]), image(5))
    assert (row["labels"], f["labels"].int2str(row["labels"])) == (2, "bird")
    assert row["boxes"] == [[5.0] * 4, [5.0] * 4]


def test_duckdb_group_by_over_the_file_equals_our_counts(photos: lc.Dataset, photos_parquet: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    rows = duckdb.sql(
        f"select labels, count(*) from read_parquet('{photos_parquet}') group by labels"
    ).fetchall()
    assert dict(rows) == _label_counts(photos)


def test_duckdb_queries_the_stream(photos: lc.Dataset) -> None:
    """DuckDB over to_arrow_reader: a query that reads the stream once, batch by batch."""
    duckdb = pytest.importorskip("duckdb")
    reader = photos.to_arrow_reader(batch_size=4, tensors=["labels", "caption"])  # noqa: F841 (DuckDB reads it by name)
    rows = duckdb.sql("select labels, count(*) from reader group by labels").fetchall()
    assert dict(rows) == _label_counts(photos)


def test_polars_reads_the_file(photos: lc.Dataset, photos_parquet: Path) -> None:
    pl = pytest.importorskip("polars")
    frame = pl.read_parquet(photos_parquet)
    counts = frame.group_by("labels").len()
    assert dict(zip(counts["labels"].to_list(), counts["len"].to_list(), strict=True)) == _label_counts(
        photos
    )
    assert frame["emb"][3].to_list() == [3.0, 4.0, 5.0, 6.0]
    assert frame["images"][1]["bytes"] == photos.images[1].tobytes()


@pytest.mark.slow
def test_ray_data_reads_the_file(photos: lc.Dataset, photos_parquet: Path, ray_session: object) -> None:  # noqa: F811
    import ray.data

    rows = ray.data.read_parquet(str(photos_parquet)).take_all()
    assert sorted(int(r["labels"]) for r in rows) == sorted(int(v) for v in photos.labels.numpy())
    assert {r["caption"] for r in rows} == {f"photo {i} é" for i in range(12)}
