"""Datasets on S3 (a local moto server): round trips, atomic commits, damage, and clear, fast errors."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.storage import open_backend
from lakecompute.storage._s3 import S3Backend
from lakecompute.testing.internals import dataset_core
from tests.s3.moto_server import MotoServer


def _fill_all_htypes(ds: lc.Dataset, n: int) -> None:
    """Create one tensor of every htype and write ``n`` samples to each, in one commit."""
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=["cat", "dog"])
        ds.create_tensor("emb", htype="embedding", dtype="float32")
        ds.create_tensor("caption", htype="text")
        ds.create_tensor("meta", htype="json")
        ds.create_tensor("x", dtype="int16", chunk_compression="zstd")
        ds.create_tensor("ragged", dtype="float64")
        for i in range(n):
            ds.append(
                {
                    "images": np.full((4 + i % 3, 5, 3), i, dtype=np.uint8),
                    "labels": "dog" if i % 2 else "cat",
                    "emb": np.arange(8, dtype=np.float32) + i,
                    "caption": f"sample {i}",
                    "meta": {"i": i, "tags": ["a"] * (i % 3)},
                    "x": np.int16(-i),
                    "ragged": np.ones(i % 4 + 1) * i,
                }
            )


def test_s3_roundtrip_all_htypes(bucket: str, storage_options: dict[str, Any]) -> None:
    """Every htype written to s3:// reads back exactly from a fresh load."""
    url = f"s3://{bucket}/data/all"
    ds = lc.empty(url, storage_options=storage_options)
    _fill_all_htypes(ds, 12)
    back = lc.load(url, storage_options=storage_options)
    assert len(back) == 12
    for i in range(12):
        np.testing.assert_array_equal(back.images[i].numpy(), np.full((4 + i % 3, 5, 3), i, dtype=np.uint8))
        assert int(back.labels[i].numpy()) == i % 2
        np.testing.assert_array_equal(back.emb[i].numpy(), np.arange(8, dtype=np.float32) + i)
        assert back.caption[i].text() == f"sample {i}"
        assert back.meta[i].data() == {"i": i, "tags": ["a"] * (i % 3)}
        np.testing.assert_array_equal(back.ragged[i].numpy(), np.ones(i % 4 + 1) * i)
    np.testing.assert_array_equal(back.x.numpy(), -np.arange(12, dtype=np.int16))
    assert back.labels.info.class_names == ["cat", "dog"]
    assert back.images.dtype == np.uint8


def test_s3_exists_delete_and_versions(bucket: str, storage_options: dict[str, Any]) -> None:
    """exists/dataset/delete work on s3://, and older versions stay loadable."""
    url = f"s3://{bucket}/v"
    assert not lc.exists(url, storage_options=storage_options)
    ds = lc.dataset(url, storage_options=storage_options)
    ds.create_tensor("x", dtype="int32")
    ds.x.extend([1, 2, 3])
    ds.x.extend([4])
    assert lc.exists(url, storage_options=storage_options)
    latest = lc.load(url, storage_options=storage_options)
    assert latest.x.numpy().tolist() == [1, 2, 3, 4]
    old = lc.load(url, version=latest.version - 1, storage_options=storage_options)
    assert old.x.numpy().tolist() == [1, 2, 3]
    # A sibling prefix that shares the name's start is another location.
    assert not lc.exists(f"s3://{bucket}/v2", storage_options=storage_options)
    lc.delete(url, storage_options=storage_options)
    assert not lc.exists(url, storage_options=storage_options)
    assert open_backend(url, storage_options).list("") == []
    with pytest.raises(lc.DatasetNotFoundError):
        lc.load(url, storage_options=storage_options)


def test_s3_create_exclusive_one_winner_of_eight(bucket: str, storage_options: dict[str, Any]) -> None:
    """Eight writers racing to create the same key: exactly one wins, and its bytes are what is stored."""
    backends = [open_backend(f"s3://{bucket}/race", storage_options) for _ in range(8)]
    barrier = threading.Barrier(8)
    wins: list[int] = []

    def commit(i: int) -> None:
        barrier.wait()
        if backends[i].create_exclusive("versions/0000000007.json", f"writer {i}".encode()):
            wins.append(i)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert backends[0].read("versions/0000000007.json") == f"writer {wins[0]}".encode()


def test_s3_racing_committers_one_conflict(bucket: str, storage_options: dict[str, Any]) -> None:
    """Two handles committing on top of the same version: one commit lands, the other raises
    CommitConflictError and leaves nothing behind."""
    url = f"s3://{bucket}/conflict"
    ds = lc.empty(url, storage_options=storage_options)
    ds.create_tensor("x", dtype="int32")
    first = lc.load(url, storage_options=storage_options)
    second = lc.load(url, storage_options=storage_options)
    first.x.extend([1, 2])
    with pytest.raises(lc.CommitConflictError) as info:
        second.x.extend([9])
    assert info.value.expected == first.version - 1
    assert lc.load(url, storage_options=storage_options).x.numpy().tolist() == [1, 2]


