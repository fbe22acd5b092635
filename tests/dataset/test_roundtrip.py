"""Round trips: every htype, several dtypes, fixed and ragged shapes, each compression, reopened."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import zarr

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from tests.dataset.conftest import make_mixed, row, snapshot

CHUNK_COMPRESSIONS = [None, "zstd", "lz4", "gzip"]


def test_create_tensor_default_chunk_compression(tmp_path: Any) -> None:
    """Without chunk_compression, numeric tensors get zstd and encoded images get none."""
    ds = lc.empty(str(tmp_path / "d"))
    assert ds.create_tensor("x", dtype="int16").chunk_compression == "zstd"
    assert ds.create_tensor("img", htype="image", sample_compression="png").chunk_compression is None
    assert ds.create_tensor("t", htype="text").chunk_compression is None


NUMERIC_DTYPES = ["bool", "int8", "uint16", "int32", "int64", "float16", "float32", "float64", "complex64"]


def _values(dtype: str, shapes: list[tuple[int, ...]], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    out = []
    for shape in shapes:
        if dt.kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(bool))
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt))
        elif dt.kind == "c":
            out.append((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt))
        else:
            out.append((rng.standard_normal(shape) * 1000).astype(dt))
    return out


def _assert_exact(got: list[np.ndarray], want: list[np.ndarray], dtype: str) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.dtype(dtype)
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


FIXED = [(3, 4)] * 7
RAGGED = [(1, 4), (5, 2), (3, 3), (1, 1), (0, 2), (6, 1), (2, 7)]


@pytest.mark.parametrize("chunk_compression", CHUNK_COMPRESSIONS)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("shapes", [FIXED, RAGGED], ids=["fixed", "ragged"])
def test_generic_roundtrip_exact(
    ds_path: str, dtype: str, chunk_compression: str | None, shapes: Any
) -> None:
    """A generic tensor gives back exactly what was written, after reopening from disk."""
    want = _values(dtype, shapes)
    ds = lc.empty(ds_path)
    ds.create_tensor("x", dtype=dtype, chunk_compression=chunk_compression)
    ds.x.extend(want[:3])
    for v in want[3:]:
        ds.x.append(v)
    again = lc.load(ds_path)
    # The tensor's codec, then the chunk checksum; None gets zstd's fastest level, which squeezes out the
    # zero padding of each writer's last chunk.
    assert again.x.chunk_compression == chunk_compression
    seg = dataset_core(again).txn.head.tensors["x"].fragments[0].seg
    compressors = zarr.open_array(ds_path, path=f"segments/{seg}/data", mode="r").compressors
    assert [type(c).__name__ for c in compressors[1:]] == ["Crc32cCodec"]
    if chunk_compression is None:
        assert compressors[0] == zarr.codecs.ZstdCodec(level=-1)
    assert again.x.dtype == np.dtype(dtype)
    _assert_exact(again.x.numpy(aslist=True), want, dtype)
    if shapes is FIXED:
        np.testing.assert_array_equal(again.x.numpy(), np.stack(want))
        assert again.x.shape == (7, 3, 4)
    else:
        assert again.x.shape == (7, None, None)


def test_generic_roundtrip_stacked_array_extend(ds_path: str) -> None:
    """extend() with one stacked array reads back as the same array."""
    want = np.arange(2 * 5 * 6, dtype=np.int32).reshape(10, 6) - 30
    ds = lc.empty(ds_path)
    ds.create_tensor("x", dtype="int32")
    ds.x.extend(want)
    got = lc.load(ds_path).x.numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_generic_roundtrip_scalars(ds_path: str) -> None:
    """Scalar samples read back as a 1-D array of the values."""
    ds = lc.empty(ds_path)
    ds.create_tensor("s", dtype="float64")
    ds.s.extend([0.5, -2.0, 1e300])
    ds.s.append(3)
    again = lc.load(ds_path)
    np.testing.assert_array_equal(again.s.numpy(), np.array([0.5, -2.0, 1e300, 3.0]))
    assert again.s.shape == (4,)
    assert again.s[1].numpy().shape == ()


def test_generic_roundtrip_across_chunk_boundaries(ds_path: str) -> None:
    """Ragged samples that span several 1 MiB storage chunks, written in many commits, read back exactly."""
    rng = np.random.default_rng(3)
    want = [rng.integers(0, 2**31, size=n, dtype=np.int64) for n in (70_000, 1, 200_000, 33, 90_000)]
    ds = lc.empty(ds_path)
    ds.create_tensor("x", dtype="int64")
    for v in want:
        ds.x.append(v)
    _assert_exact(lc.load(ds_path).x.numpy(aslist=True), want, "int64")


def _image(shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def _smooth_image(shape: tuple[int, ...]) -> np.ndarray:
    h, w = shape[:2]
    base = (np.add.outer(np.arange(h) * 3, np.arange(w) * 2) % 256).astype(np.uint8)
    return base if len(shape) == 2 else np.repeat(base[:, :, None], shape[2], axis=2)


IMAGE_SHAPES_FIXED = [(16, 12, 3)] * 4
IMAGE_SHAPES_RAGGED = [(16, 12, 3), (9, 20, 3), (1, 1, 3), (31, 7, 3)]


@pytest.mark.parametrize("sample_compression", ["png", "webp", None])
@pytest.mark.parametrize("shapes", [IMAGE_SHAPES_FIXED, IMAGE_SHAPES_RAGGED], ids=["fixed", "ragged"])
def test_image_roundtrip_lossless_exact(ds_path: str, sample_compression: str | None, shapes: Any) -> None:
    """Images stored raw, as PNG or as lossless WebP read back bit-exact after reopening."""
    want = [_image(s, i) for i, s in enumerate(shapes)]
    ds = lc.empty(ds_path)
    ds.create_tensor("images", htype="image", sample_compression=sample_compression)
    with ds:
        for img in want:
            ds.images.append(img)
    again = lc.load(ds_path)
    assert again.images.sample_compression == sample_compression
    _assert_exact(again.images.numpy(aslist=True), want, "uint8")


LAYOUTS = [(10, 8), (10, 8, 1), (10, 8, 3), (10, 8, 4)]


@pytest.mark.parametrize(
    ("sample_compression", "shape"),
    # JPEG has no alpha channel: refusing RGBA is tested in test_errors.
    [(c, s) for c in ("png", "webp", "jpeg", None) for s in LAYOUTS if not (c == "jpeg" and s[-1] == 4)],
)
def test_image_roundtrip_channel_layouts(ds_path: str, sample_compression: str | None, shape: Any) -> None:
    """HxW, HxWx1, HxWx3 and HxWx4 images keep their shape (JPEG: everything but alpha, within tolerance)."""
    want = _smooth_image(shape) if sample_compression == "jpeg" else _image(shape, 1)
    ds = lc.empty(ds_path)
    ds.create_tensor("images", htype="image", sample_compression=sample_compression)
    ds.images.append(want)
    got = lc.load(ds_path).images[0].numpy()
    assert got.shape == shape
    assert got.dtype == np.uint8
    if sample_compression == "jpeg":
        assert np.abs(got.astype(int) - want.astype(int)).mean() < 4
    else:
        np.testing.assert_array_equal(got, want)


def test_image_roundtrip_jpeg_within_tolerance(ds_path: str) -> None:
    """JPEG images read back with their shapes and pixel values within a small mean error."""
    want = [_smooth_image((32, 24, 3)), _smooth_image((17, 40, 3)), _smooth_image((8, 8, 3))]
    ds = lc.empty(ds_path)
    ds.create_tensor("images", htype="image", sample_compression="jpeg")
    ds.images.extend(want)
    got = lc.load(ds_path).images.numpy(aslist=True)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want, strict=True):
        assert np.abs(g.astype(int) - w.astype(int)).mean() < 4


@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint32", "int64"])
def test_class_label_roundtrip_names_and_indices(ds_path: str, dtype: str) -> None:
    """Class labels given as names or indices read back as indices of the tensor's dtype."""
    ds = lc.empty(ds_path)
    ds.create_tensor("labels", htype="class_label", dtype=dtype, class_names=["cat", "dog", "bird"])
    ds.labels.append("dog")
    ds.labels.extend([0, "bird", 1])
    ds.labels.extend(np.array([2, 2]))
    again = lc.load(ds_path)
    got = again.labels.numpy()
    assert got.dtype == np.dtype(dtype)
    assert got.tolist() == [1, 0, 2, 1, 2, 2]
    assert again.labels.info.class_names == ["cat", "dog", "bird"]


