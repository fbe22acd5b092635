"""Datasets on S3 (and S3-compatible stores): ``s3://bucket/prefix`` through obstore.

Tensor data goes through zarr's own `zarr.storage.ObjectStore` over an obstore
``S3Store`` (2-3x faster than s3fs in our measurements, see STORAGE-NOTES.md). The small files
(version manifests, the ``LATEST`` hint) use the same client directly, because a commit needs to
know whether *this* writer won: `S3Backend.create_exclusive` is a conditional put
(``If-None-Match: *``), so of several writers racing for the same version exactly one succeeds.

Opening a backend checks the location once, with short timeouts and no retries, so that a missing
bucket, missing or refused credentials, or an endpoint that does not answer fail within seconds
with a `StorageError` that names the bucket and endpoint, instead of
hanging in retries.

Clients are not fork-safe: obstore's runtime hangs in a child forked after the parent used it,
even for a client created afresh in the child. `S3Backend.fork_safe` is False, and the
engine starts processed workers with ``forkserver`` when a dataset lives here.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from lakecompute.errors import InvalidArgumentError, StorageError
from lakecompute.optional import require
from lakecompute.perprocess import PerProcess
from lakecompute.storage._backend import Backend, BackendSpec, check_key
from lakecompute.threads import start_thread

__all__ = ["S3_OPTIONS", "S3Backend", "open_s3_backend"]

#: The ``storage_options`` an ``s3://`` dataset accepts (s3fs spellings, with obstore's as aliases).
S3_OPTIONS: dict[str, str] = {
    "endpoint_url": "the S3 endpoint, e.g. 'http://127.0.0.1:9000' for MinIO or moto (default: AWS)",
    "key": "the access key id (default: the AWS_ACCESS_KEY_ID environment variable)",
    "secret": "the secret access key (default: AWS_SECRET_ACCESS_KEY)",
    "token": "a session token for temporary credentials (default: AWS_SESSION_TOKEN)",
    "region": "the bucket's region (default: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1)",
    "anonymous": "True to send unsigned requests (public buckets)",
    "virtual_hosted_style": (
        "True for https://bucket.host/ addressing (default: True on AWS, False with endpoint_url)"
    ),
    "connect_timeout": "seconds to wait for a connection (default 5)",
    "timeout": "seconds a single request may take (default 60)",
    "max_retries": "retries of a failed request (default 5)",
    "retry_timeout": "seconds after which a request is not retried any more (default 120)",
}
_ALIASES: dict[str, str] = {
    "endpoint": "endpoint_url",
    "aws_endpoint_url": "endpoint_url",
    "access_key_id": "key",
    "aws_access_key_id": "key",
    "secret_access_key": "secret",
    "aws_secret_access_key": "secret",
    "session_token": "token",
    "aws_session_token": "token",
    "region_name": "region",
    "anon": "anonymous",
    "skip_signature": "anonymous",
}
# How long opening a backend may take to find out that the location is unusable (seconds).
_PROBE_CONNECT_TIMEOUT = 3.0
_PROBE_TIMEOUT = 5.0
_PROBE_DEADLINE = 8.0
# A conditional put racing another one on the same key may get 409 ConditionalRequestConflict;
# AWS says to retry, and the retry then either wins or sees the other writer's object (412).
_CONFLICT_RETRIES = 8


# The process that created the first S3 client here. A forked child inherits it, and obstore
# calls hang in such a child, so a probe that times out there says so instead of blaming the network.
_CLIENT_PID: int | None = None

# This process's clients, by everything they are made from (the bucket, the prefix, the options and the
# AWS_* environment the credential chain reads): a loader's open, a worker's and the user's handle on
# one dataset share one client instead of building one each (4 ms, and a connection pool, apiece). A
# forked child makes its own (`PerProcess`): clients do not survive a fork.
_CLIENTS: PerProcess[OrderedDict[tuple[Any, ...], Any]] = PerProcess(OrderedDict)
_CLIENTS_KEPT = 16
_CLIENTS_LOCK = PerProcess(threading.Lock)


def _parse_options(url: str, storage_options: dict[str, Any]) -> dict[str, Any]:
    """Normalise ``storage_options``: resolve aliases and s3fs's ``client_kwargs``; refuse unknown keys."""
    options: dict[str, Any] = {}
    for raw_key, value in storage_options.items():
        if raw_key == "client_kwargs" and isinstance(value, dict):
            # s3fs passes endpoint and region to botocore this way; accept it for drop-in options.
            for inner_key, inner in value.items():
                key = _ALIASES.get(inner_key, inner_key)
                if key not in ("endpoint_url", "region"):
                    raise InvalidArgumentError(
                        f"Unsupported client_kwargs option {inner_key!r} for {url!r}. "
                        "Only endpoint_url and region_name are understood there."
                    )
                options[key] = inner
            continue
        key = _ALIASES.get(raw_key, raw_key)
        if key not in S3_OPTIONS:
            raise InvalidArgumentError(
                f"Unknown storage option {raw_key!r} for {url!r}. Expected some of {sorted(S3_OPTIONS)!r}."
            )
        options[key] = value
    return options


