"""The local disk cache of a dataset on S3 (issue 44): request counts taken at a counting proxy in front
of the moto server, real files in a real ``cache_dir``, real processes."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.errors import LakeComputeWarning
from lakecompute.storage import CacheSpec, DiskCache
from tests.s3.counting_proxy import CountingProxy, start_counting_proxy
from tests.s3.moto_server import MotoServer

N = 300_000  # int64 values: 3 chunks of 1 MiB (the last one partly filled)
TEXTS = [f"s{i}" * (i % 3 + 1) for i in range(N)]


@pytest.fixture(scope="module")
def proxy(moto_server: MotoServer) -> Iterator[CountingProxy]:
    counting = start_counting_proxy(moto_server.endpoint)
    try:
        yield counting
    finally:
        counting.stop()


@pytest.fixture
def counted(proxy: CountingProxy, storage_options: dict[str, Any]) -> dict[str, Any]:
    """Storage options through the counting proxy (counts reset)."""
    proxy.reset()
    return proxy.storage_options(storage_options)


def _make(url: str, options: dict[str, Any], offset: int = 0) -> None:
    ds = lc.empty(url, storage_options=options, overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("t", htype="text")
        ds.x.extend(np.arange(N) + offset)
        ds.t.extend(TEXTS)


def _files(cache_dir: Path) -> list[Path]:
    return [p for p in (cache_dir / "lakecompute-cache").rglob("*") if p.is_file() and len(p.name) == 38]


def _held(cache_dir: Path) -> int:
    return sum(
        p.stat().st_size
        for p in (cache_dir / "lakecompute-cache").rglob("*")
        if p.is_file() and p.name not in ("lock", "CACHEDIR.TAG", "about.json")
    )


def _epoch(ds: lc.Dataset, **options: Any) -> tuple[np.ndarray, list[str]]:
    xs, ts = [], []
    for batch in ds.batches(4096, **options):
        xs.append(batch["x"])
        ts.extend(batch["t"]) if "t" in batch else None
    return np.concatenate(xs), ts


def test_the_second_epoch_of_a_dataset_that_fits_makes_no_chunk_get(
    bucket: str,
    storage_options: dict[str, Any],
    counted: dict[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
) -> None:
    url = f"s3://{bucket}/ds"
    _make(url, storage_options)
    ds = lc.load(url, storage_options=counted, cache_dir=tmp_path, cache_size="1GB")
    first = ds.x.numpy()
    assert (first == np.arange(N)).all()
    assert ds.t.text() == TEXTS
    gets = proxy.chunk_gets()
    assert gets >= 5  # 3 chunks of x, the text's data and index chunks
    proxy.reset()
    for epoch in range(2):  # a loader's epochs, shuffled, in this process and in 2 workers
        xs, _ = _epoch(ds, shuffle=True, epoch=epoch, tensors=["x"], num_workers=2 * epoch)
        assert sorted(xs.tolist()) == list(range(N))
    again = lc.load(url, storage_options=counted, cache_dir=tmp_path)
    assert again.t.text() == TEXTS
    assert proxy.chunk_gets() == 0
    info = DiskCache(CacheSpec(str(tmp_path), 10**9)).info()
    assert info.entries == gets
    assert info.datasets[0].dataset_id == ds.id


def test_a_dataset_that_does_not_fit_stays_within_the_bound(
    bucket: str,
    storage_options: dict[str, Any],
    counted: dict[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
) -> None:
    url = f"s3://{bucket}/big"
    ds = lc.empty(url, storage_options=storage_options)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(np.random.default_rng(0).integers(0, 2**62, 8 * 131_072))  # 8 chunks, incompressible
    bound = 3 * 2**20
    r = lc.load(url, storage_options=counted, cache_dir=tmp_path, cache_size=bound)
    most = 0
    for epoch in range(2):
        for batch in r.batches(20_000, shuffle=True, epoch=epoch):
            most = max(most, _held(tmp_path))
            assert len(batch["x"]) > 0
    chunk = 2**20 + 200  # a chunk's file: its bytes and a header
    assert 0 < most <= bound + chunk
    assert (r.x.numpy() == ds.x.numpy()).all()
    assert proxy.chunk_gets() > 8  # it did not fit: chunks were fetched again


def test_an_old_version_after_a_new_commit_reuses_shared_chunks_and_is_never_stale(
    bucket: str,
    storage_options: dict[str, Any],
    counted: dict[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
) -> None:
    url = f"s3://{bucket}/grow"
    ds = lc.empty(url, storage_options=storage_options)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(np.arange(N))
    v1 = ds.version
    assert (lc.load(url, storage_options=counted, cache_dir=tmp_path).x.numpy() == np.arange(N)).all()
    # The same writer appends: the partly filled last chunk is rewritten under the same key.
    ds.x.extend(np.arange(N, N + 1000))
    ds.x[5] = -5  # and an in-place rewrite
    proxy.reset()
    latest = lc.load(url, storage_options=counted, cache_dir=tmp_path)
    want = np.arange(N + 1000)
    want[5] = -5
    assert (latest.x.numpy() == want).all()
    # Two chunks shared whole with version 1 are not fetched again: the rewritten last chunk is.
    fetched = proxy.chunk_gets()
    assert 1 <= fetched <= 2, fetched
    proxy.reset()
    old = lc.load(url, storage_options=counted, cache_dir=tmp_path, version=v1)
    assert (old.x.numpy() == np.arange(N)).all()
    assert proxy.chunk_gets() == 0  # the entry of the grown chunk holds what version 1 uses too


def test_a_writer_reading_its_own_appends_through_a_warm_cache_sees_them(
    bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    url = f"s3://{bucket}/own"
    ds = lc.empty(url, storage_options=storage_options)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(np.arange(1000))
    w = lc.load(url, storage_options=storage_options, cache_dir=tmp_path)
    assert w.x.numpy().tolist() == list(range(1000))  # the chunk is cached with 1000 items final
    with w:
        w.x.extend(np.arange(1000, 1500))
        assert w.x[1000:1500].numpy().tolist() == list(range(1000, 1500))  # pending, read in the block
    assert w.x.numpy().tolist() == list(range(1500))


@pytest.mark.parametrize("damage", ["truncate", "flip", "swap"])
def test_a_damaged_cached_file_is_fetched_again_never_served(
    damage: str,
    bucket: str,
    storage_options: dict[str, Any],
    counted: dict[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
) -> None:
    url = f"s3://{bucket}/dmg"
    _make(url, storage_options)
    assert (lc.load(url, storage_options=counted, cache_dir=tmp_path).x.numpy() == np.arange(N)).all()
    files = sorted(_files(tmp_path), key=lambda p: p.stat().st_size)
    assert len(files) == 3
    victim = files[-1]
    data = bytearray(victim.read_bytes())
    if damage == "truncate":
        victim.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        data[len(data) // 2] ^= 0x10
        victim.write_bytes(data)
    else:  # another entry's (whole, valid) file in its place
        victim.write_bytes(files[0].read_bytes())
    proxy.reset()
    assert (lc.load(url, storage_options=counted, cache_dir=tmp_path).x.numpy() == np.arange(N)).all()
    assert proxy.chunk_gets() == 1  # that one chunk, fetched again and kept again
    proxy.reset()
    assert (lc.load(url, storage_options=counted, cache_dir=tmp_path).x.numpy() == np.arange(N)).all()
    assert proxy.chunk_gets() == 0


def test_two_prefixes_with_the_same_keys_never_share_entries(
    bucket: str, storage_options: dict[str, Any], moto_server: MotoServer, tmp_path: Path
) -> None:
    import obstore

    a, c = f"s3://{bucket}/a", f"s3://{bucket}/c"
    _make(a, storage_options)
    _make(c, storage_options, offset=10**9)
    store = moto_server.store(bucket)
    assert (lc.load(a, storage_options=storage_options, cache_dir=tmp_path).x.numpy() == np.arange(N)).all()
    # b: a copy of a (the same keys, the same id), whose x chunks then hold c's values.
    keys = [m["path"] for batch in obstore.list(store, "a/") for m in batch]
    for key in keys:
        obstore.put(store, "b/" + key[2:], obstore.get(store, key).bytes())
    # Then every chunk of b's segment holds what the same key of c's segment holds (c was written the
    # same way, with other values of x): b's keys, and its id, are a's.
    segments_a = sorted({k.split("/")[2] for k in keys if k.startswith("a/segments/")})
    segments_c = sorted(
        {m["path"].split("/")[2] for batch in obstore.list(store, "c/segments/") for m in batch}
    )
    for seg_a, seg_c in zip(segments_a, segments_c, strict=True):  # made in the same order
        for batch in obstore.list(store, f"c/segments/{seg_c}/"):
            for meta in batch:
                if "/c/" in meta["path"]:
                    rest = meta["path"].split("/", 3)[3]
                    obstore.put(store, f"b/segments/{seg_a}/{rest}", obstore.get(store, meta["path"]).bytes())
    b = lc.load(f"s3://{bucket}/b", storage_options=storage_options, cache_dir=tmp_path)
    assert b.id == lc.load(a, storage_options=storage_options).id
    assert (b.x.numpy() == np.arange(N) + 10**9).all()
    assert (lc.load(a, storage_options=storage_options, cache_dir=tmp_path).x.numpy() == np.arange(N)).all()


def test_a_dataset_deleted_and_made_again_at_its_prefix_is_read_afresh(
    bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    url = f"s3://{bucket}/again"
    _make(url, storage_options)
    first = lc.load(url, storage_options=storage_options, cache_dir=tmp_path)
    assert (first.x.numpy() == np.arange(N)).all()
    lc.delete(url, storage_options=storage_options)
    _make(url, storage_options, offset=7)
    second = lc.load(url, storage_options=storage_options, cache_dir=tmp_path)
    assert second.id != first.id
    assert (second.x.numpy() == np.arange(N) + 7).all()
    assert second.t.text() == TEXTS


def test_an_unwritable_cache_dir_warns_once_and_reads_from_the_store(
    bucket: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    url = f"s3://{bucket}/nowrite"
    _make(url, storage_options)
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = lc.load(url, storage_options=storage_options, cache_dir=blocker / "cache")
        assert (ds.x.numpy() == np.arange(N)).all()
        assert ds.t.text() == TEXTS
    ours = [w for w in caught if issubclass(w.category, LakeComputeWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert "not used from now on" in str(ours[0].message)
    assert "Reads go on from the store" in str(ours[0].message)


@pytest.mark.parametrize("tensor", ["x", "t"])
def test_a_shuffled_batch_fetches_its_chunks_concurrently(
    tensor: str,
    bucket: str,
    storage_options: dict[str, Any],
    counted: dict[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
) -> None:
    """Each chunk GET waits 50 ms at the proxy (a store farther away than the loopback): a batch over
    8 chunks has several in flight at once, on numbers (cut from windows) and on texts (sample by sample)."""
    url = f"s3://{bucket}/wide"
    n = 131_072
    ds = lc.empty(url, storage_options=storage_options)
    values = np.random.default_rng(1).integers(0, 2**62, 8 * n)
    texts = [f"{v:040d}" for v in values[: 2 * n].tolist()]  # 40 bytes each: 10 MB of text
    with ds:
        ds.create_tensor(tensor, dtype="int64") if tensor == "x" else ds.create_tensor(tensor, htype="text")
        ds[tensor].extend(values if tensor == "x" else texts)
    proxy.delay = 0.05
    try:
        r = lc.load(url, storage_options=counted, cache_dir=tmp_path)
        size = 5000  # a batch of samples from all over the dataset
        batch = next(iter(r.batches(size, shuffle=True, tensors=[tensor])))
    finally:
        proxy.delay = 0.0
    plain = next(
        iter(lc.load(url, storage_options=storage_options).batches(size, shuffle=True, tensors=[tensor]))
    )
    got = batch[tensor].tolist() if tensor == "x" else batch[tensor]
    assert got == (plain[tensor].tolist() if tensor == "x" else plain[tensor])  # read without a cache
    assert len(got) == size
    assert proxy.chunk_gets() >= 8
    assert proxy.most_in_flight >= 4, proxy.most_in_flight


def test_loaders_take_the_cache_options_and_the_environment_gives_the_default(
    bucket: str,
    storage_options: dict[str, Any],
    counted: dict[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("torch")
    url = f"s3://{bucket}/opts"
    _make(url, storage_options)
    monkeypatch.delenv("LAKECOMPUTE_CACHE_DIR", raising=False)
    ds = lc.load(url, storage_options=counted)  # no cache for the handle
    loader = ds.pytorch(batch_size=50_000, tensors=["x"], num_workers=2, cache_dir=tmp_path, cache_size="1GB")
    for _ in range(2):  # every pass is the next epoch
        proxy.reset()
        got = np.sort(np.concatenate([b["x"].numpy() for b in loader]))
        assert (got == np.arange(N)).all()
    assert proxy.chunk_gets() == 0  # the second pass, in torch's workers, from the cache
    assert len(_files(tmp_path)) == 3
    proxy.reset()
    batches = ds.batches(50_000, tensors=["x"], shuffle=True, cache_dir=tmp_path)
    assert sum(len(b["x"]) for b in batches) == N
    assert proxy.chunk_gets() == 0
    monkeypatch.setenv("LAKECOMPUTE_CACHE_DIR", str(tmp_path))
    proxy.reset()
    assert (lc.load(url, storage_options=counted).x.numpy() == np.arange(N)).all()
    assert proxy.chunk_gets() == 0
    with pytest.raises(lc.InvalidArgumentError, match="cache_size"):
        ds.batches(10, cache_size="lots")


def test_token_blocks_take_the_cache_options(
    bucket: str,
    storage_options: dict[str, Any],
    counted: dict[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
) -> None:
    url = f"s3://{bucket}/tokens"
    ds = lc.empty(url, storage_options=storage_options)
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 50_000, int(n)) for n in rng.integers(100, 3000, 400)]
    with ds:
        ds.create_tensor("tokens", dtype="int64")
        ds.tokens.extend(docs)
    stream = np.concatenate(docs)
    blocks = lc.load(url, storage_options=counted).tokens.blocks(128)
    for _ in range(2):
        proxy.reset()
        xs = np.concatenate([b["x"] for b in blocks.batches(512, shuffle=True, cache_dir=tmp_path)])
        assert sorted(map(tuple, xs.tolist())) == sorted(
            tuple(stream[i * 128 : (i + 1) * 128].tolist()) for i in range(len(blocks))
        )
    assert proxy.chunk_gets() == 0


def test_a_compacted_dataset_is_cached_whole_and_its_older_version_still_reads(
    bucket: str,
    storage_options: dict[str, Any],
    counted: dict[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
) -> None:
    url = f"s3://{bucket}/compacted"
    ds = lc.empty(url, storage_options=storage_options)
    rng = np.random.default_rng(5)
    ragged = [rng.integers(0, 1000, int(n)) for n in rng.integers(1, 5000, 300)]
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.create_tensor("r", dtype="int64")
    for part in range(3):  # three commits: three runs of x, in different slots
        with ds:
            ds.x.extend(np.arange(part * 100_000, (part + 1) * 100_000))
            ds.r.extend(ragged[part * 100 : (part + 1) * 100])
    before = ds.version
    assert (lc.load(url, storage_options=counted, cache_dir=tmp_path).x.numpy() == np.arange(300_000)).all()
    ds.compact(progressbar=False)  # typed arrays written whole, and a typed stream segment
    for _ in range(2):
        proxy.reset()
        r = lc.load(url, storage_options=counted, cache_dir=tmp_path)
        assert (r.x.numpy() == np.arange(300_000)).all()
        assert all((a == b).all() for a, b in zip(r.r.numpy(aslist=True), ragged, strict=True))
    assert proxy.chunk_gets() == 0
    old = lc.load(url, storage_options=counted, cache_dir=tmp_path, version=before)
    assert (old.x.numpy() == np.arange(300_000)).all()
    assert proxy.chunk_gets() == 0
