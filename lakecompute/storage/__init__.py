"""Storage: bytes, backends and integrity.

A backend reads and writes the bytes under a dataset's keys (a local folder, memory, S3); reads of
stored arrays are verified (every chunk there, its checksum, a bounded size) and go through one cache
of decoded chunks, with direct paths for plain one-chunk reads; a remote dataset's chunks may be kept
in a local disk cache (`DiskCache`, shared by the machine's processes; `RemoteChunks` reads through it).
What the keys mean (versions, refs, segments, leases) is the versioned table format's, one layer up in
`lakecompute.versioned`.
"""

from lakecompute.storage._backend import (
    TEMP_PREFIX,
    Backend,
    BackendSpec,
    LocalBackend,
    MemoryBackend,
    backend_class,
    open_backend,
    temp_name,
)
from lakecompute.storage._cache import CACHE_BYTES, LOADER_CACHE_BYTES, ArrayCache, ArrayRules
from lakecompute.storage._cachespec import CACHE_DIR_ENV, CACHE_SIZE_ENV, CacheSpec, cache_folder, cache_spec
from lakecompute.storage._chain import plain_chain
from lakecompute.storage._checked import chunk_folder, chunk_key
from lakecompute.storage._diskcache import CachedDataset, CacheInfo, DiskCache
from lakecompute.storage._frames import encode_zstd, zstd_frame
from lakecompute.storage._probes import LayoutVerdicts, adopt_layout_verdicts, layout_verdicts
from lakecompute.storage._remote import RemoteChunks

__all__ = [
    "CACHE_BYTES",
    "CACHE_DIR_ENV",
    "CACHE_SIZE_ENV",
    "LOADER_CACHE_BYTES",
    "TEMP_PREFIX",
    "ArrayCache",
    "ArrayRules",
    "Backend",
    "BackendSpec",
    "CacheInfo",
    "CacheSpec",
    "CachedDataset",
    "DiskCache",
    "LayoutVerdicts",
    "LocalBackend",
    "MemoryBackend",
    "RemoteChunks",
    "adopt_layout_verdicts",
    "backend_class",
    "cache_folder",
    "cache_spec",
    "chunk_folder",
    "chunk_key",
    "encode_zstd",
    "layout_verdicts",
    "open_backend",
    "plain_chain",
    "temp_name",
    "zstd_frame",
]