def test_s3_damaged_manifest_named(bucket: str, storage_options: dict[str, Any]) -> None:
    """A damaged version manifest on S3 raises DatasetCorruptError naming the file."""
    url = f"s3://{bucket}/damaged"
    ds = lc.empty(url, storage_options=storage_options)
    ds.create_tensor("x", dtype="int32")
    ds.x.extend([1, 2])
    key = f"versions/{ds.version:010d}.json"
    open_backend(url, storage_options).write(key, b'{"format": "lakecompute/1", "vers')
    with pytest.raises(lc.DatasetCorruptError) as info:
        lc.load(url, storage_options=storage_options)
    assert info.value.file == key


def test_s3_unknown_option_refused(bucket: str, storage_options: dict[str, Any]) -> None:
    """An unknown storage option is refused with the list of accepted ones."""
    with pytest.raises(
        lc.InvalidArgumentError, match=r"Unknown storage option 'endpiont_url'.*'endpoint_url'"
    ):
        lc.exists(f"s3://{bucket}/x", storage_options={**storage_options, "endpiont_url": "x"})


def test_s3_s3fs_style_options_accepted(moto_server: MotoServer, bucket: str) -> None:
    """s3fs spellings (client_kwargs, aws_* names) reach the same place."""
    options = {
        "client_kwargs": {"endpoint_url": moto_server.endpoint, "region_name": "us-east-1"},
        "aws_access_key_id": "k",
        "aws_secret_access_key": "s",
    }
    ds = lc.empty(f"s3://{bucket}/s3fs-style", storage_options=options)
    assert isinstance(dataset_core(ds).backend, S3Backend)


@pytest.mark.timeout(20)
def test_s3_unreachable_endpoint_fails_fast(bucket: str, storage_options: dict[str, Any]) -> None:
    """A closed port fails within seconds with StorageError naming the endpoint."""
    options = {**storage_options, "endpoint_url": "http://127.0.0.1:1"}
    start = time.monotonic()
    with pytest.raises(lc.StorageError) as info:
        lc.load(f"s3://{bucket}/x", storage_options=options)
    assert time.monotonic() - start < 10
    assert info.value.reason == "unreachable"
    assert "http://127.0.0.1:1" in str(info.value)
    assert "endpoint_url" in str(info.value)
    assert isinstance(info.value, OSError)


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """An endpoint that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.timeout(20)
def test_s3_silent_endpoint_fails_fast(
    bucket: str, storage_options: dict[str, Any], silent_endpoint: str
) -> None:
    """An endpoint that never answers fails within 10 s instead of hanging in retries."""
    start = time.monotonic()
    with pytest.raises(lc.StorageError) as info:
        lc.exists(f"s3://{bucket}/x", storage_options={**storage_options, "endpoint_url": silent_endpoint})
    assert time.monotonic() - start < 10
    assert info.value.reason == "unreachable"
    assert silent_endpoint in str(info.value)


@pytest.mark.timeout(20)
def test_s3_missing_bucket(storage_options: dict[str, Any], moto_server: MotoServer) -> None:
    """A bucket that does not exist raises StorageError naming it, quickly."""
    start = time.monotonic()
    with pytest.raises(lc.StorageError) as info:
        lc.empty("s3://no-such-bucket-here/ds", storage_options=storage_options)
    assert time.monotonic() - start < 10
    assert info.value.reason == "bucket"
    assert str(info.value) == (
        f"S3 bucket 'no-such-bucket-here' does not exist (at {moto_server.endpoint}). "
        "Create it first, or check the bucket name in the path."
    )


@pytest.mark.timeout(20)
def test_s3_missing_credentials(
    bucket: str, moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key in the options or the environment raises StorageError saying how to pass them."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    start = time.monotonic()
    with pytest.raises(lc.StorageError) as info:
        lc.load(f"s3://{bucket}/x", storage_options={"endpoint_url": moto_server.endpoint})
    assert time.monotonic() - start < 10
    assert info.value.reason == "credentials"
    assert f"No S3 credentials found for s3://{bucket}/x at endpoint {moto_server.endpoint}." in str(
        info.value
    )
    assert "storage_options={'key': ..., 'secret': ...}" in str(info.value)
    assert "'anonymous': True" in str(info.value)


@pytest.mark.timeout(20)
def test_s3_half_credentials_refused(bucket: str, moto_server: MotoServer) -> None:
    """A key without a secret is refused before any request."""
    with pytest.raises(lc.StorageError, match="has key but not secret"):
        lc.exists(f"s3://{bucket}/x", storage_options={"endpoint_url": moto_server.endpoint, "key": "k"})


def test_s3_anonymous_requests_unsigned(bucket: str, moto_server: MotoServer) -> None:
    """anonymous=True opens without credentials and configures unsigned requests."""
    backend = open_backend(f"s3://{bucket}/public", {"endpoint_url": moto_server.endpoint, "anonymous": True})
    assert isinstance(backend, S3Backend)
    assert backend.client.config.get("skip_signature") in (True, "true")


def test_s3_bad_urls() -> None:
    """s3:// without a bucket, or with empty path parts, is refused with InvalidArgumentError."""
    with pytest.raises(lc.InvalidArgumentError, match="add the bucket name"):
        open_backend("s3://")
    with pytest.raises(lc.InvalidArgumentError, match="plain names"):
        open_backend("s3://bucket/a//b")


