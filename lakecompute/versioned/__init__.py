"""The versioned table format: one home for a dataset's versions, refs and the data they name.

A dataset is a zarr v3 group whose data lives in write-once *segments* (and the typed arrays
``compact()`` writes), and whose versions are small JSON *manifests* naming, per tensor, the runs of
stored samples (*fragments*) that form it. Branches and tags are small refs; a commit stores the next
manifest under a free number and moves its branch there in one atomic step. Writers hold *leases* on the
segments they write, so that *vacuum* never removes what a live writer may still commit.

The layers above use this package through a narrow API:

- `Table`: one dataset location's versions, refs, history, diff and merge content, the one commit call,
  and the operations on a whole dataset (create, delete, vacuum);
- `Writer` and `SlotGrant`: the storage side of a write transaction (a writer's lease, the slots of its
  own segments, an eval's tasks' slots in other processes);
- the values they trade in (`Manifest`, `TensorState`, `Fragment`, `VersionHeader`, `BranchRef`,
  `TagRef`, `VersionDiff`) and what reads and writes samples' runs (`Locator`, `SampleBuffer`,
  `SlotWriter`).

The storage key layout is spelled in one module, ``_keys.py``; the bytes under the keys are
`lakecompute.storage`'s (backends, checked reads, the chunk cache). Every backend passes the same
conformance suite, `lakecompute.testing.versioned.TableTests`.
"""

from lakecompute.versioned._diff import TensorDiff, VersionDiff
from lakecompute.versioned._fills import WHOLE_ARRAY, ChunkFills
from lakecompute.versioned._fragments import SampleBuffer, append_fragment
from lakecompute.versioned._header import VersionHeader
from lakecompute.versioned._leases import Lease
from lakecompute.versioned._locate import Locator, Run, undecodable_error
from lakecompute.versioned._manifest import Fragment, Manifest, TensorState
from lakecompute.versioned._reads import forget_manifests
from lakecompute.versioned._refs import DEFAULT_BRANCH, BranchRef, TagRef, is_version_number, parse_ref_name
from lakecompute.versioned._schema import check_nesting
from lakecompute.versioned._segments import SlotWriter
from lakecompute.versioned._table import Table
from lakecompute.versioned._writer import SlotGrant, Writer

__all__ = [
    "DEFAULT_BRANCH",
    "WHOLE_ARRAY",
    "BranchRef",
    "ChunkFills",
    "Fragment",
    "Lease",
    "Locator",
    "Manifest",
    "Run",
    "SampleBuffer",
    "SlotGrant",
    "SlotWriter",
    "Table",
    "TagRef",
    "TensorDiff",
    "TensorState",
    "VersionDiff",
    "VersionHeader",
    "Writer",
    "append_fragment",
    "check_nesting",
    "forget_manifests",
    "is_version_number",
    "parse_ref_name",
    "undecodable_error",
]
