"""Compaction and cleanup of a dataset's stored data (``ds.compact()``, ``ds.vacuum()``).

`compact` reads each tensor through the handle's readers and has the table write it again as one run
(`lakecompute.versioned.Writer.write_typed` / ``write_stream``, or one fragment of a fresh segment), in one
commit. `vacuum` checks the caller's arguments and hands over to the table's
(`lakecompute.versioned.Table.vacuum`), telling it which fragments eval records keep aside.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lakecompute.datasets._core import DatasetCore, core_of
from lakecompute.datasets._evals import parked_of
from lakecompute.datasets._session import WriteSession
from lakecompute.htypes import Encoded
from lakecompute.parsing import parse_count, parse_flag
from lakecompute.progress import progress_bar
from lakecompute.versioned import Fragment, TensorState

if TYPE_CHECKING:
    from lakecompute.datasets._dataset import Dataset

__all__ = ["compact", "vacuum"]

_BLOCK = 4096


def compact(ds: Dataset, progressbar: bool = True) -> int:
    """Rewrite every tensor into one contiguous fragment; content is unchanged. Returns the version.

    A tensor of fixed-shape numeric samples becomes one typed ``(n, *shape)`` zarr array under
    ``tensors/<name>/`` — readable with plain zarr; numeric samples of varying shapes (token ids, one
    1-D sample per document) become one typed stream, the samples' values back to back in a fresh
    segment's ``data`` array (see `lakecompute.versioned.Writer.write_stream`); others (encoded images, text,
    json) become one run in a fresh segment. Committed through the dataset's write transaction, as message
    ``compact`` (or as part of the enclosing ``with ds:`` block). With ``progressbar``, a tqdm bar counts
    the samples rewritten (of every tensor that is not compact already).
    """
    progressbar = parse_flag("progressbar", progressbar)
    core = core_of(ds)
    with core.write("compact"):
        txn = core.txn
        states = [txn.head.state(name) for name in list(txn.head.tensors)]
        todo = [s for s in states if s.fragments and not txn.writer.is_compact(s)]
        total = sum(s.length for s in todo)
        with progress_bar(total, "compact", enabled=progressbar) as bar:
            for state in todo:
                txn.head.set_fragments(state.spec.name, _compacted(core, state, bar))
    return core.version


def _compacted(core: DatasetCore, state: TensorState, bar: Any) -> list[Fragment]:
    """The fragments of ``state`` rewritten as one run (``bar`` counts the samples)."""
    name = state.spec.name
    reader = core.reader(name)
    shapes = {f.shape for f in state.fragments}
    if state.spec.kind == "array" and None not in shapes and len(shapes) == 1 and state.spec.dtype:
        return [core.txn.writer.write_typed(reader, state, bar)]
    if state.spec.kind == "array" and state.spec.dtype:
        return [core.txn.writer.write_stream(reader, state, bar)]
    session = WriteSession(core.txn.writer.new_slot)
    schema = core.txn.head.schema(name)
    if state.spec.kind == "bytes" or None in shapes or len(shapes) > 1:
        session.prefer_indexed(name)
    frags: list[Fragment] = []
    for start in range(0, state.length, _BLOCK):
        stop = min(start + _BLOCK, state.length)
        if state.spec.kind == "bytes":
            # Copy encoded blobs as they are: re-encoding images would be slow and (jpeg) lossy.
            session.add(schema, reader.read_encoded(start, stop))
        else:
            values = reader.read_range(start, stop)
            if isinstance(values, np.ndarray):
                session.add(schema, values)
            else:
                session.add(schema, [Encoded(np.asarray(v), None, np.shape(v)) for v in values])
        frags.extend(session.flush(schema))
        bar.update(stop - start)
    return frags


def vacuum(
    ds: Dataset, grace_seconds: float = 3600.0, keep_versions: int | None = None, progressbar: bool = True
) -> dict[str, int]:
    """Delete stored data no kept version references and no live writer may still commit.

    Versions follow reachability: every version a branch or a tag reaches is kept (with
    ``keep_versions=n``, the ``n`` newest of each branch and the tagged ones); a deleted branch's versions
    go once older than ``grace_seconds``; the data only removed versions used goes with them. Every
    writer holds a lease on the data it writes, wherever it runs, and vacuum leaves alone what an
    unexpired lease names (see `lakecompute.versioned._vacuum`).

    Args:
        ds: the dataset (every branch's newest version is always kept).
        grace_seconds: data younger than this is left alone whatever the leases say (data written
            by lakecompute versions before leases is protected by this alone), and so are versions of
            deleted branches committed more recently.
        keep_versions: keep only this many newest versions of each branch (None keeps all).
        progressbar: show a progress bar of the stored segments and typed arrays looked at.

    Returns:
        Counts of removed ``versions``, ``segments`` and ``chunks``.
    """
    keep_versions = parse_count("keep_versions", keep_versions, 1, optional=True)
    progressbar = parse_flag("progressbar", progressbar)
    ds.check_writable()
    core = core_of(ds)
    return core.table.vacuum(grace_seconds, keep_versions, progressbar, parked_of(ds.path))
