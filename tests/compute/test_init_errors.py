"""A class compute whose ``__init__`` raises (a model that fails to load) is a TransformError naming the
class, with the exception as its cause, on every scheduler; nothing is written."""

from __future__ import annotations

from pathlib import Path

import multiprocess
import pytest

import lakecompute as lc
from tests.compute.compute_helpers import Sched
from tests.helpers import NeedsWeights, WeightsMissingError, make_out


def test_class_init_failure_is_a_transform_error(scheduler: Sched, tmp_path: Path) -> None:
    """The __init__ failure arrives as TransformError (function named, no index), cause kept, every
    scheduler; the output is unchanged and no worker is left."""
    out = make_out(tmp_path / "out", y={"dtype": "int64"})
    version = out.version
    with pytest.raises(lc.TransformError) as info:
        NeedsWeights(path="/models/m.pt").eval(list(range(20)), out, **scheduler.kw)
    err = info.value
    assert err.function == "NeedsWeights"
    assert err.index is None
    assert str(err).startswith(
        "Transform 'NeedsWeights' could not start: its __init__ raised WeightsMissingError: no weights at "
        "/models/m.pt."
    )
    assert type(err.__cause__) is WeightsMissingError
    assert str(err.__cause__) == "no weights at /models/m.pt"
    assert lc.load(str(tmp_path / "out")).version == version
    assert multiprocess.active_children() == []


def test_class_init_failure_in_a_loader_transform(tmp_path: Path) -> None:
    """The same class as a loader's transform= fails the same way, with its cause."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("x", dtype="int64")
    ds.x.extend(list(range(4)))
    with pytest.raises(lc.TransformError, match="could not start") as info:
        next(iter(ds.batches(2, transform=NeedsWeights(path="m.pt"))))
    assert type(info.value.__cause__) is WeightsMissingError