def test_class_label_roundtrip_multi_label(ds_path: str) -> None:
    """A list of class names per sample is stored as a list of indices (ragged across samples)."""
    ds = lc.empty(ds_path)
    ds.create_tensor("labels", htype="class_label", class_names=["a", "b", "c"])
    ds.labels.append(["a", "c"])
    ds.labels.append(["b"])
    got = lc.load(ds_path).labels.numpy(aslist=True)
    assert [g.tolist() for g in got] == [[0, 2], [1]]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_embedding_roundtrip_exact(ds_path: str, dtype: str) -> None:
    """Embeddings of each float dtype read back exactly."""
    want = np.random.default_rng(5).standard_normal((9, 16)).astype(dtype)
    ds = lc.empty(ds_path)
    ds.create_tensor("emb", htype="embedding", dtype=dtype)
    ds.emb.extend(want[:4])
    for v in want[4:]:
        ds.emb.append(v)
    got = lc.load(ds_path).emb.numpy()
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


TEXTS = ["hello", "", "ünïcødé ✓ 漢字", "line\nbreak\ttab", "x" * 100_000, "\x00nul"]


@pytest.mark.parametrize("chunk_compression", CHUNK_COMPRESSIONS)
def test_text_roundtrip_exact(ds_path: str, chunk_compression: str | None) -> None:
    """Text samples (empty, unicode, control characters, long) read back exactly via text()."""
    ds = lc.empty(ds_path)
    ds.create_tensor("caption", htype="text", chunk_compression=chunk_compression)
    ds.caption.extend(TEXTS[:3])
    for t in TEXTS[3:]:
        ds.caption.append(t)
    again = lc.load(ds_path)
    assert again.caption.text() == TEXTS
    assert again.caption[2].text() == TEXTS[2]
    assert again.caption[1:3].text() == TEXTS[1:3]