def test_s3_refused_request_is_storage_error(moto_server: MotoServer, bucket: str) -> None:
    """A request S3 refuses (here: an unsigned read of a private object) raises StorageError naming it."""
    backend = open_backend(
        f"s3://{bucket}/private", {"endpoint_url": moto_server.endpoint, "anonymous": True}
    )
    signed = open_backend(f"s3://{bucket}/private", moto_server.storage_options())
    signed.write("versions/LATEST", b"0000000000")
    with pytest.raises(lc.StorageError) as info:
        backend.read("versions/LATEST")
    assert info.value.reason == "credentials"
    assert "S3 GET of 'versions/LATEST'" in str(info.value)


def test_s3_failed_chunk_read_after_open_is_storage_error(tmp_path: Any) -> None:
    """A tensor chunk read that fails once the dataset is open (the endpoint went away) is StorageError
    naming the chunk's key and keeping obstore's error as the cause, not a raw obstore exception."""
    from tests.s3.moto_server import start_moto_server

    server = start_moto_server()
    try:
        bucket = server.create_bucket()
        options = {**server.storage_options(), "max_retries": 0, "retry_timeout": 1, "connect_timeout": 1}
        url = f"s3://{bucket}/gone"
        ds = lc.empty(url, storage_options=options)
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(np.arange(10))
        reopened = lc.load(url, storage_options=options)
    finally:
        server.stop()
    with pytest.raises(lc.StorageError) as info:
        reopened.x.numpy()
    assert re.search(r"S3 (GET|HEAD) of 'segments/[^']+/(data|index)/", str(info.value))
    assert f"s3://{bucket}/gone" in str(info.value)
    assert type(info.value.__cause__).__module__.startswith("obstore")


@pytest.mark.parametrize("prefix", ["/mine", ""], ids=["prefix", "bucket-root"])
def test_s3_overwrite_and_delete_refuse_other_objects(
    bucket: str, storage_options: dict[str, Any], prefix: str
) -> None:
    """A prefix (or a whole bucket) holding objects lakecompute did not write is refused by
    lc.empty(overwrite=True) and lc.delete, naming what was found; the objects stay, and a sibling
    dataset next to them is untouched."""
    url = f"s3://{bucket}{prefix}"
    backend = open_backend(url, storage_options)
    backend.write("notes.txt", b"keep me")
    backend.write("photos/1.jpg", b"\xff\xd8")
    with pytest.raises(
        lc.InvalidArgumentError, match=r"other than a lakecompute dataset \('notes.txt', 'photos'\)"
    ):
        lc.empty(url, overwrite=True, storage_options=storage_options)
    with pytest.raises(lc.DatasetNotFoundError, match=r"\('notes.txt', 'photos'\), left as it is"):
        lc.delete(url, missing_ok=True, storage_options=storage_options)
    assert backend.read("notes.txt") == b"keep me"
    assert backend.read("photos/1.jpg") == b"\xff\xd8"
    # A dataset in a prefix of its own beside them is replaced as usual.
    beside = f"{url}/ds"
    lc.from_numpy(beside, {"x": np.arange(3)}, storage_options=storage_options)
    assert lc.empty(beside, overwrite=True, storage_options=storage_options).version == 0
    assert backend.read("notes.txt") == b"keep me"


