"""Lineage: every version records its parents and what produced it; ds.log() shows it."""

from __future__ import annotations

import warnings
from pathlib import Path

import lakecompute as lc
from tests.dataset.test_branches import numbers
from tests.helpers import make_out
from tests.reliability.reliability_helpers import double, double_with


def test_an_eval_records_its_functions_code_and_input(tmp_path: Path) -> None:
    """An eval's versions record its functions, a code fingerprint that follows the arguments, and its
    input (a dataset's location and version, or a sequence's fingerprint)."""
    src = numbers(tmp_path / "src", 4)
    out = make_out(tmp_path / "out")
    double().eval(src[:4], out, progressbar=False, skip_ok=True, checkpoint_interval=2)
    entries = [e for e in out.log() if "eval" in e]
    assert [e["eval"]["status"] for e in entries] == ["running", "done"]
    lineage = entries[-1]["eval"]
    assert lineage["functions"] == ["double"]
    assert lineage["inputs"]["kind"] == "dataset"
    assert (lineage["inputs"]["path"], lineage["inputs"]["version"]) == (src.location.url, src.version)
    assert entries[0]["eval"]["code"] == lineage["code"]
    codes = []
    for extra in (1, 2, 1):
        target = make_out(tmp_path / f"out-{len(codes)}")
        double_with(extra=extra).eval(list(range(3)), target, progressbar=False)
        entry = target.log()[-1]
        codes.append(entry["eval"]["code"])
        assert entry["eval"]["inputs"]["kind"] == "sequence"
        assert entry["origin"]["op"] == "eval"
    assert codes[0] == codes[2] != codes[1]


def test_an_eval_of_a_stream_records_what_it_can(tmp_path: Path) -> None:
    """An input without identity (a generator) is recorded as unknown; the functions and code still are."""
    out = make_out(tmp_path / "out")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lc.LakeComputeWarning)
        double().eval((i for i in range(3)), out, progressbar=False)
    origin = out.log()[-1]["origin"]
    assert origin["inputs"] is None
    assert origin["functions"] == ["double"]
    assert origin["code"]


def test_the_log_names_parents_branches_and_tags(tmp_path: Path) -> None:
    """Each entry lists its parents, the branch it was committed on and the refs at it."""
    path = str(tmp_path / "ds")
    ds = numbers(path, 3)
    ds.tag("start")
    ds.checkout("exp", create=True)
    ds.x[0] = 5
    main = lc.load(path)
    main.x.append(3)
    main.merge("exp")
    log = {e["version"]: e for e in main.log()}
    merge = log[main.version]
    assert merge["branch"] == "main"
    assert merge["branches"] == ["main"]
    assert merge["origin"] == {"op": "merge", "source": "exp", "version": ds.version, "base": 2}
    assert log[ds.version]["branch"] == "exp"
    assert log[ds.version]["branches"] == ["exp"]
    assert log[2]["tags"] == ["start"]
    assert sorted(merge["parents"]) == sorted([ds.version, main.version - 1])
    everything = [e["version"] for e in ds.log(all_branches=True)]
    assert everything == sorted(everything) == list(range(main.version + 1))