def _split_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` → ``("bucket", "some/prefix")``."""
    rest = url[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if not bucket:
        raise InvalidArgumentError(f"Expected s3://<bucket>/<prefix>. Got {url!r}; add the bucket name.")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise InvalidArgumentError(f"Expected a prefix of plain names separated by single '/'. Got {url!r}.")
    return bucket, prefix


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def _has_status(text: str, code: int) -> bool:
    """Whether obstore's error ``text`` reports HTTP status ``code`` ("status code: 403 Forbidden"), not
    the same digits in a duration it prints beside it ("in 1.403ms", "elapsed: 409.2µs"): such digits made
    an unreachable endpoint read as refused credentials."""
    return re.search(rf"status code: {code}\b|\b{code} [A-Z][a-z]", text) is not None


class S3Backend(Backend):
    """A dataset under ``s3://bucket/prefix``, on AWS or any S3-compatible endpoint."""

    shared_between_processes = True
    fork_safe = False

    def __init__(self, spec: BackendSpec, bucket: str, prefix: str, options: dict[str, Any]) -> None:
        super().__init__(spec)
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint: str | None = options.get("endpoint_url")
        self._options = options
        self._client = self._make_client(probe=False)
        self._zarr: Store | None = None

    def place(self) -> tuple[str, ...]:
        endpoint = (self.endpoint or "aws").rstrip("/")
        return ("s3", endpoint, self.bucket, *(self.prefix.split("/") if self.prefix else ()))

    # -- clients -----------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The object-store client requests go through: an obstore ``S3Store`` rooted at the prefix
        (its ``config`` says how requests are signed)."""
        return self._client

    def _where(self) -> str:
        """The location for messages: the URL, and the endpoint when it is not AWS's."""
        where = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        return f"{where} at endpoint {self.endpoint}" if self.endpoint else where

    def _credentials(self) -> dict[str, Any]:
        """Credentials for the client, or StorageError when there are none and none can be found."""
        opts = self._options
        if opts.get("anonymous"):
            return {"skip_signature": True}
        key, secret = opts.get("key"), opts.get("secret")
        if key is not None or secret is not None:
            if not key or not secret:
                raise StorageError(
                    f"Incomplete S3 credentials for {self._where()}: storage_options has "
                    f"{'key' if key else 'secret'} but not {'secret' if key else 'key'}. Pass both.",
                    url=self.url,
                    reason="credentials",
                )
            creds: dict[str, Any] = {"access_key_id": str(key), "secret_access_key": str(secret)}
            if opts.get("token"):
                creds["token"] = str(opts["token"])
            return creds
        env = os.environ
        has_env = bool(env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"))
        has_provider = any(
            env.get(name)
            for name in (
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            )
        )
        if not has_env and not has_provider and _env_flag("AWS_EC2_METADATA_DISABLED"):
            raise self._no_credentials()
        # obstore reads the environment itself, then falls back to the instance metadata service
        # (an EC2 instance role); the probe's deadline bounds how long that may take.
        return {}

    def _no_credentials(self) -> StorageError:
        return StorageError(
            f"No S3 credentials found for {self._where()}. "
            "Pass storage_options={'key': ..., 'secret': ...}, set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, run on a machine with an instance role, "
            "or pass storage_options={'anonymous': True} for a public bucket.",
            url=self.url,
            reason="credentials",
        )

    def _make_client(self, probe: bool) -> Any:
        """An obstore ``S3Store`` rooted at the prefix; ``probe`` for the quick, no-retry check (made
        anew each time), else this process's client for the same settings (`_CLIENTS`)."""
        require("obstore.store", f"Opening {self.url!r}", 'pip install "lakecompute[s3]"')
        from obstore.store import S3Store

        global _CLIENT_PID
        if _CLIENT_PID is None:
            _CLIENT_PID = os.getpid()
        config, client, retry = self._client_settings(probe)

        def make() -> Any:
            return S3Store(
                self.bucket,
                prefix=self.prefix or None,
                config=config,  # type: ignore[arg-type]  # a plain dict with S3Config's keys
                client_options=client,  # type: ignore[arg-type]  # a plain dict with ClientConfig's keys
                retry_config=retry,  # type: ignore[arg-type]  # a plain dict with RetryConfig's keys
            )

        if probe:
            return make()
        environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
        settings = tuple(tuple(sorted(part.items())) for part in (config, client, retry))
        key = (self.bucket, self.prefix, settings, environment)
        with _CLIENTS_LOCK.get():
            clients = _CLIENTS.get()
            store = clients.get(key)
            if store is None:
                store = clients[key] = make()
                while len(clients) > _CLIENTS_KEPT:
                    clients.popitem(last=False)
            clients.move_to_end(key)
            return store

    def _client_settings(self, probe: bool) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The client's ``config``, ``client_options`` and ``retry_config`` (obstore's names)."""
        opts = self._options
        config: dict[str, Any] = dict(self._credentials())
        client: dict[str, Any] = {}
        endpoint = self.endpoint
        if endpoint:
            config["endpoint"] = str(endpoint)
            if str(endpoint).startswith("http://"):
                client["allow_http"] = True
        region = opts.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        config["region"] = str(region or "us-east-1")
        virtual = opts.get("virtual_hosted_style")
        # Custom endpoints (MinIO, moto, Ceph) mostly want path-style URLs: http://host/bucket/key.
        config["virtual_hosted_style_request"] = bool(virtual) if virtual is not None else not endpoint
        if probe:
            client["connect_timeout"] = timedelta(seconds=_PROBE_CONNECT_TIMEOUT)
            client["timeout"] = timedelta(seconds=_PROBE_TIMEOUT)
            retry: dict[str, Any] = {"max_retries": 0, "retry_timeout": timedelta(seconds=_PROBE_TIMEOUT)}
        else:
            client["connect_timeout"] = timedelta(seconds=float(opts.get("connect_timeout", 5.0)))
            client["timeout"] = timedelta(seconds=float(opts.get("timeout", 60.0)))
            retry = {
                "max_retries": int(opts.get("max_retries", 5)),
                "retry_timeout": timedelta(seconds=float(opts.get("retry_timeout", 120.0))),
            }
        return config, client, retry

    def check(self) -> None:
        """Make one quick request to find out whether the location is usable.

        Raises:
            StorageError: the endpoint does not answer, the bucket does not exist, or the
                credentials are missing or refused.
        """
        import obstore

        probe = self._make_client(probe=True)
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                # One LIST request of at most a page: it needs the bucket, the credentials and the
                # endpoint, and an empty prefix is not an error.
                stream = obstore.list(probe, None, chunk_size=1)
                next(iter(stream), None)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        # The request runs in a thread so that the deadline holds even if some part of the
        # client (e.g. the credential chain's instance-metadata lookup) ignores our timeouts.
        started = time.monotonic()
        worker = start_thread("s3-probe", run)
        worker.join(_PROBE_DEADLINE)
        if not outcome:
            if _CLIENT_PID is not None and os.getpid() != _CLIENT_PID:
                raise StorageError(
                    f"S3 requests for {self._where()} hang in this process, which was forked from one "
                    "that had already used S3 (object-store clients do not survive fork). Start worker "
                    "processes with 'forkserver' or 'spawn' instead of 'fork'.",
                    url=self.url,
                    reason="fork",
                )
            raise StorageError(
                f"S3 endpoint for {self._where()} did not answer within {_PROBE_DEADLINE:.0f} s. "
                "Check endpoint_url in storage_options and your network.",
                url=self.url,
                reason="unreachable",
            )
        error = outcome[0]
        if error is not None:
            raise self._classify(error, time.monotonic() - started) from error

    def _classify(self, exc: BaseException, seconds: float) -> StorageError:
        """Turn a client error from the probe into a StorageError that says what to do."""
        text = str(exc)
        if "169.254.169.254" in text or ("credential" in text.lower() and "InvalidAccessKeyId" not in text):
            return self._no_credentials()
        if "NoSuchBucket" in text:
            return StorageError(
                f"S3 bucket {self.bucket!r} does not exist (at {self.endpoint or 'AWS'}). "
                "Create it first, or check the bucket name in the path.",
                url=self.url,
                reason="bucket",
            )
        if _has_status(text, 403) or any(
            code in text for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied")
        ):
            return StorageError(
                f"S3 refused the credentials for {self._where()}: {_first_line(text)}. "
                "Check key and secret in storage_options (or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) "
                "and the bucket's permissions.",
                url=self.url,
                reason="credentials",
            )
        if any(
            marker in text.lower()
            for marker in ("connect", "connection", "dns", "timed out", "timeout", "error sending request")
        ):
            return StorageError(
                f"Cannot reach the S3 endpoint {self.endpoint or 'of AWS'} for s3://{self.bucket} "
                f"(gave up after {seconds:.1f} s): {_first_line(text)}. "
                "Check endpoint_url in storage_options and that the server is running.",
                url=self.url,
                reason="unreachable",
            )
        return StorageError(f"Cannot use {self._where()}: {_first_line(text)}", url=self.url, reason="other")

    @contextlib.contextmanager
    def _request(self, what: str, key: str) -> Iterator[None]:
        """Turn a failed request into StorageError naming the object and what to check; refuse a key that
        would leave the dataset before any request."""
        check_key(key)
        try:
            yield
        except (FileNotFoundError, StorageError):
            raise
        except Exception as exc:
            if type(exc).__module__.split(".")[0] != "obstore":
                raise
            text = str(exc)
            refused = _has_status(text, 403) or any(
                code in text for code in ("AccessDenied", "PermissionDenied")
            )
            hint = (
                "Check the credentials and the bucket's permissions."
                if refused
                else "Check the endpoint and your network; the request was retried "
                f"{self._options.get('max_retries', 5)} times."
            )
            raise StorageError(
                f"S3 {what} of {key!r} in {self._where()} failed: {_first_line(text)}. {hint}",
                url=self.url,
                reason="credentials" if refused else "other",
            ) from exc

    # -- Backend -----------------------------------------------------------------------------------

    def zarr_store(self) -> Store:
        if self._zarr is None:
            from zarr.storage import ObjectStore

            self._zarr = _NamedErrorStore(ObjectStore(self._client), self)
        return self._zarr

    def read(self, key: str) -> bytes | None:
        import obstore

        try:
            with self._request("GET", key):
                return bytes(obstore.get(self._client, key).bytes())
        except FileNotFoundError:
            return None

    def write(self, key: str, data: bytes) -> None:
        import obstore

        # A PUT replaces an object whole: readers see the old bytes or the new ones.
        with self._request("PUT", key):
            obstore.put(self._client, key, data)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        check_key(key)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                # If-None-Match: * — S3 stores the object only if the key is free, so exactly one
                # of several racing committers gets a success; the others get 412.
                obstore.put(self._client, key, data, mode="create")
                return True
            except (AlreadyExistsError, PreconditionError):
                return False
            except Exception as exc:
                if _has_status(str(exc), 409) and attempt < _CONFLICT_RETRIES - 1:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                with self._request("conditional PUT", key):
                    raise
        return False  # pragma: no cover (the loop returns or raises)

    def exists(self, key: str) -> bool:
        import obstore

        check_key(key)
        try:
            obstore.head(self._client, key)
            return True
        except FileNotFoundError:
            pass
        # A "folder": anything stored under it.
        stream = obstore.list(self._client, key.strip("/"), chunk_size=1)
        return next(iter(stream), None) is not None

    def list(self, prefix: str) -> list[str]:
        import obstore

        head = prefix.strip("/")
        with self._request("LIST", head):
            result = obstore.list_with_delimiter(self._client, head or None)
        names: set[str] = set()
        for path in result["common_prefixes"]:
            names.add(path.rstrip("/").rsplit("/", 1)[-1])
        for meta in result["objects"]:
            names.add(meta["path"].rsplit("/", 1)[-1])
        return sorted(names)

    def delete(self, key: str) -> None:
        import obstore

        check_key(key)
        try:
            obstore.delete(self._client, key)
        except FileNotFoundError:
            pass

    def delete_tree(self, prefix: str) -> None:
        import obstore

        head = check_key(prefix.rstrip("/"))
        paths: list[str] = []
        for batch in obstore.list(self._client, head or None, chunk_size=1000):
            paths.extend(meta["path"] for meta in batch)
        if head:
            paths.append(head)  # the key itself, if it is an object rather than a folder
        for start in range(0, len(paths), 1000):
            # One multi-object DELETE request per 1,000 keys.
            obstore.delete(self._client, paths[start : start + 1000])

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError(
            "An S3Backend holds a live client and is not sent to other processes; send its spec "
            "(BackendSpec) and reopen it with open_backend()."
        )


class _NamedErrorStore(WrapperStore[Store]):
    """zarr's store over our client, whose failed requests (tensor chunks read or written by zarr) are
    `StorageError`s naming the object and the cause, as the backend's own requests are."""

    def __init__(self, store: Store, backend: S3Backend) -> None:
        super().__init__(store)
        self._backend = backend

    def _with_store(self, store: Store) -> _NamedErrorStore:
        # zarr derives read-only copies through this: they name errors the same way.
        return _NamedErrorStore(store, self._backend)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        with self._backend._request("GET", key):
            return await self._store.get(key, prototype, byte_range)

    async def set(self, key: str, value: Buffer) -> None:
        with self._backend._request("PUT", key):
            await self._store.set(key, value)

    async def exists(self, key: str) -> bool:
        with self._backend._request("HEAD", key):
            return await self._store.exists(key)

    async def delete(self, key: str) -> None:
        with self._backend._request("DELETE", key):
            await self._store.delete(key)


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no details"
    return line[:300]


def open_s3_backend(spec: BackendSpec) -> S3Backend:
    """Open ``s3://bucket/prefix`` with ``spec.storage_options`` and check that it is usable.

    Raises:
        InvalidArgumentError: a malformed URL or an unknown storage option.
        StorageError: the endpoint does not answer, the bucket does not exist, or credentials
            are missing or refused.
    """
    bucket, prefix = _split_url(spec.url)
    options = _parse_options(spec.url, spec.storage_options)
    backend = S3Backend(spec, bucket, prefix, options)
    # Checked once per process, bucket and options: a loader opens its dataset again for every pass
    # (and a worker for every run), and the probe's request costs a round trip each time. A location
    # that answered once and fails later fails at its first request, with the same StorageError kinds.
    seen = (os.getpid(), bucket, repr(sorted(options.items())))
    if seen not in _CHECKED:
        backend.check()
        _CHECKED.add(seen)
    return backend


#: The buckets (with their options) `open_s3_backend` checked in this process.
_CHECKED: set[tuple[int, str, str]] = set()