def test_one_client_per_settings_in_a_process(
    bucket: str, storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Handles and loaders on one dataset share this process's client (made once); other options, or
    another AWS_* environment for the credential chain to read, get a client of their own."""
    import obstore.store

    made: list[object] = []
    real = obstore.store.S3Store

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs.get("prefix"))
        return real(*args, **kwargs)

    monkeypatch.setattr(obstore.store, "S3Store", counted)
    url = f"s3://{bucket}/shared-client"
    ds = lc.empty(url, storage_options=storage_options)
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(list(range(10)))
    assert len(made) == 2  # the new dataset's probe (its own, never shared) and the handle's client
    assert sum(len(b["x"]) for b in ds.batches(4)) == 10  # the loader opens the version again
    assert lc.load(url, storage_options=storage_options).x.numpy().tolist() == list(range(10))
    assert len(made) == 2  # the loader's open and the load share the handle's client
    lc.load(url, storage_options={**storage_options, "timeout": 30})
    assert len(made) == 4  # another setting: its first open probes, and it gets a client of its own
    monkeypatch.setenv("AWS_PROFILE", "another")
    lc.load(url, storage_options=storage_options)
    assert len(made) == 5  # the credential chain reads AWS_*: not the same client (the probe is per options)


_UNREACHABLE = (
    "Generic S3 error: Error performing list request: Error performing GET {url} in {took} - HTTP error: "
    "error sending request\n\nDebug source:\nGeneric {{ retries: 0, elapsed: {took}, inner: Http(HttpError "
    '{{ kind: Connect, message: "Connection refused" }}) }}'
)
_FORBIDDEN = (
    "The operation lacked the necessary privileges to complete for path ds: Error performing GET {url} in "
    "{took} - Server returned non-2xx status code: 403 Forbidden: "
)


@pytest.mark.parametrize("took", ["201.771µs", "1.403ms", "403.118µs", "2.340312ms"])
def test_s3_errors_are_told_apart_by_status_not_by_digits(monkeypatch: pytest.MonkeyPatch, took: str) -> None:
    """obstore prints how long a request took; a duration with the digits 403 in it (``1.403ms``) is not
    an HTTP 403: an endpoint that refused the connection is 'unreachable' whatever it took, and only a
    403 status reads as refused credentials (the probe's classification at open, and each request's)."""
    import obstore
    from obstore.exceptions import GenericError, PermissionDeniedError

    url, options = (
        "http://127.0.0.1:1/bucket?list-type=2",
        {
            "endpoint_url": "http://127.0.0.1:1",
            "aws_access_key_id": "k",
            "aws_secret_access_key": "s",
            "region": "us-east-1",
        },
    )
    for error, reason in (
        (GenericError(_UNREACHABLE.format(url=url, took=took)), "unreachable"),
        (PermissionDeniedError(_FORBIDDEN.format(url=url, took=took)), "credentials"),
    ):

        def refuse(*args: Any, error: Exception = error, **kwargs: Any) -> Any:
            raise error

        monkeypatch.setattr(obstore, "list", refuse)
        with pytest.raises(lc.StorageError) as probed:
            open_backend("s3://bucket/ds", options).check()
        assert probed.value.reason == reason, str(probed.value)
        monkeypatch.setattr(obstore, "list", lambda *args, **kwargs: iter(()))
        backend = open_backend("s3://bucket/ds", options)
        backend.check()  # the probe answers
        monkeypatch.setattr(obstore, "get", refuse)
        with pytest.raises(lc.StorageError) as requested:
            backend.read("versions/LATEST")
        assert requested.value.reason == ("credentials" if reason == "credentials" else "other")


_CONFLICTS = [
    ("in 1.409ms - HTTP error: error sending request", 1),
    ("in 2.1ms - Server returned non-2xx status code: 409 Conflict", 0),  # 0: retried, several times
]


@pytest.mark.parametrize(("text", "tries"), _CONFLICTS)
def test_s3_a_conflict_is_retried_by_its_status_only(
    monkeypatch: pytest.MonkeyPatch, text: str, tries: int
) -> None:
    """create_exclusive retries a conditional PUT that S3 answered 409 (a racing write), as many times as it
    allows; any other failure, whatever digits its duration has, is raised at once as StorageError."""
    import obstore
    from obstore.exceptions import GenericError

    monkeypatch.setattr(obstore, "list", lambda *args, **kwargs: iter(()))
    backend = open_backend(
        "s3://bucket/ds", {"endpoint_url": "http://127.0.0.1:1", "aws_access_key_id": "k",
                           "aws_secret_access_key": "s", "region": "us-east-1"},
    )  # fmt: skip
    backend.check()
    calls: list[str] = []

    def put(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1])
        raise GenericError(f"Generic S3 error: Error performing PUT {args[1]} {text}")

    monkeypatch.setattr(obstore, "put", put)
    with pytest.raises(lc.StorageError):
        backend.create_exclusive("versions/0000000001.json", b"{}")
    if tries:
        assert len(calls) == tries
    else:
        assert len(calls) > 2