JSONS: list[Any] = [
    {"a": 1, "b": [1, 2.5, None], "c": {"d": "é"}},
    [],
    None,
    "just a string",
    3.25,
    True,
    {"nested": [{"x": [[]]}]},
]


def test_json_roundtrip_exact(ds_path: str) -> None:
    """JSON values of every JSON type read back equal via data()."""
    ds = lc.empty(ds_path)
    ds.create_tensor("meta", htype="json")
    ds.meta.extend(JSONS[:2])
    for v in JSONS[2:]:
        ds.meta.append(v)
    again = lc.load(ds_path)
    assert again.meta.data() == JSONS
    assert again.meta[0].data() == JSONS[0]


def test_json_roundtrip_numpy_values(ds_path: str) -> None:
    """numpy arrays and scalars inside json values are stored as plain lists and numbers."""
    ds = lc.empty(ds_path)
    ds.create_tensor("meta", htype="json")
    ds.meta.append({"arr": np.arange(3), "f": np.float32(0.5), "i": np.int64(7)})
    assert lc.load(ds_path).meta[0].data() == {"arr": [0, 1, 2], "f": 0.5, "i": 7}


def test_dataset_roundtrip_all_htypes_in_one_dataset(ds_path: str) -> None:
    """A dataset with every htype, filled by ds.append rows inside one commit, reads back exactly."""
    make_mixed(ds_path, n=10)
    got = snapshot(lc.load(ds_path))
    want: dict[str, list[Any]] = {}
    for i in range(10):
        for k, v in row(i).items():
            want.setdefault(k, []).append(np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
    assert got == want


def test_generic_roundtrip_memory_backend() -> None:
    """A mem:// dataset gives back what was written when loaded again in the same process."""
    path = "mem://roundtrip-generic"
    ds = lc.empty(path, overwrite=True)
    ds.create_tensor("x", dtype="int16")
    ds.x.extend([np.array([1, -2]), np.array([3])])
    got = lc.load(path).x.numpy(aslist=True)
    assert [g.tolist() for g in got] == [[1, -2], [3]]
    lc.delete(path)


def test_dataset_extend_accepts_generators(ds_path: str) -> None:
    """ds.extend() and tensor.extend() take generators as well as lists and arrays."""
    ds = lc.empty(ds_path)
    ds.create_tensor("t", htype="text")
    ds.create_tensor("x", dtype="int16")
    ds.extend({"t": (f"s{i}" for i in range(3)), "x": (np.int16(i) for i in range(3))})
    ds.t.extend(f"g{i}" for i in range(2))
    again = lc.load(ds_path)
    assert again.t.text() == ["s0", "s1", "s2", "g0", "g1"]
    assert again.x.numpy().tolist() == [0, 1, 2]
