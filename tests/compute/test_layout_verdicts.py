"""Workers do not probe again the array layouts their caller decided: the caller decides the input's layout
verdicts before workers start, and they travel with the snapshot (inherited by a fork, adopted by a worker
started otherwise only when its zarr and codecs are the caller's); a warm-up opens the input without
reading a chunk.

Counted, not timed: `LayoutProbes.probed` is how many probe arrays a process wrote.
"""

from __future__ import annotations

import os
import pickle
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.compute._inputs import make_source
from lakecompute.datasets._core import core_of
from lakecompute.schedulers import ProcessedScheduler, register_scheduler, unregister_scheduler
from lakecompute.storage import LayoutVerdicts
from lakecompute.storage._probes import LAYOUT_PROBES, LayoutProbes
from tests.helpers import make_out

N = 600


@pytest.fixture
def fresh_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget this process's layout verdicts and probe count, so the test decides them anew."""
    monkeypatch.setattr(LAYOUT_PROBES, "verdicts", {})
    monkeypatch.setattr(LAYOUT_PROBES, "warned", False)
    monkeypatch.setattr(LAYOUT_PROBES, "probed", 0)


@lc.compute
def probes_seen(sample_in: Any, sample_out: Any) -> None:
    """Copies ``x`` and records the process and how many probes it had written once it read its input."""
    # Imported here: a function sent by value (fork server) would carry a copy of the caller's object.
    from lakecompute.storage._probes import LAYOUT_PROBES as here

    sample_out.x.append(sample_in.x.numpy())
    sample_out.pid.append(os.getpid())
    sample_out.probed.append(here.probed)


def _input(path: Path) -> lc.Dataset:
    ds = lc.empty(str(path), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.create_tensor("u", dtype="uint8", chunk_compression=None)  # a second layout: no zstd
    ds.x.extend(np.arange(N))
    ds.u.extend((np.arange(N) % 256).astype(np.uint8))
    return lc.load(str(path))  # a fresh handle: nothing read in this process yet


@pytest.mark.usefixtures("fresh_probes")
@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_workers_adopt_the_callers_layout_verdicts(tmp_path: Path, start_method: str) -> None:
    """With worker processes (forked, or from the fork server), the caller probes each layout of the input
    once, and no worker writes a probe of its own: forked ones inherit the verdicts, the others adopt them
    from the snapshot."""
    name = f"processed-verdicts-{start_method}"
    register_scheduler(name, partial(ProcessedScheduler, start_method=start_method))
    ds = _input(tmp_path / "in")
    out = make_out(tmp_path / "out", x={"dtype": "int64"}, pid={"dtype": "int64"}, probed={"dtype": "int64"})
    try:
        probes_seen().eval(ds, out, num_workers=2, scheduler=name, progressbar=False)
    finally:
        unregister_scheduler(name)
    assert out.x.numpy().tolist() == list(range(N))
    workers = set(out.pid.numpy().tolist())
    assert os.getpid() not in workers
    caller = LAYOUT_PROBES.probed
    assert caller == 2  # x (int64, zstd) and u (uint8, no zstd): one probe each, here
    # A forked worker starts with the caller's count; one from the fork server with the server's (none).
    before = caller if start_method == "fork" else 0
    assert set(out.probed.numpy().tolist()) == {before}


@pytest.mark.usefixtures("fresh_probes")
def test_a_worker_probes_what_the_caller_had_not_decided(tmp_path: Path) -> None:
    """Verdicts travel only as far as the caller decided them: a snapshot made before any read carries none,
    and a worker's warm-up (or first read) then decides the layouts itself, reading no chunk to do so."""
    ds = _input(tmp_path / "in")
    source = make_source(ds, pad=False)
    worker_side = pickle.loads(pickle.dumps(source))  # what a worker process receives
    assert worker_side.snap.verdicts.verdicts == ()
    worker_side.warm()
    assert LAYOUT_PROBES.probed == 2
    assert all(verdict is None for verdict in LAYOUT_PROBES.verdicts.values())
    cache = core_of(worker_side.dataset()).cache
    assert cache.fetched == 0  # opened and decided, nothing read
    assert int(worker_side.read_samples(0, 3, batch=False)[2].x.numpy()) == 2
    assert LAYOUT_PROBES.probed == 2  # the read found both layouts decided


def test_carried_verdicts_are_adopted_only_from_the_same_zarr_and_codecs() -> None:
    """A process adopts carried verdicts made by its own versions of zarr, numcodecs and numpy, keeps those
    it decided itself, and takes none made by other versions."""
    here = LayoutProbes()
    here.verdicts["kept"] = None
    made_by = here.carried().made_by
    assert any(part.startswith("zarr ") for part in made_by)
    here.adopt(LayoutVerdicts(made_by, (("kept", "other"), ("new", None), ("bad", "differs"))))
    assert here.verdicts == {"kept": None, "new": None, "bad": "differs"}
    other = LayoutProbes()
    other.adopt(LayoutVerdicts(("zarr 0.0.1", *made_by[1:]), (("new", None),)))
    assert other.verdicts == {}
    assert here.probed == other.probed == 0
