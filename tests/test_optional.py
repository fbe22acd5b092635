"""A verb whose optional package is missing says which package, for what, and how to install it: one
InvalidArgumentError from `lakecompute.optional.require`, whatever the verb."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc


@lc.compute
def _copy(row: Any, sample_out: Any) -> None:
    sample_out.a.append(row["a"])


def _eval_parquet(ds: Any, tmp: Path) -> None:
    out = lc.empty(str(tmp / "out"))
    out.create_tensor("a")
    _copy().eval(lc.read_parquet(str(tmp / "in.parquet")), out, num_workers=0, progressbar=False)


TABLES = r"pip install 'lakecompute\[tables\]'"
VERBS: dict[str, tuple[str, Callable[[Any, Path], object], str]] = {
    "to_arrow": ("pyarrow", lambda ds, tmp: ds.to_arrow(), TABLES),
    "to_parquet": ("pyarrow.parquet", lambda ds, tmp: ds.to_parquet(tmp / "x.parquet"), TABLES),
    "to_pandas": ("pandas", lambda ds, tmp: ds.to_pandas(), TABLES),
    "to_hf": ("datasets", lambda ds, tmp: ds.to_hf(), r"pip install datasets$"),
    "read_parquet as data_in": ("xxhash", _eval_parquet, TABLES),
    "pytorch": ("torch", lambda ds, tmp: ds.pytorch(2), r"pip install torch .*; or use batches\(\)"),
    "to_ray": ("ray.data", lambda ds, tmp: ds.to_ray(), r'pip install "ray\[data\]"$'),
}


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_missing_package_is_named_with_its_install_command(
    verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, use, install = VERBS[verb]
    pytest.importorskip(module)
    ds = lc.empty(str(tmp_path / "ds"))
    ds.create_tensor("a")
    ds.a.extend(np.arange(4))
    ds.to_parquet(tmp_path / "in.parquet", progressbar=False)
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed: importing it fails
    with pytest.raises(lc.InvalidArgumentError) as caught:
        use(ds, tmp_path)
    message = str(caught.value)
    package = module.split(".")[0]
    assert f"needs the package {package!r}, which is not installed. Install it with: " in message
    assert re.search(install, message), message
    assert not (tmp_path / "x.parquet").exists()
