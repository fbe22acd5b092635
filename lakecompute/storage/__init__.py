"""Storage: dataset locations, write-once segments, fragments and version manifests.

Nothing here knows about transforms; the dataset layer builds on these pieces.
"""

from lakecompute.storage._backend import (
    TEMP_PREFIX,
    Backend,
    BackendSpec,
    LocalBackend,
    MemoryBackend,
    backend_class,
    open_backend,
)
from lakecompute.storage._cache import CACHE_BYTES, LOADER_CACHE_BYTES, ArrayCache
from lakecompute.storage._fragments import SampleBuffer, append_fragment, write_fragment
from lakecompute.storage._leases import (
    IDLE_SECONDS,
    LEASE_MARGIN_SECONDS,
    LEASE_SECONDS,
    LEASES,
    RENEW_SECONDS,
    Lease,
    LiveLeases,
    let_go_released,
    read_leases,
)
from lakecompute.storage._locate import (
    TYPED_PREFIX,
    Located,
    Locator,
    Run,
    located_error,
    undecodable_error,
)
from lakecompute.storage._manifest import (
    Fragment,
    Manifest,
    TensorState,
    commit_manifest,
    latest_version,
    list_versions,
    read_manifest,
    version_key,
)
from lakecompute.storage._schema import InvalidField
from lakecompute.storage._segments import (
    DATA_CHUNK,
    INDEX_CHUNK,
    MAX_SLOTS,
    STREAM_SEGMENT,
    SlotWriter,
    checked_codecs,
    create_segment,
    create_typed_array,
    new_segment_id,
    segment_time,
)

__all__ = [
    "CACHE_BYTES",
    "DATA_CHUNK",
    "IDLE_SECONDS",
    "INDEX_CHUNK",
    "LEASES",
    "LEASE_MARGIN_SECONDS",
    "LEASE_SECONDS",
    "LOADER_CACHE_BYTES",
    "MAX_SLOTS",
    "RENEW_SECONDS",
    "STREAM_SEGMENT",
    "TEMP_PREFIX",
    "TYPED_PREFIX",
    "ArrayCache",
    "Backend",
    "BackendSpec",
    "Fragment",
    "InvalidField",
    "Lease",
    "LiveLeases",
    "LocalBackend",
    "Located",
    "Locator",
    "Manifest",
    "MemoryBackend",
    "Run",
    "SampleBuffer",
    "SlotWriter",
    "TensorState",
    "append_fragment",
    "backend_class",
    "checked_codecs",
    "commit_manifest",
    "create_segment",
    "create_typed_array",
    "latest_version",
    "let_go_released",
    "list_versions",
    "located_error",
    "new_segment_id",
    "open_backend",
    "read_leases",
    "read_manifest",
    "segment_time",
    "undecodable_error",
    "version_key",
    "write_fragment",
]
